"""Test-only plugin registering an env named "gym", which the built-in gym plugin owns."""
import zoo


@zoo.hookimpl
def register_envs(register):
    register("gym", "zoo.core.testing.fake_envs:make_counting", summary="A duplicate of the built-in gym env")
