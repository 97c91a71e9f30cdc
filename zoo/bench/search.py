"""``zoo bench --search``: the layout search, as pure logic around two callables.

A **layout** (:class:`Layout`) is how a run is arranged on a machine, not what it learns:
actors, envs per actor, ring groups, inline inference or policy workers, data-parallel
trainers and their threads, and the arithmetic (``algo.precision``, ``policy.precision``).
Every candidate keeps the workload's update batch (``trainer.count x trainer.batch_samples``
samples of ``sample_length`` steps, and so its minibatches): ``K`` data-parallel trainers
each take ``1/K`` of it (``trainer.batch_samples`` is per trainer, docs/graph.md), and a ring
group of ``G`` envs x ``A`` agents only when ``G x A`` divides each trainer's
``trainer.batch_samples``, so every trainer takes whole samples and the learning problem is
the same for every layout (:func:`zoo.core.config.batch_agent_steps` x ``K`` unchanged).

**Strategy** (:func:`run_search`): coordinate descent from the workload's layout (the
"default"), one dimension at a time in the order of :func:`dimensions` (inference, actors,
group size, ring groups, training precision, trainers, inference precision). Training
precision comes before the trainers because it changes which trainer layout wins: at the
Pong workload on 2 cores a second torch thread sped the float32 update up 1.57x but the
bfloat16 one 1.42x, so bfloat16 gains more from 2 data-parallel trainers of 1 thread
(benchmarks/RESULTS.md, issue 25). For
each dimension the incumbent's alternatives are measured once each, in the order of their
CPU-work bound (highest first: the most promising first when the budget runs out), and the
incumbent becomes the best of them and itself (:func:`pick`): the highest score, but a
layout within :data:`TIE` of the top is as good, and among those the highest bound wins,
then the incumbent (fewest changes). The measurement is ``zoo bench``'s own
(:func:`zoo.bench.measure.measure_run` over a short window after a warm-up), so each figure
is noisy; at the end the best and the default are measured once more and the final choice
is between those two by the mean of their two figures (:func:`pick` again), which states
the noise: each layout's two figures are printed.

The final measurements are ``repeats`` rounds (default 1) of the best then the default,
interleaved, so a machine whose load drifts weighs on both alike. With ``confirm`` (for a
heavily shared machine) every change of the incumbent is first confirmed by measuring the
newcomer and the incumbent once more each, the two decided by their means.

**Budget**: a candidate is started only when the time spent so far, plus one trial, plus the
final repeats (each trial as long as the mean trial so far, or
:func:`trial_estimate_s` before the first) fit in ``budget_s``; dimensions left untried are
named in :attr:`SearchResult.notes`. The smallest budget that searches at all is
:func:`minimum_budget_s`: the env-cost measurement and the trials of the default, one
candidate and the repeats of both; less is refused before anything starts.

The callables make it testable with hand-made figures: ``measure(layout, label) -> dict``
(``"score"``: the objective, env steps/s; other keys are kept in the table) may raise to
mark a trial failed; ``bound(layout) -> float | None`` is the CPU-work bound for that layout.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Layout", "Dimension", "Trial", "SearchResult", "TIE", "STARTUP_ESTIMATE_S", "dimensions", "pick",
           "run_search", "trial_estimate_s", "minimum_budget_s", "toml_text", "config_values", "format_markdown",
           "result_json", "LAYOUT_KEYS"]

TIE = 0.05
"""Scores within this fraction of the best are taken as equal (a short window's noise on a
shared machine is of that order; the final repeats state it for the run at hand)."""

STARTUP_ESTIMATE_S = 8.0
"""Seconds a measured run takes besides its warm-up and window (spawning the workers, their
imports, building envs and networks, the first update, the stop), before any trial gives
the real figure: ``zoo bench --workload cartpole --phases train --seconds 2 --warmup 1`` took
11.8 s in all on a 2-core machine loaded by other jobs (load average 5.4)."""

LAYOUT_KEYS = ("actors.count", "actors.envs_per_actor", "actors.ring_size", "policy.inline", "policy.count",
               "trainer.threads", "trainer.count", "trainer.batch_samples", "algo.precision", "policy.precision")
"""The options a layout sets (:meth:`Layout.overrides`)."""


@dataclass(frozen=True)
class Layout:
    """One arrangement of a run.

    Attributes:
        actors: ``actors.count``.
        envs_per_actor: ``actors.envs_per_actor`` (= ``group x ring_size``).
        ring_size: ``actors.ring_size``: env groups per actor.
        inline: ``policy.inline``: each actor runs the policy itself (no policy worker).
        policy_workers: ``policy.count`` (1 when ``inline``).
        trainer_threads: ``trainer.threads`` (explicit, >= 1): torch threads of each trainer.
        algo_precision: ``algo.precision`` (``float32``/``bfloat16``), None for an algorithm
            without that option.
        policy_precision: ``policy.precision`` (``float32``/``bfloat16``).
        trainers: ``trainer.count``: data-parallel trainers.
        batch_samples: ``trainer.batch_samples`` (per trainer); 0 leaves the workload's
            (only with one trainer: a layout of ``K`` > 1 trainers sets ``1/K`` of the update batch).
    """

    actors: int
    envs_per_actor: int
    ring_size: int
    inline: bool
    policy_workers: int
    trainer_threads: int
    algo_precision: str | None
    policy_precision: str
    trainers: int = 1
    batch_samples: int = 0

    @property
    def group(self) -> int:
        """Envs per ring group: ``envs_per_actor / ring_size``."""
        return self.envs_per_actor // self.ring_size

    def overrides(self) -> list[str]:
        """The ``--set`` options of this layout, in :data:`LAYOUT_KEYS` order."""
        out = [f"actors.count={self.actors}", f"actors.envs_per_actor={self.envs_per_actor}",
               f"actors.ring_size={self.ring_size}", f"policy.inline={str(self.inline).lower()}",
               f"policy.count={self.policy_workers}", f"trainer.threads={self.trainer_threads}",
               f"trainer.count={self.trainers}"]
        if self.batch_samples:
            out.append(f"trainer.batch_samples={self.batch_samples}")
        if self.algo_precision is not None:
            out.append(f"algo.precision={self.algo_precision}")
        return [*out, f"policy.precision={self.policy_precision}"]

    def describe(self) -> str:
        """In words, e.g. ``2 actors x 4 envs (2 groups of 2), 1 policy worker, 1 trainer x 2 threads,
        training float32, inference float32``."""
        inference = "inline" if self.inline else f"{self.policy_workers} policy worker" + (
            "s" if self.policy_workers != 1 else "")
        groups = f"{self.ring_size} group{'s' if self.ring_size != 1 else ''} of {self.group}"
        precision = (f"training {self.algo_precision}, " if self.algo_precision else "") + (
            f"inference {self.policy_precision}")
        return (f"{self.actors} actor{'s' if self.actors != 1 else ''} x {self.envs_per_actor} envs ({groups}), "
                f"{inference}, {self.trainers} trainer{'s' if self.trainers != 1 else ''} x {self.trainer_threads} "
                f"thread{'s' if self.trainer_threads != 1 else ''}, "
                f"{precision}")

    def changes(self, other: Layout) -> str:
        """What differs from ``other``, e.g. ``actors.count=4, trainer.threads=2``; ``"(default)"`` if nothing."""
        mine, theirs = self.overrides(), set(other.overrides())
        diff = [o for o in mine if o not in theirs]
        return ", ".join(diff) if diff else "(default)"


@dataclass(frozen=True)
class Dimension:
    """One coordinate of the search: ``name`` and ``options(incumbent)``, the layouts it tries
    from the incumbent (the incumbent itself among them or not; it is left out when measuring)."""

    name: str
    options: Callable[[Layout], list[Layout]]


def _powers_up_to(n: int) -> list[int]:
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    return out


def dimensions(cores: int, batch_samples: int, agents: int, *, training_bf16: bool, inference_bf16: bool,
               has_algo_precision: bool = True) -> list[Dimension]:
    """The candidate grid for a machine of ``cores`` cores, as dimensions in search order.

    - ``inference``: inline, or ``m`` policy workers, ``m`` a power of two up to ``max(1, cores // 4)``
      and at most the actors (2 cores: inline or 1 policy worker; 16 cores: 1, 2 or 4);
    - ``actors``: 1, ``cores // 2``, ``cores``, ``2 x cores`` (2 cores: 1, 2, 4), keeping the
      group and ring (fewer policy workers when they would outnumber the actors);
    - ``group``: envs per ring group ``G / 2``, ``G``, ``2 G`` where ``G x agents`` divides
      each trainer's ``batch_samples`` (the layout's, else the argument; the update batch keeps
      its size), keeping the ring;
    - ``ring``: 1, 2 or 4 ring groups per actor, keeping the group;
    - ``training precision``: float32, bfloat16 when ``training_bf16`` (native bfloat16 on the
      trainer's device) and the algorithm has ``algo.precision``;
    - ``trainers``: one trainer of 1, ``cores // 2`` or ``cores`` threads, and ``K`` data-parallel
      trainers (``K`` a power of two from 2 up to the cores and the actors, each trainer needing
      an actor) of 1 or ``cores // K`` threads, each taking ``1/K`` of the update batch, where
      ``K`` divides it and each share is whole groups (2 cores, 2 actors, 8 samples: 1 x 1,
      1 x 2, 2 x 1 of 4 samples each);
    - ``inference precision``: float32, bfloat16 when ``inference_bf16``.

    A dimension with one value is left out.
    """
    cores = max(1, int(cores))
    rep = dataclasses.replace
    out: list[Dimension] = []

    def inference(x: Layout) -> list[Layout]:
        workers = [m for m in _powers_up_to(max(1, cores // 4)) if m <= x.actors]
        return [rep(x, inline=True, policy_workers=1)] + [rep(x, inline=False, policy_workers=m) for m in workers]

    def actors(x: Layout) -> list[Layout]:
        counts = sorted({n for n in (1, cores // 2, cores, 2 * cores) if n >= 1})
        return [rep(x, actors=n, policy_workers=min(x.policy_workers, n)) for n in counts]

    def group(x: Layout) -> list[Layout]:
        per = x.batch_samples or batch_samples
        sizes = [g for g in (x.group // 2, x.group, x.group * 2)
                 if g >= 1 and per % (g * agents) == 0 and (g != x.group // 2 or x.group % 2 == 0)]
        return [rep(x, envs_per_actor=g * x.ring_size) for g in sorted(set(sizes))]

    def ring(x: Layout) -> list[Layout]:
        return [rep(x, ring_size=r, envs_per_actor=x.group * r) for r in (1, 2, 4)]

    def trainers(x: Layout) -> list[Layout]:
        total = x.trainers * (x.batch_samples or batch_samples)  # the update batch, every trainer's together

        def share(k: int) -> int:  # each of k trainers' batch_samples; 0 = the workload's own (one trainer)
            return total // k if (k > 1 or x.batch_samples) else 0
        opts = [rep(x, trainers=1, batch_samples=share(1), trainer_threads=t)
                for t in sorted({1, max(1, cores // 2), cores})]
        for k in _powers_up_to(min(cores, x.actors))[1:]:
            if total % k == 0 and (total // k) % (x.group * agents) == 0:
                opts += [rep(x, trainers=k, batch_samples=share(k), trainer_threads=t)
                         for t in sorted({1, max(1, cores // k)})]
        return opts

    out += [Dimension("inference", inference), Dimension("actors", actors), Dimension("group", group),
            Dimension("ring", ring)]
    if training_bf16 and has_algo_precision:
        out.append(Dimension("training precision",
                             lambda x: [rep(x, algo_precision=p) for p in ("float32", "bfloat16")]))
    out.append(Dimension("trainers", trainers))
    if inference_bf16:
        out.append(Dimension("inference precision",
                             lambda x: [rep(x, policy_precision=p) for p in ("float32", "bfloat16")]))
    return out


@dataclass
class Trial:
    """One measurement: ``index`` (1, 2, ... in order), ``layout``, ``stage`` (``default``, a
    dimension's name, or ``repeat``), ``score`` (None: failed, ``error`` says why), ``bound``
    (the CPU-work bound of the layout, None if not known), ``seconds`` (wall time of the trial),
    ``figures`` (the measuring function's other figures)."""

    index: int
    layout: Layout
    stage: str
    score: float | None
    bound: float | None
    seconds: float
    error: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResult:
    """What :func:`run_search` did: every trial in order, the ``default`` layout, the ``chosen``
    one, the ``searched`` best before the repeats, ``notes`` (dimensions left untried, and why),
    ``seconds`` spent, the ``budget_s``."""

    trials: list[Trial]
    default: Layout
    chosen: Layout
    searched: Layout
    notes: list[str]
    seconds: float
    budget_s: float

    def scores(self, layout: Layout) -> list[float]:
        """Every successful figure of ``layout``, in order."""
        return [t.score for t in self.trials if t.layout == layout and t.score is not None]

    def mean(self, layout: Layout) -> float | None:
        """The mean of :meth:`scores`, None if none succeeded."""
        got = self.scores(layout)
        return sum(got) / len(got) if got else None


def pick(candidates: Iterable[tuple[Layout, float | None, float | None]], incumbent: Layout,
         tie: float = TIE) -> Layout:
    """The best of ``(layout, score, bound)``: the highest score, where every layout scoring at
    least ``(1 - tie) x`` the top counts as tied; among the tied the highest bound (None lowest),
    then ``incumbent``, then the higher score. A None score (a failed trial) never wins unless
    nothing scored, when ``incumbent`` is kept.

    Example: scores 1,000 (bound 3,000), 980 (bound 4,000), 900 (bound 9,000) with tie 0.05:
    900 < 950 is out; 980 and 1,000 tie; the bound picks the 980 layout.
    """
    scored = [(lay, s, b) for lay, s, b in candidates if s is not None]
    if not scored:
        return incumbent
    top = max(s for _, s, _ in scored)
    tied = [(lay, s, b) for lay, s, b in scored if s >= (1.0 - tie) * top]
    return max(tied, key=lambda c: (-math.inf if c[2] is None else c[2], c[0] == incumbent, c[1]))[0]


def trial_estimate_s(warmup: float, seconds: float) -> float:
    """Wall seconds one trial is expected to take before any was measured:
    :data:`STARTUP_ESTIMATE_S` + ``warmup`` + ``seconds`` (8 + 5 + 10 = 23 s by default)."""
    return STARTUP_ESTIMATE_S + warmup + seconds


def minimum_budget_s(warmup: float, seconds: float, env_cost_s: float, repeats: int = 1) -> tuple[float, str]:
    """The smallest ``--budget-s`` that searches at all, and the arithmetic in words:
    ``env_cost_s`` (the env's cost per step, measured once) + ``2 + 2 x repeats`` trials (the
    default, one candidate, then both ``repeats`` times again) x :func:`trial_estimate_s`. With
    warm-up 5 s, windows of 10 s, an env cost of 15 s and 1 repeat: 15 + 4 x 23 = 107 s."""
    trial = trial_estimate_s(warmup, seconds)
    n = 2 + 2 * repeats
    need = env_cost_s + n * trial
    again = "again" if repeats == 1 else f"{repeats} times again"
    return need, (f"the env-cost measurement (~{env_cost_s:g} s) + {n} trials (the default, one candidate, then both "
                  f"{again}) x ~{trial:g} s each ({STARTUP_ESTIMATE_S:g} s start-up and stop + {warmup:g} s warm-up + "
                  f"{seconds:g} s window) = {need:g} s")


def run_search(default: Layout, dims: list[Dimension], measure: Callable[[Layout, str], dict[str, Any]],
               bound: Callable[[Layout], float | None], budget_s: float, *, warmup: float, seconds: float,
               clock: Callable[[], float] = time.monotonic, start: float | None = None, tie: float = TIE,
               repeats: int = 1, confirm: bool = False,
               valid: Callable[[Layout], str | None] = lambda _: None,
               on_trial: Callable[[Trial], None] = lambda _: None) -> SearchResult:
    """Coordinate descent from ``default`` over ``dims`` within ``budget_s`` seconds counted from
    ``start`` (default: now, by ``clock``), then the best and the default measured ``repeats``
    more times each, interleaved (see the module docstring). With ``confirm``, a dimension that
    would replace the incumbent first measures the newcomer and the incumbent once more each
    (stage ``confirm``, when the budget allows) and decides between the two by their mean
    figures (:func:`pick`): a lucky window alone does not move the search. ``valid(layout)`` returns why a
    layout cannot run here (it is skipped, not measured) or None; ``on_trial`` sees each trial as
    it ends (the live table)."""
    began = clock() if start is None else start
    trials: list[Trial] = []
    notes: list[str] = []
    bounds: dict[Layout, float | None] = {}

    def bound_of(layout: Layout) -> float | None:
        if layout not in bounds:
            try:
                bounds[layout] = bound(layout)
            except Exception:  # noqa: BLE001 - a bound that cannot be computed only orders less well
                bounds[layout] = None
        return bounds[layout]

    def estimate() -> float:
        done = [t.seconds for t in trials]
        return sum(done) / len(done) if done else trial_estimate_s(warmup, seconds)

    def fits(more: int) -> bool:
        return clock() - began + more * estimate() <= budget_s

    def trial(layout: Layout, stage: str) -> Trial:
        t0 = clock()
        label = f"{len(trials) + 1}"
        score, error, figures = None, "", {}
        try:
            figures = dict(measure(layout, label))
            score = figures.pop("score", None)
            if score is None:
                error = "no score"
        except Exception as exc:  # noqa: BLE001 - a failed trial is a row of the table, the search goes on
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        t = Trial(len(trials) + 1, layout, stage, score, bound_of(layout), clock() - t0, error, figures)
        trials.append(t)
        on_trial(t)
        return t

    def score_of(layout: Layout) -> float | None:
        return _mean([t.score for t in trials if t.layout == layout and t.score is not None])

    incumbent = default
    trial(default, "default")
    stopped = False
    for i, dim in enumerate(dims):
        seen = {t.layout for t in trials}
        options = [x for x in dict.fromkeys(dim.options(incumbent)) if x != incumbent and x not in seen]
        runnable = []
        for x in options:
            why = valid(x)
            if why:
                notes.append(f"{dim.name}: skipped {x.changes(incumbent)}: {why}")
            else:
                runnable.append(x)
        runnable.sort(key=lambda x: -(bound_of(x) or 0.0))
        tried = []
        for x in runnable:
            if not fits(1 + 2 * repeats):  # this one and the repeats
                stopped = True
                break
            trial(x, dim.name)
            tried.append(x)
        if tried:
            pool = [incumbent, *tried] + [x for x in dict.fromkeys(dim.options(incumbent)) if x in seen]
            new = pick([(x, score_of(x), bound_of(x)) for x in dict.fromkeys(pool)], incumbent, tie)
            if new != incumbent and confirm and fits(2 + 2 * repeats):
                for x in (new, incumbent):
                    trial(x, "confirm")
                new = pick([(x, score_of(x), bound_of(x)) for x in (incumbent, new)], incumbent, tie)
            incumbent = new
        if stopped:
            left = [d.name for d in dims[i + 1:]]
            untried = [x.changes(incumbent) for x in runnable if x not in tried]
            notes.append(f"the budget ({budget_s:g} s) ran out in '{dim.name}'"
                         + (f" (not tried: {'; '.join(untried)})" if untried else "")
                         + (f"; dimensions not tried: {', '.join(left)}" if left else ""))
            break
    searched = incumbent
    for _ in range(max(1, repeats)):
        for layout in dict.fromkeys([searched, default]):
            trial(layout, "repeat")
    means = {x: _mean([t.score for t in trials if t.layout == x and t.score is not None])
             for x in dict.fromkeys([searched, default])}
    chosen = pick([(x, m, bound_of(x)) for x, m in means.items()], searched, tie)
    if chosen != searched:
        notes.append(f"the repeats reversed the search: {searched.changes(default)} averaged "
                     f"{_fmt(means[searched])} against the default's {_fmt(means[default])}; the default is kept")
    return SearchResult(trials, default, chosen, searched, notes, clock() - began, budget_s)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


# ----------------------------------------------------------------------------- the TOML file
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value == math.inf else "-inf" if value == -math.inf
                                                 else repr(value))
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {type(value).__name__} {value!r}")


def toml_text(values: dict[str, Any], header: Iterable[str] = ()) -> str:
    """A TOML document setting each dotted option of ``values`` (``{"actors.count": 2,
    "sample_length": 128}``): top-level keys first, then one table per prefix
    (``[actors]``, ``[streams.sample.options]``), keys in the given order; ``header`` lines
    become ``#`` comments at the top.

    Raises:
        TypeError: a value with no TOML form (only bool, int, float, str, lists and dicts have one).
    """
    lines = [f"# {h}" if h else "#" for h in header]
    tables: dict[str, list[str]] = {}
    for path, value in values.items():
        table, _, key = path.rpartition(".")
        tables.setdefault(table, []).append(f"{key} = {_toml_value(value)}")
    if "" in tables:
        lines += ["", *tables.pop("")]
    for table, entries in tables.items():
        lines += ["", f"[{table}]", *entries]
    return "\n".join(lines) + "\n"


def config_values(cfg: Any, keys: Iterable[str]) -> dict[str, Any]:
    """``{key: the typed value of dotted option key in cfg}`` (a table entry such as
    ``streams.sample.options.slots`` read from the table), in the given order, each key once."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys(keys):
        obj: Any = cfg
        for part in key.split("."):
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
        out[key] = list(obj) if isinstance(obj, tuple) else obj
    return out


# ----------------------------------------------------------------------------- the table
COLUMNS = ("#", "stage", "change from the default", "score", "bound", "of bound", "s", "note")


def table_rows(result: SearchResult) -> list[tuple[str, ...]]:
    """One row per trial, :data:`COLUMNS`: index, stage, what differs from the default, score
    and bound (env steps/s), the score's share of the bound, the trial's wall seconds, and its
    error or its figures' ``note``; the chosen layout's rows are marked ``*``."""
    rows: list[tuple[str, ...]] = []
    for t in result.trials:
        mark = " *" if t.layout == result.chosen else ""
        share = f"{t.score / t.bound:.0%}" if t.score is not None and t.bound else "-"
        rows.append((f"{t.index}{mark}", t.stage, t.layout.changes(result.default), _fmt(t.score), _fmt(t.bound),
                     share, f"{t.seconds:.0f}", t.error or str(t.figures.get("note") or "")))
    return rows


def summary_lines(result: SearchResult, objective: str) -> list[str]:
    """The search's conclusion in lines: the chosen layout, the default, each one's figures (the
    noise), their ratio, the notes."""
    c, d = result.chosen, result.default

    def figures(x: Layout) -> str:
        return f"{' then '.join(_fmt(s) for s in result.scores(x)) or '-'} (mean {_fmt(result.mean(x))})"
    if c == d:
        out = [f"chosen: the default, {d.describe()} (no other layout measured more than {TIE:.0%} faster, "
               "or one that did lost in the repeats)", f"{objective}: default {figures(d)}"]
    else:
        out = [f"chosen: {c.describe()} ({c.changes(d)})", f"default: {d.describe()}",
               f"{objective}: chosen {figures(c)}; default {figures(d)}"]
    mc, md = result.mean(c), result.mean(d)
    if c != d and mc and md:
        out.append(f"chosen / default: {mc / md:.2f}x (means of each one's measurements; the spread of each one's "
                   "figures is the noise)")
    spread = [(max(s) - min(s)) / max(s) for s in (result.scores(c), result.scores(d)) if len(s) >= 2 and max(s) > 0]
    if spread:
        out.append(f"noise: one layout's figures differed by up to {max(spread):.0%} (highest - lowest, over the "
                   "highest)")
        if c != d and mc and md and abs(mc / md - 1.0) <= max(spread):
            out.append("the difference between the chosen and the default is within that noise: search again on a "
                       "quieter machine, or with a longer --seconds or more --repeats, before relying on it")
    out.append(f"{len(result.trials)} trials in {result.seconds:.0f} s of a {result.budget_s:g} s budget")
    return out + [f"note: {n}" for n in result.notes]


def format_markdown(result: SearchResult, objective: str, header: Iterable[str] = (),
                    notes: Iterable[str] = ()) -> str:
    """The table (:func:`table_rows`), :func:`summary_lines` and ``notes`` (more ``note:`` lines) as Markdown."""
    lines = [*header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table_rows(result)]
    summary = [*summary_lines(result, objective), *(f"note: {n}" for n in notes)]
    return "\n".join([*lines, "", *(f"- {s}" for s in summary)]) + "\n"


def result_json(result: SearchResult) -> dict[str, Any]:
    """The search as plain data (every trial with its layout's options)."""
    def lay(x: Layout) -> dict[str, Any]:
        return dataclasses.asdict(x)
    return {"default": lay(result.default), "chosen": lay(result.chosen), "searched": lay(result.searched),
            "chosen_scores": result.scores(result.chosen), "default_scores": result.scores(result.default),
            "seconds": result.seconds, "budget_s": result.budget_s, "notes": result.notes,
            "trials": [{"index": t.index, "stage": t.stage, "layout": lay(t.layout),
                        "change": t.layout.changes(result.default), "score": t.score, "bound": t.bound,
                        "seconds": t.seconds, "error": t.error, "figures": t.figures} for t in result.trials]}
