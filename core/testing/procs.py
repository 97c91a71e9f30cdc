"""Helpers for running Zoo in a subprocess with extra plugin directories."""
from __future__ import annotations

import os
from pathlib import Path


def subprocess_env(*paths: str | Path, base: dict[str, str] | None = None, **overrides: str | None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) with ``paths`` prepended to ``PYTHONPATH``.

    A directory holding ``NAME.py`` and ``NAME-VERSION.dist-info/entry_points.txt`` (see
    ``tests/plugins/``), or a ``pip install --target`` directory, on ``PYTHONPATH`` makes its
    plugins visible to Zoo in that subprocess only. ``overrides`` set further variables
    (e.g. ``ZOO_STRICT_PLUGINS="1"``); a value of ``None`` removes the variable.
    """
    env = dict(os.environ if base is None else base)
    parts = [str(Path(p).resolve()) for p in paths]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
