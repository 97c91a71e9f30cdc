"""The eval manager's results in the history store (:mod:`zoo.core.workers.evaluator`,
docs/history.md, "The eval manager"): the records it writes and reads back (:class:`EvalGame`,
:class:`EvalEpisode`, :class:`Standing`, :class:`EvalResult`) and :class:`EvalTables`, the
store's methods on tables ``eval_games`` and ``eval_ratings`` (one Elo update per game with an
opponent, :func:`zoo.core.ratings.elo_update`), which :class:`zoo.core.history.VersionStore`
inherits.
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from zoo.core.history_store import HistoryDB, HistoryError


def player_name(version: int) -> str:
    """A kept version's name as an eval manager's player: ``v<version>`` (a baseline's is its plugin name)."""
    return f"v{int(version)}"


@dataclass(frozen=True)
class EvalGame:
    """One game of the eval manager (:mod:`zoo.core.workers.evaluator`): ``player`` (a version's
    :func:`player_name`, or a baseline's name) played ``opponent`` (likewise; None in a
    single-agent env, where a game is an episode with no opponent) from agent ``seat`` (0: the
    env's first agent, the first to move); ``score`` is the player's (1 win, 0.5 draw, 0 loss;
    None without an opponent); returns are each side's summed reward, the env's units.
    ``curriculum_stage``: the curriculum stage it was played at (None: the eval manager does not
    drive a curriculum); ``stats``: the episode's other numeric fields (``length``, the env's
    ``info["stats"]``), what a curriculum condition on another field than ``return`` reads."""

    player: str
    opponent: str | None
    seat: int
    score: float | None
    player_return: float
    opponent_return: float | None = None
    player_version: int | None = None
    opponent_version: int | None = None
    curriculum_stage: int | None = None
    stats: dict[str, float] | None = None


@dataclass(frozen=True)
class EvalEpisode:
    """One evaluation episode of a version, as a curriculum driven by the eval manager reads it
    (:meth:`VersionStore.eval_episodes`): ``id`` its ``eval_games`` row (increasing in play
    order), ``version`` the version evaluated, ``stage`` the curriculum stage it was played at,
    ``values`` its numeric fields (``return``: the version's own return; ``length`` and env
    statistics when the game recorded them)."""

    id: int
    version: int
    stage: int
    values: dict[str, float]


@dataclass(frozen=True)
class Standing:
    """A player's eval totals (table ``eval_ratings``): its Elo ``rating`` (None until it played
    a game with an opponent), ``games`` (as player or opponent, episodes alone included),
    ``wins``/``draws``/``losses`` (its own), ``mean_return`` over all its games."""

    player: str
    version: int | None
    rating: float | None
    games: int
    wins: int
    draws: int
    losses: int
    mean_return: float | None

    def win_rate(self) -> float | None:
        """``(wins + draws / 2) / (wins + draws + losses)``; None with no game against an opponent."""
        n = self.wins + self.draws + self.losses
        return None if n == 0 else (self.wins + 0.5 * self.draws) / n


@dataclass(frozen=True)
class EvalResult:
    """The eval games of ``player`` against ``opponent`` (None: alone) from the player's side:
    ``games``, ``wins``, ``draws``, ``losses``, ``mean_return`` (the player's)."""

    player: str
    opponent: str | None
    games: int
    wins: int
    draws: int
    losses: int
    mean_return: float

    def win_rate(self) -> float | None:
        """``(wins + draws / 2) / games``; None without an opponent or games."""
        return None if self.opponent is None or not self.games else (self.wins + 0.5 * self.draws) / self.games


class EvalTables(HistoryDB):
    """The history store's eval tables (module docstring): the part of
    :class:`zoo.core.history.VersionStore` that writes and reads the eval manager's games."""

    def record_eval(self, policy: str, games: Sequence[EvalGame], *, k: float, initial: float,
                    deterministic: bool = False, loaded: dict[int, float] | None = None) -> int:
        """Write one match of the eval manager (games in play order) in one short transaction:
        a row of ``eval_games`` per game, with both players' Elo ratings after it, and each
        player's totals in ``eval_ratings`` (:class:`Standing`; a player never rated starts at
        ``initial``; one :func:`zoo.core.ratings.elo_update` with ``k`` per game that has an
        opponent; a game without one only counts the player's games and return).

        ``loaded``: ``{version: time_s}`` of each version's row as it was when its weights were
        loaded; a game in which a version played whose row is gone or was made again since
        (a resumed trainer cut it back: :meth:`drop_after`) is not written.

        Returns:
            The games written.

        Raises:
            HistoryError: the store could not be written.
        """
        import time as _time

        now = _time.time()
        try:
            with self._write():
                valid: dict[int, bool] = {}

                def ok(v: int | None) -> bool:
                    if v is None or loaded is None:
                        return True
                    if v not in valid:
                        row = self.get(policy, v)
                        valid[v] = row is not None and v in loaded and row.time_s == loaded[v]
                    return valid[v]

                keep = [g for g in games if ok(g.player_version) and ok(g.opponent_version)]
                totals = {s.player: s for s in self.standings(policy)}
                for g in keep:
                    ratings = _apply_eval(totals, g, float(k), float(initial))
                    self.db.execute(
                        "INSERT INTO eval_games (policy, player, player_version, opponent, opponent_version, seat, "
                        "score, player_return, opponent_return, deterministic, k, initial, player_rating, "
                        "opponent_rating, time_s, curriculum_stage, stats) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (policy, g.player, g.player_version, g.opponent, g.opponent_version, int(g.seat), g.score,
                         float(g.player_return), g.opponent_return, int(bool(deterministic)), float(k),
                         float(initial), *ratings, now, g.curriculum_stage,
                         None if g.stats is None else json.dumps(g.stats, sort_keys=True)))
                self._write_standings(policy, totals, {g.player for g in keep} | {g.opponent for g in keep
                                                                                  if g.opponent is not None})
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot record eval games of policy {policy} in the history store {self.path}: "
                               f"{exc}") from exc
        return len(keep)

    def _write_standings(self, policy: str, totals: dict[str, Standing], players: Iterable[str]) -> None:
        self.db.executemany(
            "INSERT OR REPLACE INTO eval_ratings (policy, player, player_version, rating, games, wins, draws, "
            "losses, mean_return) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(policy, s.player, s.version, s.rating, s.games, s.wins, s.draws, s.losses, s.mean_return)
             for s in (totals[p] for p in sorted(players))])

    def _replay_eval(self, policy: str) -> None:
        """Rebuild ``policy``'s ``eval_ratings`` from its ``eval_games`` (inside a write)."""
        rows = self.db.execute("SELECT id, player, player_version, opponent, opponent_version, seat, score, "
                               "player_return, opponent_return, k, initial FROM eval_games WHERE policy = ? "
                               "ORDER BY id", (policy,)).fetchall()
        totals: dict[str, Standing] = {}
        after = []
        for (gid, player, pv, opp, ov, seat, score, pr, orr, k, initial) in rows:
            game = EvalGame(player, opp, seat, score, pr, orr, pv, ov)
            after.append((*_apply_eval(totals, game, float(k), float(initial)), gid))
        self.db.executemany("UPDATE eval_games SET player_rating = ?, opponent_rating = ? WHERE id = ?", after)
        self.db.execute("DELETE FROM eval_ratings WHERE policy = ?", (policy,))
        self._write_standings(policy, totals, totals)

    def standings(self, policy: str) -> list[Standing]:
        """``policy``'s players in the eval manager's table ``eval_ratings``, baselines first (by
        name), then versions oldest first; ``[]`` before any eval game."""
        rows = self._rows("SELECT player, player_version, rating, games, wins, draws, losses, mean_return "
                          "FROM eval_ratings WHERE policy = ?", (policy,))
        out = [Standing(*r) for r in rows]
        return sorted(out, key=lambda s: (s.version is not None, s.version or 0, s.player))

    def eval_results(self, policy: str) -> list[EvalResult]:
        """``policy``'s eval games summed per (player, opponent), from the player's side: the
        results of each version and baseline against each opponent it was played against."""
        rows = self._rows("SELECT player, opponent, COUNT(*), SUM(score = 1.0), SUM(score = 0.5), SUM(score = 0.0), "
                          "AVG(player_return), MIN(player_version) FROM eval_games WHERE policy = ? "
                          "GROUP BY player, opponent", (policy,))
        out = [EvalResult(p, o, int(n), int(w or 0), int(d or 0), int(lost or 0), float(r))
               for p, o, n, w, d, lost, r, _ in rows]
        order = {p: (v is not None, v or 0) for p, *_, v in rows}
        return sorted(out, key=lambda e: (order[e.player], e.player, e.opponent or ""))

    def fitted_ratings(self, policy: str) -> dict[str, float]:
        """``{player: rating}``, Elo points: ``policy``'s eval games with an opponent fitted all at
        once (:func:`zoo.core.ratings.bradley_terry`, its prior centred on the games' initial
        rating), every player that played one; ``{}`` without such games. Unlike the standings'
        one-game-at-a-time Elo ratings, independent of the order the games were played in."""
        from zoo.core.ratings import INITIAL_RATING, bradley_terry

        rows = self._rows("SELECT player, opponent, score, initial FROM eval_games WHERE policy = ? AND "
                          "opponent IS NOT NULL AND score IS NOT NULL ORDER BY id", (policy,))
        if not rows:
            return {}
        initial = float(rows[0][3]) if rows[0][3] is not None else INITIAL_RATING
        return bradley_terry(((str(p), str(o), float(sc)) for p, o, sc, _ in rows), initial=initial)

    def evaluated(self, policy: str) -> set[int]:
        """The versions of ``policy`` that played an eval game as the player."""
        return {int(r[0]) for r in self._rows("SELECT DISTINCT player_version FROM eval_games WHERE policy = ? AND "
                                              "player_version IS NOT NULL", (policy,))}

    def eval_episodes(self, policy: str, after: int = 0) -> list[EvalEpisode]:
        """``policy``'s eval games after row ``after`` (an ``id``) in which a version played
        (not a baseline) at a curriculum stage, oldest first (:class:`EvalEpisode`): what a
        curriculum driven by the eval manager reads (docs/curriculum.md)."""
        rows = self._rows("SELECT id, player_version, curriculum_stage, player_return, stats FROM eval_games "
                          "WHERE policy = ? AND id > ? AND player_version IS NOT NULL AND curriculum_stage IS NOT "
                          "NULL ORDER BY id", (policy, int(after)))
        out = []
        for gid, version, stage, ret, stats in rows:
            try:
                extra = json.loads(stats) if stats else {}
            except ValueError:
                extra = {}
            values = {str(k): float(v) for k, v in (extra if isinstance(extra, dict) else {}).items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
            values["return"] = float(ret)
            out.append(EvalEpisode(int(gid), int(version), int(stage), values))
        return out

    def eval_policies(self) -> list[str]:
        """The policies with eval games, by name."""
        return [str(r[0]) for r in self._rows("SELECT DISTINCT policy FROM eval_games ORDER BY policy", ())]


def _apply_eval(totals: dict[str, Standing], game: EvalGame, k: float, initial: float) -> tuple[float | None,
                                                                                                  float | None]:
    """Count ``game`` in ``totals`` (``{player: Standing}``, changed in place); the two ratings after it."""
    from zoo.core.ratings import elo_update

    def side(name: str, version: int | None, score: float | None, ret: float) -> Standing:
        s = totals.get(name) or Standing(name, version, None, 0, 0, 0, 0, None)
        mean = ret if s.mean_return is None or s.games == 0 else (s.mean_return * s.games + ret) / (s.games + 1)
        return dataclasses.replace(s, games=s.games + 1, mean_return=mean,
                                   wins=s.wins + int(score == 1.0), draws=s.draws + int(score == 0.5),
                                   losses=s.losses + int(score == 0.0))

    me = side(game.player, game.player_version, game.score, float(game.player_return))
    if game.opponent is None or game.score is None:
        totals[game.player] = me
        return None, None
    them = side(game.opponent, game.opponent_version, 1.0 - float(game.score),
                float(game.opponent_return if game.opponent_return is not None else 0.0))
    mine, theirs = elo_update(initial if me.rating is None else me.rating,
                              initial if them.rating is None else them.rating, float(game.score), k)
    totals[game.player] = dataclasses.replace(me, rating=mine)
    totals[game.opponent] = dataclasses.replace(them, rating=theirs)
    return mine, theirs
