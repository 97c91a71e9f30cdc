"""Trainer worker: consumes samples, filters stale ones, updates, publishes parameters.

Loop (:meth:`Trainer.loop`, SRL's trainer: receive, update, publish, log, checkpoint): take
the next batch of ``trainer.batch_samples`` agent-slot trajectories (whole messages, so a
batch may hold a few more) from the receive thread
(:class:`~zoo.core.workers.receiver.SampleReceiver`), which pulls and collates it while the
previous update runs, holds at most one batch ahead (so the actors are held back through the
sample stream, ``docs/flow.md``) and drops any sample whose policy lag — the version it will
be trained at minus the ``policy_version`` of a step — exceeds ``trainer.max_policy_lag``
(counted in ``dropped_samples``); run the algorithm's ``update``; count the env steps of the
samples it used (``trained_env_steps``) and the agent-slot samples (``trained_samples``);
publish the new parameters with the version incremented (an update that left the policy's
parameters as they were, a replay algorithm's warm-up before ``learning_starts``, keeps the
version and publishes nothing: ``policy_changed`` in :mod:`zoo.core.algorithm`); log metrics;
checkpoint. Update rows, ``end`` rows and status messages also carry ``dropped_fraction`` and,
once an update followed the first, ``mean_env_steps_per_s`` and
``mean_trained_env_steps_per_s`` (per wall-clock second since this segment's first update);
a replay algorithm's rows carry the rate limiter's waits, ``rate_limit_waits`` [batches],
``rate_limit_wait_s`` and ``rate_limit_held_s`` [s]
(:mod:`zoo.core.workers.accounting`), and its status messages those and its ``gradient_steps``,
``replayed`` and ``inserted``. Torch threads: :mod:`zoo.core.workers.threads`.
When no sample arrives for a while it republishes the current parameters, so a policy worker
that started late still gets them. The run ends when the env-step budget is reached: a final
checkpoint is written and the controller is told ``done``.

Its parts, each in a module of its own:

- :mod:`zoo.core.workers.building` — the **algorithm** each rank builds (its device, seed and
  initial weights) and the schedule position of its next update (:func:`schedule_progress`);
- :mod:`zoo.core.workers.receiver` — the **receive path**: samples pulled, filtered and collated
  (:func:`collate`) one batch ahead;
- :mod:`zoo.core.workers.accounting` — the counters, rates and recent episode returns;
- :mod:`zoo.core.workers.episodes` — the **episodes** of each batch, written, offered to the
  version history, and the **curriculum**'s stage they advance (:class:`EpisodeIntake`, a base
  class of :class:`Trainer`);
- :mod:`zoo.core.workers.checkpointing` — **checkpoints** (every ``trainer.checkpoint_interval``
  updates, every ``trainer.checkpoint_interval_s`` seconds, at the end) and **starting from a
  checkpoint** (``zoo train --resume`` / ``zoo resume``, or a trainer the supervisor restarted):
  what is restored, and how ``metrics.jsonl`` is cut back (:mod:`zoo.core.workers.metrics`);
- :mod:`zoo.core.workers.history` — the **version history** (``trainer.history.*``, off by
  default): past versions kept on a schedule in the run's history store (:mod:`zoo.core.history`),
  the store cut back to the checkpoint on a resume;
- :mod:`zoo.core.workers.guard` — **guarded updates**: non-finite batches and updates are
  skipped, and ``trainer.max_nonfinite_updates`` consecutive skips stop the run with
  :class:`NonFiniteRunError`;
- :mod:`zoo.core.workers.sync` — **data-parallel trainers** (``trainer.count`` = K > 1,
  :mod:`zoo.core.distributed`): sync points, pooled counts, the stop and budget decisions
  every rank takes together, rank 0's republishing while it waits.

The heartbeats of its loop (between samples) carry its load (:class:`zoo.core.health.Meter`):
``wait`` seconds spent waiting for a batch (busy is the rest), ``samples_pulled`` (sample
messages, stale ones included) and ``updates``; during an update or a checkpoint the busy
thread's heartbeats say ``busy`` instead (:mod:`zoo.core.workers.base`).

Units: ``env_steps`` counts environment steps (not agent steps); ``frames`` is
``env_steps x frame_skip``.

A population member's trainer (``pbt.members``, docs/pbt.md) also follows the population
manager's orders at each update point and checkpoints at each ``pbt.interval_env_steps``
(:mod:`zoo.core.workers.member`: :class:`PopulationMember`, a base class of :class:`Trainer`).

Testing knobs: the environment variable ``ZOO_TEST_TRAINER_DELAY_S`` (seconds, default 0)
makes the trainer sleep that long before every update (in short slices, so a stop request
is still honoured), to exercise a trainer slower than sampling: the policy lag grows,
stale samples are dropped, the policy worker warns that parameters stopped arriving.
"""
from __future__ import annotations

import os
import time
from typing import Any

from zoo.core.algorithm import NonFiniteUpdate
from zoo.core.checkpoint import latest_path
from zoo.core.curriculum import EvalFeed, curriculum_of
from zoo.core.graph import endpoint, parameter_endpoint
from zoo.core.health import Meter
from zoo.core.policy_status import status_stats
from zoo.core.workers.accounting import RECENT_EPISODES, TrainerState  # noqa: F401  (re-exported)
from zoo.core.workers.base import WorkerContext
from zoo.core.workers.building import (  # noqa: F401  (initial_policy_state, initial_seed: re-exported)
    initial_policy_state,
    initial_seed,
    make_algorithm,
    rank_devices,
    schedule_progress,
)
from zoo.core.workers.checkpointing import (  # noqa: F401  (rng_state, set_rng_state, save_checkpoint: re-exported)
    Checkpointer,
    load_rank_state,
    load_resume,
    prepare_dir,
    rng_state,
    save_checkpoint,
    set_rng_state,
    start_from_checkpoint,
    write_rank_state,
)
from zoo.core.workers.episodes import EarlyStop, EpisodeIntake
from zoo.core.workers.guard import (  # noqa: F401  (Origin, describe_sources, nonfinite_columns: re-exported)
    NonFiniteGuard,
    NonFiniteRunError,
    Origin,
    Skip,
    describe_sources,
    nonfinite_columns,
    sample_origin,
)
from zoo.core.workers.history import History
from zoo.core.workers.member import PopulationMember
from zoo.core.workers.metrics import TRAINER_ROWS, MetricsWriter, cut_metrics  # noqa: F401  (re-exported)
from zoo.core.workers.receiver import (  # noqa: F401  (collate, policy_lag, too_stale, merge_shares: re-exported)
    SampleReceiver,
    batch_env_steps,
    collate,
    fresh_share,
    merge_shares,
    policy_lag,
    too_stale,
)
from zoo.core.workers.sync import REPUBLISH_S, GroupSync, Republisher, SoloSync, UpdatePoint

_devices = rank_devices  # its former name here, which tests/unit/test_ray_launcher.py imports

RECV_S = 0.5
PEER_LOST_GRACE_S = 10.0
"""How long a trainer that lost a peer waits for the controller to stop the run before it
reports the failure itself (the controller names the worker that failed first)."""
TEST_DELAY_ENV = "ZOO_TEST_TRAINER_DELAY_S"


def _test_delay(ctx: WorkerContext, seconds: float) -> None:
    """Sleep ``seconds`` in 0.1 s slices, returning early on a stop request (see the module doc)."""
    end = time.monotonic() + seconds
    while not ctx.stop and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))


# ----------------------------------------------------------------------------- the worker
class Trainer(PopulationMember, EpisodeIntake):
    """One trainer worker (rank ``ctx.rank`` of its policy's ``trainer.count``): the algorithm and its parts.

    Rank 0 (``lead``) alone publishes parameters, writes ``metrics.jsonl`` and checkpoints,
    and reports to the controller; on the other ranks :meth:`publish`, :meth:`log`,
    :meth:`log_update`, :meth:`checkpoint` and :meth:`report` do nothing (:meth:`account`
    counts without logging).
    """

    def __init__(self, ctx: WorkerContext) -> None:
        from zoo.core.config import budget

        cfg, spec = ctx.cfg, ctx.spec
        self.ctx, self.cfg, self.spec = ctx, cfg, spec
        K, rank = cfg.trainer.count, ctx.rank
        self.lead = rank == 0  # publishes parameters, writes metrics and checkpoints, reports to the controller
        self.learn = bool(cfg.trainer.learn)
        devices = rank_devices(cfg, K)
        self.algo = make_algorithm(ctx, devices)
        if self.lead:
            prepare_dir(ctx.run_dir, ctx.policy)
        self.state = st = TrainerState()
        self.resume = int(getattr(cfg, "resume", 0) or 0)
        self.attempt = int(getattr(ctx, "attempt", 0) or 0)
        self.start_from = start_from_checkpoint(ctx.run_dir, self.resume, self.attempt, self.algo, st,
                                                ctx.policy)
        if self.lead and st.rng_note:
            ctx.send_control("warning", timeout=0.05, key="rng", message=st.rng_note)
        # K > 1 and part of the algorithm's state is this rank's own (a replay shard): every rank
        # checkpoints it, ranks >= 1 beside latest.pt (zoo.core.workers.checkpointing, "Rank shards")
        self.rank_state = K > 1 and hasattr(self.algo, "rank_state_dict")
        if self.rank_state and not self.lead and self.start_from.purge_step is not None:  # latest.pt was loaded
            note = load_rank_state(ctx.run_dir, rank, st.updates, self.algo, ctx.policy)
            if note:
                ctx.send_control("warning", timeout=0.05, key="rank_state", message=note)
        if not self.lead:  # the samples waiting in the checkpoint were rank 0's
            st.drop_pending()
        if ctx.meter is None:
            ctx.meter = Meter("trainer")
        self.meter = ctx.meter  # time waiting for samples, pulls, updates: sent with heartbeats
        counts = self.meter.counts
        self.samples = SampleReceiver(
            ctx.transport("sample").puller(endpoint("sample", rank, ctx.policy)), cfg.trainer.batch_samples,
            cfg.trainer.max_policy_lag, spec.num_agents, collate,
            lambda meta, sample: sample_origin(meta, sample, spec.num_agents),
            on_pull=lambda meta: counts.__setitem__("samples_pulled", counts["samples_pulled"] + 1),
            pending=st.pending, origins=st.origins, share=st.pending_share, version=st.version)
        st.drop_pending()  # handed to the receiver
        self.params = ctx.transport("parameter").publisher(parameter_endpoint(ctx.policy)) if self.lead else None
        self.metrics = (MetricsWriter(ctx.run_dir, cfg.log.tensorboard, self.start_from.truncate_to,
                                      self.start_from.purge_step, ctx.policy, self.start_from.truncate_rows)
                        if self.lead else None)
        _, self.budget_steps = budget(cfg, spec)
        self.test_delay_s = float(os.environ.get(TEST_DELAY_ENV) or 0)
        self.guard = NonFiniteGuard(st, getattr(cfg.trainer, "max_nonfinite_updates", 1), self.learn)
        self.start = time.monotonic()
        self.checkpoints = Checkpointer(ctx.run_dir, cfg.trainer.checkpoint_interval,
                                        getattr(cfg.trainer, "checkpoint_interval_s", 0), cfg.trainer.keep_checkpoints,
                                        policy=ctx.policy)
        self.history = History.open(ctx, cfg, st.version) if self.lead else None
        self.curriculum = curriculum_of(cfg, spec) if self.lead else None  # docs/curriculum.md
        if self.curriculum is not None and st.curriculum is not None:
            self.curriculum.load_state_dict(st.curriculum)
        # a curriculum driven by the eval manager's episodes (curriculum.source = "eval"), read from the store
        self.eval_feed = (EvalFeed(self.curriculum, int((st.curriculum or {}).get("eval_cursor", 0) or 0))
                          if self.curriculum is not None and cfg.curriculum.from_eval else None)
        self.stage_changed = False  # an advance not yet in a checkpoint: the next update point writes one
        self.warned_fields: set[tuple[str, str]] = set()  # (option, field): condition fields the episodes lack
        # stop_when: ends the run like its budget once it held (every rank, the same episodes)
        self.early_stop = EarlyStop(cfg.stop_when, cfg.stop_over_episodes) if getattr(cfg, "stop_when", "") else None
        self.counted = 0  # env steps counted at the last update point (:meth:`budget_reached`)
        self.republish = Republisher(self.publish if self.lead else None, REPUBLISH_S)
        self.sync: SoloSync | GroupSync = (SoloSync() if K == 1
                                           else GroupSync(rank, K, lambda: _join_group(self, devices)))
        self.lag: tuple[float, float] = (0.0, 0.0)  # the last update point's policy lag, mean and max
        self.shown_stats: dict[str, float] = {}  # the last update's stats that status messages carry (status_stats)
        self.asked_at: float | None = None  # when the trainer began asking for the next batch (monotonic s)
        self.rate_limited = bool(getattr(self.algo, "rate_limited", False))
        self.changed = True  # whether the last update changed the policy's parameters (a new version)
        self.pbt_passed = 0  # a population member: the multiples of pbt.interval_env_steps passed (member_orders)
        self.env_share = 1  # a population member: P (it acts in 1/P of the run's envs)
        self.orders = self.member_orders()  # a population member: the population manager's orders (docs/pbt.md)

    # ------------------------------------------------------------------ the loop
    def train(self) -> None:
        """Join the peers, announce, run :meth:`loop`, then the final checkpoint, ``end`` row and ``done``."""
        together = False  # every rank ends here together (no exception on its way out)
        try:
            # every rank starts from rank 0's weights (a replay algorithm's target networks too)
            if not self.sync.join(getattr(self.algo, "replicated", self.algo.policy)):
                return  # stopped before every trainer arrived
            if self.lead and self.sync.info is not None:  # what the group chose, for graph.json's launcher entry
                self.ctx.send_control("group", timeout=1.0, **self.sync.info)
            if self.lead:
                if self.start_from.resumed:
                    self.log({"type": "resume", "resume": self.resume, "attempt": self.attempt, **self.counters(),
                              "time_s": self.elapsed(), **self.stage_status()})
                elif self.curriculum is not None:  # a fresh run's first stage
                    self.log_stage()
                self.publish()
            self.samples.start()  # receives and collates the next batch while each update runs
            finished = self.loop()
            self.finish(finished)
            if finished and self.ctx.policy:
                self.drain()
            together = True
        finally:
            self.sync.close(leave=together)
            if self.metrics is not None:
                self.metrics.close()
            self.samples.close()
            if self.params is not None:
                self.params.close()
            if self.history is not None:
                self.history.close()

    def loop(self) -> bool:
        """Receive, update, publish, log, keep a version (``trainer.history.*``), checkpoint, until
        the run ends. Returns whether it finished (the env-step budget reached) rather than stopped."""
        self.counted = self.state.env_steps  # what the budget is judged on (:meth:`budget_reached`)
        while True:
            if (finished := self.sync.ended(self.ctx.stop, self.budget_reached())) is not None:
                return finished
            self.samples.set_version(self.state.version, updating=False)
            ready = None
            if self.sync.receiving(self.ctx.stop):
                ready = self.receive()
                if ready is None:  # no full batch yet: late joiners get the current weights
                    self.publish()
                    self.report()
                    continue
            # An update point: this rank's batch is full (or, K > 1, it was asked to stop). The batch
            # the receiver fills from now on is trained after this update, at the next version.
            self.samples.set_version(self.state.version, updating=self.learn)
            batch, origins = (ready[0], ready[2]) if ready is not None else (None, [])
            local = UpdatePoint.local(ready, self.state.version, self.spec.num_agents,
                                      self.guard.check(batch, origins))
            meeting = self.sync.meet(local, self.ctx.stop)  # K > 1: every rank's counts, lags, checks, stops
            if meeting is None:
                return False  # asked to stop while waiting for the others, who are being stopped too
            self.account(meeting.shares)
            self.counted = self.state.env_steps  # every env step received up to this batch's last sample
            self.record_games()  # this batch's episodes' games, one write (also the last batch, before the end)
            self.observe_eval()  # curriculum.source = "eval": the eval manager's episodes since the last point
            point = meeting.point
            self.lag = (point.lag_mean, point.lag_max)
            if (finished := self.sync.end_at(meeting, self.budget_reached())) is not None:
                return finished
            if not self.learn:  # sampling benchmark: count the samples, keep the weights
                self.report()
                continue
            if self.test_delay():
                return False
            self.follow_order()
            stats = self.update(batch, origins, point)
            if stats is None:  # skipped: not finite
                continue
            if self.changed:  # an update that left the parameters as they were has nothing new to publish
                self.publish()
            if self.member_checkpoint_due():  # before its update row: docs/pbt.md, "Source checkpoints"
                self.checkpoint()
            self.log_update(stats)
            if self.changed and self.history is not None and self.history.due(self.state.updates):
                self.keep_version()
            if self.checkpoint_due():
                self.checkpoint()
            self.report()  # after the checkpoint it may announce

    def finish(self, finished: bool) -> None:
        """Rank 0: the final checkpoint (also on Ctrl-C), the ``end`` row and, when the budget
        was reached, the last status and ``done``; the other ranks their own state (:meth:`checkpoint`)."""
        if not self.lead:
            self.checkpoint()
            return
        self.checkpoint()  # the final weights, kept like every other checkpoint
        # The run's final counters: samples that arrived after the last update count too
        # (K > 1: those exchanged at the last sync point).
        stop = self.early_stop
        why = stop.fields() if finished and stop is not None and stop.held else {}  # stop_when ended it
        self.log({"type": "end", **self.counters(), "time_s": self.elapsed(), **self.state.flow(time.monotonic()),
                  "episode_return_mean": self.state.return_mean(), **why})
        if finished:
            self.report()
            self.ctx.send_control("done", timeout=2.0, **self.counters(), **self.state.flow(time.monotonic()),
                                  **self.named(), **why)

    def drain(self) -> None:
        """A named policy that reached the budget before the others keeps taking its samples and
        discards them (``samples_discarded`` on its heartbeats; no update, no publish) until the
        run is stopped, so the actors, which wait for room on every policy's sample stream, are
        never held back by it (docs/policies.md, "When the run is done")."""
        counts = self.meter.counts
        while not self.ctx.stop:
            self.ctx.heartbeat()
            ready, _ = self.samples.take(RECV_S, updating=False)
            if ready is not None:
                counts["samples_discarded"] = counts.get("samples_discarded", 0) + len(ready[1])

    # ------------------------------------------------------------------ receive
    def receive(self) -> tuple | None:
        """The next full batch ``(batch, samples, origins, share)``, or None when none came within
        :data:`RECV_S`; the counts received meanwhile go to the run's (K > 1: at the next sync)."""
        self.ctx.heartbeat()
        waiting = time.perf_counter()
        if self.asked_at is None:  # the first ask for this batch: the learner's wait starts
            self.asked_at = time.monotonic()
        ready, share = self.samples.take(RECV_S, updating=self.learn)
        taken_at = time.monotonic()
        self.meter.lap("wait", waiting)
        if ready is not None:
            self.state.batch_taken(self.asked_at, self.samples.last_ready_at, taken_at)
            self.asked_at = None
        self.account(self.sync.received(share))
        return ready

    def budget_reached(self) -> bool:
        """The env-step budget reached, or ``stop_when`` held (:class:`~zoo.core.workers.episodes.EarlyStop`).

        The env steps are those counted at the last update point (the loop's start before the
        first), not the running count, which grows as each sample of the next batch arrives: with
        one trainer a batch that completes past the budget is trained whether its samples came
        together or one by one, so a run makes ``ceil(budget / env steps per update)`` updates (a
        named policy's last batch was trained or dropped by the timing of its arrival).
        Data-parallel trainers judge it at each sync point on the exchanged counts and end there,
        before that point's batches (:meth:`GroupSync.end_at`)."""
        return self.counted >= self.budget_steps or (self.early_stop is not None and self.early_stop.held)

    # ------------------------------------------------------------------ update
    def test_delay(self) -> bool:
        """``ZOO_TEST_TRAINER_DELAY_S`` before the update; True when a stop request ends the run here."""
        if self.test_delay_s <= 0:
            return False
        with self.ctx.busy("update"):
            _test_delay(self.ctx, self.test_delay_s)
        return self.sync.stop_in_update(self.ctx.stop)

    def update(self, batch: dict[str, Any] | None, origins: list[Origin], point: UpdatePoint) -> dict[str, Any] | None:
        """The algorithm's update on ``batch`` at ``point``; its stats, or None when it was skipped
        (a non-finite batch on any rank, or a non-finite update: :meth:`skip`)."""
        if hasattr(self.algo, "progress"):
            # a population member trains on 1/P of the run's env steps (its envs): its updates stand for P times
            # theirs of the budget, so its schedule ends with the run (docs/pbt.md)
            self.algo.progress = schedule_progress(self.state.updates, point.used_steps * self.env_share,
                                                   self.budget_steps)
        if point.sources:  # a non-finite batch (K > 1: on any rank): every rank skips this update
            self.skip(self.guard.skip_batch(point.sources))
            return None
        try:
            with self.ctx.busy("update"):  # however long it takes: heartbeats come from a background thread
                stats = self.algo.update(batch)
        except NonFiniteUpdate as exc:
            self.skip(self.guard.skip_update(exc, origins))
            return None
        # a replay algorithm's warm-up update (no gradient step) keeps the parameters and the version
        self.changed = bool(getattr(self.algo, "policy_changed", True))
        self.state.updated(point.used_steps, point.used_slots, time.monotonic(), self.changed)
        self.meter.counts["updates"] += 1
        return stats

    def skip(self, skip: Skip) -> None:
        """Rank 0 logs a skipped update and warns; after the last one allowed, the checkpoint (the
        last finite weights) and :class:`NonFiniteRunError` (every rank)."""
        if self.lead:
            self.log({"type": "nonfinite", **self.counters(), "time_s": self.elapsed(), **skip.row()})
            self.ctx.send_control("warning", timeout=0.05, key="nonfinite", message=skip.warning())
        if skip.last:
            self.checkpoint()
            raise self.guard.error(skip, latest_path(self.ctx.run_dir, self.ctx.policy))

    # ------------------------------------------------------------------ publish, log, checkpoint, report
    def publish(self) -> None:
        """Rank 0: the policy's weights on the parameter stream, with the version and counters."""
        if self.params is None:
            return
        st = self.state
        state = {k: v.detach().cpu().numpy() for k, v in self.algo.policy.state_dict().items()}
        meta = {"policy_version": st.version, "updates": st.updates, "env_steps": st.env_steps,
                "trainer_attempt": self.ctx.attempt}
        if self.curriculum is not None:  # the policy workers pass it on to the actors with every reply
            meta["curriculum_stage"] = self.curriculum.stage
        self.params.publish(state, meta)
        self.republish.published(time.monotonic())

    def named(self) -> dict[str, str]:
        """``{"policy": P}`` for a named policy's trainer (status and done messages), else ``{}``."""
        return {"policy": self.ctx.policy} if self.ctx.policy else {}

    def counters(self) -> dict[str, int]:
        return self.state.counters(self.spec.frame_skip)

    def elapsed(self) -> float:
        """Running time of the run, seconds (this segment's plus the earlier ones')."""
        return round(self.state.time_before + time.monotonic() - self.start, 3)

    def log(self, row: dict[str, Any]) -> None:
        """Rank 0: a ``resume``, ``nonfinite`` or ``end`` row in ``metrics.jsonl`` (not in TensorBoard)."""
        if self.metrics is not None:
            self.metrics.write(row, self.state.env_steps, tensorboard=False)

    def log_update(self, stats: dict[str, Any]) -> None:
        """Rank 0: the ``update`` row (counters, time, policy lag, flow, recent return, the algorithm's stats)."""
        if self.metrics is None:
            return
        st = self.state
        row = {"type": "update", **self.counters(), "time_s": self.elapsed(),
               "policy_lag_mean": self.lag[0], "policy_lag_max": self.lag[1], **st.flow(time.monotonic()),
               "episode_return_mean": st.return_mean(), **{k: float(v) for k, v in stats.items()},
               **(st.rate_limit() if self.rate_limited else {})}
        self.metrics.write(row, st.env_steps)
        self.shown_stats = status_stats(stats, named=bool(self.ctx.policy))

    def checkpoint_due(self) -> bool:
        """Whether a checkpoint is due after this update: rank 0's decision
        (:meth:`~zoo.core.workers.checkpointing.Checkpointer.due`); with rank shards
        (:attr:`rank_state`) sent to every rank (one all-reduce), as they all write then."""
        due = self.lead and (self.checkpoints.due(self.state.updates) or self.stage_changed)
        if self.rank_state:
            from zoo.core import distributed as zdist

            due = zdist.global_any(due)
        return due

    def checkpoint(self) -> None:
        """Rank 0: ``latest.pt`` with the algorithm's state, the counters and the samples received
        but not yet trained on (:class:`~zoo.core.workers.checkpointing.Checkpointer`). Ranks >= 1
        of an algorithm with a state of their own (:attr:`rank_state`): that state, beside it
        (:func:`~zoo.core.workers.checkpointing.write_rank_state`); the others nothing."""
        if self.rank_state and not self.lead:
            with self.ctx.busy("checkpoint"):
                write_rank_state(self.ctx.run_dir, self.ctx.rank, self.state.updates, self.algo, self.ctx.policy)
            return
        if self.metrics is None:
            return
        with self.ctx.busy("checkpoint"):  # a large checkpoint may take long: heartbeats go on
            st = self.state
            self.metrics.sync()
            st.pending, st.origins, st.pending_share = self.samples.snapshot()  # received, not yet trained on
            st.pending_slots = sum(int(p["reward"].shape[1]) for p in st.pending)
            st.curriculum = (self.eval_feed.state_dict() if self.eval_feed is not None
                             else self.curriculum.state_dict() if self.curriculum is not None else None)
            self.stage_changed = False
            self.checkpoints.write(self.algo, {**self.counters(), "resumes": st.resumes,
                                               "trainer": st.to_dict(self.elapsed(), self.metrics.length(),
                                                                     self.metrics.rows if self.ctx.policy else None)},
                                   st.version)

    def replay_counters(self) -> dict[str, Any]:
        """A rate-limited algorithm's cumulative counters for status messages: its
        ``gradient_steps_total`` (the algorithm's ``gradient_steps``; the status's own
        ``gradient_steps`` is the last update's, :func:`status_stats`), ``replayed`` (samples
        drawn for them: transitions, or r2d2's sequences) and ``inserted`` (samples put in its
        replay), and :meth:`TrainerState.rate_limit`."""
        return {"gradient_steps_total": int(getattr(self.algo, "gradient_steps", 0)),
                "replayed": int(getattr(self.algo, "replayed", 0)),
                "inserted": int(getattr(self.algo, "inserted", 0)),
                **self.state.rate_limit()}

    def keep_version(self) -> None:
        """Rank 0: keep the current weights in the version history (:mod:`zoo.core.history`)."""
        if self.history is None:
            return
        with self.ctx.busy("history"):
            self.history.keep(self.algo, self.cfg.algo, self.state, self.elapsed())

    def record_games(self) -> None:
        """Rank 0: the games of the batch just taken in against the policy's past versions, with their Elo
        ratings, into the history store (one transaction; docs/history.md, "Results and ratings")."""
        if self.history is not None and self.history.games:
            with self.ctx.busy("history"):
                self.history.record()

    def report(self) -> None:
        """Rank 0: a ``status`` message to the controller (counters, flow, budget, returns, lag)."""
        if not self.lead:
            return
        st = self.state
        extra: dict[str, Any] = {"policy_lag_mean": self.lag[0], "policy_lag_max": self.lag[1]}
        if st.nonfinite_updates:  # shown by the display only once there is something to show
            extra["nonfinite_updates"] = st.nonfinite_updates
        if self.rate_limited:
            extra.update(self.replay_counters())
        self.ctx.send_control("status", timeout=0.05, **self.counters(), **st.flow(time.monotonic()),
                              budget_env_steps=self.budget_steps, episode_return_mean=st.return_mean(),
                              **st.recent_means(), **extra, **self.shown_stats, **self.stage_status(), **self.named())


def _join_group(trainer: Trainer, devices: list[str] | None) -> Any:
    """Join the data-parallel group (:meth:`zoo.core.distributed.TrainerGroup.join`); its waits'
    heartbeat republishes rank 0's weights (:class:`~zoo.core.workers.sync.Republisher`)."""
    from zoo.core import distributed as zdist
    from zoo.core.resolver import resolver_from_config

    ctx, cfg, rank, K = trainer.ctx, trainer.cfg, trainer.ctx.rank, trainer.cfg.trainer.count
    resolver = ctx.resolver or resolver_from_config(ctx.registry, cfg)  # the one the transports use
    return zdist.TrainerGroup.join(rank, K, devices[rank] if devices else "cpu", devices or ["cpu"] * K,
                                   ctx.run_id, resolver, cfg.trainer.collective_timeout_s,
                                   stop=lambda: ctx.stop, heartbeat=lambda: trainer.republish.tick(ctx.heartbeat),
                                   store_key=f"trainers.{ctx.policy}.store" if ctx.policy else zdist.STORE_KEY)


def _run(ctx: WorkerContext) -> None:
    Trainer(ctx).train()


def run(ctx: WorkerContext) -> None:
    """The trainer worker's loop (module docstring); trainer ``ctx.index`` is rank ``ctx.rank``
    of ``trainer.count``.

    Raises:
        CheckpointError: a checkpoint could not be written (the path and reason), or the one
            to resume from could not be read.
        NonFiniteRunError: ``trainer.max_nonfinite_updates`` consecutive updates were skipped.
        PeerLost: another trainer died or hung and the controller did not stop this one
            within :data:`PEER_LOST_GRACE_S`.
    """
    from zoo.core import distributed as zdist

    try:
        _run(ctx)
    except zdist.PeerLost:
        # A peer trainer died or hung. The controller sees that worker's end, names it and stops
        # the run: leave it the time to, instead of being reported as the first failure.
        end = time.monotonic() + PEER_LOST_GRACE_S
        while not ctx.stop and time.monotonic() < end:
            time.sleep(0.05)
        if not ctx.stop:
            raise
