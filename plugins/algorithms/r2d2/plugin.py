"""Built-in plugin: R2D2 (``zoo train r2d2``).

Registration only names the factory and config by ``"module:attr"`` strings, so
importing this module (``zoo list``) does not import torch.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "r2d2",
        "zoo.plugins.algorithms.r2d2.r2d2:R2D2",
        summary="R2D2: recurrent dueling Q, stored state, burn-in, prioritised sequences (Kapturowski et al. 2019)",
        config="zoo.plugins.algorithms.r2d2.config:R2D2Config",
    )
