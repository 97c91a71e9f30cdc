"""Trainer worker: consumes samples, filters stale ones, updates, publishes parameters.

Loop: pull samples until ``trainer.batch_samples`` agent-slot trajectories are gathered
(whole messages, so a batch may hold a few more), dropping any sample whose policy lag —
the trainer's version minus the ``policy_version`` of a step — exceeds
``trainer.max_policy_lag`` (counted in ``dropped_samples``); collate them along the batch
axis; run the algorithm's ``update``; publish the new parameters with the version
incremented; log metrics; checkpoint. When no sample arrives for a while it republishes
the current parameters, so a policy worker that started late still gets them. The run
ends when the env-step budget is reached: a final checkpoint is written and the
controller is told ``done``.

Units: ``env_steps`` counts environment steps (not agent steps); ``frames`` is
``env_steps x frame_skip``.

Testing knob: the environment variable ``ZOO_TEST_TRAINER_DELAY_S`` (seconds, default 0)
makes the trainer sleep that long before every update (in short slices, so a stop request
is still honoured), to exercise a trainer slower than sampling: the policy lag grows,
stale samples are dropped, the policy worker warns that parameters stopped arriving.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import time
from typing import Any

import numpy as np

from zoo.core.graph import PARAMETER_ENDPOINT, endpoint
from zoo.core.workers.base import WorkerContext

RECV_S = 0.5
RECENT_EPISODES = 20
TEST_DELAY_ENV = "ZOO_TEST_TRAINER_DELAY_S"


def policy_lag(version: int, sample: dict[str, Any]) -> np.ndarray:
    """Policy lag of each active step: ``version - policy_version``, int64 ``[n_active]``.

    ``sample`` holds ``policy_version`` int64 ``[T, B]`` and ``active`` bool ``[T, B]``
    (a sample or a collated batch); inactive steps have no lag.
    """
    return version - sample["policy_version"][sample["active"]]


def too_stale(version: int, sample: dict[str, Any], max_policy_lag: int) -> bool:
    """True when some active step of ``sample`` lags ``version`` by more than ``max_policy_lag``."""
    lag = policy_lag(version, sample)
    return bool(lag.size) and int(lag.max()) > max_policy_lag


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
            out[key] = np.concatenate([s[key] + np.array([0, off]) for s, off in zip(samples, offsets)])
        elif key == "final_obs":
            out[key] = {k: np.concatenate([s[key][k] for s in samples]) for k in first}
        elif isinstance(first, dict):
            out[key] = {k: np.concatenate([s[key][k] for s in samples], axis=1) for k in first}
        else:
            out[key] = np.concatenate([s[key] for s in samples], axis=1)
    return out


class MetricsWriter:
    """``metrics.jsonl`` (one JSON object per line, flushed at once) and TensorBoard events."""

    def __init__(self, run_dir: str, tensorboard: bool) -> None:
        self.file = open(os.path.join(run_dir, "metrics.jsonl"), "a", buffering=1)
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(os.path.join(run_dir, "tensorboard"))

    def write(self, row: dict[str, Any], step: int, tensorboard: bool = True) -> None:
        self.file.write(json.dumps(row) + "\n")
        if self.tb is not None and tensorboard:
            prefix = row.get("type", "update")
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("type",):
                    self.tb.add_scalar(f"{prefix}/{k}", v, step)

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def save_checkpoint(path: str, algo, counters: dict[str, int]) -> None:
    """Write atomically (temporary file, then rename): a crash never leaves half a checkpoint."""
    import torch

    tmp = path + ".tmp"
    torch.save({"algorithm": algo.state_dict(), **counters}, tmp)
    os.replace(tmp, path)


def run(ctx: WorkerContext) -> None:
    import torch

    from zoo.core.config import budget

    cfg, spec = ctx.cfg, ctx.spec
    torch.set_num_threads(cfg.trainer.threads or max(1, (os.cpu_count() or 2) // 2))
    torch.manual_seed(cfg.seed)
    algo = ctx.registry.get("algorithm", cfg.algo_name).load()(cfg.algo, spec, cfg.seed)
    samples = ctx.transport("sample").puller(endpoint("sample", ctx.index))
    params = ctx.transport("parameter").publisher(PARAMETER_ENDPOINT)
    metrics = MetricsWriter(ctx.run_dir, cfg.log.tensorboard)
    ckpt_dir = os.path.join(ctx.run_dir, "checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    _, budget_steps = budget(cfg, spec)
    version, updates, env_steps, episodes = 0, 0, 0, 0
    dropped_samples = 0
    actor_dropped_samples = 0  # dropped by actors because the trainer was behind (actors.drop_when_full)
    test_delay_s = float(os.environ.get(TEST_DELAY_ENV) or 0)
    recent = collections.deque(maxlen=RECENT_EPISODES)
    recent_stats: dict[str, collections.deque] = {}
    start = time.monotonic()

    def publish() -> None:
        state = {k: v.detach().cpu().numpy() for k, v in algo.policy.state_dict().items()}
        params.publish(state, {"policy_version": version, "updates": updates, "env_steps": env_steps})

    def counters() -> dict[str, int]:
        return {"policy_version": version, "updates": updates, "env_steps": env_steps,
                "frames": env_steps * spec.frame_skip, "episodes": episodes}

    def status(**extra: Any) -> None:
        ctx.send_control("status", timeout=0.05, **counters(), dropped_samples=dropped_samples,
                         actor_dropped_samples=actor_dropped_samples,
                         budget_env_steps=budget_steps,
                         episode_return_mean=float(np.mean(recent)) if recent else None,
                         **{k: float(np.mean(v)) for k, v in recent_stats.items() if v}, **extra)

    def checkpoint() -> None:
        latest = os.path.join(ckpt_dir, "latest.pt")
        save_checkpoint(latest, algo, counters())
        if cfg.trainer.keep_checkpoints:
            snapshot = os.path.join(ckpt_dir, f"policy-v{version:08d}.pt")
            shutil.copyfile(latest, snapshot + ".tmp")
            os.replace(snapshot + ".tmp", snapshot)  # never a half-written snapshot

    publish()
    pending: list[dict[str, Any]] = []
    pending_slots = 0
    lag_mean = lag_max = 0.0
    try:
        while not ctx.stop and env_steps < budget_steps:
            msg = samples.recv(RECV_S)
            if msg is None:
                publish()  # late joiners get the current weights
                status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)
                continue
            sample, meta = msg
            env_steps += int(meta["env_steps"])
            actor_dropped_samples += int(meta.get("dropped_at_actor", 0))
            for ep in meta["episodes"]:
                episodes += 1
                recent.append(ep["return"])
                for k, v in ep.items():
                    if k not in ("return", "length"):
                        recent_stats.setdefault(k, collections.deque(maxlen=RECENT_EPISODES)).append(v)
                metrics.write({"type": "episode", "env_steps": env_steps, **ep}, env_steps)
            if too_stale(version, sample, cfg.trainer.max_policy_lag):
                dropped_samples += sample["reward"].shape[1]
                continue
            pending.append(sample)
            pending_slots += sample["reward"].shape[1]
            if pending_slots < cfg.trainer.batch_samples:
                continue
            batch = collate(pending)
            lags = policy_lag(version, batch)
            lag_mean, lag_max = float(lags.mean()) if lags.size else 0.0, int(lags.max()) if lags.size else 0
            pending, pending_slots = [], 0
            if not cfg.trainer.learn:  # sampling benchmark: count the samples, keep the weights
                status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)
                continue
            if test_delay_s > 0:
                _test_delay(ctx, test_delay_s)
                if ctx.stop:
                    break
            if hasattr(algo, "progress"):
                algo.progress = min(1.0, env_steps / budget_steps)
            stats = algo.update(batch)
            version += 1
            updates += 1
            publish()
            elapsed = time.monotonic() - start
            row = {"type": "update", **counters(), "time_s": round(elapsed, 3),
                   "policy_lag_mean": lag_mean, "policy_lag_max": lag_max, "dropped_samples": dropped_samples,
                   "actor_dropped_samples": actor_dropped_samples,
                   "episode_return_mean": float(np.mean(recent)) if recent else None,
                   **{k: float(v) for k, v in stats.items()}}
            metrics.write(row, env_steps)
            status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)
            if updates % cfg.trainer.checkpoint_interval == 0:
                checkpoint()
        checkpoint()  # the final weights (also on Ctrl-C), kept like every other checkpoint
        # The run's final counters: samples that arrived after the last update count too.
        metrics.write({"type": "end", **counters(), "time_s": round(time.monotonic() - start, 3),
                       "episode_return_mean": float(np.mean(recent)) if recent else None}, env_steps,
                      tensorboard=False)
        if not ctx.stop:
            status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)
            ctx.send_control("done", timeout=2.0, **counters())
    finally:
        metrics.close()
        samples.close()
        params.close()
