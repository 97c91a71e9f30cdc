"""The medians and the bars table of ``time_to_return.py`` (split from it to keep it readable):
a cell is the median of the runs' values, then every run's value in run order; a time of None
means "never" (later than every time).
"""
from __future__ import annotations

import math

from peers import median


def median_time(values: list[float | None]) -> float | None:
    """The median of times where None is "never" (later than every time): [30, None, 10] -> 30;
    [None, None, 10] -> None; [10, 20, 30, None] -> 25 (mean of the middle two); [10, 20, None,
    None] -> None."""
    if not values:
        return None
    m = median([math.inf if v is None else v for v in values])
    return None if math.isinf(m) else m


def _cell(values: list[float | None], digits: int, thousands: bool = False, never: str = "never",
          mid: float | None = None) -> str:
    """``"31.0 (28.5, 31.0, never)"``: the median, then every value in run order."""
    if not values:
        return "-"

    def fmt(v: float | None) -> str:
        return never if v is None else (f"{v:,.{digits}f}" if thousands else f"{v:.{digits}f}")

    return f"{fmt(mid)} (" + ", ".join(fmt(v) for v in values) + ")"


def bars_table(rows: list[dict]) -> str:
    """For rows with ``seconds_to_bar`` (a task with bars, run to its end): per system, the wall
    seconds and env steps to each bar, the final return (mean of the last 100 episodes), the wall
    and CPU seconds of the whole run; a cell is the median, then every run's value. Example cell
    ``"812 s, 400,128 (812 s, 400,128)"``; never reached: ``"never"``."""
    ok = [r for r in rows if "error" not in r and "seconds_to_bar" in r]
    if not ok:
        return ""
    bars = list(ok[0]["seconds_to_bar"])
    out = ["| system | " + " | ".join(f"s, env steps to mean-20 >= {b}" for b in bars)
           + " | final return (last 100 episodes) | wall s | CPU s |", "|---" * (len(bars) + 4) + "|"]
    for system in dict.fromkeys(r["system"] for r in ok):
        got = [r for r in ok if r["system"] == system]
        cells = []
        for b in bars:
            hits = [r["seconds_to_bar"][b] for r in got]
            t_mid = median_time([h[0] if h else None for h in hits])
            s_mid = median_time([h[1] if h else None for h in hits])
            mid = "never" if t_mid is None else f"{t_mid:,.0f} s, {s_mid:,.0f}"
            cells.append(mid + " (" + ", ".join(f"{h[0]:,.0f} s, {h[1]:,}" if h else "never" for h in hits) + ")")
        finals = [r.get("final_mean") for r in got]
        known = [f for f in finals if f is not None]
        cells.append(_cell(finals, 1, never="-", mid=median(known) if known else None))
        cells.append(_cell([r["wall_s"] for r in got], 0, True, mid=median([r["wall_s"] for r in got])))
        cpu = [r.get("cpu_s") for r in got]
        cpu_known = [c for c in cpu if c is not None]
        cells.append(_cell(cpu, 0, True, never="-", mid=median(cpu_known) if cpu_known else None))
        out.append(f"| {got[0]['label']} | " + " | ".join(cells) + " |")
    return "\n".join(out)
