"""Test-only plugin exposing zoo.core.testing's fake envs through an entry point.

With this directory on PYTHONPATH, spawned workers (which rebuild the registry from
entry points) find ``fake-counting``, ``fake-crashing``, ``fake-slow``, ``fake-stages`` and ``fake-mixed`` too.
"""
from zoo.core.testing.plugin import register_envs  # noqa: F401  (the hook implementation)
