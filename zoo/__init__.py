"""Zoo: a plugin-based distributed reinforcement-learning system (SRL's dataflow).

The public API: :func:`zoo.core.plugins.get_registry` and the hook markers below.
"""
from zoo.core.hookspecs import hookimpl  # noqa: F401  (for plugin authors)

__all__ = ["hookimpl"]
