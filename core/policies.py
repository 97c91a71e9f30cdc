"""Named policies: several networks in one run, and which env agent acts with which.

SRL names its policies: every worker carries a ``policy_name`` and agent specs map env
agents to policies by pattern, first match wins. This module is Zoo's model of that: the
configuration, its validation and the agent -> policy mapping. Routing (which endpoint an
actor's requests and samples go to) is described in ``docs/policies.md``.

**In a config file**::

    [policies.hiders]            # one table per policy; NAME: a letter, then letters, digits, '_'
    algo = "mappo"               # its algorithm (default: the run's ALGO); also algo_name = "mappo"
    algo.lr = 3e-4               # (with algo_name) its algorithm's options, over the algorithm's
                                 # presets for its agents' spec and the run's top-level algo.*
    policy.count = 2             # its policy workers (every policy.* option; default: the run's)
    trainer.batch_samples = 32   # its trainers (every trainer.* option; default: the run's)

    [policies.seekers]
    trainable = false            # frozen: serves fixed weights, trains nothing
    weights = "runs/teams-1"     # where they come from (below)

    [[agents]]                   # env agents -> policies: fnmatch patterns, first match wins
    match = "hider_*"
    policy = "hiders"
    [[agents]]
    match = "seeker_*"
    policy = "seekers"

or with ``--set policies.hiders.algo=mappo``, ``--set policies.hiders.policy.count=2``,
``--set 'agents=[{"match": "hider_*", "policy": "hiders"}]'`` (the whole list).

**Defaults and compatibility.** With no ``[policies.*]`` table there is exactly one
policy, :data:`DEFAULT_POLICY` (``"default"``), made of the run's top-level ``algo_name``,
``algo``, ``policy`` and ``trainer`` (the very objects: :attr:`Policies.implicit`), and
every agent maps to it; ``config.json`` then holds no ``policies`` key, so every existing
config file and run folder means what it meant before (:func:`policies_from_saved`). With
one named policy and no ``[[agents]]``, every agent maps to it. A named policy's
``policy.*`` and ``trainer.*`` start from the run's top-level values (which hold the run
ALGO's presets and the user's top-level settings); its ``algo.*`` start from its
algorithm's defaults, then that algorithm's presets for the spec of its own agents
(``algo.*`` keys only: the presets' other keys are the run's, from the run's ALGO), then
the run's top-level ``algo.*`` settings when its algorithm is the run's ALGO, then (a
frozen policy) the options its weights were trained with, then its own table, then its
``--set`` overrides.

**Frozen weights** (``trainable = false``; ``weights`` is required then, and refused on a
trainable policy). ``weights`` is one of:

- ``"path/to/file.pt"``: a Zoo checkpoint file (``latest.pt``, ``policy-v00000120.pt``, a
  per-policy one); its ``["algorithm"]["policy"]`` state dict is loaded;
- ``"path/to/run"`` or a run name under ``runs_dir``: a run folder; its policy of the
  same name (``checkpoints/<name>/latest.pt``) when it has one, else its only policy
  (``checkpoints/latest.pt``, every run made before named policies);
- ``"POLICY@VERSION"``: policy POLICY's kept checkpoint of that version in this run's own
  folder (``checkpoints/POLICY/policy-v<VERSION:08d>.pt``, written with
  ``trainer.keep_checkpoints = true``; ``checkpoints/policy-v<VERSION:08d>.pt`` for
  ``default@VERSION`` of a run that names no policy), else that version in its history
  (``history/POLICY/v<VERSION:08d>.pt``, docs/history.md): self-play against an earlier
  self, on resume.

- ``"init"`` (:data:`INIT_WEIGHTS`): the policy's own initial weights, seeded and untrained,
  which its policy workers build at start exactly as its first trainer would in a run where
  it is trainable (same config, same seed, same declaration position:
  :func:`zoo.core.workers.trainer.initial_policy_state`); version 0. The baseline "this team
  never learns". ``config.json`` records ``"init"``.

**Opponents from the history** (``opponent = {source = "learner", pick = "pfsp", every =
"episode"}``, :class:`OpponentConfig`): the policy is not trainable and has no ``weights``;
its policy workers act each env episode with a version of ``source`` picked from the run's
history store (docs/history.md). :func:`opponent_problems` refuses a bad one.

The source is resolved to one absolute file when the config is built
(:func:`resolve_weights`). A frozen policy's ``algo.*`` options are those its weights were
trained with (the checkpoint's ``["algorithm"]["config"]``, ``device`` excepted), over the
layers above and under its own table; weights another algorithm wrote are refused. The
file is checked against a freshly built network of the policy's algorithm for its agents'
spaces (:func:`weights_problems`): every key and every shape. ``config.json`` records the
resolved file.

**Refused** before any worker starts, each in one line naming the key and the fix
(:func:`build_policies`): a name that is not a policy name; two names that differ only in
case (and in a TOML file, one table declared twice: :func:`duplicate_table_message`); an
unknown algorithm; an ``[[agents]]`` entry that is malformed, names no policy, matches no
agent or only agents that earlier entries took; an agent no entry matches; a policy no
agent maps to; agents of one policy with different observation or action spaces; a
frozen policy without weights, or with ``trainer.*`` options; weights on a trainable
policy; weights that cannot be found, read, or do not fit; every policy frozen; and every
rule :func:`zoo.core.config.validate` applies to the run's own ``algo``/``policy``/
``trainer`` options, applied to each policy's (``policy.count`` at most ``actors.count``,
inline contradictions, devices, the algorithm's batch check, a budget of at least one
update of each trainable policy).
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.core.config import (
    ConfigError,
    ExperimentConfig,
    PolicyConfig,
    TrainerConfig,
    _suggest,
    algorithm_config_class,
    config_to_dict,
    set_value,
    validate,
)
from zoo.core.env import EnvSpec
from zoo.core.options import NOT_OPTION, bounded
from zoo.core.registry import Registry

__all__ = [
    "DEFAULT_POLICY", "POLICY_NAME_RULE", "NamedPolicy", "AgentRule", "Policies", "PolicyLayers",
    "split_policy_layers", "build_policies", "agent_policies", "policies_to_dict", "policies_from_saved",
    "resolve_weights", "weights_problems", "duplicate_table_message", "policy_name_problem", "policy_view",
    "merge_policy_layers", "OpponentConfig", "opponent_problems", "INIT_WEIGHTS",
]

DEFAULT_POLICY = "default"
"""The name of the one policy of a run that names none."""
INIT_WEIGHTS = "init"
"""A frozen policy's ``weights`` that means its own initial (seeded, untrained) weights."""

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
POLICY_NAME_RULE = ("a policy name is a letter, then letters, digits or '_' (at most 64 characters): it is "
                    "part of endpoint names (inference-<policy>-<m>) and of folder names (checkpoints/<policy>/)")
_VERSION_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]{0,63})@(\d+)$")


@dataclass
class OpponentConfig:
    """A policy served from another policy's version history (docs/history.md, "Opponents"):
    it trains nothing, and its policy worker acts each env episode with a version of
    ``source`` picked by ``pick``. Off while ``source`` is empty."""

    source: str = ""
    """The trainable policy whose kept versions it plays (same algorithm, same spaces, its
    ``trainer.history`` on)."""
    pick: str = "latest"
    """The history query (:func:`zoo.core.history.parse_query`): ``latest``, ``v120``, ``uniform``,
    ``top-K``, ``pfsp`` or ``pfsp:P``."""
    every: str = "episode"
    """When a new version is picked: ``"episode"``, at the start of every env episode (the one form built)."""
    cache: int = field(default=4, metadata=bounded(ge=1))
    """Versions each policy worker keeps loaded (least recently used dropped first)."""


@dataclass
class NamedPolicy:
    """One policy: its algorithm and options, policy workers, trainers, weights and agents.

    The option fields mirror :class:`~zoo.core.config.ExperimentConfig`'s (``algo_name``,
    ``algo``, ``policy``, ``trainer``), so ``policies.NAME.KEY`` reads as ``KEY`` does at
    the top level.
    """

    name: str = field(metadata={NOT_OPTION: "is the name of its table ([policies.NAME])"})
    algo_name: str = ""
    """Registered algorithm (``algo = "NAME"`` is the same); default the run's ALGO."""
    algo: Any = None
    """The algorithm's ``Config`` instance (``policies.NAME.algo.X``)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Its policy workers (``count``, ``inline``, ``device``, ...); default the run's ``policy.*``."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Its trainers (``count``, ``threads``, ...); default the run's ``trainer.*``. None on a frozen policy."""
    trainable: bool = True
    """False: a frozen policy, serving ``weights`` and training nothing (its samples go nowhere)."""
    weights: str = ""
    """A frozen policy's weights: a checkpoint file, a run folder, or ``POLICY@VERSION`` (module docstring);
    after :func:`build_policies` the resolved absolute file."""
    opponent: OpponentConfig = field(default_factory=OpponentConfig)
    """Served from another policy's history (``opponent = {source = "learner", pick = "pfsp"}``):
    then not trainable, and without ``weights``."""
    agents: tuple[str, ...] = field(default=(), metadata={NOT_OPTION: "is computed from the [[agents]] entries"})
    """The env agents that act with it, in ``spec.agents`` order."""
    explicit: set[str] = field(default_factory=set, repr=False, compare=False,
                               metadata={NOT_OPTION: "records which keys the policy's own table set"})
    """Dotted keys (``trainer.count``) set by the policy's own table or ``--set``, not inherited."""


@dataclass(frozen=True)
class AgentRule:
    """One ``[[agents]]`` entry: env agents whose name matches ``match`` (``fnmatch`` pattern,
    case-sensitive) act with policy ``policy`` unless an earlier entry matched them."""

    match: str
    policy: str


@dataclass
class Policies:
    """Every policy of a run (in declaration order) and the agent mapping.

    ``implicit``: True when the run names no policy (the one :data:`DEFAULT_POLICY` *is* the
    run's top-level ``algo``/``policy``/``trainer``). ``agents`` maps every env agent to its
    policy's name.
    """

    named: dict[str, NamedPolicy]
    rules: list[AgentRule]
    agents: dict[str, str]
    implicit: bool = False

    @property
    def trainable(self) -> list[str]:
        """Names of the policies that train, in declaration order."""
        return [n for n, p in self.named.items() if p.trainable]

    def __getitem__(self, name: str) -> NamedPolicy:
        return self.named[name]


@dataclass
class PolicyLayers:
    """What the user's layers say about named policies, taken out of them by
    :func:`split_policy_layers`: per policy its ``(dotted key, value, source)`` entries in
    the order given, and the ``[[agents]]`` list (None: not given)."""

    tables: dict[str, list[tuple[str, Any, str]]] = field(default_factory=dict)
    agents: list[Any] | None = None
    agents_source: str = ""
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.tables and self.agents is None and not self.problems


def merge_policy_layers(under: PolicyLayers, over: PolicyLayers) -> PolicyLayers:
    """``over``'s policy settings over ``under``'s (a resumed run's saved policies under the
    command line's): each policy's entries in order (``under``'s first, so ``over``'s win),
    ``[[agents]]`` from ``over`` when it gives them, problems of both."""
    out = PolicyLayers(tables={n: list(e) for n, e in under.tables.items()}, agents=under.agents,
                       agents_source=under.agents_source, problems=under.problems + over.problems)
    for name, entries in over.tables.items():
        out.tables.setdefault(name, []).extend(entries)
    if over.agents is not None:
        out.agents, out.agents_source = over.agents, over.agents_source
    return out


# ----------------------------------------------------------------------------- names
def policy_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a policy (:data:`POLICY_NAME_RULE`), or None.

    ``"red-team"`` -> ``"policies.red-team: the name is not allowed: a policy name is ...;
    e.g. policies.red_team"``.
    """
    if _NAME_RE.match(name):
        return None
    fixed = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    fixed = fixed if fixed[:1].isalpha() else f"p_{fixed}" if fixed else ""
    return (f"policies.{name}: the name is not allowed: {POLICY_NAME_RULE}"
            + (f"; e.g. policies.{fixed[:64]}" if fixed else ""))


def duplicate_table_message(error: str, source: str) -> str | None:
    """A clear line for a TOML error about a table declared twice, or None for other errors.

    ``tomllib`` refuses a second ``[policies.hiders]`` (``"Cannot declare ('policies',
    'hiders') twice (at line 5, column 17)"``) and a dotted key redefining a table
    (``"Cannot redefine namespace ..."``); for a policy table this says that two policies
    cannot share a name. ``source`` starts the line (``"--config teams.toml"``).
    """
    m = re.search(r"Cannot (declare|redefine namespace) (\(.*?\))(?: twice)? \(at line (\d+)", error)
    if not m:
        return None
    try:
        key = ast.literal_eval(m.group(2))
    except (ValueError, SyntaxError):
        return None
    parts = [str(k) for k in (key if isinstance(key, tuple) else (key,))]
    table, line = ".".join(parts), m.group(3)
    if len(parts) == 2 and parts[0] == "policies":
        return (f"{source}: [policies.{parts[1]}] is declared twice (again at line {line}): two policies cannot "
                f"share a name; rename one, or merge the two tables into one")
    return f"{source}: [{table}] is declared twice (again at line {line}); merge the two tables into one"


# ----------------------------------------------------------------------------- layers
def split_policy_layers(file_data: dict[str, Any] | None, overrides: list[str], *,
                        source: str = "the config file") -> tuple[dict[str, Any] | None, list[str], PolicyLayers]:
    """Take the named-policy settings out of a config file's data and ``--set`` overrides.

    ``file_data``'s ``policies`` table (``{NAME: {KEY: VALUE}}``) and ``agents`` list, and every
    override ``policies.NAME.KEY=VALUE`` or ``agents=[...]`` (a Python literal list of
    ``{"match": ..., "policy": ...}``) go into the returned :class:`PolicyLayers`; the rest is
    returned for :func:`zoo.core.config.build_config`. ``source`` names the file in messages.

    Returns:
        ``(file_data without them, overrides without them, layers)``; a malformed entry is
        recorded in ``layers.problems`` (reported by :func:`build_policies`).
    """
    layers = PolicyLayers()
    rest_file = dict(file_data) if file_data is not None else None
    if rest_file is not None:
        tables = rest_file.pop("policies", None)
        if tables is not None:
            if not isinstance(tables, dict):
                layers.problems.append(("policies", f"{source}: policies must be tables [policies.NAME], got "
                                                    f"policies = {tables!r}"))
            else:
                for name, table in tables.items():
                    if not isinstance(table, dict):
                        layers.problems.append((f"policies.{name}", f"{source}: policies.{name} must be a table "
                                                f"[policies.{name}] of options, got {table!r}"))
                        continue
                    entries = layers.tables.setdefault(str(name), [])
                    entries += [(k, v, f"{source} [policies.{name}]") for k, v in _flatten_table(table)]
        if "agents" in rest_file:
            layers.agents, layers.agents_source = rest_file.pop("agents"), f"{source} [[agents]]"
    rest_overrides: list[str] = []
    for text in overrides:
        key, sep, value = text.partition("=")
        key = key.strip()
        if key == "agents" and sep:
            try:
                layers.agents = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                layers.problems.append(("agents", f"--set {text}: agents expects a list such as "
                                        "[{'match': 'hider_*', 'policy': 'hiders'}]"))
                continue
            layers.agents_source = f"--set {text}"
        elif key == "policies" or key.startswith("policies."):
            parts = key.split(".")
            if len(parts) < 3 or not all(parts) or not sep:
                layers.problems.append((key, f"--set {text}: set one option of one policy: "
                                        "--set policies.NAME.KEY=VALUE (e.g. policies.hiders.policy.count=2)"))
                continue
            layers.tables.setdefault(parts[1], []).append((".".join(parts[2:]), value, f"--set {text}"))
        else:
            rest_overrides.append(text)
    return rest_file, rest_overrides, layers


def _flatten_table(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in table.items():
        if isinstance(v, dict):
            out += _flatten_table(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _top_level_algo(file_data: dict[str, Any] | None, overrides: list[str]) -> tuple[list[tuple[str, Any]], list[str]]:
    """The run's own ``algo.*`` settings in the user's layers (file entries, then overrides)."""
    entries = [(f"algo.{k}", v) for k, v in _flatten_table((file_data or {}).get("algo") or {})]
    return entries, [o for o in overrides if o.partition("=")[0].strip().startswith("algo.")]


# ----------------------------------------------------------------------------- mapping
def _rules(raw: Any, source: str) -> tuple[list[AgentRule], list[tuple[str, str]]]:
    """``[[agents]]`` entries as :class:`AgentRule` s, and the problems of malformed ones."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [("agents", f"{source}: agents must be a list of tables [[agents]] with match and policy, "
                               f"got {raw!r}")]
    rules, problems = [], []
    for i, entry in enumerate(raw):
        where = f"agents[{i}]"
        if not isinstance(entry, dict):
            problems.append((where, f"{source}: {where} must be a table with match and policy, got {entry!r}"))
            continue
        extra = sorted(set(entry) - {"match", "policy"})
        if extra:
            problems.append((f"{where}.{extra[0]}", f"{source}: {where} has unknown key(s) {', '.join(extra)}; "
                             "an [[agents]] entry has match (an fnmatch pattern) and policy (a policy name)"))
        bad = [k for k in ("match", "policy") if not isinstance(entry.get(k), str) or not entry.get(k)]
        for k in bad:
            problems.append((f"{where}.{k}", f"{source}: {where}.{k} must be a non-empty string, got "
                             f"{entry.get(k)!r}" + (" (missing)" if k not in entry else "")
                             + ("; e.g. match = \"hider_*\"" if k == "match" else "; e.g. policy = \"hiders\"")))
        if not extra and not bad:
            rules.append(AgentRule(entry["match"], entry["policy"]))
    return rules, problems


def agent_policies(spec: EnvSpec, policies: Any, agents: list[AgentRule]) -> dict[str, str]:
    """``{agent: policy name}`` for every agent of ``spec``, in ``spec.agents`` order.

    ``policies``: the policy names (any iterable of names, or a mapping whose keys are).
    ``agents``: the ``[[agents]]`` entries; each agent takes the first entry whose ``match``
    (``fnmatch.fnmatchcase``) it matches. No entries and one policy: every agent maps to it.

    Raises:
        ConfigError: every problem at once (``field`` the first): an entry naming no policy,
            an entry matching no agent, an entry matching only agents earlier entries took,
            agents no entry matches (named), a policy no agent maps to.
    """
    names = list(policies)
    problems: list[tuple[str, str]] = []
    out: dict[str, str] = {}
    env = f"env {spec.env_id!r}"
    if not agents:
        if len(names) == 1:
            return {a: names[0] for a in spec.agents}
        raise ConfigError(
            f"agents: {len(names)} policies are named ({', '.join(names)}) but no [[agents]] entry maps {env}'s agents "
            f"({', '.join(spec.agents)}) to them; add [[agents]] tables with match (a pattern) and policy (a name)",
            field="agents")
    taken_by: dict[str, int] = {}
    for i, rule in enumerate(agents):
        if rule.policy not in names:
            close = _suggest(rule.policy, names)
            problems.append((f"agents[{i}].policy",
                             f"agents[{i}].policy = {rule.policy!r} names no policy"
                             + (f"; did you mean {' or '.join(map(repr, close))}?" if close else "")
                             + f" (policies: {', '.join(names)}); use one of them or add [policies.{rule.policy}]"))
        matched = [a for a in spec.agents if fnmatch.fnmatchcase(a, rule.match)]
        won = [a for a in matched if a not in out]
        if not matched:
            problems.append((f"agents[{i}].match",
                             f"agents[{i}].match = {rule.match!r} matches no agent of {env} (agents: "
                             f"{', '.join(spec.agents)}); fix the pattern or remove the entry"))
        elif not won:
            earlier = ", ".join(f"{a} -> agents[{taken_by[a]}]" for a in matched)
            problems.append((f"agents[{i}].match",
                             f"agents[{i}].match = {rule.match!r} matches only agents that earlier entries already "
                             f"map ({earlier}); the first match wins: remove the entry or move it up"))
        for a in won:
            out[a], taken_by[a] = rule.policy, i
    left = [a for a in spec.agents if a not in out]
    if left:
        patterns = ", ".join(repr(r.match) for r in agents)
        problems.append(("agents", f"agent{'s' if len(left) > 1 else ''} {', '.join(map(repr, left))} of {env} "
                         f"match{'es' if len(left) == 1 else ''} no [[agents]] pattern ({patterns}); add an "
                         "[[agents]] entry for them (match = \"*\" as the last entry maps every agent left)"))
    for name in names:
        if left or any(p[0].endswith(".policy") for p in problems):
            break  # the mapping is incomplete: which policies end up unused is not known yet
        if name not in out.values() and not any(r.policy == name for r in agents):  # else that entry's problem says why
            problems.append((f"policies.{name}",
                             f"policies.{name}: no agent maps to it (the [[agents]] entries map "
                             + ", ".join(f"{a} -> {p}" for a, p in out.items())
                             + f"); map agents to it (policy = {name!r}) or remove [policies.{name}]"))
    if problems:
        raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0],
                          problems=[m for _, m in problems])
    return {a: out[a] for a in spec.agents}


# ----------------------------------------------------------------------------- weights
def resolve_weights(source: str, policy: str, *, run_dir: str | os.PathLike | None = None,
                    runs_dir: str | os.PathLike = "runs", label: str | None = None) -> Path:
    """The checkpoint file a frozen policy's ``weights`` names (module docstring), absolute.

    ``policy`` is the frozen policy's name (a run folder's policy of that name is taken
    first); ``run_dir`` is this run's folder (for ``POLICY@VERSION``); ``runs_dir`` is
    where run names are looked up; ``label`` starts each message in place of
    ``policies.<policy>.weights = '<source>'`` (``zoo eval --policy`` passes its own option).

    Raises:
        ConfigError: no such file or run folder, a run folder without a fitting checkpoint
            (what it has is listed), ``POLICY@VERSION`` without that kept checkpoint.
    """
    key = f"policies.{policy}.weights"
    what = label or f"{key} = {source!r}"
    m = _VERSION_RE.match(source)
    path, named = Path(source), Path(runs_dir) / source
    if m and not path.exists():
        other, version = m.group(1), int(m.group(2))
        if run_dir is None:
            raise ConfigError(f"{what}: a POLICY@VERSION checkpoint is one this run kept, and a new run "
                              "has none yet; give a checkpoint file or another run's folder", field=key)
        from zoo.core.history import weights_relpath

        name = f"policy-v{version:08d}.pt"
        kept = [Path(run_dir) / "checkpoints" / other / name,  # a named policy's kept checkpoint
                Path(run_dir) / weights_relpath(other, version)]  # its version history (docs/history.md)
        if other == DEFAULT_POLICY:  # a run that names no policy keeps checkpoints/policy-v....pt
            kept.insert(0, Path(run_dir) / "checkpoints" / name)
        for file in kept:
            if file.is_file():
                return file.resolve()
        option = "trainer" if other == DEFAULT_POLICY else f"policies.{other}.trainer"
        raise ConfigError(f"{what}: policy {other} kept no version {version} ({kept[0]} does not exist, nor "
                          f"{kept[-1]}): versions are kept with {option}.keep_checkpoints = true or "
                          f"{option}.history.every_updates = N; give a version it kept", field=key)
    for candidate in (path, named):
        if candidate.is_file():
            return candidate.resolve()
        if candidate.is_dir():
            ckpts = candidate / "checkpoints"
            for file in (ckpts / policy / "latest.pt", ckpts / "latest.pt"):
                if file.is_file():
                    return file.resolve()
            have = sorted(str(p.relative_to(candidate)) for p in ckpts.glob("**/latest.pt")) if ckpts.is_dir() else []
            raise ConfigError(
                f"{what}: the run folder {candidate} has no checkpoint of policy {policy} "
                f"(checkpoints/{policy}/latest.pt) nor of a single policy (checkpoints/latest.pt)"
                + (f"; it has {', '.join(have)}: give that file" if have else "; it has no checkpoint at all"),
                field=key)
    nor = f" (nor {str(named)!r})" if named != path and len(path.parts) == 1 else ""
    raise ConfigError(f"{what} does not exist{nor}; give a checkpoint file (.pt), a run folder, or "
                      "POLICY@VERSION (docs/policies.md)", field=key)


def weights_problems(registry: Registry, pol: NamedPolicy, spec: EnvSpec, file: str | os.PathLike) -> list[str]:
    """Why the checkpoint ``file`` cannot be ``pol``'s weights for agents of ``spec`` (its
    agents' spec, :meth:`EnvSpec.subset`), as messages; ``[]`` when it fits.

    The checkpoint's ``["algorithm"]["policy"]`` state dict is compared, key by key and
    shape by shape, with the ``state_dict()`` of a network freshly built by ``pol``'s
    algorithm (``build_policy(pol.algo, spec)``, under a forked RNG: no worker, no weights
    copied). At most three differences are named, with the count of the rest.
    """
    import torch

    from zoo.core.checkpoint import CheckpointError, load_checkpoint

    key = f"policies.{pol.name}.weights"
    try:
        ckpt = load_checkpoint(str(file))
    except CheckpointError as exc:
        return [f"{key}: {exc}"]
    state = ckpt.get("algorithm") if isinstance(ckpt, dict) else None
    theirs = state.get("policy") if isinstance(state, dict) else None
    if not isinstance(theirs, dict):
        return [f"{key}: {file} is not a Zoo checkpoint (it has no ['algorithm']['policy'] state dict); give a "
                "checkpoint written by zoo train"]
    algo_cls = registry.get("algorithm", pol.algo_name).load()
    with torch.random.fork_rng(devices=[]):
        ours = algo_cls.build_policy(pol.algo, spec).state_dict()
    diffs = []
    for k, v in ours.items():
        if k not in theirs:
            diffs.append(f"{k} is missing from it")
        elif tuple(getattr(theirs[k], "shape", ())) != tuple(v.shape):
            diffs.append(f"{k} is {list(getattr(theirs[k], 'shape', ()))} in it, {list(v.shape)} here")
    diffs += [f"{k} is in it but not here" for k in theirs if k not in ours]
    if not diffs:
        return []
    more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
    agents = ", ".join(spec.agents)
    return [f"{key}: {file} does not fit policy {pol.name} ({pol.algo_name} for agents {agents}): "
            f"{'; '.join(diffs[:3])}{more}; give weights saved for these agents' spaces with the same "
            f"policies.{pol.name}.algo options"]


# ----------------------------------------------------------------------------- build
def _implicit(cfg: ExperimentConfig) -> Policies:
    spec = cfg.spec
    agents = tuple(spec.agents) if spec is not None else ()
    pol = NamedPolicy(DEFAULT_POLICY, cfg.algo_name, cfg.algo, cfg.policy, cfg.trainer, agents=agents)
    return Policies({DEFAULT_POLICY: pol}, [], {a: DEFAULT_POLICY for a in agents}, implicit=True)


def build_policies(registry: Registry, cfg: ExperimentConfig, layers: PolicyLayers, *,
                   file_data: dict[str, Any] | None = None, overrides: Iterable[str] = (),
                   run_dir: str | os.PathLike | None = None) -> Policies:
    """The run's policies from ``layers`` (:func:`split_policy_layers`) over the built ``cfg``.

    ``cfg`` is the run's config as :func:`zoo.core.config.build_config` returned it (with
    ``cfg.spec``; its ``policy``/``trainer`` are every named policy's defaults);
    ``file_data``/``overrides`` are the user's layers without the policy entries (their
    top-level ``algo.*`` settings apply to the policies of the run's ALGO); ``run_dir``
    is the run's folder on resume (``POLICY@VERSION`` weights). Empty ``layers``: the
    implicit :data:`DEFAULT_POLICY`.

    Raises:
        ConfigError: every problem at once (module docstring), ``field`` the first bad key
            (``policies.NAME.KEY``, ``agents[i].match``, ...).
    """
    if cfg.spec is None:
        raise ValueError("build_policies needs cfg.spec (a config from build_config)")
    spec = cfg.spec
    problems: list[tuple[str, str]] = list(layers.problems)
    if layers.empty:
        groups = spec.space_groups()
        if len(groups) > 1:
            raise ConfigError(
                f"env {spec.env_id!r}: its agents have different spaces ("
                + "; ".join(f"{', '.join(g)}: {_spaces_str(spec, g[0])}" for g in groups)
                + "), so one network cannot act for all of them; name a policy for each group of agents with one "
                "space ([policies.NAME] tables and [[agents]] entries: docs/policies.md)", field="policies")
        return _implicit(cfg)
    rules, rule_problems = _rules(layers.agents, layers.agents_source)
    problems += rule_problems
    if not layers.tables:
        problems.append(("agents", f"{layers.agents_source}: [[agents]] entries map agents to named policies, but no "
                         "[policies.NAME] table names one; add the tables, or remove the entries (without them every "
                         "agent acts with the run's one policy)"))
    names = list(layers.tables)
    lowered: dict[str, str] = {}
    for name in names:
        bad = policy_name_problem(name)
        if bad:
            problems.append((f"policies.{name}", bad))
        other = lowered.setdefault(name.lower(), name)
        if other != name:
            problems.append((f"policies.{name}",
                             f"policies.{other} and policies.{name} differ only in case; a policy's name names its "
                             "checkpoint folder (checkpoints/<policy>/), and the two would be one folder on a "
                             "case-insensitive file system: rename one"))
    if problems:
        _raise(problems)
    try:
        mapping = agent_policies(spec, names, rules)
    except ConfigError as exc:
        _raise(problems + [(exc.field, m) for m in exc.problems])
    top_entries, top_overrides = _top_level_algo(file_data, list(overrides))
    built: dict[str, NamedPolicy] = {}
    for name in names:
        pol, more = _build_one(registry, cfg, name, layers.tables[name], mapping, top_entries, top_overrides,
                               run_dir)
        problems += more
        if pol is not None:
            built[name] = pol
    if problems:
        _raise(problems)
    for pol in built.values():
        problems += _policy_problems(registry, cfg, pol, run_dir)
        problems += opponent_problems(cfg, pol, built)
    if not any(p.trainable for p in built.values()):
        problems.append(("policies", f"policies: every policy is frozen (trainable = false: {', '.join(built)}), so "
                         "the run would train nothing; make one trainable (zoo eval plays frozen weights)"))
    if problems:
        _raise(problems)
    return Policies(built, rules, mapping)


def _spaces_str(spec: EnvSpec, agent: str) -> str:
    obs = spec.observation_space_of(agent)
    shown = ", ".join(f"{k} {list(getattr(v, 'shape', ()))}" for k, v in obs.items())
    return f"observation {shown}, action {spec.action_space_of(agent)}"


def _raise(problems: list[tuple[str, str]]) -> None:
    raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0], problems=[m for _, m in problems])


def _build_one(registry: Registry, cfg: ExperimentConfig, name: str, entries: list[tuple[str, Any, str]],
               mapping: dict[str, str], top_entries: list[tuple[str, Any]], top_overrides: list[str],
               run_dir: str | os.PathLike | None) -> tuple[NamedPolicy | None, list[tuple[str, str]]]:
    """One policy from its entries; ``(None, problems)`` when it cannot be built."""
    prefix = f"policies.{name}."
    algo_name = cfg.algo_name
    for key, value, _ in entries:  # its algorithm decides what its algo.* options are
        if key in ("algo", "algo_name"):
            algo_name = value
    if not isinstance(algo_name, str) or algo_name not in registry.names("algorithm"):
        known = registry.names("algorithm")
        close = _suggest(str(algo_name), known) if isinstance(algo_name, str) else []
        return None, [(prefix + "algo", f"{prefix}algo = {algo_name!r} is not a registered algorithm"
                       + (f"; did you mean {' or '.join(map(repr, close))}?" if close else "")
                       + f" (installed: {', '.join(known)}; see `zoo list algorithms`)")]
    agents = tuple(a for a in mapping if mapping[a] == name)
    try:
        sub = cfg.spec.subset(agents)  # type: ignore[union-attr]
    except ValueError as exc:
        return None, [(prefix + "agents", f"policies.{name}: its agents ({', '.join(agents)}) must share one "
                       f"observation and one action space (one network acts for all of them), but {exc}; map "
                       "agents with different spaces to different policies")]
    component = registry.get("algorithm", algo_name)
    algo_cls = algorithm_config_class(component)
    pol = NamedPolicy(name, algo_name, algo_cls() if algo_cls else None, copy.deepcopy(cfg.policy),
                      copy.deepcopy(cfg.trainer), agents=agents)
    try:
        presets_fn = getattr(component.load(), "presets", None)
        presets = (presets_fn(sub) if callable(presets_fn) else None) or {}
        for key, value in presets.items():
            if key.startswith("algo."):
                set_value(pol, key, value, source=f"{algo_name} presets for policy {name} ({sub.env_id})")
        if algo_name == cfg.algo_name:  # the run's own algo.* settings are every policy's of that algorithm
            for key, value in top_entries:
                set_value(pol, key, value, source="the run's algo options")
            for text in top_overrides:
                key, _, value = text.partition("=")
                set_value(pol, key.strip(), value, source=f"--set {text}")
        frozen = NamedPolicy(name)  # trainable and weights first: a frozen policy's network is its checkpoint's
        for key, value, source in entries:
            if key in ("trainable", "weights"):
                set_value(frozen, key, value, source=source)
        if not frozen.trainable and frozen.weights and frozen.weights != INIT_WEIGHTS:
            bad = _checkpoint_options(pol, algo_cls, frozen.weights, run_dir, cfg.runs_dir)
            if bad:
                return None, [(prefix + "weights", bad)]
        for key, value, source in entries:
            if key == "algo":
                key = "algo_name"
            set_value(pol, key, value, source=source)
            pol.explicit.add(key)
        if pol.opponent.source:  # served from another policy's history: trains nothing
            if "trainable" in pol.explicit and pol.trainable:
                return None, [(prefix + "trainable", f"{prefix}trainable = true: policy {name} is served from "
                               f"policy {pol.opponent.source}'s history ({prefix}opponent) and trains nothing; "
                               f"remove {prefix}trainable, or remove {prefix}opponent")]
            pol.trainable = False
    except ConfigError as exc:
        return None, [(prefix + exc.field, m) for m in exc.problems]
    return pol, []


def _checkpoint_options(pol: NamedPolicy, algo_cls: type | None, source: str, run_dir: str | os.PathLike | None,
                        runs_dir: str) -> str | None:
    """Set a frozen policy's ``algo.*`` options to those its weights were trained with (the
    checkpoint's ``["algorithm"]["config"]``, which Zoo's algorithms store), except
    ``device`` (a frozen policy has no trainer); its own table still overrides them. A
    source that cannot be found or read changes nothing (:func:`weights_problems` says why
    later). Returns a message when the checkpoint holds options its algorithm does not have
    (another algorithm's weights), else None.
    """
    from zoo.core.checkpoint import CheckpointError, load_checkpoint

    if algo_cls is None:
        return None
    try:
        file = resolve_weights(source, pol.name, run_dir=run_dir, runs_dir=runs_dir)
        ckpt = load_checkpoint(str(file))
    except (ConfigError, CheckpointError):
        return None
    state = ckpt.get("algorithm") if isinstance(ckpt, dict) else None
    saved = state.get("config") if isinstance(state, dict) else None
    if not isinstance(saved, dict):
        return None
    fields = {f.name for f in dataclasses.fields(algo_cls)}
    foreign = sorted(set(saved) - fields)
    if foreign:
        return (f"policies.{pol.name}.weights: {file} was written by another algorithm than "
                f"policies.{pol.name}.algo = {pol.algo_name!r} (its options {', '.join(foreign[:3])} are not "
                f"{pol.algo_name}'s); set policies.{pol.name}.algo to the algorithm that trained it")
    for key, value in saved.items():
        if key != "device":
            set_value(pol, f"algo.{key}", value, source=f"{file} (the options its weights were trained with)")
    return None


def _policy_problems(registry: Registry, cfg: ExperimentConfig, pol: NamedPolicy,
                     run_dir: str | os.PathLike | None) -> list[tuple[str, str]]:
    """The problems of one built policy: its options by the run's own rules, frozen-policy rules, weights."""
    prefix, name = f"policies.{pol.name}.", pol.name
    out: list[tuple[str, str]] = []
    sub = cfg.spec.subset(pol.agents)  # type: ignore[union-attr]
    view = dataclasses.replace(cfg, algo_name=pol.algo_name, algo=pol.algo, policy=pol.policy, trainer=pol.trainer,
                               spec=sub if pol.trainable else None)
    try:
        validate(view, registry, check_budget=pol.trainable)
    except ConfigError as exc:
        for msg in exc.problems:
            out.append((prefix + exc.field if exc.field.startswith(("algo", "policy.", "trainer.")) else exc.field,
                        f"policies.{name}: {msg}"))
    if not pol.trainable:
        for key in sorted(k for k in pol.explicit if k.startswith("trainer.")):
            out.append((prefix + key, f"{prefix}{key}: policy {name} is frozen (trainable = false) and has no "
                        f"trainers; remove {prefix}{key}, or make the policy trainable"))
        if pol.opponent.source and pol.weights:
            out.append((prefix + "weights", f"{prefix}weights = {pol.weights!r}: policy {name} is served from policy "
                        f"{pol.opponent.source}'s history ({prefix}opponent), not from weights; remove one of the two"))
        elif not pol.weights and not pol.opponent.source:
            out.append((prefix + "weights", f"{prefix}weights: policy {name} is frozen (trainable = false) but has no "
                        f"weights to serve; set {prefix}weights to a checkpoint file, a run folder, "
                        f"POLICY@VERSION or \"{INIT_WEIGHTS}\" (its initial weights; docs/policies.md), or make the "
                        "policy trainable"))
    elif pol.weights:
        out.append((prefix + "weights", f"{prefix}weights = {pol.weights!r} is set on a trainable policy; weights are "
                    f"what a frozen policy serves: set {prefix}trainable = false, or remove {prefix}weights"))
    if not pol.trainable and pol.weights and not pol.opponent.source and not out and pol.weights != INIT_WEIGHTS:
        try:
            file = resolve_weights(pol.weights, name, run_dir=run_dir, runs_dir=cfg.runs_dir)
        except ConfigError as exc:
            return [(exc.field, str(exc))]
        bad = weights_problems(registry, pol, sub, file)
        if bad:
            return [(prefix + "weights", m) for m in bad]
        pol.weights = str(file)
    return out


def opponent_problems(cfg: ExperimentConfig, pol: NamedPolicy,
                      built: dict[str, NamedPolicy]) -> list[tuple[str, str]]:
    """Why policy ``pol`` cannot be served from its ``opponent.source``'s history, one line each
    (none when it has no ``opponent``): the source must be another policy of the run
    (``built``), trainable, of the same algorithm and spaces, with its history on; ``pick``
    must be a history query and ``every`` a form that is built."""
    from zoo.core.history import parse_query

    opp = pol.opponent
    if not opp.source:
        return []
    key = f"policies.{pol.name}.opponent"
    out: list[tuple[str, str]] = []
    src = built.get(opp.source)
    if src is None or src is pol:
        others = [n for n in built if n != pol.name]
        why = "is the policy itself" if src is pol else "names no policy of this run"
        out.append((key + ".source", f"{key}.source = {opp.source!r} {why}; set it to a trainable policy whose history "
                    f"it plays (policies: {', '.join(others) or 'none other'})"))
    elif not src.trainable:
        out.append((key + ".source", f"{key}.source = {opp.source!r}: policy {opp.source} is not trainable and keeps "
                    "no history; set it to a trainable policy"))
    elif src.algo_name != pol.algo_name:
        out.append((key + ".source", f"{key}.source = {opp.source!r}: policy {opp.source} is of algorithm "
                    f"{src.algo_name!r} and policy {pol.name} of {pol.algo_name!r}; a past version only loads into "
                    f"its own algorithm's network: set policies.{pol.name}.algo = {src.algo_name!r}"))
    elif cfg.spec is not None and src.agents and pol.agents and (
            _spaces_str(cfg.spec, src.agents[0]) != _spaces_str(cfg.spec, pol.agents[0])):
        mine = _spaces_str(cfg.spec, src.agents[0])
        out.append((key + ".source", f"{key}.source = {opp.source!r}: its agents ({mine}"
                    f") and policy {pol.name}'s ({_spaces_str(cfg.spec, pol.agents[0])}) have different spaces; a "
                    "past version only acts for agents of its own spaces"))
    elif not (src.trainer.history.every_updates > 0 or src.trainer.history.every_minutes > 0):
        out.append((key + ".source", f"{key}.source = {opp.source!r}: policy {opp.source} keeps no history; set "
                    f"policies.{opp.source}.trainer.history.every_updates=N (or every_minutes=M; docs/history.md)"))
    try:
        parse_query(opp.pick)
    except ValueError as exc:
        out.append((key + ".pick", f"{key}.pick = {opp.pick!r}: {exc}"))
    if pol.policy.inline:
        out.append((f"policies.{pol.name}.policy.inline", f"policies.{pol.name}.policy.inline = true: an opponent "
                    "is served by policy workers (they hold its versions); set it to false"))
    if opp.every != "episode":
        out.append((key + ".every", f"{key}.every = {opp.every!r}: the version is picked per env episode; set "
                    f"{key}.every = \"episode\" (or leave it out)"))
    return out


def policy_view(cfg: ExperimentConfig, policies: Policies, name: str) -> ExperimentConfig:
    """The run config as a worker of policy ``name`` sees it: ``algo_name``, ``algo``,
    ``policy`` and ``trainer`` are that policy's, ``spec`` its agents' (:meth:`EnvSpec.subset`);
    everything else (actors, streams, budget, seed, ...) the run's. The policy worker and
    trainer code, which read ``cfg.algo``/``cfg.policy``/``cfg.trainer`` and the spec, run
    unchanged on it (docs/policies.md). For the implicit policy it is ``cfg`` itself.

    Raises:
        KeyError: ``name`` is not one of ``policies``.
    """
    pol = policies.named[name]
    if policies.implicit:
        return cfg
    spec = cfg.spec.subset(pol.agents) if cfg.spec is not None else None
    return dataclasses.replace(cfg, algo_name=pol.algo_name, algo=pol.algo, policy=pol.policy, trainer=pol.trainer,
                               spec=spec)


# ----------------------------------------------------------------------------- config.json
def policies_to_dict(policies: Policies) -> dict[str, Any]:
    """What ``config.json`` holds about the policies, to merge into
    :func:`zoo.core.config.config_to_dict`'s result: ``{}`` for an implicit policy (the file
    stays as it was before named policies), else ``{"policies": {NAME: {algo_name, algo,
    policy, trainer, trainable, weights, agents}}, "agents": [{match, policy}]}``. A
    frozen policy has no ``trainer`` entry (it has no trainers); ``agents`` inside a policy
    is what the mapping gave (for readers; :func:`policies_from_saved` ignores it);
    ``weights`` is the resolved absolute file.
    """
    if policies.implicit:
        return {}
    tables: dict[str, Any] = {}
    for name, pol in policies.named.items():
        holder = dataclasses.replace(_HOLDER, algo_name=pol.algo_name, algo=pol.algo, policy=pol.policy,
                                     trainer=pol.trainer)
        flat = config_to_dict(holder)
        table = {"algo_name": pol.algo_name, "algo": flat["algo"], "policy": flat["policy"]}
        if pol.trainable:
            table["trainer"] = flat["trainer"]
        table.update({"trainable": pol.trainable, "weights": pol.weights, "agents": list(pol.agents)})
        if pol.opponent.source:
            table["opponent"] = dataclasses.asdict(pol.opponent)
        tables[name] = table
    return {"policies": tables, "agents": [{"match": r.match, "policy": r.policy} for r in policies.rules]}


_HOLDER = ExperimentConfig(algo_name="", env_name="")


def policies_from_saved(registry: Registry, saved: dict[str, Any], cfg: ExperimentConfig, *,
                        run_dir: str | os.PathLike | None = None) -> Policies:
    """The policies of a run from its ``config.json`` (``saved``) and the config rebuilt from it
    (``cfg``, as :func:`zoo.core.resume.resume_config` returns it).

    A ``config.json`` without ``policies`` (every run made before named policies, and every
    run that names none) gives the implicit :data:`DEFAULT_POLICY` of ``cfg``'s top-level
    options. Otherwise its tables are built again as a config file's would be (each option
    given, so nothing is inherited).

    Raises:
        ConfigError: as :func:`build_policies`.
    """
    tables = saved.get("policies")
    if not tables:
        return _implicit(cfg)
    data = {"policies": {n: {k: v for k, v in t.items() if k != "agents"} for n, t in tables.items()},
            "agents": saved.get("agents")}
    if not data["agents"]:
        data.pop("agents")
    source = str(Path(run_dir) / "config.json") if run_dir else "config.json"
    _, _, layers = split_policy_layers(data, [], source=source)
    return build_policies(registry, cfg, layers, run_dir=run_dir)
