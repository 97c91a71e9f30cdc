"""Population-based training (PBT, arXiv 1711.09846): the population's decisions and state, the
checks of its options, and what a member's trainer does with an exploit or explore.

A population is ``P`` members of one policy family, each its own trainer. Every
``interval_env_steps`` the members are ranked by an objective (a logged metric, the recent
mean episode return by default); each member of the bottom ``fraction`` copies the weights and
optimiser state of a member of the top ``fraction`` (*exploit*) and then perturbs or resamples
its hyperparameters (*explore*). docs/pbt.md says what is built and what is not yet.

Pieces (no torch import at module level):

- :class:`PBTOptions`: the ``[pbt]`` options, with declared bounds;
- :func:`hyperparameter_ranges` / :func:`pbt_problems`: the checks made before anything starts,
  each a one-line message naming the field and the fix;
- :class:`Population`: the seeded exploit/explore decisions, their metrics rows
  (``"type": "pbt"``) and the population state (hyperparameters, lineage, RNG) for a checkpoint;
- :func:`exploit` / :func:`set_hyperparameters`: a member's trainer applying a decision to its
  live algorithm;
- :func:`write_order` / :class:`MemberOrders`: the manager's orders to the members' trainers
  (atomic JSON files in the run folder), and :func:`member_objectives`, the members' objectives
  read back from ``metrics.jsonl``.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from zoo.core.options import DOTTED_NAMES, ConfigError, _hints, bound_of, bounded, type_name

OBJECTIVE_RETURN = "return"
"""The default objective: the trainer's recent mean episode return (``episode_return_mean`` of
its ``update`` rows)."""
UPDATE_ROW_KEYS = ("episode_return_mean", "env_steps", "updates", "time_s", "policy_lag_mean", "policy_lag_max",
                   "dropped_samples", "actor_dropped_samples", "trained_samples", "dropped_fraction", "lr",
                   "agent_steps")
"""Keys every trainer ``update`` row carries besides the algorithm's own statistics."""
EXPLOIT_KEEPS = ("updates", "agent_steps", "rng", "config")
"""Keys of an algorithm's ``state_dict()`` that an exploiting member keeps as its own (its counters,
RNG and config); every other key (weights, optimiser state, normalisation statistics) is copied."""
LOG_UNIFORM_RATIO = 10.0
"""A range ``[low, high]`` with ``low > 0`` and ``high / low >= 10`` is resampled log-uniformly."""


@dataclass
class PBTOptions:
    """The ``[pbt]`` options."""

    members: int = field(default=0, metadata=bounded(ge=0, hint="0 = no PBT"))
    """Population size P (at least 2 when PBT is on)."""
    policy: str = "default"
    """The policy whose family the members are (``default``: the run's only policy)."""
    interval_env_steps: int = field(default=50_000, metadata=bounded(ge=1))
    """Env steps (the run's count) between two exploit/explore rounds."""
    fraction: float = field(default=0.25, metadata=bounded(gt=0, le=0.5))
    """Bottom fraction that exploits the top fraction, in (0, 0.5]; at least one member each."""
    objective: str = OBJECTIVE_RETURN
    """The metric members are ranked by, higher better: ``return`` or a key of the ``update`` rows."""
    hyperparameters: dict[str, list[float]] = field(default_factory=dict, metadata={DOTTED_NAMES: True})
    """``{"algo.OPTION": [low, high]}``; ``[]`` takes the option's declared bounds (both ends needed)."""
    resample_probability: float = field(default=0.25, metadata=bounded(ge=0, le=1))
    """Chance that explore resamples a hyperparameter from its range instead of perturbing it."""
    perturb: list[float] = field(default_factory=lambda: [0.8, 1.2], metadata=bounded(gt=0))
    """Factors explore multiplies a hyperparameter by (one picked uniformly), then clamped to the range."""


@dataclass(frozen=True)
class Range:
    """The values PBT may give one algorithm option: ``[low, high]``, ``integer`` for int options."""

    low: float
    high: float
    integer: bool = False

    @property
    def log(self) -> bool:
        """Resampled log-uniformly (see :data:`LOG_UNIFORM_RATIO`)."""
        return self.low > 0 and self.high / self.low >= LOG_UNIFORM_RATIO

    def clamp(self, value: float) -> float:
        x = min(max(value, self.low), self.high)
        return float(round(x)) if self.integer else x

    def sample(self, rng: random.Random) -> float:
        if self.log:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        return self.clamp(x)


def _bound_ends(bound: Any) -> tuple[float | None, float | None]:
    if bound is None:
        return None, None
    low = bound.ge if bound.ge is not None else bound.gt
    high = bound.le if bound.le is not None else bound.lt
    return low, high


def hyperparameter_ranges(config_cls: type, given: dict[str, Any]) -> dict[str, Range]:
    """The ranges of ``pbt.hyperparameters`` (``{"algo.OPTION": [low, high] or []}``) for the
    algorithm config dataclass ``config_cls``, in name order.

    Raises:
        ConfigError: every problem at once, each one line naming ``pbt.hyperparameters.<name>``
            and the fix: none given, a name outside ``algo.*``, an unknown option (closest
            names suggested), an option that is not a number, a range that is not two numbers
            ``low < high``, an end outside the option's declared bound, ``[]`` for an option
            whose bound has no upper or lower end.
    """
    where = "pbt.hyperparameters"
    if not given:
        raise ConfigError(f"{where} is empty: name the algo options to explore, e.g. "
                          f"--set 'pbt.hyperparameters={{\"algo.lr\": [1e-5, 1e-3]}}'", field=where)
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = _hints(config_cls)
    problems: list[str] = []
    out: dict[str, Range] = {}
    for name in sorted(given):
        path = f"{where}.{name}"
        if not name.startswith("algo."):
            problems.append(f"{path}: PBT explores the algorithm's options; name one as algo.OPTION "
                            f"(e.g. algo.lr)")
            continue
        option = name[len("algo."):]
        if option not in fields:
            close = difflib.get_close_matches(option, sorted(fields), n=2, cutoff=0.6)
            problems.append(f"{path}: {config_cls.__name__} has no option {option!r}"
                            + (f"; did you mean {' or '.join('algo.' + c for c in close)}?" if close else
                               "; see `zoo list options`"))
            continue
        tp = hints.get(option)
        if tp not in (int, float):
            problems.append(f"{path}: algo.{option} is {type_name(tp)}, not a number; PBT explores int and "
                            "float options only")
            continue
        bound = bound_of(config_cls, option)
        value = given[name]
        if not isinstance(value, (list, tuple)) or len(value) not in (0, 2) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            problems.append(f"{path} must be [low, high] (two numbers) or [] (the option's declared bounds), "
                            f"got {value!r}")
            continue
        if not value:
            low, high = _bound_ends(bound)
            if low is None or high is None:
                what = bound.describe(tp is float) if bound is not None else "unbounded"
                problems.append(f"{path}: algo.{option} is declared {what}, which has no "
                                f"{'lower' if low is None else 'upper'} end; give a range, "
                                f"{name} = [low, high]")
                continue
        else:
            low, high = float(value[0]), float(value[1])
            if not low < high:
                problems.append(f"{path} must be [low, high] with low < high, got {list(value)!r}")
                continue
            if tp is int and not (low.is_integer() and high.is_integer()):
                problems.append(f"{path}: algo.{option} is an int option; give whole-number ends, got {list(value)!r}")
                continue
            outside = [v for v in (low, high) if bound is not None and not bound.allows(v)]
            if outside:
                problems.append(f"{path}: {outside[0]!r} is outside algo.{option}'s declared bound "
                                f"({bound.describe(tp is float)}); give a range inside it")  # type: ignore[union-attr]
                continue
        out[name] = Range(float(low), float(high), integer=tp is int)
    if problems:
        raise ConfigError("\n".join(problems), field=where, problems=problems)
    return out


def known_objectives(algo_cls: type | None) -> set[str] | None:
    """The objectives a run of ``algo_cls`` logs: ``return``, :data:`UPDATE_ROW_KEYS` and the
    names in the algorithm module's ``STATS`` tuple; None when the module declares no ``STATS``
    (any name is then accepted)."""
    stats = getattr(sys.modules.get(getattr(algo_cls, "__module__", ""), None), "STATS", None)
    if stats is None:
        return None
    return {OBJECTIVE_RETURN, *UPDATE_ROW_KEYS, *stats}


def objective_key(objective: str) -> str:
    """The ``update``-row key the objective reads (``return`` -> ``episode_return_mean``)."""
    return "episode_return_mean" if objective == OBJECTIVE_RETURN else objective


def pbt_problems(opts: PBTOptions, config_cls: type, algo_cls: type | None = None,
                 policies: list[str] | None = None) -> list[str]:
    """Every problem of the ``[pbt]`` options ``opts`` (empty when PBT is off, ``members == 0``),
    each one line naming the field and the fix; ``config_cls`` is the member policy's algorithm
    config dataclass, ``policies`` the run's policy names (None: only ``default``)."""
    if opts.members == 0:
        return []
    problems: list[str] = []
    if opts.members < 2:
        problems.append(f"pbt.members must be >= 2 (a population), got {opts.members}; set pbt.members=0 "
                        "to train without PBT")
    if not (0 < opts.fraction <= 0.5):
        problems.append(f"pbt.fraction must be in (0, 0.5], got {opts.fraction!r}: the bottom and top fractions "
                        "may not overlap")
    names = policies or ["default"]
    if opts.policy not in names:
        problems.append(f"pbt.policy names no policy: {opts.policy!r}; policies: {', '.join(names)}")
    if len(opts.perturb) == 0:
        problems.append("pbt.perturb is empty: give the factors explore multiplies by, e.g. [0.8, 1.2]")
    known = known_objectives(algo_cls)
    if known is not None and opts.objective not in known:
        close = difflib.get_close_matches(opts.objective, sorted(known), n=2, cutoff=0.6)
        problems.append(f"pbt.objective: no row logs {opts.objective!r}"
                        + (f"; did you mean {' or '.join(map(repr, close))}?" if close else "")
                        + f" (logged: {', '.join(sorted(known))})")
    try:
        hyperparameter_ranges(config_cls, opts.hyperparameters)
    except ConfigError as exc:
        problems += exc.problems or [str(exc)]
    return problems


def check_pbt(opts: PBTOptions, config_cls: type, algo_cls: type | None = None,
              policies: list[str] | None = None) -> None:
    """Raise :class:`ConfigError` with every :func:`pbt_problems` (one line each)."""
    problems = pbt_problems(opts, config_cls, algo_cls, policies)
    if problems:
        raise ConfigError("\n".join(problems), field="pbt", problems=problems)


def member_names(policy: str, members: int) -> list[str]:
    """The members' policy names, ``<policy>_0`` .. ``<policy>_<P-1>``."""
    return [f"{policy}_{i}" for i in range(members)]


def member_of_env(env_index: int, members: int) -> int:
    """The member every agent of global env ``env_index`` acts with: ``env_index % members``."""
    return env_index % members


@dataclass
class Member:
    """One member: its current hyperparameters (``{"algo.OPTION": value}``) and its lineage, the
    ``(env_steps, from_member)`` of every exploit it made, oldest first."""

    index: int
    hyperparameters: dict[str, float]
    lineage: list[tuple[int, int]] = field(default_factory=list)


class Population:
    """The population's decisions: who exploits whom, and the explored hyperparameters.

    Args:
        opts: the ``[pbt]`` options (``members`` >= 2).
        ranges: :func:`hyperparameter_ranges` of ``opts.hyperparameters``.
        initial: the configured value of each explored option, ``{"algo.OPTION": value}``;
            member 0 starts with it, every other member with a value resampled from its range.
        seed: seeds the decisions' ``random.Random`` (the run's seed).

    The random draws, in order, are documented in docs/pbt.md ("The decision"), so a test can
    work a round out by hand.
    """

    def __init__(self, opts: PBTOptions, ranges: dict[str, Range], initial: dict[str, float], seed: int) -> None:
        self.opts, self.ranges = opts, ranges
        self.rng = random.Random(seed)
        self.next_at = int(opts.interval_env_steps)
        self.members = [Member(0, {k: ranges[k].clamp(float(initial[k])) for k in ranges})]
        for i in range(1, opts.members):
            self.members.append(Member(i, {k: ranges[k].sample(self.rng) for k in ranges}))

    @property
    def cut(self) -> int:
        """How many members exploit (and how many are the top): ``max(1, floor(fraction x P))``."""
        return max(1, int(self.opts.fraction * len(self.members)))

    def due(self, env_steps: int) -> bool:
        """True when a round is due at ``env_steps`` (the run's env steps)."""
        return env_steps >= self.next_at

    def round(self, objectives: list[float | None], env_steps: int) -> list[dict[str, Any]]:
        """One exploit/explore round at ``env_steps`` given each member's objective (None: not known
        yet, e.g. no episode finished). Returns the ``metrics.jsonl`` rows of its decisions, an
        ``exploit`` and an ``explore`` row per exploiting member, worst member first; empty (and
        the round stays due) while fewer than all members have an objective.

        Ranking: objective descending, ties by member index (lower first).
        """
        if len(objectives) != len(self.members):
            raise ValueError(f"{len(objectives)} objectives for {len(self.members)} members")
        if any(o is None or math.isnan(o) for o in objectives):
            return []
        while self.next_at <= env_steps:
            self.next_at += int(self.opts.interval_env_steps)
        ranked = sorted(range(len(self.members)), key=lambda i: (-float(objectives[i]), i))  # type: ignore[arg-type]
        n = self.cut
        top, bottom = ranked[:n], list(reversed(ranked[-n:]))  # bottom: worst first
        rows: list[dict[str, Any]] = []
        for i in bottom:
            j = top[self.rng.randrange(len(top))]
            member, source = self.members[i], self.members[j]
            old = dict(member.hyperparameters)
            copied = dict(source.hyperparameters)
            new = self.explore(copied)
            member.hyperparameters = new
            member.lineage.append((int(env_steps), j))
            common = {"type": "pbt", "env_steps": int(env_steps), "member": i, "from_member": j,
                      "objective": float(objectives[i]), "from_objective": float(objectives[j]),  # type: ignore[arg-type]
                      "objective_name": self.opts.objective}
            rows.append({**common, "event": "exploit", "old_hyperparameters": old, "new_hyperparameters": copied})
            rows.append({**common, "event": "explore", "old_hyperparameters": copied, "new_hyperparameters": new})
        return rows

    def explore(self, values: dict[str, float]) -> dict[str, float]:
        """``values`` explored, option by option in name order: one ``rng.random()``; below
        ``resample_probability`` a draw from the range (:meth:`Range.sample`), else the value
        times ``perturb[rng.randrange(len(perturb))]``; then clamped to the range."""
        out = {}
        for name in sorted(values):
            r = self.ranges[name]
            if self.rng.random() < self.opts.resample_probability:
                out[name] = r.sample(self.rng)
            else:
                out[name] = r.clamp(values[name] * self.opts.perturb[self.rng.randrange(len(self.opts.perturb))])
        return out

    def state_dict(self) -> dict[str, Any]:
        """The population state for a checkpoint (JSON-serialisable): hyperparameters, lineage,
        the next round's env steps and the RNG state."""
        version, internal, gauss = self.rng.getstate()
        return {"next_at": self.next_at,
                "members": [{"index": m.index, "hyperparameters": dict(m.hyperparameters),
                             "lineage": [list(e) for e in m.lineage]} for m in self.members],
                "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (resume).

        Raises:
            ValueError: the state is of a population of another size or other hyperparameters.
        """
        members = state["members"]
        if len(members) != len(self.members):
            raise ValueError(f"the checkpoint's population has {len(members)} members, pbt.members is "
                             f"{len(self.members)}; resume with pbt.members={len(members)}")
        names = sorted(members[0]["hyperparameters"])
        if names != sorted(self.ranges):
            raise ValueError(f"the checkpoint's population explores {', '.join(names)}, pbt.hyperparameters names "
                             f"{', '.join(sorted(self.ranges))}; resume with the same pbt.hyperparameters")
        self.next_at = int(state["next_at"])
        self.members = [Member(int(m["index"]), {k: float(v) for k, v in m["hyperparameters"].items()},
                               [(int(a), int(b)) for a, b in m["lineage"]]) for m in members]
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


# ----------------------------------------------------------------------------- a member's trainer
def exploit(algo: Any, source_state: dict[str, Any]) -> None:
    """Make ``algo`` (a member's live algorithm) continue from another member's ``state_dict()``
    ``source_state``: every key but :data:`EXPLOIT_KEEPS` (weights, optimiser state, statistics)
    is loaded bit for bit; its own counters, RNG and config stay."""
    own = algo.state_dict()
    algo.load_state_dict({**source_state, **{k: own[k] for k in EXPLOIT_KEEPS if k in own}})


def optimizers(algo: Any) -> list[Any]:
    """The torch optimisers that are attributes of ``algo``."""
    import torch

    return [v for v in vars(algo).values() if isinstance(v, torch.optim.Optimizer)]


def set_hyperparameters(algo: Any, values: dict[str, float]) -> None:
    """Set explored ``values`` (``{"algo.OPTION": value}``) on the live ``algo``: each on
    ``algo.config`` (an int option as an int), read from the next update on; ``algo.lr`` also on
    every param group of each of its optimisers at once.

    Raises:
        ValueError: an option ``algo.config`` does not have.
    """
    cfg = algo.config
    for name, value in values.items():
        option = name[len("algo."):] if name.startswith("algo.") else name
        if not hasattr(cfg, option):
            raise ValueError(f"{name}: {type(cfg).__name__} has no option {option!r}")
        current = getattr(cfg, option)
        setattr(cfg, option, int(round(value)) if isinstance(current, int) and not isinstance(current, bool)
                else float(value))
        if option == "lr":
            for opt in optimizers(algo):
                for group in opt.param_groups:
                    group["lr"] = float(value)


# ----------------------------------------------------------------------------- manager <-> members
ORDERS_DIR = os.path.join("pbt", "orders")
"""Where the population manager leaves each member's order: ``<run_dir>/pbt/orders/<member>.json``."""


def order_path(run_dir: str, member: str) -> str:
    """``<run_dir>/pbt/orders/<member>.json``: member policy ``member``'s latest order."""
    return os.path.join(run_dir, ORDERS_DIR, f"{member}.json")


def write_order(run_dir: str, member: str, seq: int, from_member: str, hyperparameters: dict[str, float],
                env_steps: int) -> None:
    """Leave member ``member`` the order number ``seq`` (increasing per member): continue from
    member ``from_member``'s latest checkpoint with ``hyperparameters``. Written atomically
    (a member's trainer never reads half an order)."""
    from zoo.core.checkpoint import write_bytes_atomic

    os.makedirs(os.path.join(run_dir, ORDERS_DIR), exist_ok=True)
    order = {"seq": int(seq), "from_member": from_member, "hyperparameters": dict(hyperparameters),
             "env_steps": int(env_steps)}
    write_bytes_atomic(order_path(run_dir, member), json.dumps(order).encode())


def source_ready(run_dir: str, order: dict[str, Any]) -> bool:
    """Whether the source member of ``order`` has a checkpoint to copy
    (``checkpoints/<from_member>/latest.pt``)."""
    from zoo.core.checkpoint import latest_path

    return os.path.exists(latest_path(run_dir, str(order["from_member"])))


class MemberOrders:
    """A member trainer's side of the orders: :meth:`poll` between updates, :meth:`apply` a new
    order to the live algorithm. ``seq`` (the last order applied) belongs in the trainer's
    checkpoint, so a resumed member does not apply an order twice."""

    def __init__(self, run_dir: str, member: str, seq: int = 0) -> None:
        self.run_dir, self.member, self.seq = run_dir, member, int(seq)

    def poll(self) -> dict[str, Any] | None:
        """The member's order when it is newer than the last applied one, else None (no order,
        or one being replaced: read again at the next poll)."""
        try:
            with open(order_path(self.run_dir, self.member), encoding="utf-8") as f:
                order = json.load(f)
        except (OSError, ValueError):
            return None
        return order if int(order.get("seq", 0)) > self.seq else None

    def apply(self, algo: Any, order: dict[str, Any]) -> dict[str, int]:
        """Exploit (:func:`exploit` from ``from_member``'s ``checkpoints/<from>/latest.pt``) and
        explore (:func:`set_hyperparameters`), then count the order as applied. Returns the
        source checkpoint's counters, ``{"policy_version", "updates", "env_steps"}`` (-1: absent).

        Raises:
            zoo.core.checkpoint.CheckpointError: the source checkpoint cannot be read.
        """
        from zoo.core.checkpoint import latest_path, load_checkpoint

        source = load_checkpoint(latest_path(self.run_dir, str(order["from_member"])))
        exploit(algo, source["algorithm"])
        set_hyperparameters(algo, order["hyperparameters"])
        self.seq = int(order["seq"])
        return {k: int(source.get(k, -1)) for k in ("policy_version", "updates", "env_steps")}


def weights_digest(state: dict[str, Any]) -> str:
    """SHA-256 (hex) of a policy's ``state_dict()`` (torch tensors or numpy arrays), key by key
    in name order: its name, dtype, shape and bytes. Equal digests: bitwise equal weights."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for name in sorted(state):
        value = state[name]
        arr = np.ascontiguousarray(value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value))
        h.update(f"{name}|{arr.dtype}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def member_objectives(metrics_path: str, members: list[str], objective: str) -> list[float | None]:
    """Each member's objective: the value of :func:`objective_key` in the last ``update`` row
    of ``metrics.jsonl`` at ``metrics_path`` that member policy wrote (``"policy": member``)
    and that carries it as a number; None for a member with none yet."""
    key = objective_key(objective)
    found: dict[str, float] = {}
    try:
        with open(metrics_path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:  # a row being appended
                    continue
                value = row.get(key)
                if (row.get("type") == "update" and row.get("policy") in members
                        and isinstance(value, (int, float)) and not isinstance(value, bool)):
                    found[row["policy"]] = float(value)
    except OSError:
        pass
    return [found.get(m) for m in members]


POPULATION_FILE = os.path.join("pbt", "population.json")
"""The population state in the run folder (:meth:`Population.state_dict` plus the orders' numbers)."""


class PopulationManager:
    """The population manager's work at each look at the run: when a round is due, read the
    members' objectives (:func:`member_objectives`), decide (:meth:`Population.round`), append
    the decisions' rows to ``metrics.jsonl``, leave each exploiting member its order
    (:func:`write_order`) and save the population state (``pbt/population.json``, atomically,
    after the rows and orders). Constructed on a run folder that has that file, it continues
    from it (resume).

    Args:
        run_dir: the run folder.
        population: a fresh :class:`Population` (replaced by the saved state when there is one).
        members: the members' policy names, member ``i`` first at index ``i``.
    """

    def __init__(self, run_dir: str, population: Population, members: list[str]) -> None:
        self.run_dir, self.population, self.members = run_dir, population, list(members)
        self.seq = [0] * len(members)
        path = os.path.join(run_dir, POPULATION_FILE)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            population.load_state_dict(saved["population"])
            self.seq = [int(s) for s in saved["seq"]]

    def tick(self, env_steps: int) -> list[dict[str, Any]]:
        """One look at the run at ``env_steps`` (the run's env steps): the rows written (empty
        when no round is due or a member has no objective yet)."""
        pop = self.population
        if not pop.due(env_steps):
            return []
        objectives = member_objectives(os.path.join(self.run_dir, "metrics.jsonl"), self.members,
                                       pop.opts.objective)
        rows = pop.round(objectives, env_steps)
        if not rows:
            return []
        import fcntl

        from zoo.core.checkpoint import write_bytes_atomic

        data = b"".join((json.dumps({**row, "member_policy": self.members[row["member"]],
                                     "from_policy": self.members[row["from_member"]]}) + "\n").encode()
                        for row in rows)
        fd = os.open(os.path.join(self.run_dir, "metrics.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:  # a shared lock, as a member trainer's rows: never inside a resuming member's cut (cut_metrics)
            fcntl.flock(fd, fcntl.LOCK_SH)
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        for row in rows:
            if row["event"] == "explore":
                i = row["member"]
                self.seq[i] += 1
                write_order(self.run_dir, self.members[i], self.seq[i], self.members[row["from_member"]],
                            row["new_hyperparameters"], env_steps)
        os.makedirs(os.path.join(self.run_dir, "pbt"), exist_ok=True)
        write_bytes_atomic(os.path.join(self.run_dir, POPULATION_FILE),
                           json.dumps({"population": pop.state_dict(), "seq": self.seq}).encode())
        return rows


# ----------------------------------------------------------------------------- zoo train: the members
def population_problems(registry: Any, cfg: Any, named: bool = False) -> list[str]:
    """The problems of running ``cfg``'s population (:func:`pbt_problems` and those of the
    run's layout), each one line naming the field and the fix; ``named``: the run names
    policies (``[policies.NAME]``), which a population does not build on yet."""
    if not cfg.pbt.members:
        return []
    problems = []
    if named:
        problems.append("pbt: a population of a named policy ([policies.NAME]) is not built yet; train the run's "
                        "one policy (pbt.policy = \"default\", no [policies.NAME] tables)")
    algo_cls = registry.get("algorithm", cfg.algo_name).load()
    problems += pbt_problems(cfg.pbt, type(cfg.algo), algo_cls, None)
    if int(cfg.trainer.count) != 1:
        problems.append(f"pbt: a member with data-parallel trainers (trainer.count={cfg.trainer.count}) is not built "
                        "yet; set trainer.count=1 (each member has its own trainer)")
    P = cfg.pbt.members
    per_group = cfg.actors.envs_per_actor // max(1, cfg.actors.ring_size)
    if P >= 2 and per_group % P:
        problems.append(f"pbt.members={P}: every agent of env e acts with member e % {P}, so each ring group's envs "
                        f"(actors.envs_per_actor / actors.ring_size = {per_group}) must be a multiple of {P}; set "
                        f"actors.envs_per_actor={P * max(1, cfg.actors.ring_size) * max(1, -(-per_group // P))}")
    return problems


def make_population(cfg: Any) -> Population:
    """The run's :class:`Population` as it starts (``cfg.pbt``, the configured ``cfg.algo``
    values for member 0, seeded by ``cfg.seed``): the same members whoever builds it (the
    config's expansion, the population manager)."""
    ranges = hyperparameter_ranges(type(cfg.algo), cfg.pbt.hyperparameters)
    initial = {k: float(getattr(cfg.algo, k[len("algo."):])) for k in ranges}
    return Population(cfg.pbt, ranges, initial, cfg.seed)


def member_algo_config(algo_cfg: Any, values: dict[str, float]) -> Any:
    """A copy of the algorithm config ``algo_cfg`` with ``values`` (``{"algo.OPTION": value}``;
    int options rounded)."""
    changes: dict[str, Any] = {}
    for name, value in values.items():
        option = name[len("algo."):]
        current = getattr(algo_cfg, option)
        changes[option] = int(round(value)) if isinstance(current, int) and not isinstance(current, bool) \
            else float(value)
    return dataclasses.replace(algo_cfg, **changes)


def population_policies(registry: Any, cfg: Any, named: bool = False) -> Any:
    """The run's policies with a population: the run's one policy expanded into the members
    ``<policy>_0 .. <policy>_<P-1>`` (:func:`member_names`), each with every agent (routed by
    env: :func:`member_of_env`), the run's ``policy.*`` and ``trainer.*`` and its algorithm
    options with member i's starting hyperparameters (:func:`make_population`).

    Raises:
        ConfigError: every :func:`population_problems` at once, one line each.
    """
    from zoo.core.policies import NamedPolicy, Policies

    problems = population_problems(registry, cfg, named)
    if problems:
        raise ConfigError("\n".join(problems), field="pbt", problems=problems)
    population = make_population(cfg)
    agents = tuple(cfg.spec.agents)
    names = member_names(cfg.pbt.policy, cfg.pbt.members)
    built = {n: NamedPolicy(n, cfg.algo_name, member_algo_config(cfg.algo, m.hyperparameters), cfg.policy,
                            cfg.trainer, agents=agents)
             for n, m in zip(names, population.members, strict=True)}
    return Policies(built, [], {a: names[0] for a in agents})
