"""Built-in plugin ``zoo.workers``: the actor, policy worker and trainer kinds (:mod:`zoo.core.kinds`)."""
from zoo.core.hookspecs import hookimpl
from zoo.core.workers.kinds import BUILTIN


@hookimpl
def register_worker_kinds(register):
    for name, declaration in BUILTIN.items():
        keywords = dict(declaration)
        register(name, keywords.pop("entry"), **keywords)
