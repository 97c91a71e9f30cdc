"""Built-in plugin: OpenAI's hide-and-seek on MuJoCo (``--env hide-and-seek[:full]``).

Registration imports nothing heavy: the factory and config are ``"module:attr"`` paths.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    register(
        "hide-and-seek",
        "zoo.plugins.envs.hide_and_seek.zoo_env:make",
        summary="OpenAI hide-and-seek (Baker et al. 2019) on MuJoCo: hide-and-seek (quadrant) or hide-and-seek:full",
        config="zoo.plugins.envs.hide_and_seek.config:HideAndSeekConfig",
        default_budget=("env_steps", 100_000_000),
        renderer="zoo.plugins.envs.hide_and_seek.render:render_env",
    )
