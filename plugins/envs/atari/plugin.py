"""Built-in plugin: Atari 2600 games through ale-py (``--env atari:Pong``).

Registration is cheap: the factory and config are ``"module:attr"`` strings, so listing
environments imports neither ale-py, gymnasium nor OpenCV.
"""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    register(
        "atari",
        "zoo.plugins.envs.atari.env:make",
        summary="Atari 2600 games (ale-py) with DeepMind preprocessing: --env atari:Pong",
        config="zoo.plugins.envs.atari.env:AtariConfig",
        default_budget=("frames", 10_000_000),
        renderer="zoo.plugins.envs.atari.env:render",
        vector_factory="zoo.plugins.envs.atari.env:make_vector",
    )
