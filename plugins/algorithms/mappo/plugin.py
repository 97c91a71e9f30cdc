"""Built-in plugin: MAPPO (``zoo train mappo``).

Registration only names the factory and config by ``"module:attr"`` strings, so
importing this module (``zoo list``) does not import torch.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "mappo",
        "zoo.plugins.algorithms.mappo.mappo:MAPPO",
        summary="Multi-agent PPO: shared policy, centralised critic, value normalisation (Yu et al. 2021)",
        config="zoo.plugins.algorithms.mappo.mappo:MAPPOConfig",
    )
