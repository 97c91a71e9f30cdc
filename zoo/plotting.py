"""Learning curves from runs' ``metrics.jsonl`` with matplotlib (Agg: no display needed).

:func:`plot_runs` returns the :class:`matplotlib.figure.Figure`, so callers (and tests)
can read the plotted points back: every curve is a ``Line2D`` whose ``gid`` is
``"<label>|<metric>"``; a seed group's band is a ``PolyCollection`` with the same gid
plus ``"|band"``.

- **y**: any numeric field of the ``episode`` rows (``return``, ``length``, the env's
  statistics such as ``hider_return``) or of the ``update`` rows (``episode_return_mean``,
  losses, ``policy_lag_mean``...); an episode field wins when both have it. Default: the
  per-team returns when the env logs them (fields named ``<team>_return``, e.g.
  hide-and-seek's ``hider_return`` and ``seeker_return``), else ``return``.
- **ratings**: ``rating``, the eval manager's Elo rating of each kept version it rated
  (docs/history.md, "The eval manager"), one point per version at the env steps it was kept
  at, ``fit_rating``, its eval rating fitted to all the eval games at once (the one to compare
  versions by), and ``training_rating``, each kept version's rating from training games (the store's
  ``versions.rating``): read from the run's ``history.sqlite`` (rows of type ``rating``, one
  per version and policy, ordered by env steps; not smoothed unless ``smooth`` is given). A
  run of named policies draws each selected policy's versions as its own line.
- **x**: ``env_steps`` (calls to ``env.step``), ``frames`` (env steps x frame-skip) or
  ``time`` (seconds of wall time since the trainer started; rows without ``time_s`` get it
  by linear interpolation between the update rows around them).
- **rows sharing an x value** are one point, their mean (:func:`mean_per_x`): episodes that
  end in the same sample share its env steps (every MPE env of a ring group ends its 25-step
  episodes together), and drawn one by one they made vertical spikes.
- **smoothing**: a trailing moving average over ``smooth`` consecutive points (the first
  ``smooth - 1``, which have no full window, are not drawn); ``smooth=0`` picks
  ``max(1, points // 50)``; ``1`` draws the points as they are.
- **named policies** (a run whose ``config.json`` has ``policies``, docs/policies.md): each
  selected policy (``policies``: every one unless named) is its own line. ``return`` (the
  default) means each policy's ``<P>_return`` field of the episode rows (the mean over its
  agents); an update-row metric (``episode_return_mean``, losses...) is drawn from each
  policy's own update rows (``"policy": P``), its line's gid ``"<label>|<metric>@<P>"``;
  other episode fields (``length``, the env's statistics, ``<P>_return`` named with ``--y``)
  are the run's, one line. A run without named policies has one policy, ``default``.
- **seeds**: runs whose ``config.json`` differ only in ``seed`` (and ``name``,
  ``runs_dir``) form one curve: the mean over the runs, with a band of +- one standard
  deviation (numpy, ``ddof=0``), on the env steps where every run has data (each run's
  smoothed curve is linearly interpolated onto the union of their x values).
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.runinfo import RunError, read_config, read_metrics

X_AXES = ("env_steps", "frames", "time")
X_LABELS = {"env_steps": "env steps (calls to env.step)", "frames": "frames (env steps x frame-skip)",
            "time": "wall time since the trainer started (s)"}
_NOT_METRICS = {"type", "env_steps", "frames", "time_s", "version"}
_IDENTITY = ("seed", "name", "runs_dir")  # what may differ between the runs of one seed group

__all__ = ["plot_runs", "RunCurves", "Curve", "load_run", "available_metrics", "default_metrics", "smooth_curve",
           "y_label", "X_AXES", "run_policies", "plan_curves", "mean_per_x"]


@dataclass
class RunCurves:
    """One run's metrics, ready to plot: ``rows`` by type (``episode``, ``update``)."""

    path: Path
    name: str
    config: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]]

    @property
    def frame_skip(self) -> int:
        return max(1, int((self.config.get("env_spec") or {}).get("frame_skip", 1)))


@dataclass(frozen=True)
class Curve:
    """One line of a run: field ``metric`` of its rows; ``policy``: only the update rows of that
    policy (None: every row); ``owner``: the policy the line belongs to (None: the run's)."""

    metric: str
    policy: str | None = None
    owner: str | None = None

    @property
    def key(self) -> str:
        """``metric``, or ``metric@policy`` for one policy's update rows (the line's gid after ``label|``)."""
        return f"{self.metric}@{self.policy}" if self.policy else self.metric

    @property
    def description(self) -> str:
        if self.owner is None:
            return self.metric
        return f"{self.owner} return" if self.metric == f"{self.owner}_return" else f"{self.owner} {self.metric}"


def run_policies(run: RunCurves) -> list[str]:
    """The run's named policies in declaration order (``config.json``'s ``policies``); ``[]`` when it names none."""
    named = run.config.get("policies")
    return list(named) if isinstance(named, dict) else []


def load_run(run_dir: str | os.PathLike) -> RunCurves:
    """Read a run directory's config and metrics.

    Raises:
        RunError: not a run folder, or it has no metrics yet.
    """
    from zoo.runinfo import resolve_run

    path = resolve_run(run_dir)
    config = read_config(path)
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in read_metrics(path):
        rows.setdefault(str(row.get("type", "update")), []).append(row)
    ratings = rating_rows(path)
    if ratings:
        rows["rating"] = ratings
    if not rows.get("episode") and not rows.get("update"):
        raise RunError(f"run {str(run_dir)!r} has no metrics yet ({path / 'metrics.jsonl'} holds no episode "
                       "or update rows)")
    return RunCurves(path, path.name, config, rows)


def rating_rows(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """One row per version of each policy in the run's history store, ordered by env steps:
    ``{"type": "rating", "policy", "version", "env_steps", "time_s", "rating", "fit_rating",
    "training_rating"}`` (``rating``: the eval manager's, left out when it did not rate the
    version; ``fit_rating``: the rating fitted to all its eval games at once,
    :meth:`~zoo.core.history.VersionStore.fitted_ratings`, left out when it played none;
    ``training_rating`` from training games, left out when None). ``[]`` without a
    store, or when no version has either rating."""
    from zoo.core.history import DB_NAME, VersionStore
    from zoo.core.history_eval import player_name

    if not os.path.isfile(os.path.join(os.fspath(run_dir), DB_NAME)):
        return []
    out = []
    with VersionStore(run_dir, readonly=True) as store:
        for policy in store.policies():
            rated = {s.version: s.rating for s in store.standings(policy) if s.version is not None}
            fitted = store.fitted_ratings(policy)
            for v in store.versions(policy, kept_only=False):
                row: dict[str, Any] = {"type": "rating", "policy": policy, "version": v.version,
                                       "env_steps": v.env_steps, "time_s": v.time_s}
                if rated.get(v.version) is not None:
                    row["rating"] = rated[v.version]
                if fitted.get(player_name(v.version)) is not None:
                    row["fit_rating"] = fitted[player_name(v.version)]
                if v.rating is not None:
                    row["training_rating"] = v.rating
                if len(row) > 5:
                    out.append(row)
    return sorted(out, key=lambda r: (r["policy"], r["env_steps"], r["version"]))


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def available_metrics(run: RunCurves, policy: str | None = None) -> dict[str, str]:
    """``{metric: row type}`` of every numeric field the run logged (episode fields first);
    with ``policy``, of the update rows only that policy's (``"policy": policy``)."""
    out: dict[str, str] = OrderedDict()
    for kind in ("episode", "update", "rating"):
        for row in run.rows.get(kind, []):
            if kind in ("update", "rating") and policy is not None and row.get("policy") != policy:
                continue
            for k, v in row.items():
                if k not in _NOT_METRICS and _numeric(v) and k not in out:
                    out[k] = kind
    return out


def default_metrics(runs: Sequence[RunCurves]) -> list[str]:
    """The per-team returns (episode fields ``<team>_return``) if any run logs them, else ``["return"]``."""
    teams = sorted({k for r in runs for k, kind in available_metrics(r).items()
                    if kind == "episode" and k.endswith("_return")})
    return teams or ["return"]


def y_label(metric: str) -> str:
    """Axis label of ``metric`` naming its unit."""
    if metric == "return":
        return "episode return (sum of rewards, the env's units)"
    if metric.endswith("_return"):
        return f"{metric.removesuffix('_return')} return per episode (mean over the team's agents)"
    if metric == "rating":
        return "eval manager's Elo rating of each kept version"
    if metric == "fit_rating":
        return "eval rating of each kept version, fitted to all eval games at once (Bradley-Terry)"
    if metric == "training_rating":
        return "Elo rating of each kept version from training games"
    if metric == "length":
        return "episode length (env steps)"
    if metric == "episode_return_mean":
        return "mean return of the trainer's recent episodes"
    if metric.startswith("policy_lag"):
        return f"{metric} (policy versions)"
    return metric


def _x_values(run: RunCurves, rows: list[dict[str, Any]], x: str) -> np.ndarray:
    steps = np.array([float(r.get("env_steps", np.nan)) for r in rows])
    if x == "env_steps":
        return steps
    if x == "frames":
        return np.array([float(r["frames"]) if _numeric(r.get("frames")) else s * run.frame_skip
                         for r, s in zip(rows, steps, strict=True)])
    known = [(float(r["env_steps"]), float(r["time_s"])) for kind in ("update", "end")
             for r in run.rows.get(kind, []) if _numeric(r.get("time_s")) and _numeric(r.get("env_steps"))]
    own = np.array([float(r["time_s"]) if _numeric(r.get("time_s")) else np.nan for r in rows])
    missing = np.isnan(own)
    if missing.any():
        if len(known) < 1:
            raise RunError(f"run {run.name!r} logged no wall times (time_s) to plot against; use --x env_steps")
        ks, kt = np.array(sorted(known)).T
        own[missing] = np.interp(steps[missing], np.concatenate([[0.0], ks]), np.concatenate([[0.0], kt]))
    return own


def series(run: RunCurves, metric: str, x: str, policy: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The raw points ``(x, y)`` of ``metric``, one per row that has it, in file order; with
    ``policy``, of the update rows only that policy's.

    Raises:
        RunError: the run (that policy) never logged ``metric`` (the message lists what it did log).
    """
    kinds = available_metrics(run, policy)
    if metric not in kinds:
        whose = f"policy {policy} of run {run.name!r}" if policy else f"run {run.name!r}"
        raise RunError(f"unknown metric {metric!r} for {whose}; it logged: {', '.join(kinds) or 'nothing'}")
    rows = [r for r in run.rows.get(kinds[metric], []) if _numeric(r.get(metric))
            and (policy is None or kinds[metric] not in ("update", "rating") or r.get("policy") == policy)]
    return _x_values(run, rows, x), np.array([float(r[metric]) for r in rows])


def _selected(run: RunCurves, policies: Sequence[str]) -> list[str]:
    """The run's policies that ``policies`` names (all of them when it names none)."""
    names = run_policies(run)
    known = names or ["default"]
    for name in policies:
        if name not in known:
            has = f"its policies: {', '.join(names)}" if names else "it names no policies (its one policy: default)"
            raise RunError(f"--policy {name}: run {run.name!r} has no policy {name!r}; {has}")
    if not names:
        return []
    return [n for n in names if n in policies] if policies else names


def plan_curves(run: RunCurves, metrics: Sequence[str] | None, policies: Sequence[str] = ()) -> list[Curve]:
    """The lines of ``run`` for ``metrics`` (default: :func:`default_metrics`, or ``return``
    for a run of named policies) and the selected ``policies`` (module docstring). Without
    ``policies``, an update-row or rating metric is drawn for the policies that logged it.

    Raises:
        RunError: a policy the run does not have (listing its policies).
    """
    selected = _selected(run, policies)
    if not run_policies(run):
        return [Curve(m) for m in (list(metrics) if metrics else default_metrics([run]))]
    kinds = available_metrics(run)
    out: list[Curve] = []
    for m in list(metrics) if metrics else ["return"]:
        if m == "return":
            out += [Curve(f"{p}_return", None, p) for p in selected]
        elif kinds.get(m) in ("update", "rating"):
            # a policy left to the default that never logged it (a frozen opponent has no update
            # rows and no ratings) is left out; a policy named with --policy must have it
            having = selected if policies else [p for p in selected if m in available_metrics(run, p)]
            out += [Curve(m, p, p) for p in having or selected]
        else:
            out.append(Curve(m))
    return out


def mean_per_x(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One point per distinct ``x``: the mean of the ``y`` of the rows at it, in increasing ``x``.
    Example: x ``[25, 25, 25, 50]``, y ``[-10, -30, -20, -5]`` -> ``[25, 50]``, ``[-20, -5]``."""
    if not len(x):
        return x, y
    ux, inverse = np.unique(x, return_inverse=True)
    inverse = inverse.reshape(-1)
    return ux, np.bincount(inverse, weights=y) / np.bincount(inverse)


def smooth_curve(x: np.ndarray, y: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Trailing moving average over ``window`` rows: ``y'[i] = mean(y[i - window + 1 .. i])``
    for ``i >= window - 1`` (``window`` is capped at ``len(y)``; 1 returns the input)."""
    window = max(1, min(int(window), len(y)))
    if window == 1:
        return x, y
    total = np.concatenate([[0.0], np.cumsum(y, dtype=np.float64)])
    return x[window - 1:], (total[window:] - total[:-window]) / window


def _groups(runs: Sequence[RunCurves]) -> list[list[RunCurves]]:
    """Runs whose configs are equal but for seed, name and runs_dir, in first-seen order."""
    out: OrderedDict[str, list[RunCurves]] = OrderedDict()
    for run in runs:
        key = json.dumps({k: v for k, v in run.config.items() if k not in _IDENTITY}, sort_keys=True, default=str)
        out.setdefault(key, []).append(run)
    return list(out.values())


def _group_label(group: list[RunCurves]) -> str:
    if len(group) == 1:
        return group[0].name
    prefix = os.path.commonprefix([r.name for r in group]).rstrip("-_ .") or \
        f"{group[0].config.get('algo_name')} on {group[0].config.get('env_name')}"
    seeds = ", ".join(str(r.config.get("seed")) for r in group)
    return f"{prefix} (seeds {seeds}: mean +- std)"


def plot_runs(run_dirs: Sequence[str | os.PathLike], metrics: Sequence[str] | None = None, x: str = "env_steps",
              smooth: int = 0, title: str | None = None, policies: Sequence[str] = ()):
    """Draw the learning curves of ``run_dirs`` on one axes; returns the Figure (not saved).

    Args:
        run_dirs: run directories (or run names under ``./runs``).
        metrics: fields to plot (default: :func:`default_metrics` of each run; ``return``
            per policy for a run of named policies).
        x: ``env_steps``, ``frames`` or ``time``.
        smooth: moving-average window in points, after rows sharing an x value are averaged
            (0: automatic; module docstring).
        policies: the named policies to draw (default: every one; module docstring).

    Raises:
        RunError: a run folder that does not exist or has no metrics; an unknown metric
            (listing what the run, or the policy, logged); a policy a run does not have
            (listing its policies); an unknown ``x``; seed runs with no common env steps.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    if x not in X_AXES:
        raise RunError(f"--x {x!r} is not one of {', '.join(X_AXES)}")
    runs = [load_run(d) for d in run_dirs]
    chosen = {id(run): plan_curves(run, metrics, policies) for run in runs}
    for run in runs:  # every error before drawing anything
        for c in chosen[id(run)]:
            series(run, c.metric, x, c.policy)
    fig = Figure(figsize=(8, 4.8))
    ax = fig.add_subplot()
    colours = iter(matplotlib.rcParams["axes.prop_cycle"].by_key()["color"] * 10)
    shown: list[str] = []
    policy_returns = True  # every line is a named policy's return
    for group in _groups(runs):
        label = _group_label(group)
        plan = chosen[id(group[0])]
        shown += [c.metric for c in plan if c.metric not in shown]
        owned = any(c.owner for c in plan)
        policy_returns &= all(c.owner and c.metric == f"{c.owner}_return" for c in plan)
        for curve in plan:
            metric = curve.metric
            alone = len(plan) == 1 and not owned and not (metric != "return" and len(runs) > 1)
            name = label if alone else f"{label}: {curve.description}"
            colour = next(colours)
            curves = []
            for run in group:
                xs, ys = mean_per_x(*series(run, metric, x, curve.policy))
                n = len(ys)
                auto = 1 if available_metrics(run, curve.policy).get(metric) == "rating" else max(1, n // 50)
                curves.append(smooth_curve(xs, ys, smooth if smooth > 0 else auto))
            if len(curves) == 1:
                (line,) = ax.plot(*curves[0], color=colour, lw=1.2, label=name)
                line.set_gid(f"{label}|{curve.key}")
                continue
            lo = max(c[0][0] for c in curves if len(c[0]))
            hi = min(c[0][-1] for c in curves if len(c[0]))
            grid = np.unique(np.concatenate([c[0] for c in curves]))
            grid = grid[(grid >= lo) & (grid <= hi)]
            if not grid.size:
                raise RunError(f"runs {', '.join(r.name for r in group)} share no range of {x} to average over")
            stack = np.stack([np.interp(grid, cx, cy) for cx, cy in curves])
            mean, std = stack.mean(0), stack.std(0)
            (line,) = ax.plot(grid, mean, color=colour, lw=1.4, label=name)
            line.set_gid(f"{label}|{curve.key}")
            band = ax.fill_between(grid, mean - std, mean + std, color=colour, alpha=0.25, lw=0)
            band.set_gid(f"{label}|{curve.key}|band")
    ax.set_xlabel(X_LABELS[x])
    metrics = shown
    if policy_returns and metrics:
        ax.set_ylabel("return per episode (mean over the policy's agents)")
    elif len(metrics) == 1:
        ax.set_ylabel(y_label(metrics[0]))
    elif all(m.endswith("_return") for m in metrics):
        ax.set_ylabel("return per episode (mean over the team's agents)")
    else:
        ax.set_ylabel(", ".join(metrics))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    windows = "automatic smoothing" if smooth <= 0 else ("no smoothing" if smooth == 1 else
                                                          f"moving average of {smooth} rows")
    ax.set_title(title or f"{', '.join(metrics)} ({windows})", fontsize=10)
    fig.tight_layout()
    return fig
