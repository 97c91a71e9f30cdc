"""The trainer's accounting: its counters, rates and recent episode returns (:class:`TrainerState`).

The run's counters: ``policy_version``, ``updates``, ``env_steps`` (environment steps
received, not agent steps), ``frames`` (``env_steps x frame_skip``), ``episodes`` and
``trained_env_steps`` (env steps of the samples the updates used); beside them
``trained_samples`` (agent-slot samples trained on), ``dropped_samples`` (agent-slot samples
the trainer dropped as too stale), ``actor_dropped_samples`` (dropped by actors because the
trainer was behind), ``dropped_fraction``, the non-finite counters and, from the second
update on, ``mean_env_steps_per_s`` and ``mean_trained_env_steps_per_s`` (per wall-clock
second since this segment's first update). ``episode_return_mean`` is the mean return of the
last :data:`RECENT_EPISODES` episodes (and likewise each other numeric field episodes report).

Received counts arrive as *shares* (:func:`zoo.core.workers.receiver.fresh_share`): one
trainer adds its own at once; data-parallel trainers add every rank's at a sync point
(:mod:`zoo.core.workers.sync`). Everything here besides the algorithm's state is what a
checkpoint holds (:meth:`TrainerState.to_dict`, :meth:`TrainerState.load`).

**Rate-limiter waits** (replay algorithms, ``rate_limited = True``: :mod:`zoo.core.algorithm`;
docs/replay.md). The samples-per-insert rate limiter ties the learner's gradient steps to
inserted data, so each batch ends in one of two waits, measured from three times
(``time.monotonic()`` seconds, :func:`rate_limit_wait`): ``asked_at``, when the trainer began
asking for the batch (after the previous update, its publishing, logging and checkpoint);
``ready_at``, when the receive path had it complete; ``taken_at``, when the trainer took it.

- ``rate_limit_waits`` [batches]: batches the learner was held back for, for lack of inserted
  data: complete only after the trainer asked (``ready_at > asked_at``);
- ``rate_limit_wait_s`` [s]: the sum of those waits, ``ready_at - asked_at``;
- ``rate_limit_held_s`` [s]: the sum over batches of ``taken_at - ready_at``, how long a
  complete batch waited for the learner to finish its granted gradient steps. The receive path
  pulls nothing meanwhile, so the sample stream fills and the actors' pushes block: the actors
  are held back for this long, less the time the stream's buffers still took samples (an upper
  bound; each actor's own blocked time is its ``push`` phase in ``live.json``).

All three are cumulative over the run (kept in the checkpoint), counted for every batch taken,
skipped updates' and the warm-up's (before ``learning_starts``) included.
"""
from __future__ import annotations

import collections
from typing import Any

import numpy as np

from zoo.core.workers.checkpointing import rng_state, set_rng_state
from zoo.core.workers.guard import Origin
from zoo.core.workers.receiver import fresh_share, merge_shares

RECENT_EPISODES = 20


def rate_limit_wait(asked_at: float, ready_at: float, taken_at: float) -> tuple[float, float]:
    """``(learner_wait_s, held_s)`` of one batch from the three times of the module docstring
    (seconds of one clock): the learner waited ``max(0, ready_at - asked_at)`` for it, and it
    waited ``max(0, taken_at - ready_at)`` for the learner. Example: asked at 10.0, complete at
    12.5, taken at 12.5 -> (2.5, 0.0); complete at 7.0, asked at 10.0, taken at 10.0 -> (0.0, 3.0)."""
    return max(0.0, ready_at - asked_at), max(0.0, taken_at - ready_at)


class TrainerState:
    """The trainer's own counters and bookkeeping: everything a checkpoint holds besides the
    algorithm's state (see :mod:`zoo.core.workers.checkpointing`)."""

    def __init__(self) -> None:
        self.version = 0
        self.updates = 0
        self.env_steps = 0
        self.episodes = 0
        self.dropped_samples = 0
        self.actor_dropped_samples = 0  # dropped by actors because the trainer was behind (actors.drop_when_full)
        self.trained_env_steps = 0  # env steps of the samples trained on (env steps, not agent steps)
        self.trained_samples = 0  # agent-slot samples trained on
        self.nonfinite_updates = 0
        self.nonfinite_streak = 0
        self.resumes = 0
        self.pbt_seq = 0  # a population member: the last order of the population manager applied (zoo.core.pbt)
        self.pbt_hyperparameters: dict[str, float] = {}  # and the hyperparameters it set
        self.rng_note: str | None = None  # set by load(): CUDA RNG states a checkpoint held for devices not here
        self.time_before = 0.0  # running time of the run's earlier segments, seconds
        self.recent: collections.deque = collections.deque(maxlen=RECENT_EPISODES)
        self.recent_stats: dict[str, collections.deque] = {}
        self.pending: list[dict[str, Any]] = []
        self.origins: list[Origin] = []
        self.pending_slots = 0
        self.pending_share: dict[str, Any] = fresh_share()  # counts of the pending samples not yet in the run's
        # (monotonic s, env steps, trained, updates) at this segment's first update
        self.rate_ref: tuple[float, int, int, int] | None = None
        self.rate_limit_waits = 0  # batches the learner waited for (module docstring)
        self.rate_limit_wait_s = 0.0  # seconds it waited for them
        self.rate_limit_held_s = 0.0  # seconds complete batches waited for the learner
        self.curriculum: dict[str, Any] | None = None  # Curriculum.state_dict() at the checkpoint (docs/curriculum.md)

    # ------------------------------------------------------------------ what arrives and what is trained
    def absorb(self, shares: list[dict[str, Any]], stamp_at_sample: bool) -> list[tuple[int, dict[str, Any]]]:
        """Add ``shares`` (rank order) to the run's counters: env steps, dropped counts, and each
        finished episode (``episodes``, the recent returns and statistics).

        Returns:
            ``[(env_steps, episode)]``, the step each episode is logged at: with
            ``stamp_at_sample`` (one trainer) the env steps up to the sample that brought it
            (the run's count before plus the share's ``episode_at``), else (K > 1) the run's
            env steps after adding every share.
        """
        base = self.env_steps
        self.env_steps += sum(sh["env_steps"] for sh in shares)
        self.dropped_samples += sum(sh["dropped"] for sh in shares)
        self.actor_dropped_samples += sum(sh["actor_dropped"] for sh in shares)
        logged = []
        for sh in shares:
            for ep, at in zip(sh["episodes"], sh["episode_at"], strict=True):
                self.episodes += 1
                self.recent.append(ep["return"])
                for k, v in ep.items():
                    # a played version (an opponent's "<P>_version", docs/history.md) is a label: no mean
                    # nor is the curriculum stage an episode was played at (docs/curriculum.md)
                    if k not in ("return", "length", "curriculum_stage") and not k.endswith("_version"):
                        self.recent_stats.setdefault(k, collections.deque(maxlen=RECENT_EPISODES)).append(v)
                logged.append((base + at if stamp_at_sample else self.env_steps, ep))
        return logged

    def updated(self, used_steps: int, used_slots: int, now: float, changed: bool = True) -> None:
        """Count one update trained on ``used_steps`` env steps in ``used_slots`` agent-slot
        samples: the trained counters, a finite update (the non-finite streak ends) and, when it
        ``changed`` the policy's parameters, a new policy version (a replay algorithm's update
        that took no gradient step keeps the version: ``policy_changed`` in
        :mod:`zoo.core.algorithm`); ``now`` (``time.monotonic()``) starts the rates at the
        segment's first update."""
        self.nonfinite_streak = 0
        self.version += 1 if changed else 0
        self.updates += 1
        self.trained_env_steps += used_steps
        self.trained_samples += used_slots
        if self.rate_ref is None:  # rates are per wall-clock second since this segment's first update
            self.rate_ref = (now, self.env_steps, self.trained_env_steps, self.updates)

    def batch_taken(self, asked_at: float, ready_at: float, taken_at: float) -> None:
        """Count one batch's rate-limiter waits (:func:`rate_limit_wait`; module docstring)."""
        wait, held = rate_limit_wait(asked_at, ready_at, taken_at)
        self.rate_limit_waits += 1 if wait > 0 else 0
        self.rate_limit_wait_s += wait
        self.rate_limit_held_s += held

    # ------------------------------------------------------------------ what is reported
    def rate_limit(self) -> dict[str, Any]:
        """``rate_limit_waits`` [batches], ``rate_limit_wait_s`` and ``rate_limit_held_s`` [s],
        cumulative over the run (module docstring)."""
        return {"rate_limit_waits": self.rate_limit_waits, "rate_limit_wait_s": self.rate_limit_wait_s,
                "rate_limit_held_s": self.rate_limit_held_s}

    def counters(self, frame_skip: int) -> dict[str, int]:
        return {"policy_version": self.version, "updates": self.updates, "env_steps": self.env_steps,
                "frames": self.env_steps * frame_skip, "episodes": self.episodes,
                "trained_env_steps": self.trained_env_steps}

    def dropped_fraction(self) -> float:
        """Agent-slot samples dropped (too stale here, or at the actors) over those dropped plus
        those trained on: ``(dropped + actor_dropped) / (dropped + actor_dropped + trained)``; 0.0
        before any."""
        dropped = self.dropped_samples + self.actor_dropped_samples
        return dropped / (dropped + self.trained_samples) if dropped + self.trained_samples else 0.0

    def rates(self, now: float) -> dict[str, float]:
        """``mean_env_steps_per_s`` and ``mean_trained_env_steps_per_s``: env steps received and
        env steps trained on per wall-clock second since this segment's first update (``now``:
        ``time.monotonic()``); empty until an update followed that one (the first update's own
        env steps are before the reference, so after it alone the trained rate would read 0.0)."""
        if self.rate_ref is None or now <= self.rate_ref[0] or self.updates <= self.rate_ref[3]:
            return {}
        t0, steps0, trained0, _ = self.rate_ref
        return {"mean_env_steps_per_s": (self.env_steps - steps0) / (now - t0),
                "mean_trained_env_steps_per_s": (self.trained_env_steps - trained0) / (now - t0)}

    def flow(self, now: float) -> dict[str, Any]:
        """Dropped and trained-on counts, the dropped fraction and the :meth:`rates` at ``now``."""
        return {"dropped_samples": self.dropped_samples, "actor_dropped_samples": self.actor_dropped_samples,
                "trained_samples": self.trained_samples, "dropped_fraction": self.dropped_fraction(),
                **self.rates(now)}

    def return_mean(self) -> float | None:
        return float(np.mean(self.recent)) if self.recent else None

    def recent_means(self) -> dict[str, float]:
        """The mean of each recent episode statistic besides return and length (e.g. ``win``)."""
        return {k: float(np.mean(v)) for k, v in self.recent_stats.items() if v}

    # ------------------------------------------------------------------ checkpoints
    def to_dict(self, time_s: float, metrics_bytes: int, metrics_rows: int | None = None) -> dict[str, Any]:
        return {"dropped_samples": self.dropped_samples, "actor_dropped_samples": self.actor_dropped_samples,
                "trained_samples": self.trained_samples, "pending_share": self.pending_share,
                "nonfinite_updates": self.nonfinite_updates, "nonfinite_streak": self.nonfinite_streak,
                "time_s": time_s, "metrics_bytes": metrics_bytes, "recent": list(self.recent),
                "recent_stats": {k: list(v) for k, v in self.recent_stats.items()},
                "pending": self.pending, "origins": self.origins, "pending_slots": self.pending_slots,
                **self.rate_limit(), "rng": rng_state(),
                **({"metrics_rows": metrics_rows} if metrics_rows is not None else {}),  # a named policy's
                **({"curriculum": self.curriculum} if self.curriculum is not None else {}),
                **({"pbt_seq": self.pbt_seq, "pbt_hyperparameters": dict(self.pbt_hyperparameters)}
                   if self.pbt_seq else {})}  # a population member that applied an order (docs/pbt.md)

    def load(self, ckpt: dict[str, Any]) -> None:
        t = ckpt.get("trainer", {})
        self.version, self.updates = int(ckpt["policy_version"]), int(ckpt["updates"])
        self.env_steps, self.episodes = int(ckpt["env_steps"]), int(ckpt["episodes"])
        self.resumes = int(ckpt.get("resumes", 0))
        self.dropped_samples = int(t.get("dropped_samples", 0))
        self.actor_dropped_samples = int(t.get("actor_dropped_samples", 0))
        self.trained_env_steps = int(ckpt.get("trained_env_steps", 0))  # absent before it was counted
        self.trained_samples = int(t.get("trained_samples", 0))
        self.pending_share = merge_shares(fresh_share(), t.get("pending_share") or fresh_share())
        self.nonfinite_updates = int(t.get("nonfinite_updates", 0))
        self.nonfinite_streak = 0  # a resumed or restarted trainer gets a fresh run of max_nonfinite_updates tries
        self.time_before = float(t.get("time_s", 0.0))
        self.pbt_seq = int(t.get("pbt_seq", 0))  # absent before PBT
        self.pbt_hyperparameters = {k: float(v) for k, v in (t.get("pbt_hyperparameters") or {}).items()}
        self.recent.extend(t.get("recent", []))
        for k, v in t.get("recent_stats", {}).items():
            self.recent_stats[k] = collections.deque(v, maxlen=RECENT_EPISODES)
        self.pending, self.origins = list(t.get("pending", [])), list(t.get("origins", []))
        self.pending_slots = int(t.get("pending_slots", 0))
        self.rate_limit_waits = int(t.get("rate_limit_waits", 0))  # absent before they were counted
        self.rate_limit_wait_s = float(t.get("rate_limit_wait_s", 0.0))
        self.rate_limit_held_s = float(t.get("rate_limit_held_s", 0.0))
        self.rng_note = set_rng_state(t["rng"]) if "rng" in t else None
        self.curriculum = t.get("curriculum")  # absent: a run without a curriculum, or before it had one

    def drop_pending(self) -> None:
        """Forget the received samples not yet trained on (and their counts): they were handed to
        the receiver, or (data-parallel ranks > 0) they were rank 0's."""
        self.pending, self.origins, self.pending_slots, self.pending_share = [], [], 0, fresh_share()
