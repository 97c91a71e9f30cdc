"""Zoo: a plugin-based distributed reinforcement-learning system (SRL's dataflow).

The public API: :func:`zoo.core.plugins.get_registry` and the hook markers below.

``zoo.hookimpl`` (for plugin authors) is imported on first use: ``python -m zoo`` imports this
package before :func:`zoo.__main__.run` can turn a Ctrl-C into one line, so it imports
nothing (pluggy took tens of ms on a loaded machine, and a Ctrl-C then printed a traceback).
"""
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy goes by the name)
if TYPE_CHECKING:
    from zoo.core.hookspecs import hookimpl

__all__ = ["hookimpl"]


def __getattr__(name: str) -> object:
    if name == "hookimpl":
        from zoo.core.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")
