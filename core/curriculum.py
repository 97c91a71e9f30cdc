"""Curricula: an environment's stages, and the decision to advance to the next one.

An environment may expose **stages** (docs/curriculum.md): its spec lists their names
(:attr:`zoo.core.env.EnvSpec.stages`, stage ``0 .. len(stages) - 1``) and it has a method
``set_curriculum_stage(stage: int) -> None`` that the actor calls between episodes, just
before a ``reset()``; the stage applies from that reset on, never in the middle of an
episode.

A run with a ``[curriculum]`` section (:class:`CurriculumConfig`) advances the stage when a
condition on the returns of the last ``over_episodes`` episodes played at the current stage
holds, e.g. ``advance_when = "mean_return >= 0.9"``; a list gives one condition per stage
(``["mean_return >= 0.5", "mean_return >= 0.9"]``: the first takes stage 0 to 1, the second
1 to 2). The decision is :class:`Curriculum`, fed with episode returns through
:meth:`Curriculum.observe` by the lead trainer, which owns it (its checkpoint keeps the stage,
its parameters carry it to the actors, it writes the ``curriculum`` rows). What it feeds is
chosen by ``curriculum.source``: ``"training"`` (the default), the training episodes it logs;
``"eval"``, the eval manager's evaluation episodes (``workers.eval.count = 1``), which the eval
manager plays at the current stage and writes to the history store with the stage they were
played at, and which the trainer reads from there at each update point (:class:`EvalFeed`).

Condition grammar: ``<aggregate>_<field> <op> <number>``: ``aggregate`` one of
:data:`AGGREGATES` over the window, ``field`` a numeric field of the episode rows (``return``,
or an env's per-episode statistic such as hide-and-seek's ``hider_return``;
:attr:`Condition.field`), ``op`` one of ``>=``, ``>``, ``<=``, ``<``. What
:meth:`Curriculum.observe` takes are the values of the current condition's field
(:attr:`Curriculum.field`): the returns, for ``mean_return``.
"""
from __future__ import annotations

import difflib
import math
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from zoo.core.options import bounded

AGGREGATES = ("mean", "min", "max", "median")
"""How a condition sums up the window of the last ``over_episodes`` values."""
_OPS: dict[str, Callable[[float, float], Any]] = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal,
                                                  "<": np.less}
_AGGREGATE: dict[str, Callable[[np.ndarray], Any]] = {"mean": np.mean, "min": np.min, "max": np.max,
                                                      "median": np.median}
_CONDITION = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(>=|<=|>|<)\s*(\S+)\s*$")


@dataclass
class CurriculumConfig:
    """The ``[curriculum]`` section (docs/curriculum.md); off while ``advance_when`` is empty.

    ``advance_when``: one condition for every stage, or one per stage but the last
    (``len(stages) - 1``); ``over_episodes``: the window, in episodes played at the current
    stage, that a condition is computed over (it fills again after each advance). The window
    slides: the condition is tested after every episode once it is full, so a short window
    passes on a lucky streak (docs/curriculum.md, "Choosing the window"); ``source``: the
    episodes they are computed over, the training ones or the eval manager's (``"eval"``: refused
    without ``workers.eval.count = 1``, :func:`curriculum_problems`).
    """

    advance_when: list[str] = field(default_factory=list)
    """Conditions such as 'mean_return >= 0.9' (one for all stages, or one per stage but the last); empty: off."""
    over_episodes: int = field(default=100, metadata=bounded(ge=1))
    """Episodes at the current stage a condition is computed over (the last N; tested after each episode)."""
    source: Literal["training", "eval"] = "training"
    """The episodes the conditions are computed over: the training episodes ("training") or the eval
    manager's evaluation episodes ("eval", needs workers.eval.count=1)."""

    @property
    def from_eval(self) -> bool:
        """True when the eval manager's episodes drive the stage (``source = "eval"``)."""
        return self.on and self.source == "eval"

    @property
    def on(self) -> bool:
        return bool(self.advance_when)


@dataclass(frozen=True)
class Condition:
    """One parsed condition: ``statistic op threshold``, ``statistic`` = ``<aggregate>_<field>``."""

    statistic: str
    op: str
    threshold: float

    @property
    def aggregate(self) -> str:
        """``mean``, ``min``, ``max`` or ``median``."""
        return self.statistic.split("_", 1)[0]

    @property
    def field(self) -> str:
        """The episode rows' field it is computed over (``return`` for ``mean_return``)."""
        return self.statistic.split("_", 1)[1]

    def summarise(self, values: np.ndarray) -> float:
        """Its aggregate of ``values`` (float64 ``[n]``, n >= 1), e.g. their mean for ``mean_return``."""
        return float(_AGGREGATE[self.aggregate](values))

    def holds(self, values: np.ndarray) -> bool:
        """Whether it holds over ``values`` (float64 ``[n]``, n >= 1)."""
        return bool(_OPS[self.op](self.summarise(values), self.threshold))

    def __str__(self) -> str:
        return f"{self.statistic} {self.op} {self.threshold:g}"


def parse_condition(text: str, path: str = "curriculum.advance_when") -> Condition:
    """``"mean_return >= 0.9"`` -> :class:`Condition`.

    Raises:
        ValueError: naming ``path``, the text and the grammar (unknown statistic, missing or
            unknown operator, a threshold that is not a finite number).
    """
    m = _CONDITION.match(text)
    grammar = (f"write '<aggregate>_<field> <op> <number>', aggregate one of {', '.join(AGGREGATES)}, field a "
               "numeric field of the episode rows (return, or an env statistic), op one of >=, >, <=, < "
               "(e.g. 'mean_return >= 0.9')")
    if m is None:
        raise ValueError(f"{path}: cannot parse {text!r}: {grammar}")
    stat, op, number = m.groups()
    agg, _, field_name = stat.partition("_")
    if agg not in AGGREGATES or not field_name:
        raise ValueError(f"{path}: unknown statistic {stat!r} in {text!r}: {grammar}")
    near = difflib.get_close_matches(field_name, ["return", "length"], n=1, cutoff=0.7)
    if near and near[0] != field_name:  # a typo of the fields every episode row has
        raise ValueError(f"{path}: unknown field {field_name!r} in {text!r}; did you mean '{agg}_{near[0]}'? "
                         f"{grammar}")
    try:
        threshold = float(number)
    except ValueError:
        raise ValueError(f"{path}: threshold {number!r} in {text!r} is not a number: {grammar}") from None
    if not math.isfinite(threshold):
        raise ValueError(f"{path}: threshold {number!r} in {text!r} is not finite: {grammar}")
    return Condition(stat, op, threshold)


def parse_conditions(cfg: CurriculumConfig, stages: tuple[str, ...], env_id: str) -> list[Condition]:
    """The condition of each advance, ``len(stages) - 1`` of them (one given for all is repeated).

    Raises:
        ValueError: one line naming the field and the fix: the env has no stages, a condition
            does not parse (:func:`parse_condition`), or the number of conditions is neither 1
            nor ``len(stages) - 1``.
    """
    if not stages:
        raise ValueError(f"curriculum.advance_when: env {env_id!r} has no curriculum stages (its spec.stages is "
                         "empty, it has no set_curriculum_stage); drop the [curriculum] section, or use an env "
                         "that declares stages (docs/curriculum.md)")
    conditions = [parse_condition(t, f"curriculum.advance_when[{i}]") if len(cfg.advance_when) > 1
                  else parse_condition(t) for i, t in enumerate(cfg.advance_when)]
    advances = len(stages) - 1
    if len(conditions) == 1:
        return conditions * advances
    if len(conditions) != advances:
        raise ValueError(f"curriculum.advance_when: {len(conditions)} conditions for env {env_id!r}, whose "
                         f"{len(stages)} stages ({', '.join(stages)}) have {advances} advances; give one condition "
                         f"for all, or exactly {advances} (one per stage but the last)")
    return conditions


class Curriculum:
    """Decides when to advance: :meth:`observe` takes the returns of episodes played at the
    current stage and says the new stage once the current stage's condition holds over the
    last ``over_episodes`` of them.

    Args:
        conditions: the condition of each advance (stage ``s`` -> ``s + 1`` uses
            ``conditions[s]``), ``len(stages) - 1`` of them (:func:`parse_conditions`).
        over_episodes: the window, in episodes (>= 1).
        stage: the stage to start at (a resumed run's).
    """

    def __init__(self, conditions: list[Condition], over_episodes: int, stage: int = 0) -> None:
        if over_episodes < 1:
            raise ValueError(f"over_episodes must be >= 1, got {over_episodes}")
        self.conditions, self.over_episodes = list(conditions), over_episodes
        self.stages = len(self.conditions) + 1
        if not 0 <= stage < self.stages:
            raise ValueError(f"stage {stage} is not one of 0..{self.stages - 1}")
        self.stage = stage
        self.window: deque[float] = deque(maxlen=over_episodes)

    @property
    def last(self) -> bool:
        """True at the last stage (nothing left to advance to)."""
        return self.stage >= self.stages - 1

    @property
    def field(self) -> str:
        """The episode rows' field whose values :meth:`observe` takes now: the current stage's
        condition's (``return`` for ``mean_return``; ``return`` at the last stage)."""
        return self.conditions[min(self.stage, len(self.conditions) - 1)].field if self.conditions else "return"

    def observe(self, returns: Iterable[float]) -> int | None:
        """Add the values of :attr:`field` (the returns, for ``mean_return``) of episodes played at
        the current stage, in order; the new stage when the current stage's condition holds over
        the last ``over_episodes`` of them, else None.

        At most one advance per call; the window starts empty at the new stage, and returns
        after the one that completed the advance in the same call are dropped (they were
        played at the old stage).
        """
        for r in returns:
            if self.last:
                return None
            self.window.append(float(r))
            if len(self.window) == self.over_episodes and self.conditions[self.stage].holds(np.asarray(self.window)):
                self.stage += 1
                self.window.clear()
                return self.stage
        return None

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the stage and the window (plain Python values)."""
        return {"stage": self.stage, "window": list(self.window)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a stage beyond the last is clamped to the last)."""
        stage, window = state.get("stage", 0), state.get("window", [])
        self.stage = min(int(stage or 0), self.stages - 1)
        self.window = deque((float(x) for x in window or []), maxlen=self.over_episodes)


class EvalFeed:
    """What the lead trainer feeds a :class:`Curriculum` driven by the eval manager
    (``curriculum.source = "eval"``): the evaluation episodes the eval manager wrote to the
    history store (:meth:`zoo.core.history.VersionStore.eval_episodes`), offered one at a time in
    the order they were played (their row ``id``).

    An episode counts when it was played at the curriculum's current stage (one played at an
    earlier stage, before the eval manager learnt of the advance, does not) and has the
    condition's field; the values of those go to :meth:`Curriculum.observe`. :attr:`cursor` is
    the ``id`` of the last episode offered (counted or not): the next read starts after it, and
    the trainer's checkpoint keeps it with the curriculum's state (``eval_cursor``).

    Args:
        curriculum: the run's curriculum (changed in place when it advances).
        cursor: the last episode's ``id`` already offered (a resumed run's checkpoint's; 0: none).
    """

    def __init__(self, curriculum: Curriculum, cursor: int = 0) -> None:
        self.curriculum, self.cursor = curriculum, int(cursor)

    def offer(self, episode: Any) -> str:
        """Offer one :class:`~zoo.core.history.EvalEpisode` (``id``, ``stage``, ``values``; ids
        increasing). Returns ``"advanced"`` (it completed the window of the current stage's
        condition: :attr:`Curriculum.stage` is the new stage), ``"counted"``, ``"missing"``
        (played at the current stage but without the condition's field, :attr:`Curriculum.field`)
        or ``"skipped"`` (another stage, the last stage, or an ``id`` already offered)."""
        if int(episode.id) <= self.cursor:
            return "skipped"
        self.cursor = int(episode.id)
        cur = self.curriculum
        if cur.last or int(episode.stage) != cur.stage:
            return "skipped"
        value = episode.values.get(cur.field)
        if not isinstance(value, (int, float)):
            return "missing"
        return "advanced" if cur.observe([float(value)]) is not None else "counted"

    def state_dict(self) -> dict[str, Any]:
        """The curriculum's :meth:`Curriculum.state_dict` and ``eval_cursor``."""
        return {**self.curriculum.state_dict(), "eval_cursor": self.cursor}


def stage_label(stage: int, stages: tuple[str, ...] | list[str]) -> str:
    """``"stage 1 two-steps (0-2)"``: the stage (0-based), its name and the stages' range."""
    name = f" {stages[stage]}" if 0 <= stage < len(stages) else ""
    return f"stage {stage}{name} (0-{max(len(stages) - 1, 0)})"


def curriculum_of(cfg: object, spec: object) -> Curriculum | None:
    """The run's :class:`Curriculum` at stage 0 (None when ``cfg.curriculum`` is off).

    Raises:
        ValueError: see :func:`parse_conditions` (the config check refuses these first).
    """
    cc = getattr(cfg, "curriculum", None)
    if cc is None or not cc.on:
        return None
    stages = tuple(getattr(spec, "stages", ()) or ())
    return Curriculum(parse_conditions(cc, stages, str(getattr(spec, "env_id", "?"))), cc.over_episodes)


def curriculum_problems(cfg: object) -> list[tuple[str, str]]:
    """``(field, message)`` for a ``[curriculum]`` the run cannot have, before any process starts:
    ``source = "eval"`` without an eval manager (``workers.eval.count`` below 1), an env without
    stages, a condition that does not parse, a number of conditions other than 1 or
    ``len(stages) - 1``, named policies (not supported yet). Empty when it is off or fine."""
    cc = getattr(cfg, "curriculum", None)
    if cc is None or not cc.on:
        return []
    if cc.source == "eval" and eval_managers(cfg) < 1:
        return [("curriculum.source", "curriculum.source = 'eval': the run has no eval manager to play the "
                 "evaluation episodes; set workers.eval.count=1 (with trainer.history.every_updates=N, "
                 "docs/history.md), or curriculum.source=training")]
    spec = getattr(cfg, "spec", None)
    if spec is None:
        return []
    policies = getattr(cfg, "policies", None)
    if policies is not None and not policies.implicit:
        return [("curriculum.advance_when", "curriculum.advance_when: a curriculum with named policies "
                 "([policies.NAME]) is not supported yet; train one shared policy, or drop the [curriculum] section")]
    try:
        parse_conditions(cc, tuple(spec.stages), spec.env_id)
    except ValueError as exc:
        return [(str(exc).split(":", 1)[0].split("[", 1)[0], str(exc))]
    return []


def eval_managers(cfg: object) -> int:
    """``workers.eval.count`` of ``cfg`` (0 when absent or not a number; ``--set`` may give it as text)."""
    workers = getattr(cfg, "workers", None) or {}
    opts = workers.get("eval") if isinstance(workers, dict) else None
    count = opts.get("count", 0) if isinstance(opts, dict) else getattr(opts, "count", 0)
    try:
        return int(str(count).strip())
    except ValueError:
        return 0


def last_stage(metrics_path: str) -> int:
    """The ``stage`` of the last ``curriculum`` row of a run's ``metrics.jsonl`` (0 when none, or
    no file): where a resumed run's actors start (the trainer's checkpoint then says the rest)."""
    import json

    stage = 0
    try:
        with open(metrics_path, "rb") as f:
            for line in f:
                if b'"curriculum"' not in line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("type") == "curriculum":
                    stage = int(row.get("stage", stage))
    except OSError:
        return 0
    return stage
