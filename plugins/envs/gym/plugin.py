"""Built-in plugin: any Gymnasium environment id (``--env CartPole-v1`` or ``--env gym:ID``)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    register(
        "gym",
        "zoo.plugins.envs.gym.env:make",
        summary="Any Gymnasium id: --env CartPole-v1, or your own registered env: --env my_package.envs:MyEnv-v0",
        config="zoo.plugins.envs.gym.env:GymConfig",
        default_budget="zoo.plugins.envs.gym.env:default_budget",
        resolves="zoo.plugins.envs.gym.env:resolves",
        renderer="zoo.plugins.envs.gym.env:render",
    )
