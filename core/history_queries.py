"""The history store's queries (:mod:`zoo.core.history`'s docstring, "Queries"): parsing one
(:func:`parse_query`), the probability each kept version has under it (:func:`query_weights`,
with AlphaStar's PFSP weighting :func:`pfsp_weight`) and the pick itself (:func:`pick_version`,
one seeded draw, falling back to ``latest`` when the query matches no kept version).
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zoo.core.history_store import Version

DEFAULT_PFSP_POWER = 2.0
UNPLAYED_WIN_RATE = 0.5
"""The win rate :func:`query_weights` assumes for a version with no games (AlphaStar's PFSP
plays an unknown opponent as an even one)."""


@dataclass(frozen=True)
class Query:
    """A parsed query (:func:`parse_query`): ``kind`` is ``latest``, ``version``, ``uniform``,
    ``top`` or ``pfsp``; ``version`` (kind ``version``), ``k`` (``top``), ``power`` (``pfsp``)."""

    kind: str
    version: int = 0
    k: int = 0
    power: float = DEFAULT_PFSP_POWER

    def __str__(self) -> str:
        return {"latest": "latest", "version": f"v{self.version}", "uniform": "uniform", "top": f"top-{self.k}",
                "pfsp": f"pfsp:{self.power:g}"}[self.kind]


QUERY_FORMS = "latest, v<VERSION> (or <VERSION>), uniform, top-<K>, pfsp or pfsp:<P>"


def parse_query(text: str) -> Query:
    """The :class:`Query` a string names: ``"latest"``, ``"v120"`` or ``"120"`` (version 120),
    ``"uniform"``, ``"top-5"`` (K = 5 >= 1), ``"pfsp"`` (P = 2) or ``"pfsp:3"`` (P finite, > 0).
    Case and surrounding spaces do not matter.

    Raises:
        ValueError: one line naming the text and the forms allowed.
    """
    s = str(text).strip().lower()
    if s in ("latest", "uniform"):
        return Query(s)
    if re.fullmatch(r"v?\d+", s):
        return Query("version", version=int(s.lstrip("v")))
    if m := re.fullmatch(r"top-(\d+)", s):
        if int(m.group(1)) >= 1:
            return Query("top", k=int(m.group(1)))
        raise ValueError(f"history query {text!r}: top-K needs K >= 1 (e.g. top-5)")
    if s == "pfsp":
        return Query("pfsp")
    if m := re.fullmatch(r"pfsp:(.+)", s):
        try:
            power = float(m.group(1))
        except ValueError:
            power = math.nan
        if math.isfinite(power) and power > 0:
            return Query("pfsp", power=power)
        raise ValueError(f"history query {text!r}: pfsp:P needs a finite power P > 0 (e.g. pfsp:2)")
    raise ValueError(f"history query {text!r} is not a query; use one of {QUERY_FORMS}")


def pfsp_weight(win_rate: float | None, power: float = DEFAULT_PFSP_POWER) -> float:
    """AlphaStar's PFSP "hard" weighting ``f(x) = x**power`` of the version's win rate ``x``
    against the learner (None: no games, taken as :data:`UNPLAYED_WIN_RATE`)."""
    x = UNPLAYED_WIN_RATE if win_rate is None else min(1.0, max(0.0, float(win_rate)))
    return x ** float(power)


def query_weights(query: Query, versions: Sequence[Version]) -> tuple[np.ndarray, str]:
    """The probability of picking each of ``versions`` (kept ones, any order) under ``query``:
    ``(p, "")`` with ``p`` float64 ``[len(versions)]`` summing to 1, or ``(zeros, reason)`` when
    the query matches none of them (the reason in words, for the fallback's note).

    - ``latest``: 1 on the highest version;
    - a fixed version: 1 on it;
    - ``uniform``: ``1 / n`` each;
    - ``top-K``: ``1 / m`` on each of the ``m = min(K, rated)`` versions with the highest rating
      (versions without a rating are not candidates; equal ratings: the newer first);
    - ``pfsp:P``: proportional to :func:`pfsp_weight` of each version's win rate.
    """
    n = len(versions)
    p = np.zeros(n, dtype=np.float64)
    if n == 0:
        return p, "no version is kept yet"
    if query.kind == "latest":
        p[max(range(n), key=lambda i: versions[i].version)] = 1.0
    elif query.kind == "version":
        hits = [i for i, v in enumerate(versions) if v.version == query.version]
        if not hits:
            return p, f"version {query.version} is not kept (kept: {_span(versions)})"
        p[hits[0]] = 1.0
    elif query.kind == "uniform":
        p[:] = 1.0 / n
    elif query.kind == "top":
        rated = [i for i, v in enumerate(versions) if v.rating is not None]
        if not rated:
            return p, "no kept version has a rating yet"
        rated.sort(key=lambda i: (-float(versions[i].rating), -versions[i].version))  # type: ignore[arg-type]
        chosen = rated[:query.k]
        p[chosen] = 1.0 / len(chosen)
    elif query.kind == "pfsp":
        w = np.array([pfsp_weight(v.win_rate(), query.power) for v in versions], dtype=np.float64)
        total = float(w.sum())
        if total <= 0:
            return p, "the learner beat every kept version in every game (every pfsp weight is 0)"
        p = w / total
    else:
        raise ValueError(f"unknown query kind {query.kind!r}")
    return p, ""


def _span(versions: Sequence[Version]) -> str:
    vs = sorted(v.version for v in versions)
    return ", ".join(map(str, vs)) if len(vs) <= 6 else f"{len(vs)} versions, {vs[0]} .. {vs[-1]}"


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One index drawn with probabilities ``p``: the first ``i`` with ``cumsum(p)[i] > u`` for
    ``u = rng.random()`` (one draw per pick, so a seeded generator repeats its picks)."""
    u = float(rng.random())
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, u * c[-1], side="right"), len(p) - 1))


@dataclass(frozen=True)
class Pick:
    """What a query picked: ``version`` (None only when no version is kept at all: then the
    caller acts with the learner's current weights), ``fell_back`` (the query matched no kept
    version, so ``latest`` was taken) and ``reason`` (why, in words; "" when it did not)."""

    version: Version | None
    fell_back: bool = False
    reason: str = ""


def pick_version(query: Query, versions: Sequence[Version], rng: np.random.Generator) -> Pick:
    """Pick one of ``versions`` (kept ones) by ``query`` with ``rng`` (:func:`query_weights`,
    :func:`draw`); a query that matches none falls back to ``latest`` (no draw is taken from
    ``rng`` for ``latest`` and fixed versions, nor for a fallback)."""
    p, reason = query_weights(query, versions)
    if reason:
        if not versions:
            return Pick(None, True, reason)
        newest = max(versions, key=lambda v: v.version)
        return Pick(newest, True, reason)
    if query.kind in ("latest", "version"):
        return Pick(versions[int(np.argmax(p))])
    return Pick(versions[draw(p, rng)])
