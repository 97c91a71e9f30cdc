"""Evaluate trained policies in-process: load a run's checkpoints, play episodes, record video.

Used by ``zoo eval`` (:mod:`zoo.commands.eval`) and ``benchmarks/hide_and_seek_learning.py``.
No worker process, no transport, no display: the policy runs on CPU in this process.

**What is loaded.** The run's ``config.json`` gives the algorithm, the env (name and
``env.*`` options) and the ``algo.*`` options; the algorithm's ``build_policy(config,
spec)`` builds the network and the checkpoint's ``["algorithm"]["policy"]`` state dict
fills it (the trainer's checkpoint format: ``{"algorithm": algo.state_dict(),
"policy_version", "updates", "env_steps", "frames", "episodes"}``).

**Named policies** (docs/policies.md): each policy's network, built from its own
``config.json`` table and checkpoint, acts for its agents only (:class:`Seat`); an env whose
agents' observation spaces differ is laid out as in training (``PaddedSpaces``), and each
policy reads its space group's keys, renamed back.

How the loaded policy plays episodes, the per-episode results and the video frames:
:mod:`zoo.play` (:func:`play`, :class:`Recorder`, :class:`Seat`), re-exported here.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.play import Recorder, RenderError, Seat, play, summarise, team_of
from zoo.runinfo import RunError, read_config, resolve_run, resolve_target

__all__ = ["Evaluation", "Seat", "evaluation_options", "load_evaluation", "parse_policy_swaps", "checkpoint_label",
           "output_stem", "play",
           "Recorder", "RenderError", "team_of", "summarise"]


def evaluation_options(env_config: Any) -> Any:
    """The env options an evaluation plays with: ``env_config.evaluation()`` where the env
    plugin's config has that method (the ``pettingzoo`` plugin's leaves out ``opening_moves``),
    else ``env_config`` itself."""
    evaluation = getattr(env_config, "evaluation", None)
    return evaluation() if callable(evaluation) else env_config


@dataclass
class Evaluation:
    """A policy ready to play, with where it came from.

    ``make_env(seed)`` builds one env of the run (its ``env.*`` options); ``renderer`` is the
    env plugin's registered ``renderer`` (None if it has none); ``counters``: the
    checkpoint's ``policy_version``, ``env_steps``... (those present).

    A run of named policies has ``seats``, one :class:`Seat` per policy in declaration
    order (``policy``, ``checkpoint``, ``counters`` and ``algo_name`` are then the first
    seat's); ``players`` is what :func:`play` takes: ``seats``, or ``policy`` when there
    are none.
    """

    run_dir: Path
    checkpoint: Path
    config: dict[str, Any]
    algo_name: str
    env_name: str
    policy: Any
    make_env: Callable[[int], Any]
    renderer: Callable[[Any], np.ndarray] | None
    counters: dict[str, int]
    seats: list[Seat] = dataclasses.field(default_factory=list)

    @property
    def players(self) -> Any:
        return self.seats or self.policy


def _torch_load(path: Path) -> Any:
    """:func:`zoo.core.checkpoint.load_checkpoint` (it unpickles numpy states: load only
    checkpoints you trust, such as your own runs'), its error as one :class:`RunError` line."""
    from zoo.core.checkpoint import CheckpointError, load_checkpoint

    try:
        return load_checkpoint(str(path))
    except CheckpointError as exc:
        raise RunError(str(exc).splitlines()[0]) from None


def _algorithms_with_fields(registry, fields: set[str]) -> list[str]:
    from zoo.core.config import algorithm_config_class

    names = []
    for component in registry.all("algorithm"):
        try:
            cls = algorithm_config_class(component)
        except Exception:  # noqa: BLE001 - a broken plugin cannot be the match
            continue
        if cls is not None and {f.name for f in dataclasses.fields(cls)} == fields:
            names.append(component.name)
    return names


def _config_name(config: dict[str, Any], key: str, run_dir: Path) -> str:
    """``config[key]``, a name (``algo_name``, ``env_name``). Raises RunError when it is not a string."""
    value = config.get(key)
    if not isinstance(value, str):
        raise RunError(f"run {str(run_dir)!r} cannot be rebuilt: its config.json has no {key} (a name, got "
                       f"{value!r}); take the config from a run that zoo train wrote with --run RUN")
    return value


def parse_policy_swaps(values: Sequence[str]) -> dict[str, str]:
    """``zoo eval --policy NAME=CHECKPOINT`` values as ``{NAME: CHECKPOINT}`` (in order).

    Raises:
        RunError: a value that is not ``NAME=CHECKPOINT`` with both parts non-empty, or one
            NAME given twice (one line naming the option and the fix).
    """
    out: dict[str, str] = {}
    for text in values:
        name, sep, source = text.partition("=")
        name, source = name.strip(), source.strip()
        if not sep or not name or not source:
            raise RunError(f"--policy {text!r}: give NAME=CHECKPOINT, a policy of the run and a checkpoint file, a run "
                           "folder or POLICY@VERSION to play in place of its weights (e.g. --policy "
                           "lead=runs/other/checkpoints/lead/latest.pt)")
        if name in out:
            raise RunError(f"--policy {name}= is given twice ({out[name]!r} and {source!r}); give each policy's "
                           "checkpoint once")
        out[name] = source
    return out


def _refuse_unknown_swaps(swaps: dict[str, str], names: Sequence[str], run_dir: Path, named: bool) -> None:
    for name, source in swaps.items():
        if name not in names:
            if named:
                has = f"names policies {', '.join(names)}"
            else:
                has = f"names no policies (its one policy is {names[0]!r})"
            raise RunError(f"--policy {name}={source}: run {str(run_dir)!r} has no policy {name!r}; it {has}: give "
                           f"--policy {names[0]}=CHECKPOINT")


def _swap_file(name: str, source: str, run_dir: Path, config: dict[str, Any]) -> Path:
    """The checkpoint file ``--policy NAME=SOURCE`` names (:func:`zoo.core.policies.resolve_weights`)."""
    from zoo.core.config import ConfigError
    from zoo.core.policies import resolve_weights

    try:
        return resolve_weights(source, name, run_dir=run_dir, runs_dir=str(config.get("runs_dir") or "runs"),
                               label=f"--policy {name}={source}")
    except ConfigError as exc:
        raise RunError(str(exc).splitlines()[0]) from None


def load_evaluation(target: str | os.PathLike, run: str | os.PathLike | None = None, registry=None,
                    swaps: dict[str, str] | None = None) -> Evaluation:
    """Load the policy of ``target`` (a run folder -> its ``checkpoints/latest.pt``, or a
    checkpoint file inside a run folder); ``run`` takes the config from another run folder.

    A run of named policies (its ``config.json`` has ``policies``) loads every policy, each
    playing its agents (:attr:`Evaluation.seats`): a trainable policy's
    ``checkpoints/<policy>/latest.pt``, a frozen one's ``weights``, an opponent from a policy's
    history (docs/history.md) that policy's ``latest.pt``; ``target`` may also be
    a file in ``checkpoints/<policy>/``, which that policy then plays. ``swaps``
    (``{policy: source}``, :func:`parse_policy_swaps`) plays a checkpoint file, run folder or
    ``POLICY@VERSION`` (as a frozen policy's ``weights``) in place of a policy's weights,
    built with the options stored in that checkpoint; a run that names no policies has one,
    ``default``.

    Raises:
        RunError: the run folder or checkpoint does not exist or cannot be read; the run's
            config.json names no algorithm or env, or they are not installed; the checkpoint
            holds another algorithm's state (naming it when its config matches an installed
            algorithm) or a policy of another shape; ``swaps`` names a policy the run does
            not have or a checkpoint that cannot be found, read or does not fit.
    """
    import torch  # noqa: F401  (fail here, not half-way)

    from zoo.core.config import (
        ConfigError,
        ExperimentConfig,
        algorithm_config_class,
        apply_mapping,
        env_config_class,
        resolve_env,
    )
    from zoo.core.registry import UnknownComponentError

    if registry is None:
        from zoo.core.plugins import get_registry

        registry = get_registry()
    swaps = dict(swaps or {})
    path = Path(target)
    if run is not None:  # the config of another run, the checkpoint of target
        run_dir = resolve_run(run)
        config = read_config(run_dir)
        if config.get("policies"):
            raise RunError(f"--run {str(run)!r} names policies ({', '.join(config['policies'])}); evaluate it as "
                           f"zoo eval {str(run)!r}, and play a checkpoint in place of one policy's weights with "
                           "--policy NAME=CHECKPOINT")
        _refuse_unknown_swaps(swaps, ["default"], run_dir, named=False)
        if swaps:
            raise RunError(f"--policy default={swaps['default']} and --run {str(run)!r}: with --run, "
                           f"RUN_OR_CHECKPOINT ({str(target)!r}) is the checkpoint to play; give one of the two")
        if path.is_dir():
            _, checkpoint = resolve_target(path)
        elif path.is_file():
            checkpoint = path
        else:
            raise RunError(f"checkpoint {str(target)!r} does not exist")
    else:
        run_dir, file = resolve_target(path) if path.is_file() else (resolve_run(target), None)
        config = read_config(run_dir)
        if config.get("policies"):
            return _load_named(registry, run_dir, config, file, swaps)
        _refuse_unknown_swaps(swaps, ["default"], run_dir, named=False)
        if "default" in swaps:
            if file is not None:
                raise RunError(f"{str(target)!r} and --policy default={swaps['default']} both name the checkpoint to "
                               "play; give the run folder and --policy, or the checkpoint alone")
            checkpoint = _swap_file("default", swaps["default"], run_dir, config)
        else:
            checkpoint = file if file is not None else resolve_target(target)[1]
    algo_name, env_name = _config_name(config, "algo_name", run_dir), _config_name(config, "env_name", run_dir)
    try:
        algo = registry.get("algorithm", algo_name)
        env_component, env_arg = resolve_env(registry, env_name)
    except (UnknownComponentError, LookupError) as exc:
        raise RunError(f"run {str(run_dir)!r} cannot be rebuilt: {exc}") from None
    algo_cls, env_cls = algorithm_config_class(algo), env_config_class(env_component)
    holder = ExperimentConfig(algo_name=algo_name, env_name=env_name, algo=algo_cls() if algo_cls else None,
                              env=env_cls() if env_cls else None)
    try:
        apply_mapping(holder, {k: config[k] for k in ("algo", "env") if isinstance(config.get(k), dict)},
                      source=f"{run_dir / 'config.json'}")
    except ConfigError as exc:
        raise RunError(str(exc).splitlines()[0]) from None

    ckpt = _torch_load(checkpoint)
    state = ckpt.get("algorithm") if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not isinstance(state.get("policy"), dict):
        raise RunError(f"{str(checkpoint)!r} is not a Zoo checkpoint (no algorithm policy state in it)")
    stored = ckpt.get("algo_name") or state.get("algo_name")
    if stored is not None and stored != algo.name:
        raise RunError(f"checkpoint {str(checkpoint)!r} was written by algorithm {stored}, but run {str(run_dir)!r} "
                       f"trains {algo.name}; evaluate it with its own run (or --run RUN of a {stored} run)")
    fields = set(state["config"]) if isinstance(state.get("config"), dict) else None
    if fields is not None and algo_cls is not None and fields != {f.name for f in dataclasses.fields(algo_cls)}:
        owners = _algorithms_with_fields(registry, fields)
        what = f"algorithm {' or '.join(owners)}" if owners else "another algorithm"
        raise RunError(f"checkpoint {str(checkpoint)!r} was written by {what}, but run {str(run_dir)!r} trains "
                       f"{algo.name}; evaluate it with its own run (or --run RUN of a run of its algorithm)")

    env_options = evaluation_options(holder.env)

    def make_env(seed: int):
        return env_component.load()(env_arg, env_options, seed)

    probe = make_env(0)
    try:
        spec = probe.spec
    finally:
        probe.close()
    policy = algo.load().build_policy(holder.algo, spec)
    try:
        policy.load_state_dict(state["policy"])
    except (RuntimeError, KeyError, ValueError) as exc:
        first = str(exc).strip().splitlines()
        raise RunError(f"checkpoint {str(checkpoint)!r} does not fit run {str(run_dir)!r}'s {algo.name} policy for "
                       f"{env_name}: {first[0] if first else type(exc).__name__}"
                       + (f" {first[1].strip()}" if len(first) > 1 else "")) from None
    policy.eval()
    counters = {k: int(ckpt[k]) for k in ("policy_version", "updates", "env_steps", "frames", "episodes")
                if isinstance(ckpt.get(k), (int, float))}
    return Evaluation(run_dir, checkpoint, config, algo.name, env_name, policy, make_env,
                      env_component.option("renderer"), counters)


def _load_named(registry, run_dir: Path, config: dict[str, Any], file: Path | None,
                swaps: dict[str, str]) -> Evaluation:
    """Every named policy of the run at ``run_dir``, each for its agents (:func:`load_evaluation`)."""
    from zoo.core.config import (
        ConfigError,
        ExperimentConfig,
        algorithm_config_class,
        apply_mapping,
        env_config_class,
        resolve_env,
    )
    from zoo.core.env import PAD_SEP
    from zoo.core.policies import INIT_WEIGHTS
    from zoo.core.registry import UnknownComponentError

    tables: dict[str, Any] = config["policies"]
    names = list(tables)
    source = run_dir / "config.json"
    _refuse_unknown_swaps(swaps, names, run_dir, named=True)
    files: dict[str, tuple[Path | None, bool]] = {}  # None: a frozen policy's initial weights ("init")
    if file is not None:
        owner = file.parent.name if file.parent.parent.name == "checkpoints" else None
        if owner not in tables:
            raise RunError(f"checkpoint {str(file)!r} is no policy's of run {str(run_dir)!r}, which names policies "
                           f"{', '.join(names)} (their checkpoints are checkpoints/<policy>/*.pt); give the run "
                           "folder, and a checkpoint in place of one policy's weights with --policy NAME=CHECKPOINT")
        if owner in swaps:
            raise RunError(f"{str(file)!r} and --policy {owner}={swaps[owner]} both name policy {owner}'s "
                           "checkpoint; give the run folder and --policy, or the checkpoint alone")
        files[owner] = (file, False)
    for name, where in swaps.items():
        # "init": the policy's initial weights, those its trainer starts from (a frozen policy's weights = "init")
        files[name] = (None if where == INIT_WEIGHTS else _swap_file(name, where, run_dir, config), True)
    for name, table in tables.items():
        if name in files:
            continue
        opponent = table.get("opponent") if isinstance(table.get("opponent"), dict) else {}
        if table.get("trainable", True) or opponent.get("source"):
            # an opponent from a policy's history (docs/history.md) plays that policy's latest weights
            owner = str(opponent.get("source") or name)
            own = run_dir / "checkpoints" / owner / "latest.pt"
            if not own.is_file():
                raise RunError(f"run {str(run_dir)!r} has no checkpoint of policy {owner} yet ({own} does not exist); "
                               "the trainer writes one every trainer.checkpoint_interval updates and at the end, or "
                               f"play one with --policy {name}=CHECKPOINT")
            files[name] = (own, False)
        else:
            weights = table.get("weights")
            if weights == INIT_WEIGHTS:  # its initial weights, built below as its trainer would
                files[name] = (None, False)
                continue
            if not isinstance(weights, str) or not Path(weights).is_file():
                raise RunError(f"frozen policy {name}'s weights ({weights!r} in {source}) do not exist; play a "
                               f"checkpoint in their place with --policy {name}=CHECKPOINT")
            files[name] = (Path(weights), False)

    env_name = _config_name(config, "env_name", run_dir)
    try:
        env_component, env_arg = resolve_env(registry, env_name)
    except (UnknownComponentError, LookupError) as exc:
        raise RunError(f"run {str(run_dir)!r} cannot be rebuilt: {exc}") from None
    env_cls = env_config_class(env_component)
    env_holder = ExperimentConfig(algo_name="", env_name=env_name, env=env_cls() if env_cls else None)
    try:
        apply_mapping(env_holder, {"env": config["env"]} if isinstance(config.get("env"), dict) else {},
                      source=str(source))
    except ConfigError as exc:
        raise RunError(str(exc).splitlines()[0]) from None

    env_options = evaluation_options(env_holder.env)

    def make_env(seed: int):
        return env_component.load()(env_arg, env_options, seed)

    probe = make_env(0)
    try:
        spec = probe.spec
    finally:
        probe.close()
    seats: list[Seat] = []
    space_groups = spec.space_groups() if spec.mixed else []
    for name, table in tables.items():
        checkpoint, swapped = files[name]
        what = f"--policy {name}={swaps[name]}" if swapped else f"checkpoint {str(checkpoint)!r}"
        agents = table.get("agents")
        if not isinstance(agents, list) or not agents or any(a not in spec.agents for a in agents):
            raise RunError(f"{source}: policies.{name}.agents = {agents!r} are not agents of {env_name} "
                           f"({', '.join(spec.agents)}); take the config from the run that zoo train wrote")
        algo_name = _config_name(table, "algo_name", run_dir)
        try:
            algo = registry.get("algorithm", algo_name)
        except UnknownComponentError as exc:
            raise RunError(f"run {str(run_dir)!r} cannot be rebuilt: policy {name}: {exc}") from None
        algo_cls = algorithm_config_class(algo)
        holder = ExperimentConfig(algo_name=algo_name, env_name=env_name, algo=algo_cls() if algo_cls else None)
        if checkpoint is None:  # frozen at its initial weights: those its trainer would start from
            ckpt = _initial_checkpoint(registry, config, tables, name, holder, spec.subset(agents), source)
        else:
            try:
                ckpt = _torch_load(checkpoint)
            except RunError as exc:
                raise RunError(f"{what}: {exc}" if swapped else str(exc)) from None
        state = ckpt.get("algorithm") if isinstance(ckpt, dict) else None
        if not isinstance(state, dict) or not isinstance(state.get("policy"), dict):
            raise RunError(f"{what}: {str(checkpoint)!r} is not a Zoo checkpoint (no algorithm policy state in it)")
        stored = state.get("config")
        saved: dict[str, Any] = stored if isinstance(stored, dict) else {}
        fields = {f.name for f in dataclasses.fields(algo_cls)} if algo_cls is not None else set(saved)
        if set(saved) - fields:
            owners = _algorithms_with_fields(registry, set(saved))
            by = f"algorithm {' or '.join(owners)}" if owners else "another algorithm"
            raise RunError(f"{what}: {str(checkpoint)!r} was written by {by}, but policy {name} plays {algo_name}; "
                           f"give a {algo_name} checkpoint")
        layers = {"algo": table["algo"]} if isinstance(table.get("algo"), dict) else {}
        try:
            apply_mapping(holder, layers, source=f"{source} policies.{name}")
            if swapped:  # its network as the checkpoint was trained (a frozen policy's rule, docs/policies.md)
                apply_mapping(holder, {"algo": {k: v for k, v in saved.items() if k != "device"}},
                              source=f"{checkpoint} (the options its weights were trained with)")
        except ConfigError as exc:
            raise RunError(str(exc).splitlines()[0]) from None
        policy = algo.load().build_policy(holder.algo, spec.subset(agents))
        try:
            policy.load_state_dict(state["policy"])
        except (RuntimeError, KeyError, ValueError) as exc:
            first = str(exc).strip().splitlines()
            why = (f"{first[0]} {first[1].strip()}" if len(first) > 1 else first[0]) if first else type(exc).__name__
            raise RunError(f"{what}: {str(checkpoint)!r} does not fit policy {name} ({algo_name} for agents "
                           f"{', '.join(agents)}): {why.rstrip('.')}; give a checkpoint of a policy for these agents' "
                           "spaces") from None
        policy.eval()
        keys = None
        if space_groups:  # PaddedSpaces: this policy reads its space group's keys, renamed back
            g = next(i for i, grp in enumerate(space_groups) if agents[0] in grp)
            keys = {f"{k}{PAD_SEP}{g}": k for k in spec.observation_space_of(agents[0])}
        counters = {k: int(ckpt[k]) for k in ("policy_version", "updates", "env_steps", "frames", "episodes")
                    if isinstance(ckpt.get(k), (int, float))}
        seats.append(Seat(name, algo_name, policy, np.array([spec.agents.index(a) for a in agents], np.int64), keys,
                          checkpoint, counters, swapped))
    lead = seats[0]
    algos = "/".join(dict.fromkeys(seat.algo_name for seat in seats))
    return Evaluation(run_dir, lead.checkpoint or run_dir, config, algos, env_name, lead.policy, make_env,
                      env_component.option("renderer"), lead.counters, seats)


def checkpoint_label(path: str | os.PathLike) -> str:
    """A readable, file-name-safe name of checkpoint ``path`` that differs between files: for a
    file inside a run folder (an ancestor holding ``config.json``), the run's name and the
    file's path in it without ``checkpoints/`` and ``.pt``, joined by dots; else its folder's
    name and its stem; then the first 6 hex digits of the SHA-1 of its absolute path (two runs
    of one name in different folders). Examples: ``runs/teams-1/checkpoints/lead/latest.pt`` ->
    ``teams-1.lead.latest.3fa2c1``; ``runs/teams-1/history/lead/v00000012.pt`` ->
    ``teams-1.history.lead.v00000012.<hash>``; ``/tmp/x/lead.pt`` -> ``x.lead.<hash>``."""
    import hashlib

    full = Path(os.path.abspath(path))
    run = next((p for p in full.parents if (p / "config.json").is_file()), None)
    if run is not None:
        parts = [run.name] + [part for part in full.relative_to(run).with_suffix("").parts if part != "checkpoints"]
    else:
        parts = [part for part in (full.parent.name, full.stem) if part]
    text = re.sub(r"[^A-Za-z0-9._@+-]", "_", ".".join(parts))
    return f"{text}.{hashlib.sha1(str(full).encode()).hexdigest()[:6]}"


def output_stem(ev: Evaluation, swapped_default: bool = False) -> str:
    """The name of ``zoo eval``'s default output file before ``-seed<S>``: the checkpoint's stem
    (``latest``); ``default=<label>`` when ``--policy default=...`` swapped it
    (``swapped_default``); for named policies ``policies``, then ``-NAME=<label>`` for each policy
    that plays other weights than its own (``--policy``, or a checkpoint file given as the
    target), :func:`checkpoint_label` naming them, so two evaluations of different weights never
    share a file."""
    if not ev.seats:
        return f"default={checkpoint_label(ev.checkpoint)}" if swapped_default else ev.checkpoint.stem
    tables = ev.config.get("policies") or {}
    parts = ["policies"]
    for seat in ev.seats:
        if seat.checkpoint is None:  # initial weights: by --policy NAME=init, or its own (frozen at "init")
            parts += [f"{seat.name}=init"] if seat.swapped else []
            continue
        found = tables.get(seat.name)
        table: dict[str, Any] = found if isinstance(found, dict) else {}
        opp = table.get("opponent")
        opponent: dict[str, Any] = opp if isinstance(opp, dict) else {}
        if table.get("trainable", True) or opponent.get("source"):
            own = ev.run_dir / "checkpoints" / str(opponent.get("source") or seat.name) / "latest.pt"
        else:
            own = Path(str(table.get("weights") or ""))
        if seat.swapped or os.path.abspath(seat.checkpoint) != os.path.abspath(own):
            parts.append(f"{seat.name}={checkpoint_label(seat.checkpoint)}")
    return "-".join(parts)


def _initial_checkpoint(registry, config: dict[str, Any], tables: dict[str, Any], name: str, holder: Any, spec: Any,
                        source: Path) -> dict[str, Any]:
    """A checkpoint-shaped dict of policy ``name``'s initial weights (``weights = "init"``):
    :func:`zoo.core.workers.trainer.initial_policy_state` with the run's seed and its options
    from ``config.json``, version 0."""
    from types import SimpleNamespace

    from zoo.core.config import ConfigError, apply_mapping
    from zoo.core.workers.trainer import initial_policy_state

    table = tables[name]
    try:
        apply_mapping(holder, {"algo": table["algo"]} if isinstance(table.get("algo"), dict) else {},
                      source=f"{source} policies.{name}")
    except ConfigError as exc:
        raise RunError(str(exc).splitlines()[0]) from None
    view = SimpleNamespace(policies=SimpleNamespace(named=dict(tables)), seed=int(config.get("seed", 0) or 0),
                           algo=holder.algo, algo_name=holder.algo_name)
    return {"algorithm": {"policy": initial_policy_state(registry, view, spec, name)}, "policy_version": 0}

