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
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger("zoo.history")

DB_NAME = "history.sqlite"
FOLDER = "history"
SCHEMA_VERSION = 1
DEFAULT_PFSP_POWER = 2.0
UNPLAYED_WIN_RATE = 0.5
"""The win rate :func:`query_weights` assumes for a version with no games (AlphaStar's PFSP
plays an unknown opponent as an even one)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    policy      TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    updates     INTEGER NOT NULL,
    env_steps   INTEGER NOT NULL,
    time_s      REAL    NOT NULL,
    path        TEXT    NOT NULL,
    kept        INTEGER NOT NULL DEFAULT 1,
    rating      REAL,
    games       INTEGER,
    wins        INTEGER,
    draws       INTEGER,
    mean_return REAL,
    PRIMARY KEY (policy, version)
)
"""
_EVAL_SCHEMA = ("""
CREATE TABLE IF NOT EXISTS eval_games (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    policy           TEXT    NOT NULL,
    player           TEXT    NOT NULL,
    player_version   INTEGER,
    opponent         TEXT,
    opponent_version INTEGER,
    seat             INTEGER NOT NULL,
    score            REAL,
    player_return    REAL    NOT NULL,
    opponent_return  REAL,
    deterministic    INTEGER NOT NULL,
    k                REAL    NOT NULL,
    initial          REAL    NOT NULL,
    player_rating    REAL,
    opponent_rating  REAL,
    time_s           REAL    NOT NULL,
    curriculum_stage INTEGER,
    stats            TEXT
)
""", """
CREATE TABLE IF NOT EXISTS eval_ratings (
    policy         TEXT    NOT NULL,
    player         TEXT    NOT NULL,
    player_version INTEGER,
    rating         REAL,
    games          INTEGER NOT NULL,
    wins           INTEGER NOT NULL,
    draws          INTEGER NOT NULL,
    losses         INTEGER NOT NULL,
    mean_return    REAL,
    PRIMARY KEY (policy, player)
)
""")
_EVAL_ADDED = (("curriculum_stage", "INTEGER"), ("stats", "TEXT"))
"""Columns of ``eval_games`` added after its first release: a store made before gets them when a
writer opens it (nullable, so a Zoo that does not know them reads and writes the table as before)."""
_COLUMNS = ("policy", "version", "updates", "env_steps", "time_s", "path", "kept", "rating", "games", "wins",
            "draws", "mean_return")
METADATA = ("rating", "games", "wins", "draws", "mean_return")
"""The columns evaluation fills (:meth:`VersionStore.update_metadata`)."""


class HistoryError(RuntimeError):
    """The history store could not be opened, read or written; the message names the file and the reason."""


def db_path(run_dir: str | os.PathLike) -> str:
    """``<run_dir>/history.sqlite``."""
    return os.path.join(os.fspath(run_dir), DB_NAME)


def weights_relpath(policy: str, version: int) -> str:
    """``history/<policy>/v<version:08d>.pt``, relative to the run folder."""
    return os.path.join(FOLDER, policy, f"v{version:08d}.pt")


@dataclass(frozen=True)
class Version:
    """One row of the store (the module docstring's columns); ``path`` is relative to the run
    folder (:meth:`VersionStore.file` gives the absolute one)."""

    policy: str
    version: int
    updates: int
    env_steps: int
    time_s: float
    path: str
    kept: bool = True
    rating: float | None = None
    games: int | None = None
    wins: int | None = None
    draws: int | None = None
    mean_return: float | None = None

    def win_rate(self) -> float | None:
        """This version's win rate against the learner, ``(wins + draws / 2) / games``, in [0, 1];
        None when it played no game."""
        if not self.games:
            return None
        return ((self.wins or 0) + 0.5 * (self.draws or 0)) / self.games


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


# ----------------------------------------------------------------------------- queries
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


# ----------------------------------------------------------------------------- the store
class VersionStore:
    """The run's history store (module docstring). Opening it creates the database (unless
    ``readonly``); one connection per process (SQLite connections do not cross processes).

    A reader (``readonly``) may be opened before the store exists (a policy worker that starts
    before the trainer kept its first version): until the lead trainer creates it, the reader
    sees no version, and it connects once the file is there.

    Raises:
        HistoryError: the database cannot be opened, or is of a newer schema than this Zoo reads.
    """

    def __init__(self, run_dir: str | os.PathLike, *, readonly: bool = False, timeout_s: float = 30.0) -> None:
        self.run_dir = os.fspath(run_dir)
        self.path = db_path(self.run_dir)
        self.readonly, self.timeout_s = readonly, timeout_s
        self._db: sqlite3.Connection | None = None
        if not readonly:
            os.makedirs(self.run_dir, exist_ok=True)
            self._connect()
        elif os.path.exists(self.path):
            self._connect()

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.readonly:
                uri = "file:" + self.path.replace("?", "%3f").replace("#", "%23") + "?mode=ro"
                db = sqlite3.connect(uri, uri=True, timeout=self.timeout_s, isolation_level=None)
            else:
                db = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
                db.execute("PRAGMA journal_mode=DELETE")
                db.execute("PRAGMA synchronous=FULL")
            db.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            found = int(db.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot open the history store {self.path}: {exc}") from exc
        if found > SCHEMA_VERSION:
            db.close()
            raise HistoryError(f"{self.path} is a history store of schema {found}; this Zoo reads schema "
                               f"{SCHEMA_VERSION}: use the Zoo that wrote the run")
        self._db = db
        if not self.readonly:
            try:
                with self._write():
                    db.execute(_SCHEMA)
                    for table in _EVAL_SCHEMA:
                        db.execute(table)
                    have = {str(r[1]) for r in db.execute("PRAGMA table_info(eval_games)").fetchall()}
                    for column, kind in _EVAL_ADDED:
                        if column not in have:
                            db.execute(f"ALTER TABLE eval_games ADD COLUMN {column} {kind}")
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            except sqlite3.Error as exc:
                raise HistoryError(f"cannot create the history store {self.path}: {exc}") from exc
        return db

    @property
    def db(self) -> sqlite3.Connection:
        """The connection (a reader connects here once the store exists).

        Raises:
            HistoryError: a reader's store does not exist yet.
        """
        if self._db is None:
            if not os.path.exists(self.path):
                raise HistoryError(f"the history store {self.path} does not exist yet")
            self._connect()
        assert self._db is not None
        return self._db

    def _rows(self, sql: str, args: tuple) -> list[tuple]:
        """A read; a reader whose store (or its table) is not made yet reads nothing."""
        if self._db is None and self.readonly and not os.path.exists(self.path):
            return []
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if self.readonly and "no such table" in str(exc):
                return []
            raise HistoryError(f"cannot read the history store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot read the history store {self.path}: {exc}") from exc

    # ------------------------------------------------------------------ plumbing
    @contextlib.contextmanager
    def _write(self):
        """One short write transaction (``BEGIN IMMEDIATE``: the lock is taken at once, waited
        for up to the busy timeout)."""
        if self.readonly:
            raise HistoryError(f"the history store {self.path} was opened read-only")
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise HistoryError(f"the history store {self.path} stayed locked by another writer for "
                               f"{self.timeout_s:g} s ({exc}); on a network file system its locks must work "
                               "(docs/history.md)") from exc
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def __enter__(self) -> VersionStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def file(self, version: Version) -> str:
        """The absolute path of ``version``'s weights file."""
        return os.path.join(self.run_dir, version.path)

    # ------------------------------------------------------------------ reads
    def versions(self, policy: str, *, kept_only: bool = True) -> list[Version]:
        """The rows of ``policy``, oldest version first (``kept_only``: those queries see)."""
        sql = f"SELECT {', '.join(_COLUMNS)} FROM versions WHERE policy = ?"
        if kept_only:
            sql += " AND kept = 1"
        return [_row(r) for r in self._rows(sql + " ORDER BY version", (policy,))]

    def policies(self) -> list[str]:
        """The policies that have rows, by name."""
        return [str(r[0]) for r in self._rows("SELECT DISTINCT policy FROM versions ORDER BY policy", ())]

    def get(self, policy: str, version: int) -> Version | None:
        """``policy``'s row of ``version`` (kept or not), or None."""
        found = self._rows(f"SELECT {', '.join(_COLUMNS)} FROM versions WHERE policy = ? AND version = ?",
                           (policy, int(version)))
        return _row(found[0]) if found else None

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

    # ------------------------------------------------------------------ the eval manager's results
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


def _row(r: Iterable[Any]) -> Version:
    d = dict(zip(_COLUMNS, r, strict=True))
    d["kept"] = bool(d["kept"])
    return Version(**d)


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
