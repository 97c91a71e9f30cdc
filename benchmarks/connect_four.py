"""Self-play on connect four against a pool of past versions (issue 23, "Show that it works").

PettingZoo classic's ``connect_four_v3`` (turn-based, action masks), one MAPPO policy
``learner`` for agent ``player_0`` and an ``opponent`` policy for ``player_1`` served from the
learner's kept versions (docs/history.md, "Opponents from the history"), with
``env.random_seats = true`` so the learner moves first in about half the episodes and second in
the others. Two variants of one config, budget and seed:

- ``pfsp``: ``opponent = {source = "learner", pick = "pfsp", every = "episode"}``: each
  episode's opponent is a kept version drawn with weight ``x**2``, ``x`` its win rate against
  the learner;
- ``latest``: ``pick = "latest"``: always the newest kept version.

The learner keeps a version every ``--every-updates`` updates; the eval manager
(``workers.eval.count = 1``) plays each kept version against the baselines ``random`` and
``lookahead`` (one-step lookahead: wins when it can, blocks when it must, else random;
plugins/envs/pettingzoo/baselines.py) and its 2 newest predecessors, ``--eval-episodes`` games
per match, and writes Elo ratings to ``history.sqlite``.

The targets (issue 23): the final policy wins >= 95% of 500 games against ``random`` and >= 60%
against ``lookahead``, each half as first and half as second player; the eval ratings of the
kept versions rise with training (Spearman rank correlation >= 0.8 between version and rating).

Usage::

    python benchmarks/connect_four.py run --runs-dir RUNS --steps 500000 --seed 1
    python benchmarks/connect_four.py report --runs-dir RUNS --games 500 --out benchmarks/connect_four.png

``--algo ppo`` (both subcommands) trains both policies with ppo instead of mappo: its encoder reads
the ``[2, 6, 7]`` board planes with a small CNN where mappo's presets flatten them into a 2x64 MLP;
its runs are named ``c4-ppo-<variant>-s<seed>``. ``run`` trains the two variants one after the
other (``python -m zoo train mappo ...``; ``--set KEY=VALUE`` for both); a run whose ``status.json`` says finished is skipped, so an interrupted
``run`` continues (a run folder left unfinished stops it, naming the folder: ``zoo resume`` it,
or remove it). ``report`` loads each variant's final policy (``checkpoints/learner/latest.pt``)
and plays ``--games`` games against each baseline, the first half with the policy as the first
player, the rest as the second (``--deterministic``: the argmax action instead of a sample),
counts wins, draws and losses and the forced moves the policy took (a win it could play, a
block it had to play: :class:`Tactics`), computes the Spearman rank correlation between version
and each rating of the kept versions (:data:`RATINGS`: the eval manager's ratings fitted to all
its games, its one-game-at-a-time Elo ratings, the training games' Elo ratings), prints a
markdown table, writes it to ``--out`` with the suffix ``.md``, and to ``--out`` (png) the fitted
eval rating of each kept version over the env steps it was kept at and, below, each version's eval win rate against
``random`` and ``lookahead`` (a running mean of 5 versions) with the targets. Seeds: the games of baseline b in seat s reset
their envs with ``seed + k`` (game k) from ``--seed``'s ``1000 * (2 * b + s)``; the baseline and
torch are seeded likewise.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ENV = "pettingzoo:pettingzoo.classic.connect_four_v3"
MODULE = "pettingzoo.classic.connect_four_v3"
VARIANTS = ("pfsp", "latest")
ALGOS = ("mappo", "ppo")
"""``--algo``: mappo's presets give a 2x64 MLP on the flattened board; ppo's encoder a small CNN on the
``[2, 6, 7]`` planes (two 3x3 convolutions of 32 and 64 channels, dense 256)."""
BASELINES = ("random", "lookahead")
CONFIG = """\
# written by benchmarks/connect_four.py: self-play against {pick} versions of the learner
[policies.learner]
algo = "{algo}"
trainer.history.every_updates = {every_updates}
[policies.opponent]
algo = "{algo}"
opponent = {{source = "learner", pick = "{pick}", every = "episode", cache = 8}}
[[agents]]
match = "player_0"
policy = "learner"
[[agents]]
match = "*"
policy = "opponent"
[env]
random_seats = true
[workers.eval]
count = 1
episodes = {eval_episodes}
baselines = ["random", "lookahead"]
past_versions = 2
"""


def config_text(variant: str, every_updates: int = 10, eval_episodes: int = 20, algo: str = "mappo") -> str:
    """The TOML of ``variant`` (``pfsp`` or ``latest``) with ``algo`` (``mappo`` or ``ppo``) for both policies."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
    if algo not in ALGOS:
        raise ValueError(f"algo {algo!r} is not one of {', '.join(ALGOS)}")
    return CONFIG.format(pick=variant, every_updates=every_updates, eval_episodes=eval_episodes, algo=algo)


def run_name(variant: str, seed: int, algo: str = "mappo") -> str:
    return f"c4-{variant}-s{seed}" if algo == "mappo" else f"c4-{algo}-{variant}-s{seed}"


def finished(run_dir: Path) -> bool:
    """Whether the run wrote ``status.json`` saying finished."""
    try:
        return json.loads((run_dir / "status.json").read_text()).get("status") == "finished"
    except (OSError, ValueError):
        return False


def train(args: argparse.Namespace) -> int:
    runs = Path(args.runs_dir).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    for variant in args.variants:
        name = run_name(variant, args.seed, args.algo)
        if finished(runs / name):
            print(f"{name}: finished already, skipped", flush=True)
            continue
        if (runs / name).exists():
            print(f"{runs / name} exists but did not finish: zoo resume it, or remove it", file=sys.stderr)
            return 2
        config = runs / f"{name}.toml"
        config.write_text(config_text(variant, args.every_updates, args.eval_episodes, args.algo))
        cmd = [sys.executable, "-m", "zoo", "train", args.algo, "--env", ENV, "--config", str(config),
               "--steps", str(args.steps), "--seed", str(args.seed), "--name", name, "--set", f"runs_dir={runs}",
               "--set", "log.tensorboard=false"]
        for extra in args.set or []:
            cmd += ["--set", extra]
        print("$ " + " ".join(cmd), flush=True)
        done = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL if args.quiet else None)
        if done.returncode != 0:
            print(f"{name}: zoo train exited {done.returncode}", file=sys.stderr, flush=True)
            return done.returncode
    return 0


# ----------------------------------------------------------------------------- report
@dataclass
class Tally:
    """Games of the policy against one opponent: wins, draws, losses (the policy's), per seat."""

    wins: int = 0
    draws: int = 0
    losses: int = 0
    first: tuple[int, int, int] = (0, 0, 0)
    second: tuple[int, int, int] = (0, 0, 0)

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    def rate(self, what: str) -> float:
        """``wins``, ``draws`` or ``losses`` over the games (NaN with none)."""
        return getattr(self, what) / self.games if self.games else float("nan")


def tally(results: list[tuple[int, float, float]]) -> Tally:
    """Count ``(seat, policy's return, opponent's return)`` games: a higher return is a win,
    an equal one a draw, a lower one a loss (connect four: +1 / -1, or 0 each)."""
    per = {0: [0, 0, 0], 1: [0, 0, 0]}
    for seat, mine, theirs in results:
        per[int(seat)][0 if mine > theirs else 1 if mine == theirs else 2] += 1
    w, d, lo = (per[0][i] + per[1][i] for i in range(3))
    return Tally(w, d, lo, tuple(per[0]), tuple(per[1]))  # type: ignore[arg-type]


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (ties: average ranks; the Pearson
    correlation of the ranks). NaN with fewer than 2 points or a constant side.

    Raises:
        ValueError: ``x`` and ``y`` of different lengths."""
    if len(x) != len(y):
        raise ValueError(f"spearman: x has {len(x)} values, y {len(y)}")
    if len(x) < 2:
        return float("nan")

    def ranks(v: list[float]) -> np.ndarray:
        a = np.asarray(v, float)
        order = np.argsort(a, kind="mergesort")
        r = np.empty(len(a))
        r[order] = np.arange(1, len(a) + 1)
        for value in np.unique(a):  # ties: the mean of their ranks
            tied = a == value
            r[tied] = r[tied].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx ** 2).sum() * (ry ** 2).sum()))
    return float((rx * ry).sum() / den) if den > 0 else float("nan")


RATINGS = {"fit": "eval, fitted to all games (Bradley-Terry)", "elo": "eval, Elo one game at a time",
           "training": "training games, Elo (the learner's when kept)"}
"""The ratings :func:`version_ratings` reads, by ``kind``: the eval manager's fitted ones
(``zoo league``'s ``fit rating``), its sequential Elo ones (``rating``), and each version's Elo rating
from the training games against the learner (``versions.rating``: the learner's rating when the
version was kept, moved by its games as an opponent since)."""


def version_ratings(run_dir: Path, policy: str = "learner", kind: str = "fit") -> list[tuple[int, int, float]]:
    """``(version, env steps, rating)`` of the kept versions with a rating of ``kind`` (one of
    :data:`RATINGS`), by version (read from ``history.sqlite``); ``[]`` without a store.

    Raises:
        ValueError: an unknown ``kind``."""
    if kind not in RATINGS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(RATINGS)}")
    db = run_dir / "history.sqlite"
    if not db.is_file():
        return []
    from zoo.core.history import VersionStore

    with VersionStore(run_dir, readonly=True) as store:
        kept = [v for v in store.versions(policy) if v.kept]
        if kind == "training":
            rated = {v.version: v.rating for v in kept}
        elif kind == "elo":
            rated = {s.version: s.rating for s in store.standings(policy) if s.version is not None}
        else:
            fitted = store.fitted_ratings(policy)
            rated = {v.version: fitted.get(f"v{v.version}") for v in kept}
    return [(v.version, v.env_steps, float(r)) for v in kept if (r := rated.get(v.version)) is not None]


@dataclass
class Tactics:
    """What the policy did where a one-step lookahead sees a forced move
    (:func:`zoo.plugins.envs.pettingzoo.baselines.lookahead_choices` on its own board): ``wins``
    positions where it could connect four and ``taken`` of them where it did; ``blocks``
    positions where the opponent threatened to connect four next (and it could not win) and
    ``blocked`` of them where it played there."""

    wins: int = 0
    taken: int = 0
    blocks: int = 0
    blocked: int = 0


class TacticsCounter:
    """A policy wrapper for :func:`zoo.play.play` that counts :class:`Tactics` of each action."""

    def __init__(self, net: object, tactics: Tactics) -> None:
        self.net, self.tactics = net, tactics

    def eval(self) -> TacticsCounter:
        return self

    def act(self, obs: dict, deterministic: bool = False, **kw: object) -> dict:
        from zoo.plugins.envs.pettingzoo.baselines import BOARD_KEY, MASK_KEY, lookahead_choices

        out = self.net.act(obs, deterministic)  # type: ignore[attr-defined]
        boards = np.asarray(obs[BOARD_KEY])
        masks = np.asarray(obs[MASK_KEY], bool).reshape(boards.shape[0], -1)
        actions = np.asarray(out["action"]).reshape(-1)
        for board, mask, action in zip(boards, masks, actions, strict=True):
            board = np.moveaxis(board, -1, 0) if board.shape[-1] == 2 else board
            reason, columns = lookahead_choices(board, mask)
            if reason == "win":
                self.tactics.wins += 1
                self.tactics.taken += int(action) in columns
            elif reason == "block":
                self.tactics.blocks += 1
                self.tactics.blocked += int(action) in columns
        return out


def play_baseline(checkpoint: Path, baseline: str, games: int, seed: int, deterministic: bool,
                  index: int, envs: int = 8, algo_name: str = "mappo",
                  tactics: Tactics | None = None, env_options: dict | None = None) -> list[tuple[int, float, float]]:
    """``games`` games of the policy in ``checkpoint`` against ``baseline``: the first
    ``ceil(games / 2)`` as the first player (seat 0), the rest as the second;
    ``(seat, policy's return, baseline's return)`` per game. ``tactics``: counts the policy's
    forced moves taken (:class:`Tactics`). ``env_options``: the run's ``env`` options (its
    ``config.json``), of which ``kwargs`` and ``to_move`` (what the policy observes) are used."""
    from zoo.core.checkpoint import load_checkpoint
    from zoo.core.plugins import get_registry
    from zoo.play import Seat, play
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    reg = get_registry()
    ckpt = load_checkpoint(str(checkpoint))
    opts = env_options or {}
    env_config = PettingZooConfig(kwargs=str(opts.get("kwargs", "")), to_move=bool(opts.get("to_move", False)))
    pool = [make(MODULE, env_config, seed + i) for i in range(envs)]
    spec = pool[0].spec
    seat_spec = spec.subset([spec.agents[0]])
    algo = reg.get("algorithm", algo_name).load()
    from zoo.core.config import algorithm_config_class

    options = algorithm_config_class(reg.get("algorithm", algo_name))(**(ckpt["algorithm"].get("config") or {}))
    net = algo.build_policy(options, seat_spec)  # the learner's own agent, as its trainer built it
    net.load_state_dict(ckpt["algorithm"]["policy"])
    net.eval()
    out: list[tuple[int, float, float]] = []
    first = math.ceil(games / 2)
    try:
        for seat, count in ((0, first), (1, games - first)):
            if not count:
                continue
            s = seed + 1000 * (2 * index + seat)
            player = reg.get("baseline", baseline).load()(seat_spec, s)
            policy = net if tactics is None else TacticsCounter(net, tactics)
            seats = [Seat("policy", "", policy, np.array([seat], np.int64)),
                     Seat("baseline", "", player, np.array([1 - seat], np.int64))]
            for r in play(seats, pool[:min(len(pool), count)], count, s, deterministic=deterministic):
                out.append((seat, float(r["policy_returns"].get("policy", 0.0)),
                            float(r["policy_returns"].get("baseline", 0.0))))
    finally:
        for env in pool:
            env.close()
    return out


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


def _of(n: int, total: int) -> str:
    return f"{n} of {total} ({100 * n / total:.1f}%)" if total else "-"


def table(results: dict[str, dict[str, Tally]], correlations: dict[str, dict[str, tuple[float, int]]],
          steps: dict[str, int | None], deterministic: bool,
          tactics: dict[str, dict[str, Tactics]] | None = None) -> str:
    """The markdown report: per variant and baseline, win/draw/loss rates (and per seat) and the
    targets; per variant and rating kind (:data:`RATINGS`), the Spearman correlation of version
    and rating; with ``tactics``, the forced moves the policy took in those games."""
    target = {"random": 0.95, "lookahead": 0.60}
    out = ["| variant | env steps | opponent | games | win | draw | loss | win as 1st / 2nd | target | met |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for variant, per in results.items():
        for baseline, t in per.items():
            w1 = t.first[0] / sum(t.first) if sum(t.first) else float("nan")
            w2 = t.second[0] / sum(t.second) if sum(t.second) else float("nan")
            goal = target.get(baseline)
            met = "-" if goal is None or not t.games else ("yes" if t.rate("wins") >= goal else "no")
            n = steps.get(variant)
            out.append(f"| {variant} | {'-' if n is None else f'{n:,}'} | {baseline} | {t.games} | "
                       f"{_pct(t.rate('wins'))} | {_pct(t.rate('draws'))} | {_pct(t.rate('losses'))} | "
                       f"{_pct(w1)} / {_pct(w2)} | {'-' if goal is None else f'>= {100 * goal:.0f}% wins'} | {met} |")
    out += ["", f"Actions: {'argmax (deterministic)' if deterministic else 'sampled'}."]
    if tactics:
        out += ["", "| variant | opponent | could connect four: did | had to block: did |", "|---|---|---|---|"]
        for variant, per_t in tactics.items():
            for baseline, k in per_t.items():
                out.append(f"| {variant} | {baseline} | {_of(k.taken, k.wins)} | {_of(k.blocked, k.blocks)} |")
    out += ["", "| variant | rating | versions rated | Spearman(version, rating) | target | met |",
            "|---|---|---|---|---|---|"]
    for variant, kinds in correlations.items():
        for kind, (rho, n) in kinds.items():
            met = "-" if math.isnan(rho) else ("yes" if rho >= 0.8 else "no")
            out.append(f"| {variant} | {RATINGS.get(kind, kind)} | {n} | {'-' if math.isnan(rho) else f'{rho:.3f}'} "
                       f"| >= 0.8 | {met} |")
    return "\n".join(out)


def baseline_win_rates(run_dir: Path, policy: str = "learner") -> dict[str, list[tuple[int, float]]]:
    """``{baseline: [(env steps, win rate), ...]}``: each rated version's eval-manager win rate
    (``(wins + draws / 2) / games``) against each baseline, by version (``zoo league``'s rows)."""
    from zoo.commands.league import league_rows

    try:
        rows = league_rows(run_dir).get(policy, [])
    except Exception:  # noqa: BLE001 - no store, or one that cannot be read: no curves
        return {}
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        ev = row.get("eval")
        if row.get("version") is None or not ev or row.get("env_steps") is None:
            continue
        for opponent, r in ev["vs"].items():
            if opponent in BASELINES and r.get("win_rate") is not None:
                out.setdefault(opponent, []).append((int(row["env_steps"]), float(r["win_rate"])))
    return out


def running_mean(values: list[float], window: int) -> list[float]:
    """The mean of each value and up to ``window - 1`` values before it."""
    return [float(np.mean(values[max(0, i + 1 - window):i + 1])) for i in range(len(values))]


def plot(curves: dict[str, list[tuple[int, int, float]]], out: Path,
         wins: dict[str, dict[str, list[tuple[int, float]]]] | None = None, window: int = 5) -> None:
    """Each variant's eval rating of its kept versions against the env steps they were kept at;
    with ``wins`` (variant -> :func:`baseline_win_rates`) a second panel: the win rate against each
    baseline, the running mean of ``window`` versions, and the targets (95%, 60%)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 7.6 if wins else 4.2))
    ax = fig.add_subplot(2 if wins else 1, 1, 1)
    for i, (variant, rows) in enumerate(curves.items()):
        if rows:
            ax.plot([r[1] for r in rows], [r[2] for r in rows], marker="o", ms=3, lw=1.2, color=f"C{i}",
                    label=f"{variant} ({len(rows)} versions)")
    ax.set_xlabel("env steps when the version was kept (calls to env.step)")
    ax.set_ylabel("eval rating (Bradley-Terry fit, Elo scale)")
    ax.set_title("connect four: learner versions rated against random, lookahead and each other", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if wins:
        bx = fig.add_subplot(2, 1, 2)
        for i, (variant, per) in enumerate(wins.items()):
            for baseline, style in (("random", ":"), ("lookahead", "-")):
                pts = per.get(baseline) or []
                if pts:
                    bx.plot([p[0] for p in pts], running_mean([p[1] for p in pts], window), ls=style, lw=1.4,
                            color=f"C{i}", label=f"{variant} vs {baseline}")
        for goal in (0.95, 0.60):
            bx.axhline(goal, color="grey", lw=0.8, ls="--")
        bx.set_ylim(0, 1.02)
        bx.set_xlabel("env steps when the version was kept (calls to env.step)")
        bx.set_ylabel(f"eval win rate (mean of {window} versions)")
        bx.set_title("win rate of each kept version against the baselines (eval manager); targets 95% and 60%",
                     fontsize=9)
        bx.grid(alpha=0.3)
        bx.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def final_steps(run_dir: Path) -> int | None:
    """The env steps of the final checkpoint (``checkpoints/learner/latest.pt``), None without one."""
    path = run_dir / "checkpoints" / "learner" / "latest.pt"
    if not path.is_file():
        return None
    from zoo.core.checkpoint import load_checkpoint

    n = load_checkpoint(str(path)).get("env_steps")
    return int(n) if n is not None else None


def report(args: argparse.Namespace) -> int:
    runs = Path(args.runs_dir).resolve()
    present = [v for v in args.variants if (runs / run_name(v, args.seed, args.algo) / "checkpoints" / "learner"
                                            / "latest.pt").is_file()]
    if not present:
        print(f"no run {run_name('pfsp', args.seed, args.algo)} (or latest) with a final checkpoint in {runs}",
              file=sys.stderr)
        return 2
    results: dict[str, dict[str, Tally]] = {}
    tactics: dict[str, dict[str, Tactics]] = {}
    correlations: dict[str, dict[str, tuple[float, int]]] = {}
    curves: dict[str, list[tuple[int, int, float]]] = {}
    wins: dict[str, dict[str, list[tuple[int, float]]]] = {}
    steps: dict[str, int | None] = {}
    for variant in present:
        run = runs / run_name(variant, args.seed, args.algo)
        ckpt = run / "checkpoints" / "learner" / "latest.pt"
        steps[variant] = final_steps(run)
        results[variant], tactics[variant], correlations[variant] = {}, {}, {}
        env_options = json.loads((run / "config.json").read_text()).get("env") or {}
        for b, baseline in enumerate(BASELINES):
            tactics[variant][baseline] = Tactics()
            games = play_baseline(ckpt, baseline, args.games, args.seed, args.deterministic, b, algo_name=args.algo,
                                  tactics=tactics[variant][baseline], env_options=env_options)
            results[variant][baseline] = tally(games)
        for kind in RATINGS:
            rows = version_ratings(run, kind=kind)
            correlations[variant][kind] = (spearman([r[0] for r in rows], [r[2] for r in rows]), len(rows))
            if kind == "fit":
                curves[variant] = rows
        wins[variant] = baseline_win_rates(run)
    text = table(results, correlations, steps, args.deterministic, tactics)
    print(text)
    out = Path(args.out)
    plot(curves, out, wins)
    out.with_suffix(".md").write_text(text + "\n")
    print(f"ratings: {out}; table: {out.with_suffix('.md')}")
    return 0


# ----------------------------------------------------------------------------- probe
def random_play_positions(games: int, seed: int) -> tuple[list[tuple[np.ndarray, np.ndarray, list[int]]],
                                                           list[tuple[np.ndarray, np.ndarray, list[int]]]]:
    """Positions of ``games`` games of uniformly random moves (numpy generator ``seed``), each
    seen by the player to move (``[2, 6, 7]`` int8, channel 0 the mover's pieces, as the env
    observes): ``(wins, blocks)``, lists of ``(board, legal bool [7], columns)`` where
    :func:`~zoo.plugins.envs.pettingzoo.baselines.lookahead_choices` says the mover can connect
    four (``columns`` the winning moves) or must block (no win, ``columns`` the blocks)."""
    from zoo.plugins.envs.pettingzoo.baselines import COLUMNS, connects, drop_row, lookahead_choices

    rng = np.random.default_rng(seed)
    wins: list[tuple[np.ndarray, np.ndarray, list[int]]] = []
    blocks: list[tuple[np.ndarray, np.ndarray, list[int]]] = []
    for _ in range(games):
        board = np.zeros((2, 6, COLUMNS), np.int8)
        while True:
            legal = np.array([drop_row(board, c) >= 0 for c in range(COLUMNS)])
            if not legal.any():
                break  # a draw
            reason, columns = lookahead_choices(board, legal)
            if reason in ("win", "block"):
                (wins if reason == "win" else blocks).append((board.copy(), legal, list(columns)))
            column = int(rng.choice(np.flatnonzero(legal)))
            row = drop_row(board, column)
            board[0, row, column] = 1
            if connects(board[0].astype(bool), row, column):
                break
            board = board[::-1].copy()  # the other player's view: it moves next
    return wins, blocks


DIRECTIONS = (("horizontal", (0, 1)), ("vertical", (1, 0)), ("diagonal", (1, 1)), ("diagonal", (1, -1)))
"""The lines a win can run along (both diagonals are ``diagonal``)."""


def win_direction(board: np.ndarray, column: int) -> str | None:
    """The direction of the four that the mover's piece dropped in ``column`` of ``board``
    (``[2, 6, 7]``, channel 0 the mover's) would connect: ``horizontal``, ``vertical`` or
    ``diagonal``; None when it connects none or more than one direction."""
    from zoo.plugins.envs.pettingzoo.baselines import CONNECT, ROWS, drop_row

    row, pieces = drop_row(board, column), board[0].astype(bool)
    found = set()
    for name, (dr, dc) in DIRECTIONS:
        run = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < ROWS and 0 <= c < pieces.shape[1] and pieces[r, c]:
                run, r, c = run + 1, r + sign * dr, c + sign * dc
        if run >= CONNECT:
            found.add(name)
    return found.pop() if len(found) == 1 else None


def probe_policy(net: object, cases: list[tuple[np.ndarray, np.ndarray, list[int]]],
                 extra: dict[str, np.ndarray] | None = None) -> tuple[float, float, float]:
    """``(mean probability of the right columns, share of argmax moves among them, mean entropy in
    nats)`` of ``net`` (a PPO :class:`~zoo.plugins.algorithms.ppo.networks.ActorCritic`) over
    ``cases`` (:func:`random_play_positions`); ``extra``: observation entries added to every case
    (``to_move``)."""
    import torch

    boards = np.stack([b for b, _, _ in cases])
    legal = np.stack([m for _, m, _ in cases])
    obs = {"observation": torch.as_tensor(boards), "zoo:action_mask": torch.as_tensor(legal)}
    for key, value in (extra or {}).items():
        obs[key] = torch.as_tensor(np.broadcast_to(value, (len(cases), *np.shape(value))).copy())
    with torch.no_grad():
        logits, _ = net._forward(obs)  # type: ignore[attr-defined]
        logp = torch.log_softmax(logits.masked_fill(~obs["zoo:action_mask"], -1e9), dim=-1)
    p = logp.exp().numpy()
    right = np.zeros(p.shape, bool)
    for i, (_, _, columns) in enumerate(cases):
        right[i, columns] = True
    entropy = -(p * np.where(p > 0, logp.numpy(), 0.0)).sum(axis=1)
    return float((p * right).sum(axis=1).mean()), float(right[np.arange(len(p)), p.argmax(axis=1)].mean()), \
        float(entropy.mean())


def probe(args: argparse.Namespace) -> int:
    """Each kept version's win-taking and blocking on positions from random play (a table)."""
    from zoo.core.checkpoint import load_checkpoint
    from zoo.core.config import algorithm_config_class
    from zoo.core.plugins import get_registry
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    run = Path(args.run).resolve()
    files = sorted((run / "history" / "learner").glob("v*.pt"))
    if not files:
        print(f"{run}: no kept versions in history/learner", file=sys.stderr)
        return 2
    picked = files[::max(1, args.every)]
    if picked[-1] != files[-1]:
        picked.append(files[-1])
    env_options = json.loads((run / "config.json").read_text()).get("env") or {}
    to_move = bool(env_options.get("to_move", False))
    env = make(MODULE, PettingZooConfig(to_move=to_move), 0)
    spec = env.spec.subset([env.spec.agents[0]])
    env.close()
    wins, blocks = random_play_positions(args.games, args.seed)
    extra = {"to_move": np.ones(1, np.float32)} if to_move else None
    reg = get_registry()
    algo = reg.get("algorithm", args.algo).load()
    config_class = algorithm_config_class(reg.get("algorithm", args.algo))
    print(f"{run.name}: {len(wins):,} positions with a win, {len(blocks):,} with a block to play, from "
          f"{args.games:,} games of random moves (seed {args.seed})\n")
    lines: dict[str, list[tuple[np.ndarray, np.ndarray, list[int]]]] = {"horizontal": [], "vertical": [],
                                                                         "diagonal": []}
    for case in wins:  # one winning column, along one direction
        direction = win_direction(case[0], case[2][0]) if len(case[2]) == 1 else None
        if direction:
            lines[direction].append(case)
    print(f"P(win) by direction: of the positions with one winning column along one line ({len(lines['horizontal']):,} "
          f"horizontal, {len(lines['vertical']):,} vertical, {len(lines['diagonal']):,} diagonal)\n")
    print("| version | env steps | P(win) | argmax wins | P(win): horizontal / vertical / diagonal | P(block) | "
          "argmax blocks | entropy (nats) |")
    print("|---|---|---|---|---|---|---|---|")
    for file in picked:
        ckpt = load_checkpoint(str(file))
        net = algo.build_policy(config_class(**(ckpt["algorithm"].get("config") or {})), spec)
        net.load_state_dict(ckpt["algorithm"]["policy"])
        net.eval()
        w, b = probe_policy(net, wins, extra), probe_policy(net, blocks, extra)
        by = " / ".join(f"{probe_policy(net, cases, extra)[0]:.3f}" if cases else "-" for cases in lines.values())
        print(f"| {int(ckpt.get('policy_version', 0))} | {int(ckpt.get('env_steps', 0)):,} | {w[0]:.3f} | {w[1]:.3f} | "
              f"{by} | {b[0]:.3f} | {b[1]:.3f} | "
              f"{(w[2] * len(wins) + b[2] * len(blocks)) / (len(wins) + len(blocks)):.3f} |", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train pfsp and latest-only self-play at one budget and seed")
    r.add_argument("--runs-dir", required=True)
    r.add_argument("--steps", type=int, default=500_000, help="budget in env steps of each run")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    r.add_argument("--algo", choices=ALGOS, default="mappo", help="the learner's (and its opponent's) algorithm")
    r.add_argument("--every-updates", type=int, default=10, help="keep a learner version every N updates")
    r.add_argument("--eval-episodes", type=int, default=20, help="games per eval-manager match")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="zoo train --set for every run")
    r.add_argument("--quiet", action="store_true", help="leave out zoo train's progress lines")
    p = sub.add_parser("report", help="play the final policies against the baselines; table and ratings plot")
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--algo", choices=ALGOS, default="mappo", help="the runs' algorithm (as given to run)")
    p.add_argument("--games", type=int, default=500, help="games against each baseline, half in each seat")
    p.add_argument("--deterministic", action="store_true", help="argmax actions instead of sampled ones")
    p.add_argument("--out", default=os.path.join("benchmarks", "connect_four.png"))
    q = sub.add_parser("probe", help="each kept version's wins taken and blocks played on positions of random play")
    q.add_argument("--run", required=True, help="a run folder (RUNS/c4-ppo-pfsp-s1)")
    q.add_argument("--algo", choices=ALGOS, default="ppo", help="the run's algorithm")
    q.add_argument("--every", type=int, default=5, help="every Nth kept version (and the last)")
    q.add_argument("--games", type=int, default=1500, help="games of random moves to take positions from")
    q.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return {"run": train, "report": report, "probe": probe}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
