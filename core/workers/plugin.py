"""Built-in plugin ``zoo.workers``: the actor, policy worker, trainer and eval kinds
(:mod:`zoo.core.kinds`) and the ``random`` baseline (:mod:`zoo.core.baselines`)."""
from zoo.core.hookspecs import hookimpl
from zoo.core.workers.kinds import BUILTIN


@hookimpl
def register_worker_kinds(register):
    for name, declaration in BUILTIN.items():
        keywords = dict(declaration)
        register(name, keywords.pop("entry"), **keywords)
    register("eval", "zoo.core.workers.evaluator:run", options="zoo.core.workers.evaluator:EvalOptions",
             check="zoo.core.workers.evaluator:check", describe="zoo.core.workers.evaluator:describe",
             connects="zoo.core.workers.evaluator:connects", cpus=1.0,
             order=30, summary="eval manager: plays kept versions against baselines and each other, writes results "
                               "and Elo ratings to the history store (workers.eval.count; docs/history.md)")
    register("pbt", "zoo.core.workers.population:run", count="zoo.core.workers.population:count",
             describe="zoo.core.workers.population:describe", cpus=0.25, order=40, restart="restartable",
             summary="population manager of a PBT run: ranks the members, leaves exploit/explore orders "
                     "(pbt.members; docs/pbt.md)")


@hookimpl
def register_baselines(register):
    register("random", "zoo.core.baselines:random_baseline",
             summary="uniform over the legal actions (action masks honoured)")
