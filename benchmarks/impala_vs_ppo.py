"""IMPALA training throughput next to PPO and raw env stepping, and where the time goes.

    python benchmarks/impala_vs_ppo.py [--env atari:Pong] [--frames 60000] [--raw-seconds 10]

Everything is measured in one run of this script, on the same machine:

1. **raw env**: one process steps one environment of ``--env`` (same preprocessing as in
   training) with random actions: frames/s (frames = env steps x frame-skip).
2. **end to end**: ``zoo train impala --env ENV --frames N`` and ``zoo train ppo ...``
   through the real CLI (worker processes, nng transport, each algorithm's presets),
   one after the other. Training throughput = frames between the first and the last
   update record of ``metrics.jsonl`` / the time between them (start-up excluded); the
   wall time of the whole command is shown too.
3. **where the time goes** (in this process, 1 torch thread as in the workers, with each
   algorithm's preset sizes; best of 3 rounds), as CPU milliseconds per 1,000 frames:
   - env: one ``env.step`` (from 1.);
   - inference: ``policy.act`` on one ring group of observations (``envs_per_actor /
     ring_size`` rows), per row;
   - training: one ``algorithm.update`` on a synthetic batch of the preset size
     (``sample_length x batch_samples``), per step in the batch;
   - transport: wire-format ``encode`` + ``decode`` of one sample message and of one
     inference request and reply (the bytes nng moves; the socket copy itself is not
     included), per step.
   Their sum is the CPU cost of one frame; ``cores / sum`` is the throughput a perfect
   pipeline would reach on this machine's cores.

Figures depend on the load of the machine; compare the rows of one run with each other.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build(algo: str, env_name: str):
    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry

    return build_config(get_registry(), algo, env_name, steps=1, name="bench")


def make_env(env_name: str, seed: int):
    from zoo.core.config import resolve_env
    from zoo.core.plugins import get_registry

    component, arg = resolve_env(get_registry(), env_name)
    cfg_cls = component.option("config")
    return component.load()(arg, cfg_cls() if cfg_cls else None, seed)


def raw_env(env_name: str, seconds: float) -> tuple[float, float]:
    """(frames/s, seconds per env step) of one env with random actions, resets included."""
    env = make_env(env_name, 0)
    space, A = env.spec.action_space, env.spec.num_agents
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, term, trunc, _ = env.step(np.stack([space.sample() for _ in range(A)]))
        if np.all(term | trunc):
            env.reset()
        steps += 1
    elapsed = time.perf_counter() - start
    skip = env.spec.frame_skip
    env.close()
    return steps * skip / elapsed, elapsed / steps


def timeit(fn, repeat: int, warmup: int = 1, rounds: int = 3) -> float:
    """Seconds per call: the best of ``rounds`` means over ``repeat`` calls (least disturbed by load)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


def synthetic_batch(policy, spec, T: int, B: int, rng: np.random.Generator) -> dict:
    import torch

    obs = {k: (rng.integers(0, 256, (T + 1, B, *s.shape), dtype=np.uint8) if np.dtype(s.dtype) == np.uint8
               else rng.standard_normal((T + 1, B, *s.shape)).astype(s.dtype))
           for k, s in spec.observation_space.items()}
    out = policy.act({k: torch.as_tensor(v[:T].reshape(T * B, *v.shape[2:])) for k, v in obs.items()})
    extras = {k: v.numpy().reshape(T, B, *v.shape[1:]) for k, v in out.items()}
    return {"obs": obs, **extras, "reward": rng.standard_normal((T, B)).astype(np.float32),
            "terminated": np.zeros((T, B), bool), "truncated": np.zeros((T, B), bool),
            "active": np.ones((T, B), bool), "policy_version": np.zeros((T, B), np.int64),
            "final_obs": {k: np.zeros((0, *v.shape[2:]), v.dtype) for k, v in obs.items()},
            "final_index": np.zeros((0, 2), np.int64)}


def costs(algo_name: str, env_name: str, env_step_s: float) -> dict[str, float]:
    """CPU seconds per env step of env, inference, training and transport for ``algo_name``'s presets."""
    import torch

    from zoo.core.arrays import decode, encode
    from zoo.core.plugins import get_registry

    torch.set_num_threads(1)
    cfg = build(algo_name, env_name)
    spec = cfg.spec
    algo_cls = get_registry().get("algorithm", algo_name).load()
    algo = algo_cls(cfg.algo, spec, 0)
    rng = np.random.default_rng(0)
    T, B = cfg.sample_length, cfg.trainer.batch_samples
    rows = cfg.actors.envs_per_actor // cfg.actors.ring_size * spec.num_agents
    batch = synthetic_batch(algo.policy, spec, T, B, rng)
    train_s = timeit(lambda: algo.update(batch), repeat=2)
    group = {k: v[0, :rows] for k, v in batch["obs"].items()}
    tgroup = {k: torch.as_tensor(v) for k, v in group.items()}
    infer_s = timeit(lambda: algo.policy.act(tgroup), repeat=50, warmup=5)
    # One sample message of one ring group, as the actor pushes it.
    sample = {k: ({kk: vv[:, :rows] for kk, vv in v.items()} if k == "obs"
                  else v if k in ("final_obs", "final_index") else v[:, :rows]) for k, v in batch.items()}
    wire_sample_s = timeit(lambda: decode(encode(sample, {"env_steps": T * rows})), repeat=20, warmup=2)
    reply = {k: v[0, :rows] for k, v in batch.items() if k in ("action", "logp", "value")}
    wire_infer_s = timeit(lambda: (decode(encode({"obs": group}, {"rows": rows})),
                                   decode(encode(reply, {"policy_version": 1}))), repeat=200, warmup=5)
    steps_per_update = T * B / spec.num_agents
    return {"env": env_step_s,
            "inference": infer_s / rows * spec.num_agents,
            "training": train_s / steps_per_update,
            "transport": wire_sample_s / (T * rows / spec.num_agents) + wire_infer_s / rows * spec.num_agents,
            "frame_skip": spec.frame_skip, "update_s": train_s, "update_steps": steps_per_update,
            "infer_rows": rows}


def end_to_end(algo: str, env_name: str, frames: int, runs_dir: str) -> dict[str, float]:
    name = f"bench-{algo}"
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "zoo", "train", algo, "--env", env_name, "--frames", str(frames),
                             "--name", name, "--set", f"runs_dir={runs_dir}", "--set", "log.tensorboard=false"],
                            capture_output=True, text=True)
    wall = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"zoo train {algo} failed:\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in (Path(runs_dir) / name / "metrics.jsonl").read_text().splitlines()]
    ups = [r for r in rows if r["type"] == "update"]
    first, last = ups[0], ups[-1]
    rate = (last["frames"] - first["frames"]) / max(1e-9, last["time_s"] - first["time_s"])
    return {"frames_per_s": rate, "wall_s": wall, "frames": last["frames"], "updates": len(ups),
            "lag_mean": float(np.mean([u["policy_lag_mean"] for u in ups])),
            "lag_max": max(u["policy_lag_max"] for u in ups), "dropped": last["dropped_samples"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="atari:Pong")
    ap.add_argument("--frames", type=int, default=60_000, help="budget of each `zoo train` run, in frames")
    ap.add_argument("--raw-seconds", type=float, default=10.0)
    ap.add_argument("--algos", default="impala,ppo")
    args = ap.parse_args()
    import torch

    algos = args.algos.split(",")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"# {dt.datetime.now():%Y-%m-%d %H:%M}  {platform.platform()}  {platform.processor() or platform.machine()}"
          f"  {cores} cores  python {platform.python_version()}  torch {torch.__version__}"
          f"  load average {os.getloadavg()[0]:.1f}")
    raw_fps, env_step_s = raw_env(args.env, args.raw_seconds)
    print(f"raw env ({args.env}, 1 process, 1 env, random actions): {raw_fps:,.0f} frames/s")
    with tempfile.TemporaryDirectory(prefix="zoo-bench-") as runs_dir:
        e2e = {a: end_to_end(a, args.env, args.frames, runs_dir) for a in algos}
    print(f"\nend to end: zoo train ALGO --env {args.env} --frames {args.frames} (presets)")
    print(f"{'algo':8} {'frames/s':>10} {'x raw env':>10} {'wall s':>8} {'updates':>8} {'lag mean/max':>13} "
          f"{'dropped':>8}")
    for a, r in e2e.items():
        print(f"{a:8} {r['frames_per_s']:>10,.0f} {r['frames_per_s'] / raw_fps:>10.2f} {r['wall_s']:>8.0f} "
              f"{r['updates']:>8} {r['lag_mean']:>6.1f}/{r['lag_max']:<6} {r['dropped']:>8}")
    if "impala" in e2e and "ppo" in e2e:
        print(f"impala / ppo training throughput: {e2e['impala']['frames_per_s'] / e2e['ppo']['frames_per_s']:.2f}")
    print("\nwhere the time goes: CPU ms per 1,000 frames (1 torch thread; share of the sum)")
    print(f"{'algo':8} {'env':>14} {'inference':>14} {'training':>14} {'transport':>14} {'sum':>8} "
          f"{'ideal fps':>10}")
    for a in algos:
        c = costs(a, args.env, env_step_s)
        per_k = {k: c[k] / c["frame_skip"] * 1000 * 1000 for k in ("env", "inference", "training", "transport")}
        total = sum(per_k.values())
        cells = " ".join(f"{v:>7.0f} ({v / total:>3.0%})" for v in per_k.values())
        print(f"{a:8} {cells} {total:>8.0f} {cores * 1e6 / total:>10,.0f}")
        print(f"{'':8} (one update: {c['update_s']:.2f} s for {c['update_steps']:.0f} env steps; inference batch "
              f"{c['infer_rows']} rows)")


if __name__ == "__main__":
    main()
