"""PBT against fixed hyperparameters at the same total env steps (issue 23, docs/pbt.md).

For each seed, one PBT run and four fixed runs of PPO on ``CartPole-v1``:

- **PBT**: ``zoo train ppo --env CartPole-v1 --steps 4N --set pbt.members=4`` with the learning
  rate explored over ``[1e-5, 1e-2]`` (log-uniform: member 0 starts at the presets' 1e-3, members
  1-3 at seeded draws), a round every ``4N / 10`` env steps of the run (each member trains on
  its own quarter of the envs: ``N`` env steps each);
- **fixed**: four runs of ``N`` env steps, each with one PBT member's *starting* learning rate
  (read from that member's first ``update`` row) and nothing explored, on the layout one member
  has (4 envs in 4 ring groups of 1, 8 samples of 32 steps per update: 256 env steps, as a
  member's update), so the 4 fixed runs together take the PBT run's env steps.

The measure of a run (or a PBT member) is its **final return**: the mean return of its last 20
episodes (CartPole's episodes last up to 500 env steps: 100 would reach back over the whole run). The target: the best PBT member's final return is at least the median of the four
fixed runs' (per seed, and over the seeds). ``benchmarks/data/pbt_vs_fixed/summary.json`` keeps
every run's starting learning rate, final return and the PBT lineage (exploit / explore rows);
``benchmarks/pbt_vs_fixed.png`` draws each PBT member's and each fixed run's mean-20 return
over its env steps, one panel per seed.

Usage (from the repository root)::

    python benchmarks/pbt_vs_fixed.py --seeds 1 2 3 --member-steps 30000
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from zoo.plotting import smooth_curve

ROOT = Path(__file__).resolve().parents[1]
P = 4
LR_RANGE = "[1e-5, 1e-2]"
MEMBER_LAYOUT = ("actors.count=2", "actors.envs_per_actor=2", "actors.ring_size=2", "trainer.batch_samples=8",
                 "sample_length=32")
"""A fixed run: 2 actors x 2 envs in ring groups of 1 env = 4 envs, 8 one-env samples of 32 steps an update."""
PBT_LAYOUT = ("actors.count=2", "actors.envs_per_actor=8", "actors.ring_size=2", "trainer.batch_samples=8",
              "sample_length=32")
"""The PBT run: 2 actors x 8 envs in ring groups of 4 (one env of each member): 4 envs a member, each
member's sample from a group one env of 32 steps, 8 an update."""
FINAL = 20
WINDOW = 20


def zoo(args: list[str]) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "zoo", *args], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def sets(*items: str) -> list[str]:
    return [x for s in items for x in ("--set", s)]


def rows_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def final_return(returns: list[float], window: int = FINAL) -> float | None:
    """The mean of the last ``window`` returns (None with fewer). Example: 1..150, 20 -> 140.5."""
    return sum(returns[-window:]) / window if len(returns) >= window else None


def members(rows: list[dict]) -> dict[str, dict]:
    """Per PBT member: its starting lr (its first ``update`` row's), its episodes' ``(env steps,
    return)`` and its final return."""
    out: dict[str, dict] = {}
    for r in rows:
        name = r.get("policy")
        if not name:
            continue
        m = out.setdefault(name, {"start_lr": None, "episodes": []})
        if r["type"] == "update" and m["start_lr"] is None:
            m["start_lr"] = float(r["lr"])
        elif r["type"] == "episode":
            m["episodes"].append((int(r["env_steps"]), float(r["return"])))
    for m in out.values():
        m["final_return"] = final_return([e[1] for e in m["episodes"]])
    return dict(sorted(out.items()))


def judge(pbt_best: float | None, fixed: list[float | None]) -> dict:
    """The target of one seed: the best PBT member's final return >= the median of the fixed runs'."""
    done = [f for f in fixed if f is not None]
    median = statistics.median(done) if len(done) == len(fixed) else None
    return {"pbt_best": pbt_best, "fixed_median": median,
            "met": pbt_best is not None and median is not None and pbt_best >= median}


def run_seed(tmp: Path, seed: int, member_steps: int) -> dict:
    pbt_name = f"pbt-s{seed}"
    interval = P * member_steps // 10
    wall = zoo(["train", "ppo", "--env", "CartPole-v1", "--steps", str(P * member_steps), "--seed", str(seed),
                "--name", pbt_name, *sets(f"runs_dir={tmp}", f"pbt.members={P}",
                                          f'pbt.hyperparameters={{"algo.lr": {LR_RANGE}}}',
                                          f"pbt.interval_env_steps={interval}", *PBT_LAYOUT)])
    rows = rows_of(tmp / pbt_name)
    pop = members(rows)
    lineage = [{k: r[k] for k in ("event", "member_policy", "from_policy", "round_env_steps", "new_hyperparameters")
                if k in r} for r in rows if r["type"] == "pbt" and r.get("event") in ("exploit", "explore")]
    fixed = {}
    for name, m in pop.items():
        run = f"fixed-s{seed}-{name}"
        fwall = zoo(["train", "ppo", "--env", "CartPole-v1", "--steps", str(member_steps), "--seed", str(seed),
                     "--name", run, *sets(f"runs_dir={tmp}", f"algo.lr={m['start_lr']!r}", *MEMBER_LAYOUT)])
        eps = [(int(r["env_steps"]), float(r["return"])) for r in rows_of(tmp / run) if r["type"] == "episode"]
        fixed[name] = {"lr": m["start_lr"], "episodes": eps, "final_return": final_return([e[1] for e in eps]),
                       "wall_s": round(fwall, 1)}
    best = max((m["final_return"] for m in pop.values() if m["final_return"] is not None), default=None)
    return {"seed": seed, "pbt_wall_s": round(wall, 1), "members": pop, "fixed": fixed, "lineage": lineage,
            **judge(best, [f["final_return"] for f in fixed.values()])}


def rolling(episodes: list[tuple[int, float]], window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """Env steps and the mean return of the last ``window`` episodes (:func:`zoo.plotting.smooth_curve`)."""
    return smooth_curve(np.array([e[0] for e in episodes]), np.array([e[1] for e in episodes], float), window)


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.8), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        for i, (name, m) in enumerate(res["members"].items()):
            # a member's env_steps are the run's (all members'); / P puts them on the member's own axis
            x, y = rolling([(s // P, r) for s, r in m["episodes"]])
            ax.plot(x, y, color=f"C{i}", label=f"PBT {name} (lr from {m['start_lr']:.1e})")
            f = res["fixed"][name]
            x, y = rolling(f["episodes"])
            ax.plot(x, y, color=f"C{i}", linestyle=":", label=f"fixed lr {f['lr']:.1e}")
        ax.set_title(f"seed {res['seed']}: PBT best {res['pbt_best']:.0f}, fixed median {res['fixed_median']:.0f}",
                     fontsize=9)
        ax.set_xlabel("env steps of the member / run")
        ax.set_ylabel(f"return (mean of the last {WINDOW})")
        ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--member-steps", type=int, default=30_000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "pbt_vs_fixed.png"))
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="zoo-pbt-") as tmp:
        for seed in args.seeds:
            res = run_seed(Path(tmp), seed, args.member_steps)
            results.append(res)
            print(f"seed {seed}: PBT ({res['pbt_wall_s']} s) members' final returns "
                  + ", ".join(f"{n} {m['final_return']} (lr from {m['start_lr']:.2e})"
                              for n, m in res["members"].items())
                  + "; fixed " + ", ".join(f"lr {f['lr']:.2e}: {f['final_return']} ({f['wall_s']} s)"
                                           for f in res["fixed"].values())
                  + f"; best PBT {res['pbt_best']} vs fixed median {res['fixed_median']}: "
                  + ("met" if res["met"] else "not met"), flush=True)
    plot(results, Path(args.out))
    data = ROOT / "benchmarks" / "data" / "pbt_vs_fixed"
    data.mkdir(parents=True, exist_ok=True)
    slim = [{**r, "members": {n: {k: v for k, v in m.items() if k != "episodes"} for n, m in r["members"].items()},
             "fixed": {n: {k: v for k, v in f.items() if k != "episodes"} for n, f in r["fixed"].items()}}
            for r in results]
    (data / "summary.json").write_text(json.dumps({"member_steps": args.member_steps, "members": P,
                                                   "lr_range": LR_RANGE, "seeds": slim}, indent=1) + "\n")


if __name__ == "__main__":
    main()
