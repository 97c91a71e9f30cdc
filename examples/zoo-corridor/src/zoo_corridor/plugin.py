"""The hook implementations Zoo calls (entry point ``corridor = "zoo_corridor.plugin"``).

Registration is cheap: the factory and the config are ``"module:attr"`` strings, so
``zoo list`` does not import :mod:`zoo_corridor.env` (nor gymnasium).
"""
import zoo


@zoo.hookimpl
def register_envs(register):
    register(
        "corridor",
        "zoo_corridor.env:make",
        summary="1-D corridor: walk right to the end (+1, -0.01 per step); corridor:N sets the length",
        config="zoo_corridor.env:CorridorConfig",
        default_budget=("env_steps", 20_000),
    )
