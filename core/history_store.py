"""The history store's SQLite plumbing (the store itself, its columns and who writes:
:mod:`zoo.core.history`): the schema of ``<run_dir>/history.sqlite`` (tables ``versions``,
``eval_games``, ``eval_ratings``), the paths of the database and of each kept version's weights
file, :class:`Version` (one row of ``versions``), and :class:`HistoryDB`, one process's connection:
opening (creating or upgrading the schema), reads, ``BEGIN IMMEDIATE`` write transactions and the
reads of ``versions`` that the rest of the store builds on.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DB_NAME = "history.sqlite"
FOLDER = "history"
SCHEMA_VERSION = 1

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
    """One row of the store (its columns: :mod:`zoo.core.history`'s docstring); ``path`` is
    relative to the run folder (:meth:`VersionStore.file` gives the absolute one)."""

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


def _row(r: Iterable[Any]) -> Version:
    d = dict(zip(_COLUMNS, r, strict=True))
    d["kept"] = bool(d["kept"])
    return Version(**d)


class HistoryDB:
    """One process's connection to the run's history store: the base of
    :class:`zoo.core.history.VersionStore`, whose docstring gives the arguments, a reader opened
    before the store exists, and the errors."""

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
