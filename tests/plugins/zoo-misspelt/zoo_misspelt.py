"""Test-only plugin with a misspelt hook implementation (register_env, not register_envs)."""
import zoo


@zoo.hookimpl
def register_env(register):
    register("never-registered", "zoo.core.testing.fake_envs:make_counting", summary="Never registered")
