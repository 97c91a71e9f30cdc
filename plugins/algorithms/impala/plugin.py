"""Built-in plugin: IMPALA (``zoo train impala``).

Registration only names the factory and config by ``"module:attr"`` strings, so
importing this module (``zoo list``) does not import torch.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "impala",
        "zoo.plugins.algorithms.impala.impala:IMPALA",
        summary="IMPALA actor-critic with V-trace off-policy correction (Espeholt et al. 2018)",
        config="zoo.plugins.algorithms.impala.impala:IMPALAConfig",
    )
