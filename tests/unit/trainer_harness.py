"""Runs the real trainer worker (``zoo.core.workers.trainer.run``) in a thread of the test
process, on samples the test makes, over the ``inline`` transport.

Samples are pseudo-random but fixed by their index (:func:`make_sample`), so two trainers
fed the same indices see exactly the same data in the same order: what a bit-for-bit
resume test needs (the multi-process dataflow orders samples by timing, not by seed).

:func:`accounting_trainer` is the lead trainer's episode and curriculum bookkeeping alone,
without a thread, processes or streams; :class:`SentControls` records what it sends.
"""
from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

import numpy as np

from zoo.core.config import build_config
from zoo.core.curriculum import Curriculum, EvalFeed
from zoo.core.graph import endpoint
from zoo.core.plugins import PluginHost
from zoo.core.streams import transport_for
from zoo.core.testing import plugin as testing_plugin
from zoo.core.testing.fake_envs import StagedCorridorEnv
from zoo.core.workers.base import WorkerContext

WAIT_S = 60.0


def fake_host() -> PluginHost:
    """A plugin host with the built-in plugins and the fake envs (``fake-counting``...)."""
    host = PluginHost()
    host.register_plugin(testing_plugin, "zoo.testing", "zoo-rl", "0", builtin=False)
    return host


def trainer_config(host: PluginHost, algo: str, runs_dir: str, agents: int = 1, overrides: tuple[str, ...] = ()):
    """A resolved config for ``algo`` on ``fake-counting`` with ``agents`` agents, a budget that
    never ends by itself, nothing dropped for staleness, no TensorBoard; streams made ``inline``
    after validation (``zoo train`` refuses it: every worker is a process there)."""
    cfg = build_config(host.registry, algo, "fake-counting", seed=3, name="run", steps=10**9,
                       overrides=[f"runs_dir={runs_dir}", f"env.num_agents={agents}", "trainer.max_policy_lag=100000",
                              "log.tensorboard=false", *overrides])
    for stream in ("inference", "sample", "parameter"):
        sc = getattr(cfg.streams, stream)
        sc.transport, sc.options = "inline", {}
    return cfg


def make_sample(index: int, T: int, slots: int, agents: int, version: int = 0,
                box_actions: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sample number ``index``: ``slots`` agent-slots x ``T`` steps of a 1-d observation and 2
    actions (``box_actions``: float32 ``[T, slots, 1]`` in [-1, 1], for ``env.box_actions=true``),
    fixed by ``index`` (``numpy.random.default_rng(index)``); every 4th sample has a truncated
    step with its final observation; meta reports one finished episode per sample."""
    rng = np.random.default_rng(index)
    sample = {
        "obs": {"obs": rng.normal(size=(T + 1, slots, 1)).astype(np.float32)},
        "action": rng.integers(0, 2, size=(T, slots)).astype(np.int64),
        "reward": rng.normal(size=(T, slots)).astype(np.float32),
        "terminated": rng.random((T, slots)) < 0.05,
        "truncated": np.zeros((T, slots), bool),
        "active": np.ones((T, slots), bool),
        "on_reset": np.zeros((T, slots), bool),
        "policy_version": np.full((T, slots), version, np.int64),
        "logp": np.log(rng.uniform(0.3, 0.7, size=(T, slots))).astype(np.float32),
        "value": rng.normal(size=(T, slots)).astype(np.float32),
    }
    if index % 4 == 0:
        sample["truncated"][T // 2, 0] = True
        sample["terminated"][T // 2, 0] = False
        sample["final_obs"] = {"obs": rng.normal(size=(1, 1)).astype(np.float32)}
        sample["final_index"] = np.array([[T // 2, 0]], np.int64)
    else:
        sample["final_obs"] = {"obs": np.empty((0, 1), np.float32)}
        sample["final_index"] = np.empty((0, 2), np.int64)
    if box_actions:  # drawn last: the other arrays stay those of the discrete sample
        sample["action"] = rng.uniform(-1, 1, size=(T, slots, 1)).astype(np.float32)
    meta = {"actor": index % 2, "env_offset": 0, "agents": agents, "env_steps": T * slots // agents,
            "episodes": [{"return": float(index), "length": T}], "dropped_at_actor": 0}
    return sample, meta


class TrainerThread:
    """One trainer segment: the worker in a thread, a sample pusher, the control messages it sent.

    ``resume``: the value of ``cfg.resume`` for this segment (0: a fresh start); ``attempt``:
    ``ctx.attempt`` (>= 1: a trainer restarted by the supervisor).
    """

    def __init__(self, host: PluginHost, cfg, run_dir: str, resume: int = 0, attempt: int = 0) -> None:
        self.cfg = dataclasses.replace(cfg, resume=resume)
        self.run_id = f"harness-{uuid.uuid4().hex[:8]}"
        self.transports = [transport_for(host.registry, self.cfg, s, self.run_id, create=True)
                           for s in ("sample", "parameter")]
        self.control_transport = host.registry.get("transport", "inline").load()(f"{self.run_id}-control", create=True)
        self.control = self.control_transport.puller("control")
        self.ctx = WorkerContext("trainer", 0, self.cfg, self.cfg.spec, self.run_id, run_dir,
                                 registry=host.registry, control=self.control_transport.pusher("control"),
                                 attempt=attempt)
        self.pusher = self.transports[0].pusher(endpoint("sample", 0))
        self.messages: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from zoo.core.workers import trainer

        try:
            trainer.run(self.ctx)
        except BaseException as exc:  # noqa: BLE001 - kept for the test to inspect
            self.error = exc

    def push(self, sample: dict[str, Any], meta: dict[str, Any]) -> None:
        assert self.pusher.send(sample, meta, WAIT_S), "the trainer did not take a sample"

    def drain(self) -> None:
        while (msg := self.control.recv(0)) is not None:
            self.messages.append(msg[1])

    def wait_status(self, **want: int) -> dict[str, Any]:
        """Wait for a ``status`` message whose fields equal ``want`` (e.g. ``env_steps=.., updates=..``)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            msg = self.control.recv(0.1)
            if msg is not None:
                self.messages.append(msg[1])
                m = msg[1]
                if m.get("type") == "status" and all(m.get(k) == v for k, v in want.items()):
                    return m
            if not self.thread.is_alive():
                break
        raise AssertionError(f"no status with {want} (trainer error: {self.error!r}; last messages "
                             f"{self.messages[-3:]})")

    def stop(self) -> None:
        """Ask the trainer to stop (it writes its final checkpoint and ``end`` row) and wait for it."""
        self.ctx.stop = True
        self.join()

    def join(self) -> None:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the trainer thread did not stop"
        self.drain()
        self.pusher.close()
        self.control.close()
        self.control_transport.cleanup()
        for t in self.transports:
            t.cleanup()


class SentControls:
    """Stands for a trainer's :class:`WorkerContext` where only its control messages matter:
    every ``send_control`` succeeds and is kept in ``sent`` as ``(kind, meta)``, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send_control(self, kind: str, timeout: float = 1.0, **meta: Any) -> bool:
        self.sent.append((kind, meta))
        return True


def accounting_trainer(curriculum: Curriculum, eval_feed: EvalFeed | None = None, history: Any = None):
    """The lead trainer's episode accounting and curriculum bookkeeping alone (``Trainer.account``,
    ``Trainer.observe_eval``), without processes or streams: a ``Trainer`` that was never
    constructed, holding only what they read. The env is ``fake-stages`` (3 stages,
    :class:`StagedCorridorEnv`), ``ctx`` a :class:`SentControls`, no metrics writer, one trainer.

    Args:
        curriculum: the run's curriculum (its stage and window).
        eval_feed: with ``curriculum.source = "eval"``: the feed of the eval manager's episodes
            (its ``curriculum`` is ``curriculum``); None: the training episodes drive it.
        history: what ``observe_eval`` reads the store through (``store``, ``policy``, ``saw``); None: no history.
    """
    from zoo.core.workers.accounting import TrainerState
    from zoo.core.workers.trainer import Trainer

    t = object.__new__(Trainer)
    t.__dict__.update(ctx=SentControls(), spec=StagedCorridorEnv(3).spec, state=TrainerState(), metrics=None,
                      history=history, sync=SimpleNamespace(data_parallel=False), stage_changed=False,
                      warned_fields=set(), curriculum=curriculum, eval_feed=eval_feed, early_stop=None, counted=0)
    return t
