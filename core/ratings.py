"""Elo ratings of a learner and the past versions it plays (issue 23, item 3; docs/history.md,
"Results and ratings").

The Elo system (A. E. Elo, *The Rating of Chessplayers, Past and Present*, Arco, 1978), in the
form FIDE's rating regulations use (FIDE Handbook, B.02, "Rating Regulations", 8.5): a player
rated ``Ra`` against one rated ``Rb`` has the expected score

    E_a = 1 / (1 + 10 ** ((Rb - Ra) / 400))

and after a game with score ``S_a`` (1 win, 0.5 draw, 0 loss) its rating moves by
``K * (S_a - E_a)``; the opponent's moves by the opposite amount (same K for both here, so the
sum of the two ratings is kept). Ratings are in Elo points (floats); a version never rated starts
at :data:`INITIAL_RATING`.

Games are rated one after the other, in the order given (the episodes' order in the metrics),
so a batch gives the same ratings as the same games rated one at a time.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

INITIAL_RATING = 1000.0
"""The rating of a version (and of the learner) before its first rated game, Elo points."""
DEFAULT_K = 32.0
"""The K-factor: the most points one game moves a rating (FIDE uses 40, 20 or 10 by the player's
history; 32 is the common choice for a pool without one)."""
WIN, DRAW, LOSS = 1.0, 0.5, 0.0


def expected_score(rating_a: float, rating_b: float) -> float:
    """The score A expects against B, ``1 / (1 + 10 ** ((rating_b - rating_a) / 400))``, in (0, 1)."""
    return 1.0 / (1.0 + 10.0 ** ((float(rating_b) - float(rating_a)) / 400.0))


def elo_update(rating_a: float, rating_b: float, score_a: float, k: float = DEFAULT_K) -> tuple[float, float]:
    """The two ratings after one game in which A scored ``score_a`` (1, 0.5 or 0) against B.

    Raises:
        ValueError: ``score_a`` is not in [0, 1], or ``k`` is not a finite number >= 0.
    """
    if not 0.0 <= float(score_a) <= 1.0:
        raise ValueError(f"elo_update: score_a={score_a!r} must be in [0, 1] (1 win, 0.5 draw, 0 loss)")
    if not (math.isfinite(float(k)) and k >= 0):
        raise ValueError(f"elo_update: k={k!r} must be a finite number >= 0")
    delta = float(k) * (float(score_a) - expected_score(rating_a, rating_b))
    return float(rating_a) + delta, float(rating_b) - delta


def learner_score(learner_return: float, opponent_return: float) -> float:
    """The learner's score in one episode from the two policies' returns: 1 when its return is
    higher (a win), 0.5 when equal (a draw), 0 when lower (a loss)."""
    if learner_return > opponent_return:
        return WIN
    return DRAW if learner_return == opponent_return else LOSS


@dataclass(frozen=True)
class Game:
    """One training game: the learner (policy ``source``) against ``opponent``'s pick of the
    source's ``version``; ``score`` is the learner's (1, 0.5, 0); ``opponent_return`` is the
    version's return in it."""

    source: str
    opponent: str
    version: int
    score: float
    opponent_return: float


def games_in(episodes: Iterable[dict], opponents: dict[str, str]) -> Iterator[Game]:
    """The games in episode rows (``metrics.jsonl``'s ``episode`` rows, or the dicts the trainer
    logs as them): for each opponent policy O of ``opponents`` (``{O: its source S}``) whose
    ``O_version`` the row holds, one :class:`Game` scored by ``S_return`` against ``O_return``
    (:func:`learner_score`). A row without ``O_version`` (O did not act in it) or without
    either return gives no game for O."""
    for row in episodes:
        for opp, source in opponents.items():
            version = row.get(f"{opp}_version")
            mine, theirs = row.get(f"{source}_return"), row.get(f"{opp}_return")
            if version is None or mine is None or theirs is None:
                continue
            yield Game(source, opp, int(version), learner_score(float(mine), float(theirs)), float(theirs))


BT_PRIOR_DRAWS = 2.0
""":func:`bradley_terry`'s prior: virtual draws of every player against a virtual player rated
:data:`INITIAL_RATING`."""


def bradley_terry(games: Iterable[tuple[str, str, float]], *, initial: float = INITIAL_RATING,
                  prior_draws: float = BT_PRIOR_DRAWS, tol: float = 1e-6, max_iter: int = 100_000) -> dict[str, float]:
    """Ratings fitted to all ``games`` at once, in Elo points: the Bradley-Terry model (R. A.
    Bradley and M. E. Terry, "Rank analysis of incomplete block designs: I. The method of paired
    comparisons", Biometrika 39, 1952) on the Elo scale, i.e. player a beats player b with
    probability :func:`expected_score` ``(R_a, R_b)``; a draw counts as half a win and half a
    loss. Unlike :func:`elo_update`'s one-game-at-a-time updates, the result does not depend on
    the games' order, and every game counts as much as every other (an Elo rating mostly shows
    its player's last games).

    The fit is the maximum a posteriori one with the prior R. Coulom's BayesElo program uses:
    ``prior_draws`` virtual draws of every player against a virtual player rated ``initial``:
    it anchors the scale (a player who only drew against equals stays at ``initial``) and keeps
    a player who won or lost every game finite. Solved by the minorization-maximization
    iteration of D. R. Hunter, "MM algorithms for generalized Bradley-Terry models", Ann.
    Statist. 32(1), 2004, eq. (3), with the strengths ``g_i = 10 ** ((R_i - initial) / 400)``
    (the virtual player's is 1) and ``W_i`` player i's wins (draws half) plus ``prior_draws /
    2``: ``g_i <- W_i / (sum over i's games of 1 / (g_i + g_opponent) + prior_draws / (g_i +
    1))``, all players at once, until no rating moves more than ``tol`` Elo points (at most
    ``max_iter`` rounds).

    Args:
        games: ``(player a, player b, a's score)`` per game, the score 1 (a won), 0.5 or 0.

    Returns:
        ``{player: rating}`` of every player named in ``games``, Elo points.

    Raises:
        ValueError: a score outside [0, 1], a player against itself, ``prior_draws`` not a
            finite number > 0, or ``tol`` not > 0.
    """
    import numpy as np

    if not (math.isfinite(float(prior_draws)) and prior_draws > 0):
        raise ValueError(f"bradley_terry: prior_draws={prior_draws!r} must be a finite number > 0 "
                         "(without a prior a player who won every game has no finite rating)")
    if not tol > 0:
        raise ValueError(f"bradley_terry: tol={tol!r} must be > 0")
    index: dict[str, int] = {}
    a_list: list[int] = []
    b_list: list[int] = []
    s_list: list[float] = []
    for a, b, score in games:
        if a == b:
            raise ValueError(f"bradley_terry: player {a!r} plays itself")
        if not 0.0 <= float(score) <= 1.0:
            raise ValueError(f"bradley_terry: score {score!r} of {a!r} against {b!r} must be in [0, 1] "
                             "(1 win, 0.5 draw, 0 loss)")
        a_list.append(index.setdefault(a, len(index)))
        b_list.append(index.setdefault(b, len(index)))
        s_list.append(float(score))
    n = len(index)
    if not n:
        return {}
    ia, ib, s = np.asarray(a_list), np.asarray(b_list), np.asarray(s_list)
    wins = np.bincount(ia, s, n) + np.bincount(ib, 1.0 - s, n) + prior_draws / 2.0
    scale = math.log(10.0) / 400.0
    ratings = np.zeros(n)  # R_i - initial
    for _ in range(int(max_iter)):
        g = np.exp(scale * ratings)
        inv = 1.0 / (g[ia] + g[ib])
        denom = np.bincount(ia, inv, n) + np.bincount(ib, inv, n) + prior_draws / (g + 1.0)
        new = np.log(wins / denom) / scale
        moved = float(np.max(np.abs(new - ratings)))
        ratings = new
        if moved < tol:
            break
    return {name: float(initial + ratings[i]) for name, i in index.items()}
