"""The ``pbt`` worker kind: the population manager of a population-based training run
(docs/pbt.md; :class:`zoo.core.pbt.PopulationManager`).

One worker when ``pbt.members`` > 0 (:func:`count`). It follows ``metrics.jsonl`` and, every
:data:`LOOK_S`, calls :meth:`~zoo.core.pbt.PopulationManager.tick` with the run's env steps
as every member has passed them (:func:`members_env_steps`: the least, over the members, of
the ``env_steps`` of its last ``update`` row; each member's trainer counts the run's env steps).
A member checkpoints before the update row at which it passes a round's env steps
(:meth:`zoo.core.workers.member.PopulationMember.member_checkpoint_due`), so when the manager decides,
every member's ``latest.pt`` is at most one update older than the round. Restartable: a new
manager continues from ``pbt/population.json``.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

LOOK_S = 0.25
"""Seconds between two looks at ``metrics.jsonl``."""


def count(cfg: Any) -> int:
    """1 when the run has a population (``pbt.members`` > 0), else 0."""
    pbt = getattr(cfg, "pbt", None)
    return 1 if pbt is not None and pbt.members else 0


def describe(graph: Any, index: int) -> dict[str, Any]:
    """``graph.json``'s entry: the members it manages and where it leaves their orders."""
    pbt = graph.cfg.pbt
    from zoo.core.pbt import ORDERS_DIR, member_names

    return {"members": member_names(pbt.policy, pbt.members), "orders": ORDERS_DIR,
            "interval_env_steps": int(pbt.interval_env_steps)}


class UpdateRows:
    """Follows ``metrics.jsonl`` (appended by every member's trainer; cut back by a resumed one:
    then read again from the start) and keeps each member's last ``update`` row ``env_steps``."""

    def __init__(self, path: str, members: list[str]) -> None:
        self.path, self.members = path, list(members)
        self.offset = 0
        self.env_steps: dict[str, int] = {}

    def read(self) -> None:
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return
        if size < self.offset:  # cut back by a resumed trainer
            self.offset, self.env_steps = 0, {}
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        end = data.rfind(b"\n") + 1  # a row being appended is read next time
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("type") == "update" and row.get("policy") in self.members:
                self.env_steps[row["policy"]] = int(row.get("env_steps", 0))
        self.offset += end

    def members_env_steps(self) -> int:
        """The env steps every member has passed: the least of their last update rows' (0 while
        a member has none)."""
        self.read()
        return min((self.env_steps.get(m, 0) for m in self.members), default=0)


def run(ctx: Any) -> None:
    """The manager's loop until stopped (module docstring)."""
    from zoo.core.pbt import PopulationManager, make_population, member_names

    cfg = ctx.cfg
    members = member_names(cfg.pbt.policy, cfg.pbt.members)
    manager = PopulationManager(ctx.run_dir, make_population(cfg), members)
    rows = UpdateRows(os.path.join(ctx.run_dir, "metrics.jsonl"), members)
    while not ctx.stop:
        ctx.heartbeat()
        manager.tick(rows.members_env_steps())
        end = time.monotonic() + LOOK_S
        while not ctx.stop and time.monotonic() < end:
            time.sleep(0.05)
