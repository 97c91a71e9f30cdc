"""Continuing a run in its own run directory: ``zoo train --resume RUN_DIR`` / ``zoo resume NAME``.

A run that stopped (Ctrl-C, SIGTERM), crashed, or reached a budget the user now wants to
extend continues from ``<run_dir>/checkpoints/latest.pt``. :func:`resume_config` rebuilds
the run's config from its ``config.json`` (with the same presets, then the saved values,
then what the command line adds), checks it against the saved one and returns it with
``resume`` set to the run's resume count + 1; the controller then starts the workers as
for a new run, in the same run directory, and the trainer continues from the checkpoint
(what it restores: :mod:`zoo.core.workers.checkpointing`).

**What may change on resume** (:data:`SAFE_TO_CHANGE`): the budget (``--steps`` /
``--frames``: it counts from the run's original start, so it must be more than the env
steps already done; with ``anneal_lr`` over the run's budget the schedule follows the new
budget from the current step on), ``stop_when`` and ``stop_over_episodes`` (when to stop early,
docs/looking-at-runs.md; ``--set stop_when=`` clears it), ``log.*``, ``trainer.checkpoint_interval``,
``trainer.checkpoint_interval_s``, ``trainer.keep_checkpoints``, ``trainer.history.*`` (which
versions are kept, not what is learned), ``trainer.threads``,
``trainer.max_nonfinite_updates``, ``policy.threads``, ``policy.device``,
``policy.max_wait_ms``, ``policy.stall_warning_s``, ``algo.device``, ``algo.precision`` (the
trainer's arithmetic; checkpoints hold float32 weights either way), ``streams.*`` (how data
travels, not what is learned), ``supervision.*``, ``launcher``, ``launcher_options.*`` and
``resolver.*`` (how workers are run and find each other).
Anything else that differs from ``config.json`` (an algorithm hyperparameter, the seed, the
environment or its options, the number of actors, the sample length...) is refused with
the list of differing keys, and so is an environment whose spec (spaces, agents,
frame-skip) changed since the run started. An option that Zoo gained after the run
started (absent from its ``config.json``) takes its current value.

What a resumed run restores exactly, and what it cannot: see ``docs/checkpoints.md``.
"""
from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zoo.core.checkpoint import CheckpointError, latest_path, load_checkpoint
from zoo.core.options import ConfigError
from zoo.core.rundir import RunNotFound, pid_alive
from zoo.core.rundir import find_run_dir as _find_run_dir

SAFE_TO_CHANGE = (
    "env_steps", "frames", "stop_when", "stop_over_episodes", "name", "runs_dir", "log.",
    "trainer.checkpoint_interval", "trainer.checkpoint_interval_s",
    "trainer.keep_checkpoints", "trainer.history.", "trainer.threads", "trainer.max_nonfinite_updates",
    "policy.threads",
    "policy.device", "policy.max_wait_ms", "policy.stall_warning_s", "algo.device", "algo.precision", "streams.",
    "supervision.",
    "launcher", "launcher_options.", "resolver.",
)
"""Config keys a resume may change; an entry ending in ``.`` covers every key below it."""


def is_safe(key: str) -> bool:
    """Whether ``key`` (dotted, e.g. ``log.interval_s``) may differ on resume (:data:`SAFE_TO_CHANGE`);
    a named policy's ``policies.P.<rest>`` when ``<rest>`` may."""
    if key.startswith("policies."):
        parts = key.split(".", 2)
        return len(parts) == 3 and parts[2] != "agents" and is_safe(parts[2])
    return any(key.startswith(s) if s.endswith(".") else key == s for s in SAFE_TO_CHANGE)


def _load_checkpoints(run_dir: str, saved: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint a resume continues from: ``checkpoints/latest.pt``, or with named policies
    each trainable policy's ``checkpoints/<policy>/latest.pt`` (all must exist), of which the
    one with the fewest env steps is returned, its ``resumes`` the largest of theirs; a
    population (``pbt.members``) each member's.

    Raises:
        ConfigError: a checkpoint is missing or unreadable (named).
    """
    tables = saved.get("policies") or {}
    names = [n for n, t in tables.items() if t.get("trainable", True)] or [""]
    pbt = saved.get("pbt") or {}
    if pbt.get("members"):  # a population: its members' (config.json holds the pbt table, not them)
        from zoo.core.pbt import member_names

        names = member_names(str(pbt.get("policy", "default")), int(pbt["members"]))
    loaded = []
    for name in names:
        try:
            loaded.append(load_checkpoint(latest_path(run_dir, name)))
        except CheckpointError as exc:
            what = f"policy {name}'s checkpoint: " if name else ""
            raise ConfigError(f"cannot resume {run_dir}: {what}{exc}", field="resume") from None
    ckpt = min(loaded, key=lambda c: int(c["env_steps"]))
    return {**ckpt, "resumes": max(int(c.get("resumes", 0)) for c in loaded)}


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


class _Absent:
    """The value of a key one side does not have (printed as ``(absent)``)."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT = _Absent()


def config_changes(saved: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, saved value, new value)`` for every dotted key whose value differs between two
    :func:`~zoo.core.config.config_to_dict` results (``env_spec`` included), sorted by key;
    a key missing on one side has the value :data:`ABSENT` there."""
    a, b = _flat(saved), _flat(new)
    return sorted(((k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in set(a) | set(b)
                   if a.get(k, ABSENT) != b.get(k, ABSENT)), key=lambda c: c[0])


def find_run_dir(target: str | Path, runs_dir: str | Path = "runs") -> str:
    """The run directory ``target`` names (:func:`zoo.core.rundir.find_run_dir`), as a string.

    Raises:
        ConfigError: it is not a run directory (field ``resume``).
    """
    try:
        return str(_find_run_dir(target, runs_dir))
    except RunNotFound as exc:
        raise ConfigError(str(exc), field="resume") from None


def _still_running(run_dir: str) -> int | None:
    """The pid of a controller that ``status.json`` says is running this run on this host and is alive."""
    try:
        status = json.loads(Path(run_dir, "status.json").read_text())
        pid = int(status.get("pid") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if status.get("status") != "running" or status.get("host") != socket.gethostname() or not pid_alive(pid):
        return None
    return pid


def resume_config(registry, run_dir: str, *, algo: str | None = None, env: str | None = None,
                  seed: int | None = None, config_file: str | Path | None = None, overrides: Iterable[str] = (),
                  steps: int | None = None, frames: int | None = None, launcher: str | None = None):
    """The config to continue the run in ``run_dir`` with, and its checkpoint's counters.

    ``algo``/``env``/``seed``/``config_file``/``overrides``/``steps``/``frames``/``launcher`` are what the
    command line gave (``None``: not given); they are applied over the saved config exactly
    as for ``zoo train``, then the result is compared with ``config.json``.

    Returns:
        ``(cfg, checkpoint)``: ``cfg.resume`` is the checkpoint's ``resumes`` + 1; ``checkpoint``
        is the loaded ``latest.pt`` (its counters say where the run continues).

    Raises:
        ConfigError: no checkpoint to continue from; the run is still running; a changed key
            outside :data:`SAFE_TO_CHANGE` (every one listed, with old and new values); a
            changed env spec; a budget not above the env steps already done; and every
            error of :func:`~zoo.core.config.build_config`.
    """
    from zoo.core.config import budget, build_config, config_to_dict

    path = Path(run_dir)
    try:
        saved = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path / 'config.json'}: {exc}", field="resume") from None
    pid = _still_running(run_dir)
    if pid is not None:
        raise ConfigError(f"{run_dir} is still running (controller pid {pid} on this host, per status.json); "
                          "stop it first (Ctrl-C or kill PID), then resume it", field="resume")
    ckpt = _load_checkpoints(run_dir, saved)
    named = [(k, saved.get(k), v) for k, v in (("algo_name", algo), ("env_name", env)) if v not in (None, saved.get(k))]
    if named:  # another algorithm or env: its options would not even fit the saved ones
        raise ConfigError(f"cannot resume {run_dir} as another run: "
                          + "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in named)
                          + f"; the run is {saved.get('algo_name')} on {saved.get('env_name')} (give no ALGO/--env "
                          "to resume it, or start a new run with --name NEW)",
                          field=named[0][0], problems=[f"{k}: {o!r} -> {n!r}" for k, o, n in named])
    base = {k: v for k, v in saved.items() if k not in ("env_spec", "algo_name", "env_name", "name", "runs_dir")}
    base["runs_dir"], base["name"] = str(path.parent), path.name
    cfg = build_config(registry, algo or saved["algo_name"], env or saved["env_name"], seed=seed,
                       config_file=config_file, overrides=list(overrides), steps=steps, frames=frames,
                       name=path.name, launcher=launcher, base=base)
    changes = config_changes(saved, config_to_dict(cfg))
    # An option Zoo gained since the run started is absent from its config.json: it takes its
    # value now (default or preset), like the run's code did implicitly.
    refused = [c for c in changes if not is_safe(c[0]) and c[1] is not ABSENT]
    if refused:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in refused)
        raise ConfigError(
            f"cannot resume {run_dir} with a different config: {len(refused)} key(s) differ from its config.json: "
            f"{listed}. A resume may change only the budget (--steps/--frames), stop_when, stop_over_episodes"
            ", log.*, trainer.checkpoint_interval"
            "(_s), trainer.keep_checkpoints, trainer.history.*, trainer.threads, trainer.max_nonfinite_updates, "
            "policy.threads/device/"
            "max_wait_ms/stall_warning_s, algo.device, algo.precision, streams.*, supervision.* and launcher; to "
            "change the others start a new run (--name NEW)", field=refused[0][0],
            problems=[f"{k}: {o!r} -> {n!r}" for k, o, n in refused])
    _, total = budget(cfg)
    if total <= int(ckpt["env_steps"]):
        raise ConfigError(
            f"{run_dir} already did {int(ckpt['env_steps']):,} env steps of its budget of {total:,}; to continue it "
            f"give a larger budget, counted from the run's start: e.g. --steps {2 * total}", field="env_steps")
    cfg.resume = int(ckpt.get("resumes", 0)) + 1
    return cfg, ckpt
