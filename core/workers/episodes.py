"""The episodes a trainer takes in with each batch: counted, written to ``metrics.jsonl``,
offered to the version history (:mod:`zoo.core.workers.history`) and to the curriculum, whose
stage the lead trainer keeps (docs/curriculum.md): it advances on the training episodes, or on
the eval manager's (``curriculum.source = "eval"``), and each stage is logged, announced and
reported with the status (:class:`EpisodeIntake`).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo.core.curriculum import parse_condition

if TYPE_CHECKING:
    from zoo.core.curriculum import Curriculum, EvalFeed
    from zoo.core.workers.accounting import TrainerState
    from zoo.core.workers.base import WorkerContext
    from zoo.core.workers.history import History
    from zoo.core.workers.metrics import MetricsWriter
    from zoo.core.workers.sync import GroupSync, SoloSync


class EarlyStop:
    """``stop_when`` (docs/looking-at-runs.md, "Stopping early"): the condition ``text`` (the
    curriculum's grammar, :func:`zoo.core.curriculum.parse_condition`, e.g. ``"mean_return >=
    450"``) over a sliding window of the last ``over`` training episodes, tested after each
    episode once the window is full, as a curriculum's is. Once it held it stays held
    (:attr:`value`: the aggregate then) and the trainer ends the run at its next update point as
    if the budget were reached. Every rank of data-parallel trainers sees the same episodes in
    the same order (:meth:`EpisodeIntake.account`), so all decide alike. The window is not
    checkpointed: a resumed run fills it again.

    Raises:
        ValueError: ``text`` does not parse (the config check refuses it before any process starts).
    """

    def __init__(self, text: str, over: int) -> None:
        self.condition = parse_condition(text, "stop_when")
        self.window: deque[float] = deque(maxlen=over)
        self.value: float | None = None
        self.at_env_steps: int | None = None  # the env steps the episode that made it hold is logged at

    def observe(self, episode: dict[str, Any], env_steps: int) -> bool:
        """Offer one episode row (``env_steps``: the step its row is logged at); False when it has
        no numeric field the condition needs (nothing is added)."""
        value = episode.get(self.condition.field)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.value is None:
            self.window.append(float(value))
            values = np.asarray(self.window, dtype=np.float64)
            if len(values) == self.window.maxlen and self.condition.holds(values):
                self.value = self.condition.summarise(values)
                self.at_env_steps = env_steps
        return True

    @property
    def held(self) -> bool:
        return self.value is not None

    def fields(self) -> dict[str, Any]:
        """What the ``end`` row and the ``done`` message add once it held: ``stop_when``,
        ``stop_value`` and ``reason`` (:meth:`describe`)."""
        return {"stop_when": str(self.condition), "stop_value": self.value, "reason": self.describe()}

    def describe(self) -> str:
        """E.g. ``stop_when 'mean_return >= 450' held: 452.3 over the last 20 episodes at 45,056 env steps``."""
        return (f"stop_when '{self.condition}' held: {self.value:g} over the last {self.window.maxlen} episodes "
                f"at {self.at_env_steps or 0:,} env steps")


class EpisodeIntake:
    """The part of :class:`~zoo.core.workers.trainer.Trainer` that takes in episodes and keeps the
    curriculum's stage (a base class of it). The attributes below are the trainer's, set by its
    ``__init__`` (``metrics``, ``history``, ``curriculum``: None except on rank 0)."""

    ctx: WorkerContext
    spec: Any
    state: TrainerState
    metrics: MetricsWriter | None
    history: History | None
    sync: SoloSync | GroupSync
    curriculum: Curriculum | None
    early_stop: EarlyStop | None  # stop_when (every rank)
    eval_feed: EvalFeed | None  # curriculum.source = "eval"
    stage_changed: bool  # an advance not yet in a checkpoint
    warned_fields: set[tuple[str, str]]  # (option, field): condition fields the episodes lack (warned once)
    counters: Callable[[], dict[str, int]]
    elapsed: Callable[[], float]

    def account(self, shares: list[dict[str, Any]]) -> None:
        """Add ``shares`` to the run's counters; rank 0 logs their episodes
        (:meth:`~zoo.core.workers.accounting.TrainerState.absorb`)."""
        for stamp, episode in self.state.absorb(shares, stamp_at_sample=not self.sync.data_parallel):
            if self.metrics is not None:
                self.metrics.write({"type": "episode", "env_steps": stamp, **episode}, stamp)
            if self.history is not None:
                self.history.saw(episode)
            if self.early_stop is not None and not self.early_stop.observe(episode, stamp) and self.metrics is not None:
                self.missing_field(self.early_stop.condition.field, episode, "stop_when")
            # an episode played at the curriculum's current stage (its row is written just before any advance's)
            cur = self.curriculum
            if cur is None or self.eval_feed is not None or episode.get("curriculum_stage") != cur.stage or cur.last:
                continue
            value = episode.get(cur.field)
            if not isinstance(value, (int, float)):
                self.missing_field(cur.field, episode)
            elif cur.observe([float(value)]) is not None:
                self.stage_changed = True
                self.log_stage()
                self.ctx.send_control("curriculum", timeout=0.5, **self.stage_status(), **self.counters())

    def observe_eval(self) -> None:
        """Rank 0 of a curriculum driven by the eval manager (``curriculum.source = "eval"``): offer
        the evaluation episodes it wrote to the history store since the last ones read, in play
        order (:class:`~zoo.core.curriculum.EvalFeed`); an advance is logged, announced and
        checkpointed as one from the training episodes, and the parameters published after this
        update carry it to the actors (docs/curriculum.md)."""
        feed = self.eval_feed
        if feed is None or self.history is None or feed.curriculum.last:
            return
        for episode in self.history.store.eval_episodes(self.history.policy, after=feed.cursor):
            result = feed.offer(episode)
            if result == "missing":
                self.missing_field(feed.curriculum.field, episode.values)
            elif result == "advanced":
                self.stage_changed = True
                self.log_stage({"source": "eval", "eval_version": episode.version, "eval_game": episode.id})
                self.ctx.send_control("curriculum", timeout=0.5, **self.stage_status(), **self.counters())

    def missing_field(self, name: str, episode: dict[str, Any], option: str = "curriculum.advance_when") -> None:
        """Warn once per field that the episodes have no numeric ``name`` for the condition of
        ``option`` (an env statistic the env does not report): the curriculum's stage cannot
        advance, or ``stop_when`` cannot hold."""
        if (option, name) in self.warned_fields:
            return
        self.warned_fields.add((option, name))
        have = ", ".join(k for k, v in episode.items() if isinstance(v, (int, float)) and k != "curriculum_stage")
        if option == "stop_when":
            self.ctx.send_control("warning", timeout=0.5, key="stop-when-field", message=(
                f"stop_when: the episodes of env {self.spec.env_id!r} have no numeric field {name!r}, so the "
                f"condition cannot hold and the budget alone ends the run; their fields: {have} "
                "(docs/looking-at-runs.md)"))
            return
        self.ctx.send_control("warning", timeout=0.5, key="curriculum-field", message=(
            f"curriculum.advance_when: the episodes of env {self.spec.env_id!r} have no numeric field {name!r}, so "
            f"the curriculum cannot advance from stage {self.curriculum.stage if self.curriculum else 0}; their "
            f"fields: {have} (docs/curriculum.md)"))

    def stage_status(self) -> dict[str, Any]:
        """The curriculum's stage for status messages and the display (``{}`` without one)."""
        if self.curriculum is None:
            return {}
        stage = self.curriculum.stage
        return {"curriculum_stage": stage, "curriculum_stages": len(self.spec.stages),
                "curriculum_stage_name": self.spec.stages[stage]}

    def log_stage(self, why: dict[str, Any] | None = None) -> None:
        """Rank 0: a ``curriculum`` row: the stage from now on, with the counters, and ``why`` (an
        advance from the eval manager's episodes: ``source``, ``eval_version``, ``eval_game``;
        docs/curriculum.md)."""
        if self.curriculum is None or self.metrics is None:
            return
        cur, st = self.curriculum, self.state
        row: dict[str, Any] = {"type": "curriculum", "stage": cur.stage, "stage_name": self.spec.stages[cur.stage],
                               **self.counters(), "time_s": self.elapsed()}
        if cur.stage > 0:
            row.update(condition=str(cur.conditions[cur.stage - 1]), over_episodes=cur.over_episodes, **(why or {}))
        self.metrics.write(row, st.env_steps, tensorboard=False)

