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

- :mod:`zoo.core.workers.accounting` — the counters, rates and recent episode returns;
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
manager's orders at each update point (:meth:`Trainer.follow_order`) and checkpoints at each
``pbt.interval_env_steps`` (:meth:`Trainer.member_checkpoint_due`).

Testing knobs: the environment variable ``ZOO_TEST_TRAINER_DELAY_S`` (seconds, default 0)
makes the trainer sleep that long before every update (in short slices, so a stop request
is still honoured), to exercise a trainer slower than sampling: the policy lag grows,
stale samples are dropped, the policy worker warns that parameters stopped arriving.
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from zoo.core import devices as zdevices
from zoo.core.algorithm import NonFiniteUpdate
from zoo.core.checkpoint import latest_path
from zoo.core.curriculum import EvalFeed, curriculum_of
from zoo.core.graph import endpoint, parameter_endpoint
from zoo.core.health import Meter
from zoo.core.policy_status import status_stats
from zoo.core.seeding import derive_seed
from zoo.core.workers.accounting import RECENT_EPISODES, TrainerState  # noqa: F401  (re-exported)
from zoo.core.workers.base import WorkerContext
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
from zoo.core.workers.metrics import TRAINER_ROWS, MetricsWriter, cut_metrics  # noqa: F401  (re-exported)
from zoo.core.workers.receiver import (  # noqa: F401  (policy_lag, too_stale, merge_shares: re-exported)
    SampleReceiver,
    batch_env_steps,
    fresh_share,
    merge_shares,
    policy_lag,
    too_stale,
)
from zoo.core.workers.sync import REPUBLISH_S, GroupSync, Republisher, SoloSync, UpdatePoint
from zoo.core.workers.threads import thread_plan

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


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Join samples ``[T(+1), S_i, ...]`` along the batch axis into one :data:`Batch`.

    ``final_obs`` rows are concatenated and ``final_index[:, 1]`` is shifted by the batch
    offset of the sample they came from.
    """
    out: dict[str, Any] = {}
    offsets = np.cumsum([0] + [s["reward"].shape[1] for s in samples[:-1]])
    for key, first in samples[0].items():
        if key == "final_index":
            out[key] = np.concatenate([s[key] + np.array([0, off]) for s, off in zip(samples, offsets, strict=True)])
        elif key == "final_obs":
            out[key] = {k: np.concatenate([s[key][k] for s in samples]) for k in first}
        elif isinstance(first, dict):
            out[key] = {k: np.concatenate([s[key][k] for s in samples], axis=1) for k in first}
        else:
            out[key] = np.concatenate([s[key] for s in samples], axis=1)
    return out


def schedule_progress(updates_done: int, update_env_steps: int, budget_steps: int) -> float:
    """The schedule position of the next update (``algo.progress``), in [0, 1].

    ``min(1, updates_done x update_env_steps / budget_steps)``: the fraction of the run's
    env-step budget that the updates already done stand for, each counted at the size
    (env steps, every trainer's) of the batch about to be trained on. It is CleanRL's
    ``frac = 1 - (update - 1) / num_updates`` with ``num_updates = budget / batch size``
    (``ppo.py``; Huang et al., "The 37 Implementation Details of PPO", detail 4): the
    first update runs at the configured rate and none at rate 0 (lr 1e-3 annealed over 4
    updates: 1e-3, 7.5e-4, 5e-4, 2.5e-4). ``updates_done`` is the run's update count, which
    a checkpoint restores, so a resumed run continues the schedule where it stopped.
    """
    if budget_steps <= 0:
        return 1.0
    return min(1.0, updates_done * update_env_steps / budget_steps)


def _devices(cfg: Any, count: int) -> list[str] | None:
    """Each rank's torch device (``algo.device`` through :func:`zoo.core.graph.worker_device`);
    None when the algorithm has no ``device`` option."""
    from zoo.core.graph import worker_device

    device = getattr(cfg.algo, "device", None)
    return [worker_device(device, r) for r in range(count)] if isinstance(device, str) else None


def initial_seed(cfg: Any, policy: str, attempt: int = 0) -> int:
    """The seed a policy's trainers build its algorithm with, and so its initial weights:
    ``derive_seed(cfg.seed, "trainer", which, attempt)`` with ``which`` the policy's position in
    the run's declaration order (0 for the implicit policy ``""``), so two policies of one
    algorithm start from different weights; the attempt of a restarted trainer draws new ones."""
    which = list(cfg.policies.named).index(policy) if policy else 0
    return derive_seed(cfg.seed, "trainer", which, attempt=attempt)


def initial_policy_state(registry: Any, cfg: Any, spec: Any, policy: str) -> dict[str, Any]:
    """The initial (seeded, untrained) weights of named policy ``policy``: the ``state_dict()``
    of the policy network of its algorithm built as its first trainer builds it (the seed of
    :func:`initial_seed` with attempt 0, ``cfg`` the policy's view, ``spec`` its agents'), on
    the CPU, under a forked torch RNG (the caller's generator is untouched). Bitwise the
    version-0 weights a trainable run of the same config and seed starts from, for algorithms
    that initialise their networks on the CPU before moving them (every built-in one). What a
    frozen policy with ``weights = "init"`` serves (docs/policies.md). Returns ``{name: CPU
    tensor}``."""
    import dataclasses

    import torch

    seed = initial_seed(cfg, policy)
    algo_cfg = cfg.algo
    if isinstance(getattr(algo_cfg, "device", None), str):
        algo_cfg = dataclasses.replace(algo_cfg, device="cpu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        algo = registry.get("algorithm", cfg.algo_name).load()(algo_cfg, spec, seed)
        return {k: v.detach().cpu().clone() for k, v in algo.policy.state_dict().items()}


def make_algorithm(ctx: WorkerContext, devices: list[str] | None) -> Any:
    """The trainer's algorithm (``cfg.algo_name`` with ``cfg.algo``) on this rank's device
    (``devices[ctx.rank]``; None: the algorithm has no ``device`` option), after setting
    torch's threads (:mod:`zoo.core.workers.threads`) and seed."""
    import dataclasses

    import torch

    cfg, rank = ctx.cfg, ctx.rank
    torch.set_num_threads(thread_plan(cfg).trainer)
    # Initial weights and minibatch order (zoo.core.seeding); index 0 for every data-parallel trainer,
    # so they all start from the same weights.
    # A restarted trainer (ctx.attempt >= 1) draws new ones: it does not replay the crashed attempt
    # (its checkpoint, when there is one, then restores the state it continues from).
    # Named policies: the policy's position in the run's declaration order, so two policies of one
    # algorithm start from different weights.
    seed = initial_seed(cfg, ctx.policy, ctx.attempt)
    torch.manual_seed(seed)
    algo_cfg = cfg.algo
    if devices is not None and devices[rank] != algo_cfg.device:
        algo_cfg = dataclasses.replace(algo_cfg, device=devices[rank])
    if devices is not None:  # cuda:N current before any tensor is made there: no stray context on GPU 0
        zdevices.use_device(devices[rank])
    return ctx.registry.get("algorithm", cfg.algo_name).load()(algo_cfg, ctx.spec, seed)


# ----------------------------------------------------------------------------- the worker
class Trainer:
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
        devices = _devices(cfg, K)
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
        self.warned_fields: set[str] = set()  # curriculum condition fields the episodes lack (warned once)
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
        self.log({"type": "end", **self.counters(), "time_s": self.elapsed(), **self.state.flow(time.monotonic()),
                  "episode_return_mean": self.state.return_mean()})
        if finished:
            self.report()
            self.ctx.send_control("done", timeout=2.0, **self.counters(), **self.state.flow(time.monotonic()),
                                  **self.named())

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
        return self.state.env_steps >= self.budget_steps

    # ------------------------------------------------------------------ a population member (docs/pbt.md)
    def member_orders(self) -> Any:
        """The :class:`~zoo.core.pbt.MemberOrders` of a population member's trainer (None for any
        other), continuing from the checkpoint's last applied order, whose hyperparameters it sets
        again (an algorithm's checkpoint does not restore its config)."""
        pbt = getattr(self.cfg, "pbt", None)
        if pbt is None or not pbt.members or not self.lead:
            return None
        from zoo.core.pbt import MemberOrders, member_names, set_hyperparameters

        if self.ctx.policy not in member_names(pbt.policy, pbt.members):
            return None
        if self.state.pbt_hyperparameters:
            set_hyperparameters(self.algo, self.state.pbt_hyperparameters)
        self.pbt_passed = self.state.env_steps // int(pbt.interval_env_steps)
        self.env_share = int(pbt.members)
        return MemberOrders(self.ctx.run_dir, self.ctx.policy, self.state.pbt_seq)

    def follow_order(self) -> None:
        """At an update point, before the update: apply the population manager's new order, if any
        (exploit: the source member's checkpointed weights and optimiser state; explore: its new
        hyperparameters), counted in the checkpoint (``pbt_seq``) so it is applied once, and an
        ``applied`` row (``type: "pbt"``: the source checkpoint's counters and the SHA-256 of the
        weights the member continues from, :func:`~zoo.core.pbt.weights_digest`). An order whose
        source has no checkpoint yet, or one being replaced, stays for the next update point."""
        if self.orders is None:
            return
        order = self.orders.poll()
        if order is None:
            return
        from zoo.core.checkpoint import CheckpointError
        from zoo.core.pbt import source_ready

        if not source_ready(self.ctx.run_dir, order):
            return
        from zoo.core.pbt import weights_digest

        try:
            with self.ctx.busy("pbt"):
                source = self.orders.apply(self.algo, order)
        except CheckpointError as exc:  # being replaced: try again at the next update point
            self.ctx.send_control("warning", timeout=0.05, key="pbt", message=f"{self.ctx.policy}: {exc}")
            return
        self.state.pbt_seq = self.orders.seq
        self.state.pbt_hyperparameters = {k: float(v) for k, v in order["hyperparameters"].items()}
        self.log({"type": "pbt", "event": "applied", "member_policy": self.ctx.policy,
                  "from_policy": str(order["from_member"]), "seq": self.orders.seq,
                  "round_env_steps": int(order["env_steps"]), "hyperparameters": self.state.pbt_hyperparameters,
                  **{f"source_{k}": v for k, v in source.items()}, **self.counters(),
                  "weights_sha256": weights_digest(self.algo.policy.state_dict())})

    def member_checkpoint_due(self) -> bool:
        """A population member checkpoints at the first update at or past each multiple of
        ``pbt.interval_env_steps`` (before that update's row, which the population manager waits
        for), so a member exploiting it at that round copies weights at most one update old."""
        if self.orders is None:
            return False
        passed = self.state.env_steps // int(self.cfg.pbt.interval_env_steps)
        due = passed > self.pbt_passed
        self.pbt_passed = passed
        return due

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
