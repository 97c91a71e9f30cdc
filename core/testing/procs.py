"""Helpers for running Zoo in a subprocess with extra plugin directories, and for finding its processes."""
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


def processes_with_env(name: str, value: str, prefix: bool = False) -> list[int]:
    """PIDs of live (not zombie) processes whose environment holds ``name=value`` (or, with
    ``prefix``, a value starting with ``value``): how tests find a run's processes by a mark
    they put in its environment. Processes that vanish or cannot be read are skipped."""
    import glob

    needle = f"{name}={value}".encode()
    pids = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            entries = Path(environ).read_bytes().split(b"\0")
            status = Path(environ).with_name("stat").read_text()
        except OSError:
            continue
        if ") Z " not in status and any(e.startswith(needle) if prefix else e == needle for e in entries):
            pids.append(int(Path(environ).parent.name))
    return pids


def processes_titled(fragment: str) -> list[int]:
    """PIDs of processes whose command line (``/proc/PID/cmdline``, which ``setproctitle``
    rewrites: ``zoo: actor 3 <run name>``) holds ``fragment``: how tests check that no worker
    of a run whose name holds ``fragment`` is left. Processes that vanish or cannot be read
    are skipped; zombies are not (their command line reads empty, so they never match)."""
    needle = fragment.encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids
