"""A plugin registering the fake environments of :mod:`zoo.core.testing.fake_envs`.

It is not loaded by default. Tests add it to a host::

    from zoo.core.plugins import PluginHost
    from zoo.core.testing import plugin as testing_plugin

    host = PluginHost()
    host.register_plugin(testing_plugin, "zoo.testing", "zoo-rl", "0", builtin=False)
    env = host.registry.get("env", "fake-counting").load()(None, CountingConfig(), 0)

or a test-only distribution points its ``zoo.plugins`` entry point at this module (so
that spawned workers find the fakes too).
"""
from zoo.core.hookspecs import hookimpl

FAKE_ENVS = ("fake-counting", "fake-crashing", "fake-slow", "fake-stages", "fake-mixed")


@hookimpl
def register_envs(register):
    register("fake-counting", "zoo.core.testing.fake_envs:make_counting",
             summary="Test env: observation = step number, reward 1 per step",
             config="zoo.core.testing.fake_envs:CountingConfig", default_budget=("env_steps", 1_000))
    register("fake-crashing", "zoo.core.testing.fake_envs:make_crashing",
             summary="Test env: raises RuntimeError('boom') at step crash_at (default 5)",
             config="zoo.core.testing.fake_envs:CrashingConfig", default_budget=("env_steps", 1_000))
    register("fake-slow", "zoo.core.testing.fake_envs:make_slow",
             summary="Test env: a counting env that sleeps step_latency seconds per step",
             config="zoo.core.testing.fake_envs:SlowConfig", default_budget=("env_steps", 1_000))
    register("fake-stages", "zoo.core.testing.fake_envs:make_stages",
             summary="Test env with curriculum stages: stage s asks for s + 1 right actions in a row",
             config="zoo.core.testing.fake_envs:StagesConfig", default_budget=("env_steps", 20_000))
    register("fake-mixed", "zoo.core.testing.fake_envs:make_mover_chooser",
             summary="Test env with two agents of different spaces: mover Box(-1, 1, (2,)), chooser Discrete(4)",
             config="zoo.core.testing.fake_envs:MixedConfig", default_budget=("env_steps", 2_000))
