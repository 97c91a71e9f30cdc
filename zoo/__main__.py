"""``python -m zoo`` and the ``zoo`` console script.

:func:`run` imports the CLI inside a ``try``: a Ctrl-C while the (heavy) imports run ends
the command quietly with status 130 instead of a traceback.
"""
import sys


def run() -> None:
    """Entry point: :func:`zoo.cli.main`, with Ctrl-C during start-up a one-line exit 130."""
    try:
        from zoo.cli import main

        main()
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        sys.exit(130)


if __name__ == "__main__":
    run()
