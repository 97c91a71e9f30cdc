"""Does `zoo train mappo --env hide-and-seek` learn? Evaluate a run's checkpoints and plot it.

Issue 5 asks for the first emergent stage, *running and chasing*: the seekers' return
rises clearly above what the same seekers get with random actions. This script measures
that against every kept checkpoint of one training run:

1. train (any budget; ``trainer.keep_checkpoints`` keeps ``checkpoints/policy-v*.pt``)::

       zoo train mappo --env hide-and-seek --steps 1300000 --name quadrant-2v2 \\
           --set runs_dir=RUNS --set trainer.keep_checkpoints=true --set trainer.checkpoint_interval=50

2. evaluate: ``python benchmarks/hide_and_seek_learning.py evaluate RUNS/quadrant-2v2``
   plays ``--episodes`` episodes per checkpoint (and for the initial weights, version 0,
   rebuilt from the run's seed) in three matches, all with the same env seeds:

   - ``policy``: every agent acts with the checkpoint's policy (sampled, as in training);
   - ``random seekers``: the hiders act with the policy, the seekers uniformly at random;
   - ``random hiders``: the seekers act with the policy, the hiders uniformly at random.

   A seeker return of ``policy`` above ``random seekers`` is the chasing skill measured
   against the *same* hiders; ``random hiders`` is the same for the hiders' skill.
   Rows go to ``RUN/evaluation.jsonl``.
3. ``python benchmarks/hide_and_seek_learning.py table RUN`` prints the evaluation as a
   markdown table (returns are means over the episodes +- their standard error);
4. plot: ``python benchmarks/hide_and_seek_learning.py plot RUN --out FILE.png``: the
   training curves (hider and seeker return per episode, preparation-phase box movement
   and locks) from ``metrics.jsonl`` and the evaluation curves from ``evaluation.jsonl``.

Returns are per episode and team: the mean over the team's agents of the sum of their
rewards (:mod:`zoo.plugins.envs.hide_and_seek.stats`). Quadrant: 80 env steps, the first
32 preparation (reward 0), so a team's return lies in [-48, 48] unless someone leaves the
area (-10 per step).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import numpy as np

MATCHES = ("policy", "random seekers", "random hiders")
STAT_KEYS = ("hider_return", "seeker_return", "box_max_displacement_prep", "boxes_locked_prep",
             "ramp_max_displacement_prep", "box_max_displacement", "boxes_locked")


def load_run(run_dir: str):
    """(config dict, MAPPO config, env config, scenario) of a run directory."""
    from zoo.plugins.algorithms.mappo.mappo import MAPPOConfig
    from zoo.plugins.envs.hide_and_seek.config import HideAndSeekConfig

    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg["env_name"] != "hide-and-seek" or cfg["algo_name"] != "mappo":
        raise SystemExit(f"{run_dir}: not a mappo hide-and-seek run ({cfg['algo_name']} on {cfg['env_name']})")
    scenario = cfg["env_spec"]["resolved"]["scenario"]
    return cfg, MAPPOConfig(**cfg["algo"]), HideAndSeekConfig(**cfg["env"]), scenario


def play(policy, envs, episodes: int, random_team: str | None, seed: int) -> list[dict[str, float]]:
    """Play ``episodes`` episodes on the list of envs in lock-step; per-episode statistics.

    ``random_team`` (``"hider"``, ``"seeker"`` or None) acts uniformly at random; the other
    agents act with ``policy`` (a fresh recurrent state per episode, sampled actions).
    Episode ``k`` starts with ``reset(seed=seed + k)``: ``zoo.play.play``, as ``zoo eval``.
    """
    from zoo.play import play as play_episodes

    rng = np.random.default_rng(seed)
    spec = envs[0].spec
    nvec = np.asarray(spec.action_space.nvec)
    randomised = np.array([random_team is not None and name.startswith(random_team) for name in spec.agents])

    def random_actions(actions: np.ndarray) -> None:  # [n_envs, A, 5], changed in place
        if randomised.any():
            actions[:, randomised] = rng.integers(0, nvec, size=(len(actions), int(randomised.sum()), len(nvec)))

    rows = play_episodes(policy, envs, episodes, seed, override=random_actions)
    return [{k: float(row[k]) for k in STAT_KEYS} for row in rows]


def evaluate(run_dir: str, episodes: int, envs: int, every: int, seed: int, shard: str = "0/1") -> None:
    import torch

    from zoo.plugins.algorithms.mappo.mappo import MAPPO
    from zoo.plugins.envs.hide_and_seek.zoo_env import make

    torch.set_num_threads(1)
    cfg, algo_cfg, env_cfg, scenario = load_run(run_dir)
    pool = [make(scenario, env_cfg, seed + i) for i in range(envs)]
    policy = MAPPO.build_policy(algo_cfg, pool[0].spec)
    initial = MAPPO(algo_cfg, pool[0].spec, cfg["seed"]).policy.state_dict()  # version 0, as the trainer built it
    paths = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "policy-v*.pt")))
    points = [(0, 0, initial)] + [(None, None, p) for p in paths[::every]]
    if paths and paths[-1] not in paths[::every]:
        points.append((None, None, paths[-1]))
    latest = os.path.join(run_dir, "checkpoints", "latest.pt")
    if os.path.exists(latest):  # the final weights, when newer than the last kept snapshot
        points.append((None, None, latest))
    index, count = (int(x) for x in shard.split("/"))
    points = points[index::count]  # this process's share; shards append to one file
    out_path = os.path.join(run_dir, "evaluation.jsonl")
    done = set()
    if os.path.exists(out_path):
        with open(out_path) as f:
            done = {(r["policy_version"], r["match"]) for r in map(json.loads, f)}
    with open(out_path, "a") as f:
        for version, env_steps, source in points:
            if isinstance(source, str):
                ckpt = torch.load(source, map_location="cpu", weights_only=False)
                version, env_steps, source = ckpt["policy_version"], ckpt["env_steps"], ckpt["algorithm"]["policy"]
                if any((version, match) in done for match in MATCHES):
                    continue  # e.g. latest.pt when it is the last kept snapshot
            policy.load_state_dict(source)
            policy.eval()
            for match in MATCHES:
                if (version, match) in done:
                    continue
                team = {"policy": None, "random seekers": "seeker", "random hiders": "hider"}[match]
                stats = play(policy, pool, episodes, team, seed)
                row = {"policy_version": version, "env_steps": env_steps, "match": match, "episodes": len(stats)}
                for k in STAT_KEYS:
                    vals = np.array([s[k] for s in stats])
                    row[k] = float(vals.mean())
                    row[k + "_sem"] = float(vals.std(ddof=1) / np.sqrt(len(vals))) if len(vals) > 1 else 0.0
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"v{version:5d} {env_steps:>9,} env steps  {match:15s} seeker {row['seeker_return']:+6.1f} "
                      f"+- {row['seeker_return_sem']:.1f}  hider {row['hider_return']:+6.1f}  "
                      f"box moved in prep {row['box_max_displacement_prep']:.2f} m  "
                      f"boxes locked in prep {row['boxes_locked_prep']:.2f}", flush=True)


def _rolling(x: np.ndarray, y: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    from zoo.plotting import smooth_curve

    return (x, y) if len(y) < window else smooth_curve(x, y, window)


def plot(run_dir: str, out: str, window: int, title: str | None) -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        episodes = [r for r in map(json.loads, f) if r.get("type") == "episode" and "seeker_return" in r]
    evals: list[dict] = []
    if os.path.exists(os.path.join(run_dir, "evaluation.jsonl")):
        with open(os.path.join(run_dir, "evaluation.jsonl")) as f:
            evals = [json.loads(line) for line in f]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    steps = np.array([e["env_steps"] for e in episodes], float) / 1e6
    ax = axes[0]
    for key, colour in (("seeker_return", "tab:red"), ("hider_return", "tab:blue")):
        x, y = _rolling(steps, np.array([e[key] for e in episodes]), window)
        ax.plot(x, y, color=colour, label=f"{key.split('_')[0]}s")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set(title=f"training episodes (rolling mean of {window})", xlabel="env steps (M)", ylabel="return per episode")
    ax.legend()
    ax = axes[1]
    styles = {"policy": ("tab:red", "-o"), "random seekers": ("tab:orange", "--s"), "random hiders": ("tab:purple", ":^")}
    for match in MATCHES:
        rows = sorted((r for r in evals if r["match"] == match), key=lambda r: r["env_steps"])
        if not rows:
            continue
        colour, style = styles[match]
        x = np.array([r["env_steps"] for r in rows]) / 1e6
        y = np.array([r["seeker_return"] for r in rows])
        e = np.array([r["seeker_return_sem"] for r in rows])
        label = {"policy": "trained seekers vs trained hiders", "random seekers": "random seekers vs trained hiders",
                 "random hiders": "trained seekers vs random hiders"}[match]
        ax.errorbar(x, y, yerr=e, fmt=style, color=colour, ms=3, capsize=2, label=label)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set(title="evaluation of checkpoints: seeker return", xlabel="env steps (M)", ylabel="seeker return per episode")
    ax.legend(fontsize=8)
    ax = axes[2]
    for key, colour in (("box_max_displacement_prep", "tab:green"), ("boxes_locked_prep", "tab:brown")):
        x, y = _rolling(steps, np.array([e[key] for e in episodes]), window)
        ax.plot(x, y, color=colour, label=key)
    ax.set(title="preparation phase (training episodes)", xlabel="env steps (M)", ylabel="m / boxes")
    ax.legend(fontsize=8)
    fig.suptitle(title or f"zoo train mappo --env hide-and-seek: {os.path.basename(os.path.normpath(run_dir))}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def table(run_dir: str) -> None:
    """Print evaluation.jsonl as a markdown table, one row per evaluated policy version."""
    with open(os.path.join(run_dir, "evaluation.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    by = {}
    for r in rows:
        by.setdefault((r["env_steps"], r["policy_version"]), {})[r["match"]] = r
    print("| env steps | policy version | seekers: trained | seekers: random | trained - random | "
          "hiders: trained | hiders: random | trained - random | box moved in prep (m) | boxes locked in prep |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (steps, version), m in sorted(by.items()):
        if set(m) != set(MATCHES):
            continue
        p, rs, rh = m["policy"], m["random seekers"], m["random hiders"]
        pm = "\u00b1"
        print(f"| {steps:,} | {version} | {p['seeker_return']:+.1f} {pm} {p['seeker_return_sem']:.1f} | "
              f"{rs['seeker_return']:+.1f} {pm} {rs['seeker_return_sem']:.1f} | "
              f"{p['seeker_return'] - rs['seeker_return']:+.1f} | "
              f"{p['hider_return']:+.1f} {pm} {p['hider_return_sem']:.1f} | "
              f"{rh['hider_return']:+.1f} {pm} {rh['hider_return_sem']:.1f} | "
              f"{p['hider_return'] - rh['hider_return']:+.1f} | "
              f"{p['box_max_displacement_prep']:.2f} | {p['boxes_locked_prep']:.2f} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("evaluate", help="play each kept checkpoint against random opponents")
    e.add_argument("run_dir")
    e.add_argument("--episodes", type=int, default=48, help="episodes per checkpoint and match (default 48)")
    e.add_argument("--envs", type=int, default=8, help="envs stepped in lock-step (one inference batch)")
    e.add_argument("--every", type=int, default=1, help="evaluate every N-th kept checkpoint (and the last)")
    e.add_argument("--seed", type=int, default=10_000, help="env seeds seed, seed+1, ... (same for every match)")
    e.add_argument("--shard", default="0/1", help="I/N: evaluate every N-th point from the I-th (one process per core)")
    q = sub.add_parser("plot", help="learning curves as a PNG")
    q.add_argument("run_dir")
    q.add_argument("--out", required=True)
    q.add_argument("--window", type=int, default=400, help="training episodes per rolling mean")
    q.add_argument("--title")
    t = sub.add_parser("table", help="evaluation.jsonl as a markdown table")
    t.add_argument("run_dir")
    a = p.parse_args(argv)
    if a.cmd == "evaluate":
        evaluate(a.run_dir, a.episodes, a.envs, a.every, a.seed, a.shard)
    elif a.cmd == "table":
        table(a.run_dir)
    else:
        plot(a.run_dir, a.out, a.window, a.title)


if __name__ == "__main__":
    sys.exit(main())
