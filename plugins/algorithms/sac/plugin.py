"""Built-in plugin: Soft Actor-Critic (``zoo train sac``) for Box actions.

Registration only names the factory and config by ``"module:attr"`` strings, so
importing this module (``zoo list``) does not import torch.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "sac",
        "zoo.plugins.algorithms.sac.sac:SAC",
        summary="Soft Actor-Critic for Box actions: twin Q, automatic temperature, replay in the trainer "
                "(Haarnoja et al. 2018)",
        config="zoo.plugins.algorithms.sac.config:SACConfig",
    )
