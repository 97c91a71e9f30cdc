"""The episodes a trainer takes in with each batch: counted, written to ``metrics.jsonl``,
offered to the version history (:mod:`zoo.core.workers.history`) and to the curriculum, whose
stage the lead trainer keeps (docs/curriculum.md): it advances on the training episodes, or on
the eval manager's (``curriculum.source = "eval"``), and each stage is logged, announced and
reported with the status (:class:`EpisodeIntake`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.core.curriculum import Curriculum, EvalFeed
    from zoo.core.workers.accounting import TrainerState
    from zoo.core.workers.base import WorkerContext
    from zoo.core.workers.history import History
    from zoo.core.workers.metrics import MetricsWriter
    from zoo.core.workers.sync import GroupSync, SoloSync


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
    eval_feed: EvalFeed | None  # curriculum.source = "eval"
    stage_changed: bool  # an advance not yet in a checkpoint
    warned_fields: set[str]  # curriculum condition fields the episodes lack (warned once)
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

    def missing_field(self, name: str, episode: dict[str, Any]) -> None:
        """Warn once that the episodes have no numeric ``name`` for the curriculum's condition
        (an env statistic the env does not report): the stage cannot advance."""
        if name in self.warned_fields:
            return
        self.warned_fields.add(name)
        have = ", ".join(k for k, v in episode.items() if isinstance(v, (int, float)) and k != "curriculum_stage")
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

