"""Version history: past versions of a trainable policy, kept on a schedule, with metadata,
and the queries that pick one (SRL's parameter store; issue 23, item 1; docs/history.md).

**The store** (:class:`VersionStore`) is one SQLite database per run, ``<run_dir>/history.sqlite``,
with one row per kept version of every policy of the run, and one weights file per kept
version, ``<run_dir>/history/<policy>/v<version:08d>.pt``. The implicit policy of a run that
names none is ``default`` (:data:`zoo.core.policies.DEFAULT_POLICY`). Columns of ``versions``:

=============== ======= ==========================================================================
column          type    meaning
=============== ======= ==========================================================================
``policy``      TEXT    the policy's name
``version``     INTEGER its ``policy_version`` (the one the trainer published with these weights)
``updates``     INTEGER updates done when it was kept
``env_steps``   INTEGER env steps the trainer had received (the budget's unit)
``time_s``      REAL    the run's running time when it was kept, seconds (summed over segments)
``path``        TEXT    its weights file, relative to the run folder (``history/<policy>/v....pt``)
``kept``        INTEGER 1: its file is there and queries see it; 0: dropped by ``keep`` (the row
                        and its metadata stay, for tables of ratings; the file is deleted)
``rating``      REAL    its Elo rating (:meth:`VersionStore.record_games`, or an evaluator's
                        :meth:`VersionStore.update_metadata`); NULL until then
``games``       INTEGER games this version played against the policy's learner; NULL until then
``wins``        INTEGER of those, games this version won (the learner lost)
``draws``       INTEGER of those, games drawn
``mean_return`` REAL    this version's mean return over its counted games
=============== ======= ==========================================================================

A weights file is what :func:`zoo.core.checkpoint.write_checkpoint` writes (atomically:
``.tmp``, fsync, rename), a checkpoint holding only the policy: ``{"format", "algorithm":
{"policy": state_dict, "config": algo options}, "policy_version", "updates", "env_steps"}``,
so whatever reads a checkpoint's weights reads it (a frozen policy's ``weights``, the policy
worker's ``load_frozen``).

**Who writes, who reads** (the run folder may be a network file system under the Ray
launcher): only the lead trainer (rank 0) of a policy adds, drops and prunes its rows, and
records the results of its training games once per update (:meth:`VersionStore.record_games`); an
evaluator may add metadata with :meth:`VersionStore.update_metadata`; anyone reads. Every write
is one short ``BEGIN IMMEDIATE`` transaction; the journal is SQLite's rollback journal
(``journal_mode=DELETE``: WAL needs shared memory between the processes, which processes on
different hosts do not have), and a connection waits up to ``timeout_s`` for another's lock
(``busy_timeout``). Writes are short and few: a row per kept version, and one batch of game
results per update that had games (a few rows), so the lock is held for milliseconds at a time.

**Queries** (:func:`parse_query`, :func:`query_weights`, :meth:`VersionStore.pick`): ``latest``
(the newest kept version), a fixed version (``v120`` or ``120``), ``uniform`` over the kept
versions, ``top-K`` (uniform over the K highest rated), ``pfsp`` / ``pfsp:P`` (prioritised
fictitious self-play, AlphaStar's "hard" weighting: Vinyals et al. 2019, "Grandmaster level in
StarCraft II using multi-agent reinforcement learning", Nature 575, Methods, "Prioritized
fictitious self-play": a version is picked with weight ``f(x) = x**P`` where ``x`` is its win
rate against the learner, i.e. the learner's loss rate, ``(wins + draws / 2) / games``; P = 2
by default; a version with no games counts as ``x = 0.5``). A query that matches no kept
version falls back to ``latest`` (:class:`Pick` says so, and :class:`Picker` logs it once).

This module holds :class:`VersionStore` (its SQLite plumbing and rows:
:mod:`zoo.core.history_store`; its eval tables: :mod:`zoo.core.history_eval`), the schedule
(:class:`HistorySchedule`) and :class:`Picker`; the queries are :mod:`zoo.core.history_queries`.
Everything is importable from here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from zoo.core.history_eval import EvalEpisode, EvalGame, EvalResult, EvalTables, Standing, player_name
from zoo.core.history_queries import (
    DEFAULT_PFSP_POWER,
    QUERY_FORMS,
    UNPLAYED_WIN_RATE,
    Pick,
    Query,
    draw,
    parse_query,
    pfsp_weight,
    pick_version,
    query_weights,
)
from zoo.core.history_store import (
    DB_NAME,
    FOLDER,
    METADATA,
    SCHEMA_VERSION,
    HistoryDB,
    HistoryError,
    Version,
    db_path,
    weights_relpath,
)

__all__ = [
    "VersionStore", "HistorySchedule", "Picker", "log",
    # from history_store, history_eval and history_queries
    "DB_NAME", "FOLDER", "SCHEMA_VERSION", "METADATA", "HistoryDB", "HistoryError", "Version", "db_path",
    "weights_relpath", "EvalTables", "EvalGame", "EvalEpisode", "Standing", "EvalResult", "player_name",
    "DEFAULT_PFSP_POWER", "UNPLAYED_WIN_RATE", "QUERY_FORMS", "Query", "Pick", "parse_query", "pfsp_weight",
    "query_weights", "draw", "pick_version",
]

log = logging.getLogger("zoo.history")


# ----------------------------------------------------------------------------- the store
class VersionStore(EvalTables):
    """The run's history store (module docstring). Opening it creates the database (unless
    ``readonly``); one connection per process (SQLite connections do not cross processes).

    A reader (``readonly``) may be opened before the store exists (a policy worker that starts
    before the trainer kept its first version): until the lead trainer creates it, the reader
    sees no version, and it connects once the file is there.

    Raises:
        HistoryError: the database cannot be opened, or is of a newer schema than this Zoo reads.
    """

    def __enter__(self) -> VersionStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def pick(self, policy: str, query: Query | str, rng: np.random.Generator) -> Pick:
        """One of ``policy``'s kept versions by ``query`` (:func:`pick_version`).

        Raises:
            ValueError: ``query`` is a string that is not a query (:func:`parse_query`).
        """
        q = parse_query(query) if isinstance(query, str) else query
        return pick_version(q, self.versions(policy), rng)

    # ------------------------------------------------------------------ writes
    def add(self, policy: str, version: int, updates: int, env_steps: int, time_s: float,
            weights: dict[str, Any], *, keep: int = 0) -> list[int]:
        """Keep a version: write its weights file atomically (:func:`zoo.core.checkpoint.write_checkpoint`
        of ``weights``), then its row (replacing any row of the same version), then drop the
        oldest kept versions beyond the newest ``keep`` (0: keep every one; their files are
        deleted, their rows stay with ``kept = 0``).

        Returns:
            The versions dropped by ``keep``, oldest first.

        Raises:
            CheckpointError: the weights file could not be written (the row is not added).
            HistoryError: the row could not be written.
        """
        from zoo.core.checkpoint import write_checkpoint

        rel = weights_relpath(policy, version)
        path = os.path.join(self.run_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_checkpoint(path, {**weights, "policy_version": int(version), "updates": int(updates),
                                "env_steps": int(env_steps)})
        try:
            with self._write():
                self.db.execute("INSERT OR REPLACE INTO versions (policy, version, updates, env_steps, time_s, path, "
                                "kept) VALUES (?, ?, ?, ?, ?, ?, 1)",
                                (policy, int(version), int(updates), int(env_steps), float(time_s), rel))
                dropped: list[int] = []
                if keep > 0:
                    rows = self.db.execute("SELECT version FROM versions WHERE policy = ? AND kept = 1 "
                                           "ORDER BY version DESC", (policy,)).fetchall()
                    dropped = sorted(int(r[0]) for r in rows[keep:])
                    self.db.executemany("UPDATE versions SET kept = 0 WHERE policy = ? AND version = ?",
                                        [(policy, v) for v in dropped])
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot write version {version} of policy {policy} to the history store "
                               f"{self.path}: {exc}") from exc
        for v in dropped:  # after the commit: a crash leaves at worst a file no row points to (dropped on resume)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.run_dir, weights_relpath(policy, v)))
        return dropped

    def drop_after(self, policy: str, version: int) -> list[int]:
        """Forget ``policy``'s versions newer than ``version`` (a resume from a checkpoint of
        ``version``: the trainer will make those versions again): their rows are deleted and
        their files, and any ``history/<policy>/`` file newer than ``version`` or left half
        written (``.tmp``), are removed. The eval manager's games in which such a version
        played are deleted too, and ``eval_ratings`` is rebuilt by replaying the games left in
        their order (:meth:`record_eval`'s Elo updates, each with its own K and initial
        rating), in the same transaction.

        Returns:
            The versions whose rows were deleted, oldest first.
        """
        try:
            with self._write():
                rows = self.db.execute("SELECT version FROM versions WHERE policy = ? AND version > ?",
                                       (policy, int(version))).fetchall()
                self.db.execute("DELETE FROM versions WHERE policy = ? AND version > ?", (policy, int(version)))
                cut = self.db.execute("DELETE FROM eval_games WHERE policy = ? AND (player_version > ? OR "
                                      "opponent_version > ?)", (policy, int(version), int(version))).rowcount
                if cut:
                    self._replay_eval(policy)
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot drop versions of policy {policy} from the history store {self.path}: "
                               f"{exc}") from exc
        folder = os.path.join(self.run_dir, FOLDER, policy)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(folder):
                m = re.fullmatch(r"v(\d+)\.pt(\.tmp)?", name)
                if m and (m.group(2) or int(m.group(1)) > version):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(folder, name))
        return sorted(int(r[0]) for r in rows)

    def update_metadata(self, policy: str, version: int, **values: Any) -> Version:
        """Set evaluation's columns of one version: any of ``rating`` (float), ``games``,
        ``wins``, ``draws`` (ints >= 0, ``wins + draws <= games``) and ``mean_return``
        (float); None writes NULL. Columns not given keep their values.

        Returns:
            The row as it now is.

        Raises:
            KeyError: no row of ``policy`` holds ``version``.
            ValueError: an unknown column, or a value of the wrong kind.
        """
        unknown = sorted(set(values) - set(METADATA))
        if unknown:
            raise ValueError(f"update_metadata: {', '.join(unknown)} is not a metadata column "
                             f"({', '.join(METADATA)})")
        clean: dict[str, Any] = {}
        for key, value in values.items():
            if value is None:
                clean[key] = None
            elif key in ("games", "wins", "draws"):
                if isinstance(value, bool) or int(value) != value or value < 0:
                    raise ValueError(f"update_metadata: {key}={value!r} must be an int >= 0")
                clean[key] = int(value)
            else:
                if isinstance(value, bool) or not math.isfinite(float(value)):
                    raise ValueError(f"update_metadata: {key}={value!r} must be a finite number")
                clean[key] = float(value)
        with self._write():
            row = self.get(policy, version)
            if row is None:
                raise KeyError(f"policy {policy} has no version {version} in the history store {self.path}")
            merged = dataclasses.replace(row, **clean)
            if merged.games is not None and (merged.wins or 0) + (merged.draws or 0) > merged.games:
                raise ValueError(f"update_metadata: wins={merged.wins} + draws={merged.draws} is more than "
                                 f"games={merged.games}")
            if clean:
                self.db.execute(f"UPDATE versions SET {', '.join(f'{k} = ?' for k in clean)} "
                                "WHERE policy = ? AND version = ?", (*clean.values(), policy, int(version)))
        return merged

    def record_games(self, policy: str, games: Sequence[Any], learner_rating: float, *,
                     k: float | None = None, initial: float | None = None) -> tuple[float, int]:
        """Count a batch of training games of ``policy``'s learner against its past versions
        (:class:`zoo.core.ratings.Game`, in play order) in one short write transaction: for each
        game whose version has a row, ``games`` + 1, ``wins`` + 1 when the learner lost (score
        0), ``draws`` + 1 on a draw, ``mean_return`` the mean of the version's returns over all
        its counted games, and ``rating`` and the learner's rating moved by one Elo update
        (:func:`zoo.core.ratings.elo_update`; a version never rated starts at ``initial``).
        A game of a version without a row (the source's current weights before any version was
        kept, or a row cut back on resume) is not counted.

        Args:
            learner_rating: the learner's rating before the batch, Elo points.
            k: the K-factor (:data:`zoo.core.ratings.DEFAULT_K` when None).
            initial: a new version's rating (:data:`zoo.core.ratings.INITIAL_RATING` when None).

        Returns:
            ``(the learner's rating after the batch, games counted)``.

        Raises:
            HistoryError: the store could not be written.
        """
        from zoo.core.ratings import DEFAULT_K, INITIAL_RATING, elo_update

        k = DEFAULT_K if k is None else float(k)
        initial = INITIAL_RATING if initial is None else float(initial)
        if not games:
            return float(learner_rating), 0
        rating = float(learner_rating)
        try:
            with self._write():
                rows: dict[int, Version | None] = {}
                changed: dict[int, Version] = {}
                for game in games:
                    v = int(game.version)
                    if v not in rows:
                        rows[v] = self.get(policy, v)
                    row = changed.get(v, rows[v])
                    if row is None:
                        continue
                    n = row.games or 0
                    lost, drew = game.score == 0.0, game.score == 0.5
                    mean = float(game.opponent_return) if row.mean_return is None or n == 0 else (
                        (row.mean_return * n + float(game.opponent_return)) / (n + 1))
                    rating, theirs = elo_update(rating, initial if row.rating is None else row.rating, game.score, k)
                    changed[v] = dataclasses.replace(row, games=n + 1, wins=(row.wins or 0) + int(lost),
                                                     draws=(row.draws or 0) + int(drew), mean_return=mean,
                                                     rating=theirs)
                self.db.executemany("UPDATE versions SET games = ?, wins = ?, draws = ?, mean_return = ?, rating = ? "
                                    "WHERE policy = ? AND version = ?",
                                    [(r.games, r.wins, r.draws, r.mean_return, r.rating, policy, v)
                                     for v, r in changed.items()])
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot record games of policy {policy} in the history store {self.path}: "
                               f"{exc}") from exc
        counted = sum(1 for g in games if rows.get(int(g.version)) is not None)
        return rating, counted


# ----------------------------------------------------------------------------- the schedule
class HistorySchedule:
    """When a trainer keeps a version: after update number ``updates`` when ``every_updates``
    (> 0) divides it, or when ``every_s`` seconds (> 0) have passed since the last kept version
    (the segment's start before the first). ``clock``: seconds, ``time.monotonic`` unless a
    test gives its own. Both 0: never (history off)."""

    def __init__(self, every_updates: int = 0, every_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_updates, self.every_s, self.clock = int(every_updates), float(every_s), clock
        self.last = clock()

    @property
    def on(self) -> bool:
        return self.every_updates > 0 or self.every_s > 0

    def due(self, updates: int) -> bool:
        """Whether a version is due after update number ``updates``."""
        return ((self.every_updates > 0 and updates % self.every_updates == 0)
                or (self.every_s > 0 and self.clock() - self.last >= self.every_s))

    def kept(self) -> None:
        """A version was kept now: the time schedule counts from here."""
        self.last = self.clock()


class Picker:
    """Queries for one consumer (item 2's policy worker, an evaluator): :meth:`pick` as
    :meth:`VersionStore.pick`, and a fallback is logged (``zoo.history``, warning) once per
    (policy, query, reason); :attr:`said` holds what was said."""

    def __init__(self, store: VersionStore, rng: np.random.Generator) -> None:
        self.store, self.rng = store, rng
        self.said: list[str] = []
        self._seen: set[tuple[str, str, str]] = set()

    def pick(self, policy: str, query: Query | str) -> Pick:
        q = parse_query(query) if isinstance(query, str) else query
        got = self.store.pick(policy, q, self.rng)
        if got.fell_back and (key := (policy, str(q), got.reason)) not in self._seen:
            self._seen.add(key)
            to = f"version {got.version.version}" if got.version is not None else "the learner's current weights"
            line = f"history query {q} of policy {policy}: {got.reason}; using latest ({to})"
            self.said.append(line)
            log.warning(line)
        return got
