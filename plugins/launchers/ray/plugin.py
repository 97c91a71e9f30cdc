"""Built-in plugin ``zoo.ray``: the ``ray`` launcher (workers as Ray actors on a Ray cluster) and
the ``ray`` resolver (the cluster's key-value store). Ray is the optional extra ``zoo-rl[ray]``;
without it both stay listed, saying how to install it, and choosing either is refused before
anything starts (``requires``)."""
import importlib.util

from zoo.core.hookspecs import hookimpl

INSTALL = 'pip install "zoo-rl[ray]"'


def _missing() -> str:
    return f"; Ray is not installed: {INSTALL}" if importlib.util.find_spec("ray") is None else ""


@hookimpl
def register_launchers(register):
    register("ray", "zoo.plugins.launchers.ray.launcher:RayLauncher", requires="ray", install=INSTALL,
             resolver="ray", remote=True,
             summary="every worker a Ray actor placed by its resources on a Ray cluster (--ray-address ADDR; "
                     "docs/cluster.md)" + _missing())


@hookimpl
def register_resolvers(register):
    register("ray", "zoo.plugins.launchers.ray.resolver:RayResolver", requires="ray", install=INSTALL,
             summary="keys in the Ray cluster's key-value store: listeners on any node are found "
                     "(the default with --launcher ray)" + _missing())
