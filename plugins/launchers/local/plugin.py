"""Built-in plugin: the local launcher (spawned processes on this host), the default."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_launchers(register):
    register("local", "zoo.plugins.launchers.local.launcher:LocalLauncher",
             summary="every worker a spawned process on this host (the default)")
