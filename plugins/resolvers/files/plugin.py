"""Built-in plugin: the ``files`` resolver (one file per key in the run directory)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_resolvers(register):
    register("files", "zoo.plugins.resolvers.files.resolver:FilesResolver",
             summary="one file per key in <root>/zoo-<run_id>/keys/: one host, or hosts sharing `root`")
