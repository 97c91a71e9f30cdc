"""Built-in plugin: any PettingZoo Parallel environment (``--env pettingzoo:MODULE``), and the ``lookahead``
baseline of connect four (:mod:`zoo.plugins.envs.pettingzoo.baselines`)."""
from zoo.core.hookspecs import hookimpl


@hookimpl
def register_envs(register):
    register(
        "pettingzoo",
        "zoo.plugins.envs.pettingzoo.env:make",
        summary="Any PettingZoo Parallel env by module: --env pettingzoo:mpe2.simple_spread_v3",
        config="zoo.plugins.envs.pettingzoo.env:PettingZooConfig",
        default_budget=("env_steps", 1_000_000),
        renderer="zoo.plugins.envs.gym.env:render"  # one rgb_array renderer for both adapters,
    )


@hookimpl
def register_baselines(register):
    register("lookahead", "zoo.plugins.envs.pettingzoo.baselines:lookahead_baseline",
             summary="connect four (classic connect_four_v3): wins when it can, blocks the opponent's "
                     "immediate win, else a random legal move")
