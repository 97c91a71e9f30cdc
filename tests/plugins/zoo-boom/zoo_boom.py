"""Test-only plugin: env "boom" raises RuntimeError("boom") on its 5th step (crash tests)."""
import zoo


@zoo.hookimpl
def register_envs(register):
    register(
        "boom",
        "zoo.core.testing.fake_envs:make_boom",
        summary="Test env: raises RuntimeError('boom') at step 5 (crash_at)",
        config="zoo.core.testing.fake_envs:CrashingConfig",
        default_budget=("env_steps", 10_000),
    )
