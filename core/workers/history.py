"""The trainer's part of the version history (``trainer.history.*``; :mod:`zoo.core.history`,
docs/history.md): when the lead trainer of a trainable policy keeps a version, what it
writes, and how a resumed or restarted trainer makes the store agree with its checkpoint.

**Schedule**: after an update (published first) whose number ``trainer.history.every_updates``
divides, or when ``trainer.history.every_minutes`` of wall time have passed since the last
kept version (this segment's start before the first); both 0 (the default): no history, no
store is opened and nothing changes for the run. The time schedule starts again with each
segment (a resume, a restart); the update schedule counts the run's updates, which the
checkpoint restores, so it continues where it stopped.

**Resume**: the trainer continues from its checkpoint's version c; versions newer than c that
the store holds were kept after that checkpoint (before a crash or a stop that wrote no later
checkpoint) and will be made again with other weights, so their rows and files are dropped
(:meth:`zoo.core.history.VersionStore.drop_after`) before the first update. Rows of versions up
to c stay, with the metadata evaluation wrote. A version that ``trainer.history.keep`` dropped
because of a newer version that is now forgotten stays dropped (its file is gone): until the
next kept version the store then holds one version less than an uninterrupted run's, and
from it on the same ones.

**Results and ratings** (docs/history.md): the lead trainer of a source policy S is also the one
writer of its games. The episode rows it logs carry ``O_version``, ``O_return`` and ``S_return``
for each opponent policy O served from S's history; :meth:`History.saw` turns them into games
(:func:`zoo.core.ratings.games_in`) and :meth:`History.record` writes each batch's as the trainer
takes the batch in (one transaction, :meth:`zoo.core.history.VersionStore.record_games`), with
the Elo ratings. The learner's current rating lives in this object; a kept version starts with
it as its ``rating``, and a resumed trainer starts from the rating of the newest kept version.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from zoo.core.checkpoint import FORMAT
from zoo.core.history import HistorySchedule, VersionStore, db_path
from zoo.core.ratings import INITIAL_RATING, Game, games_in


def store_name(policy: str) -> str:
    """The policy's name in the store: a named policy's own, the implicit one's ``default``."""
    from zoo.core.policies import DEFAULT_POLICY

    return policy or DEFAULT_POLICY


class History:
    """The lead trainer's history writer: its schedule, its store, its policy's name there."""

    def __init__(self, store: VersionStore, policy: str, schedule: HistorySchedule, keep: int,
                 opponents: dict[str, str] | None = None) -> None:
        self.store, self.policy, self.schedule, self.keep_most = store, policy, schedule, keep
        self.dropped: list[int] = []  # versions the last keep() dropped (tests, logs)
        self.opponents = dict(opponents or {})  # {opponent policy O: this policy's name in the episode rows}
        self.games: list[Game] = []  # seen, not yet recorded
        kept = store.versions(policy)
        self.rating = INITIAL_RATING if not kept or kept[-1].rating is None else float(kept[-1].rating)

    @classmethod
    def open(cls, ctx: Any, cfg: Any, version: int) -> History | None:
        """The history of ``ctx``'s policy when ``cfg.trainer.history`` has a schedule, else None.
        The store is cut back to ``version`` (the checkpoint's) when this trainer segment resumed
        or restarted (``cfg.resume`` or ``ctx.attempt`` >= 1), also when the resume turned the
        history off (the store, if the run has one, then stays as it is from there on).

        Raises:
            HistoryError: the store could not be opened or cut back.
        """
        h = getattr(cfg.trainer, "history", None)
        on = h is not None and (h.every_updates > 0 or h.every_minutes > 0)
        again = bool(int(getattr(cfg, "resume", 0) or 0) or int(getattr(ctx, "attempt", 0) or 0))
        if not on and not (again and os.path.exists(db_path(ctx.run_dir))):
            return None
        store = VersionStore(ctx.run_dir)
        name = store_name(ctx.policy)
        if again:  # also when a resume turned the history off: the store agrees with the checkpoint
            store.drop_after(name, version)
        if not on or h is None:
            store.close()
            return None
        named = getattr(getattr(cfg, "policies", None), "named", None) or {}
        opponents = {o: ctx.policy for o, pol in named.items()
                     if ctx.policy and getattr(getattr(pol, "opponent", None), "source", "") == ctx.policy}
        return cls(store, name, HistorySchedule(h.every_updates, 60.0 * h.every_minutes), h.keep, opponents)

    def due(self, updates: int) -> bool:
        """Whether a version is due after update number ``updates``."""
        return self.schedule.due(updates)

    def keep(self, algo: Any, algo_cfg: Any, state: Any, time_s: float) -> None:
        """Keep the current weights (``algo.policy``'s state dict, on the CPU) as version
        ``state.version``, with the algorithm's options (as a checkpoint holds them, so the
        file loads wherever a checkpoint's weights do).

        Raises:
            CheckpointError: the weights file could not be written.
            HistoryError: the row could not be written.
        """
        weights = {k: v.detach().cpu() for k, v in algo.policy.state_dict().items()}
        is_options = dataclasses.is_dataclass(algo_cfg) and not isinstance(algo_cfg, type)
        options = dataclasses.asdict(algo_cfg) if is_options else None
        self.dropped = self.store.add(self.policy, state.version, state.updates, state.env_steps, time_s,
                                      {"format": FORMAT, "algorithm": {"policy": weights, "config": options}},
                                      keep=self.keep_most)
        self.schedule.kept()
        self.store.update_metadata(self.policy, state.version, rating=self.rating)

    def saw(self, episode: dict[str, Any]) -> None:
        """An episode row the trainer logs: its games against this policy's past versions, for
        the next :meth:`record`."""
        if self.opponents:
            self.games.extend(games_in([episode], self.opponents))

    def record(self) -> int:
        """Write the games seen since the last call (one transaction; none: no write).

        Returns:
            The games counted (those of versions the store holds).

        Raises:
            HistoryError: the store could not be written.
        """
        if not self.games:
            return 0
        games, self.games = self.games, []
        self.rating, counted = self.store.record_games(self.policy, games, self.rating)
        return counted

    def close(self) -> None:
        self.store.close()
