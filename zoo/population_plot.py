"""``zoo plot RUN --pbt``: a PBT run's population over env steps (docs/pbt.md, "Looking at the run").

Read from the run folder, never recomputed:

- ``config.json``'s ``pbt`` table: the members (``<pbt.policy>_0 .. <pbt.policy>_<P-1>``),
  the objective and the explored hyperparameters with their ranges;
- the ``metrics.jsonl`` rows the population manager writes at each round (``"type": "pbt"``,
  ``event`` ``exploit`` then ``explore`` per exploiting member, :meth:`zoo.core.pbt.Population.round`):
  ``env_steps`` (the round's), ``member``, ``from_member``, ``objective``, ``from_objective``,
  ``old_hyperparameters`` and ``new_hyperparameters``. The members' trainers' ``applied`` rows
  are not read: a member applies its order at its next update point, one update after the round
  or less, and the drawn change is at the round's env steps;
- each member's ``update`` rows (``"policy": <member>``): the objective over env steps
  (``episode_return_mean`` for ``return``, else that key);
- ``pbt/population.json`` (the manager's saved state): the hyperparameters of a member that
  appears in no ``pbt`` row (it never exploited nor was copied, so it kept its starting values).

A member's hyperparameters change only at its own ``explore``; the ``old_hyperparameters`` of
its first ``exploit`` row are therefore its values since env step 0, and a member first seen as
a source (``from_member``) had since env step 0 the values that row's exploit copies
(``new_hyperparameters``). :func:`population_history` turns the rows into series;
:func:`plot_population` draws them with matplotlib (Agg) and returns the Figure, each line with
a ``gid`` tests read back: ``objective|<member>``, ``<hyperparameter>|<member>``, and per
exploit two arrow annotations, ``copy|<member>|<env_steps>`` (objective panel) and
``lineage|<member>|<env_steps>`` (lineage panel).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zoo.runinfo import RunError

__all__ = ["Exploit", "PopulationHistory", "population_history", "population_table", "log_scaled",
           "plot_population"]

LOG_RATIO = 10.0
"""As :data:`zoo.core.pbt.LOG_UNIFORM_RATIO`: a range ``[low, high]`` with ``low > 0`` and
``high / low >= 10`` (a learning rate, resampled log-uniformly) is drawn on a log axis."""


@dataclass(frozen=True)
class Exploit:
    """One exploit: ``member`` copied ``from_member`` at the round at ``env_steps`` (the run's
    env steps), their objectives then (the ranking's values, in the objective's units)."""

    env_steps: int
    member: int
    from_member: int
    objective: float
    from_objective: float


@dataclass
class PopulationHistory:
    """A population's course, from a run's rows.

    ``values[name][i]``: member ``i``'s value of hyperparameter ``name`` as change points
    ``[(env_steps, value), ...]``, the first at env step 0, then one per explore of that
    member (its value from that env step on), in row order; ``[]`` when the rows and the saved
    state do not say (only a member in no row, without ``pbt/population.json``).
    ``end_env_steps``: the last env steps any member's update row or ``pbt`` row has.
    """

    members: list[str]
    objective: str
    hyperparameters: list[str]
    ranges: dict[str, list[float]]
    values: dict[str, list[list[tuple[int, float]]]]
    exploits: list[Exploit]
    end_env_steps: int


def population_table(config: dict[str, Any], run: str) -> dict[str, Any]:
    """``config.json``'s ``pbt`` table of a population run.

    Raises:
        RunError: the run ran no population (one line naming ``--pbt``).
    """
    pbt = config.get("pbt")
    if not isinstance(pbt, dict) or not pbt.get("members"):
        raise RunError(f"--pbt: run {run!r} did not train a population (its config.json has no pbt table: "
                       "pbt.members was 0), so there is no lineage or hyperparameter to draw; plot it without "
                       "--pbt, or train with --set pbt.members=4 (docs/pbt.md)")
    return pbt


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def population_history(config: dict[str, Any], rows: Iterable[dict[str, Any]], saved: dict[str, Any] | None = None,
                       run: str = "run") -> PopulationHistory:
    """The population's hyperparameters and exploits from a run's ``config.json`` (``config``),
    its ``metrics.jsonl`` rows in file order and its ``pbt/population.json`` (``saved``; None
    when absent); module docstring.

    Raises:
        RunError: the run ran no population, or no round has been decided yet (no ``exploit``
            row); one line each naming ``--pbt``.
    """
    from zoo.core.pbt import member_names

    pbt = population_table(config, run)
    members = member_names(str(pbt.get("policy", "default")), int(pbt["members"]))
    index = {m: i for i, m in enumerate(members)}
    given = pbt.get("hyperparameters") or {}
    ranges = {str(k): [float(x) for x in v] for k, v in given.items() if isinstance(v, list)}
    names = set(ranges)
    current: list[dict[str, float] | None] = [None] * len(members)
    points: list[list[tuple[int, dict[str, float]]]] = [[] for _ in members]
    exploits: list[Exploit] = []
    end = 0
    for row in rows:
        kind, steps = row.get("type"), _float(row.get("env_steps"))
        if kind == "update" and row.get("policy") in index and steps is not None:
            end = max(end, int(steps))
        if kind != "pbt" or steps is None or row.get("event") not in ("exploit", "explore"):
            continue
        end = max(end, int(steps))
        i, j = int(row["member"]), int(row["from_member"])
        if not (0 <= i < len(members) and 0 <= j < len(members)):
            continue
        old = {str(k): float(v) for k, v in (row.get("old_hyperparameters") or {}).items()}
        new = {str(k): float(v) for k, v in (row.get("new_hyperparameters") or {}).items()}
        names |= set(old) | set(new)
        if row["event"] == "exploit":
            if current[i] is None:  # its values since env step 0 (they change only at its own explore)
                current[i] = old
                points[i].append((0, old))
            if current[j] is None:  # the source's values since env step 0: what this exploit copies
                current[j] = new
                points[j].append((0, new))
            exploits.append(Exploit(int(steps), i, j, float(row.get("objective", float("nan"))),
                                    float(row.get("from_objective", float("nan")))))
        else:
            if current[i] is None:
                points[i].append((0, old))
            current[i] = new
            points[i].append((int(steps), new))
    if not exploits:
        interval = pbt.get("interval_env_steps")
        raise RunError(f"--pbt: run {run!r} has no exploit rows in metrics.jsonl yet: the population manager decides "
                       f"its first round once every member has passed pbt.interval_env_steps={interval} env steps "
                       f"and one episode (its members reached {end}); plot it without --pbt until then")
    for i, m in enumerate((saved or {}).get("members") or []):  # a member in no row kept its starting values
        if i < len(members) and current[i] is None and not m.get("lineage"):
            values = {str(k): float(v) for k, v in (m.get("hyperparameters") or {}).items()}
            names |= set(values)
            points[i].append((0, values))
    ordered = sorted(names)
    series = {n: [[(e, v[n]) for e, v in member if n in v] for member in points] for n in ordered}
    return PopulationHistory(members, str(pbt.get("objective", "return")), ordered, ranges, series, exploits, end)


def log_scaled(name: str, history: PopulationHistory) -> bool:
    """Whether hyperparameter ``name`` is drawn on a log axis: its configured range has
    ``low > 0`` and ``high / low >= 10`` (the ranges PBT resamples log-uniformly, learning rates);
    for a range ``[]`` (the option's declared bounds) the same test on the values drawn."""
    given = history.ranges.get(name) or []
    if len(given) == 2:
        low, high = given
    else:
        drawn = [v for member in history.values.get(name, []) for _, v in member]
        if not drawn:
            return False
        low, high = min(drawn), max(drawn)
    return low > 0 and high / low >= LOG_RATIO


def _objective_label(objective: str) -> str:
    if objective == "return":
        return "objective: mean return of the\nmember's recent episodes"
    return f"objective: {objective}\n(its update rows)"


def plot_population(run_dir: str | os.PathLike, smooth: int = 0, title: str | None = None):
    """Draw a PBT run's population over env steps, panels sharing the x axis; returns the Figure
    (not saved):

    1. each member's objective (its update rows' ``episode_return_mean``, or the objective's
       key), rows at one env step averaged, then smoothed, with an arrow per exploit from the
       source's objective to the member's at the round (``copy|<member>|<env_steps>``: tail
       ``(env_steps, from_objective)``, head ``(env_steps, objective)``), a dot at the tail in
       the source's colour;
    2. the lineage: a row per member (y = its index, member 0 on top) and an arrow per exploit
       from the source's row to the member's (``lineage|<member>|<env_steps>``: tail
       ``(env_steps, from_member)``, head ``(env_steps, member)``);
    3. one panel per explored hyperparameter, in name order: each member's value as a step line
       (``steps-post``) from env step 0 to the run's last env steps (log axis: :func:`log_scaled`).

    A dotted vertical line marks each round's env steps in every panel.

    Args:
        run_dir: the run folder (or its name under ``./runs``).
        smooth: moving average over this many points of each member's objective (0: points / 50).
        title: the figure's title (default: the run, the population and what the arrows mean).

    Raises:
        RunError: not a run folder; a run without a population or without a decided round,
            before anything is drawn (one line naming ``--pbt``).
    """
    from zoo.runinfo import read_config, read_metrics, resolve_run

    path = resolve_run(run_dir)
    config = read_config(path)
    population_table(config, path.name)  # refused before the metrics are read
    rows = read_metrics(path)
    saved = None
    try:
        with open(path / "pbt" / "population.json", encoding="utf-8") as f:
            saved = json.load(f).get("population")
    except (OSError, ValueError, AttributeError):
        pass
    history = population_history(config, rows, saved, path.name)

    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from zoo.core.pbt import objective_key
    from zoo.plotting import X_LABELS, mean_per_x, smooth_curve

    key = objective_key(history.objective)
    count = len(history.members)
    heights = [3.0, 0.6 + 0.3 * count] + [2.2] * len(history.hyperparameters)
    fig = Figure(figsize=(9, 0.8 + sum(heights)))
    axes = fig.subplots(len(heights), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = [cycle[i % len(cycle)] for i in range(count)]
    top, tree = axes[0], axes[1]
    for i, member in enumerate(history.members):
        mine = [r for r in rows if r.get("type") == "update" and r.get("policy") == member
                and _float(r.get(key)) is not None and _float(r.get("env_steps")) is not None]
        xs, ys = mean_per_x(np.array([float(r["env_steps"]) for r in mine]), np.array([float(r[key]) for r in mine]))
        xs, ys = smooth_curve(xs, ys, smooth if smooth > 0 else max(1, len(ys) // 50))
        (line,) = top.plot(xs, ys, color=colours[i], lw=1.2, label=member)
        line.set_gid(f"objective|{member}")
        tree.axhline(i, color=colours[i], lw=2.0, alpha=0.5)
    for e in sorted({x.env_steps for x in history.exploits}):
        for ax in axes:
            ax.axvline(e, color="0.6", lw=0.6, ls=":", zorder=0)
    for x in history.exploits:
        member = history.members[x.member]
        for ax, head, tail, gid in ((top, x.objective, x.from_objective, "copy"),
                                    (tree, x.member, x.from_member, "lineage")):
            arrow = ax.annotate("", xy=(x.env_steps, head), xytext=(x.env_steps, tail),
                                arrowprops={"arrowstyle": "-|>", "color": colours[x.member], "lw": 1.4})
            arrow.set_gid(f"{gid}|{member}|{x.env_steps}")
            ax.plot([x.env_steps], [tail], "o", color=colours[x.from_member], ms=4)
    top.set_ylabel(_objective_label(history.objective), fontsize=9)
    top.legend(fontsize=8, ncol=min(4, count))
    tree.set_yticks(range(count), history.members, fontsize=8)
    tree.set_ylim(count - 0.5, -0.5)
    tree.set_ylabel("lineage:\ncopied from", fontsize=9)
    for ax, name in zip(axes[2:], history.hyperparameters, strict=True):
        for i, member in enumerate(history.members):
            changes = history.values[name][i]
            if not changes:
                continue
            steps = [float(e) for e, _ in changes] + [float(max(history.end_env_steps, changes[-1][0]))]
            values = [v for _, v in changes] + [changes[-1][1]]
            (line,) = ax.plot(steps, values, color=colours[i], lw=1.4, drawstyle="steps-post", label=member)
            line.set_gid(f"{name}|{member}")
        log = log_scaled(name, history)
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(f"{name}\n({'log' if log else 'linear'} scale)", fontsize=9)
    for ax in (top, *axes[2:]):
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel(X_LABELS["env_steps"])
    first, last = history.members[0], history.members[-1]
    top.set_title(title or (f"{path.name}: population {first} .. {last}; arrow: at an exploit the member (head) "
                            "copies the source (dot)"), fontsize=10)
    fig.tight_layout()
    return fig
