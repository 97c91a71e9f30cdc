"""Helpers shared by the unit checks of the GPU benchmark scripts (tests/unit/test_gpu_check.py,
tests/unit/test_gpu_apex_pong.py; a test module never imports another test module).

- :data:`ROOT`: the repository root.
- :func:`parsed`: ``zoo <sub> args`` parsed by the CLI itself, not run (:func:`zoo_click`: the
  subcommand's click command).
- :func:`build`: the config those parsed options build (``ConfigError`` if one is invalid).

Their one-GPU stand-in, the ``one_gpu`` fixture, is in tests/unit/conftest.py.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def zoo_click(sub):
    import typer

    from zoo.cli import build_app

    return typer.main.get_command(build_app()).commands[sub]


def parsed(sub, args):
    """``zoo <sub> args`` parsed by the CLI itself (types, ranges, unknown flags), not run."""
    ctx = zoo_click(sub).make_context(sub, list(args))
    return ctx.params


def build(params):
    from zoo.core import config as zconfig
    from zoo.core.plugins import get_registry

    return zconfig.build_config(get_registry(), params["algo"], params["env"], overrides=params["overrides"],
                                steps=params["steps"], frames=params["frames"], name=params["name"])
