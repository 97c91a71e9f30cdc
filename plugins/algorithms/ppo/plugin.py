"""Built-in plugin: PPO (``--algo ppo``).

Registration only names the factory and config by ``"module:attr"`` strings, so
importing this module (``zoo list``) does not import torch.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "ppo",
        "zoo.plugins.algorithms.ppo.ppo:PPO",
        summary="Proximal Policy Optimization, clipped surrogate + GAE (Schulman et al. 2017)",
        config="zoo.plugins.algorithms.ppo.config:PPOConfig",
    )
