"""Inline inference (``policy.inline=true``): the policy runs inside each actor, on its CPU.

SRL's inline inference, its option for cheap policies (Mei et al., "SRL: Scaling Distributed
Reinforcement Learning to Over Ten Thousand Cores", arXiv 2306.16688): when a forward pass
costs less than sending a request and waiting for its reply, there is no policy worker; each
actor holds its own copy of the network (:class:`zoo.core.workers.policy.Inference`, built
exactly as a policy worker builds it) and pulls new parameters from the ``parameter`` stream
itself.

:class:`InlineClient` takes the place of the actor's inference-stream request client: it
has the same ``send``/``recv``/``close`` calls, so the actor's loop, its sample layout and
its meters are the same in both modes. ``send`` only queues a ring group's request;
``recv`` answers a queued reply if there is one, else runs **one** forward pass over the
requests of all waiting groups (all envs of the actor, concatenated in group order, as a
policy worker that waits for every group's request batches them) with
:func:`zoo.core.workers.policy.infer`, the function the policy worker samples actions with:
action masks, recurrent states (kept per ``(actor, group)`` and agent-slot, in the actor's
process) and the outputs are the same code. Box actions are clipped for the env by the
actor in both modes.

**Parameters are pulled between rollouts.** The actor steps each of its ring groups once
per forward pass, so all its groups start a new sample of ``T = sample_length`` steps
together, at forward passes ``0, T, 2T, ...``. Before those passes (and only then) the
client loads the newest parameters the trainer published, if newer: every step of a sample
carries one ``policy_version``. Before the first pass it waits for the trainer's first
parameters (heartbeating with ``waiting_for="parameters"``), as a policy worker does, and
like one it sends a ``parameter-stall`` warning when no newer version arrived for
``policy.stall_warning_s`` seconds while it acts (:class:`~zoo.core.workers.policy.StallWatch`;
not when ``trainer.learn`` is false).

**Same samples as the remote path.** With one actor served by one policy worker, the same
seed, and a policy worker that batches all of the actor's groups (``actors.ring_size=1``, or
``policy.max_batch`` = the actor's agent-slots with a long ``policy.max_wait_ms``), an
inline actor produces the same samples — observations, actions, log-probabilities, values,
recurrent states and ``policy_version`` of every step — as the remote path, when new
parameters arrive between rollouts: the actor's torch generator is seeded like policy
worker ``i`` (``derive_seed(seed, "policy", i, resume, attempt)`` with the actor's attempt,
:class:`~zoo.core.workers.policy.Inference`).
``tests/unit/test_inline_inference.py`` checks this value for value.

Torch threads: ``policy.threads`` (default 1) per inline actor.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from zoo.core.workers.base import WorkerContext

POLL_S = 0.2
"""While waiting for the first parameters: seconds between heartbeats and stop checks."""


class InlineClient:
    """The actor's request client when its policy runs inline (module doc).

    Args:
        ctx: the actor's context (its ``index`` keys the recurrent states and seeds torch,
            ``cfg.sample_length`` says when rollouts start, ``ctx.stop`` ends a wait).
        net: the network to act with (tests pass one); None: built from ``ctx``.
        params: the parameter subscriber (tests pass one); None: ``ctx``'s ``parameter`` stream.
    """

    def __init__(self, ctx: WorkerContext, net: Any = None, params: Any = None, policy: str = "") -> None:
        from zoo.core.graph import parameter_endpoint
        from zoo.core.workers.policy import Inference, StallWatch, frozen_weights

        self.ctx = ctx
        cfg, spec = ctx.cfg, getattr(ctx, "spec", None)
        if policy:  # a named policy run inline: its view of the config (docs/policies.md)
            from zoo.core.policies import policy_view

            cfg = policy_view(ctx.cfg, ctx.cfg.policies, policy)
            spec = cfg.spec
        self.cfg = cfg
        self.net = net if net is not None else Inference(ctx, ctx.index, cfg, spec)
        weights = frozen_weights(cfg, policy)
        if weights is not None and net is None:  # frozen: loaded once, nothing to pull
            self.net.load_frozen(weights, policy)
        if params is None and weights is None:
            params = ctx.transport("parameter").subscriber(parameter_endpoint(policy))
        self.params = params
        self.sample_length = int(ctx.cfg.sample_length)
        self.waiting: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}  # group -> (request, meta)
        self.answered: list[tuple[int, dict[str, np.ndarray], dict[str, Any]]] = []  # (group, reply, meta) not taken
        self.passes = 0  # forward passes so far
        learns = cfg.trainer.learn and weights is None
        self.watch = StallWatch(cfg.policy.stall_warning_s, time.monotonic()) if learns else None

    def send(self, request: dict[str, Any], meta: dict[str, Any], timeout: float) -> bool:
        """Queue ``request`` of ring group ``meta["group"]``; never blocks, always True.

        A request sent again for a group whose request is still waiting replaces it; one sent
        again for a group whose reply was computed but not taken yet (the actor re-sends a
        request left unanswered for ``REQUEST_RETRY_S``, e.g. while the first parameters were
        awaited) renames that reply to the new ``request_id``: the group was not stepped in
        between, so its observations are the same, and every group stays at the same step."""
        group = int(meta.get("group", 0))
        for g, _, reply_meta in self.answered:
            if g == group:
                reply_meta["request_id"] = meta["request_id"]
                return True
        self.waiting[group] = (request, meta)
        return True

    def recv(self, timeout: float) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        """The next ``(reply, meta)``; meta ``{request_id, policy_version}`` (and ``curriculum_stage``).
        Runs one forward pass over every waiting group when no reply is left; None when nothing is waiting or
        the actor is asked to stop before the first parameters arrived (``timeout`` is not
        used: the pass itself is the wait)."""
        if not self.answered and self.waiting:
            if not self._refresh():
                return None
            groups = sorted(self.waiting)
            batch = [(self.ctx.index, *self.waiting[g]) for g in groups]
            self.waiting.clear()
            replies = self.net.act(batch)
            self.passes += 1
            if self.watch is not None:
                self.watch.served()
            stage = getattr(self.net, "stage", None)  # the run's curriculum stage (docs/curriculum.md)
            extra = {} if stage is None else {"curriculum_stage": stage}
            self.answered = [(g, reply, {"request_id": meta["request_id"], "policy_version": self.net.version,
                                         **extra})
                             for g, (_, _, meta), reply in zip(groups, batch, replies, strict=True)]
            self.answered.reverse()  # popped from the end: group order
        if not self.answered:
            return None
        _, reply, meta = self.answered.pop()
        return reply, meta

    def _refresh(self) -> bool:
        """Before a pass that starts a rollout: load newer parameters (the first ones: wait
        for them). False when asked to stop while waiting."""
        if self.passes % self.sample_length or self.params is None:  # frozen: nothing to pull
            return True
        loaded = self.net.refresh(self.params, 0)
        while self.net.version < 0:
            if self.ctx.stop:
                return False
            self.ctx.heartbeat(waiting_for="parameters")
            loaded = self.net.refresh(self.params, POLL_S)
        if self.watch is not None:
            if loaded:
                self.watch.new_version(time.monotonic())
            elif self.watch.due(now := time.monotonic()):
                cfg = self.cfg
                message = (f"no new parameters for {now - self.watch.since:.0f} s: still acting with policy version "
                           f"{self.net.version} (inline inference, {self.watch.batches} forward passes since it "
                           "arrived); the policy lag grows (samples older than "
                           f"trainer.max_policy_lag={cfg.trainer.max_policy_lag} versions are dropped). "
                           "Is the trainer stalled, or much slower than sampling?")
                if self.ctx.send_control("warning", timeout=0.05, key="parameter-stall", message=message):
                    self.watch.warned()
        return True

    def close(self) -> None:
        if self.params is not None:
            self.params.close()

