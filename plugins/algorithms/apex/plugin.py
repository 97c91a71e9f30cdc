"""Built-in plugin: Ape-X DQN (``zoo train apex-dqn``, alias ``dqn``).

Registration only names the factory and config by ``"module:attr"`` strings, so
importing this module (``zoo list``) does not import torch.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_algorithms(register):
    register(
        "apex-dqn",
        "zoo.plugins.algorithms.apex.apex:ApeX",
        summary="Ape-X DQN: double dueling n-step Q, prioritised replay in the trainer (Horgan et al. 2018)",
        config="zoo.plugins.algorithms.apex.config:ApeXConfig",
        aliases=("dqn",),
    )
