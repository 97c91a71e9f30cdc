"""The trainers' status messages of a run with named policies, merged into one status.

Each trainable policy's trainer rank 0 sends ``status`` messages with ``"policy": P``
(``core/workers/trainer.py``). The controller shows one status per ``log.interval_s``
(``StatusPacer``); with named policies it shows the merge of every policy's latest
(:class:`PolicyStatuses`), so the live display, ``live.json`` and ``zoo watch`` have one row
per policy whichever policy reported last. A run of the one implicit policy shows its
trainer's status unchanged.

The merged status (``docs/live.md``): the run-level keys of the *episode writer*'s status (the
first trainable policy, whose samples carry the episodes: ``env_steps``, ``frames``,
``budget_env_steps``, ``episodes``, ``episode_return_mean``, the rates, ...; until it reports,
the latest status of any policy; its :data:`RUN_TOO` keys too) and ``"policies"``: ``{P: entry}`` for every policy in
declaration order. A trainable policy's entry holds the :data:`POLICY_KEYS` of its own latest
status (nothing before its first), every loss and :data:`STATUS_STATS` key it carries, and
``episode_return_mean``: ``<P>_return`` of the episode writer's status (the mean of P's
agents' returns over the recent episodes; absent before any episode). A frozen policy's entry
is ``{"frozen": true}``, its return and ``policy_version``: the version its first policy
worker serves (the checkpoint's; :attr:`PolicyStatuses.served`, once that worker reported it).
"""
from __future__ import annotations

from typing import Any

STATUS_STATS = ("replay_size", "replay_fill", "replay_ratio", "gradient_steps", "rate_limit_waits")
"""Update stats that status messages carry when the algorithm reports them: the replay's state
(apex-dqn, sac, r2d2: transitions or sequences held, fraction of capacity, replayed per
inserted, gradient steps of the update) and a rate limiter's waits, for the live display."""

POLICY_KEYS = ("policy_version", "updates", "env_steps", "trained_env_steps", "policy_lag_mean", "policy_lag_max",
               "dropped_samples", "actor_dropped_samples", "dropped_fraction", "nonfinite_updates")
"""Status keys that belong to one policy: in a merged status they are in its entry (and, for
:data:`RUN_TOO`, at the top level too, from the episode writer's status)."""
RUN_TOO = ("env_steps", "trained_env_steps")
"""Per-policy keys the merged status also keeps at the top level: the run's progress (every
trainable policy counts every env step of the run, so the episode writer's count is the run's)."""


def status_stats(stats: dict[str, Any], named: bool) -> dict[str, float]:
    """The stats of an update that the trainer's status messages carry: :data:`STATUS_STATS`
    and, for a named policy's trainer (``named``), every loss (a key holding ``loss``, e.g.
    ``pg_loss``): the live display's row of the policy shows them (the implicit policy's status
    keeps only :data:`STATUS_STATS`, so its display is what it was)."""
    return {k: float(v) for k, v in stats.items() if k in STATUS_STATS or (named and "loss" in k)}


def _own(key: str) -> bool:
    return key in POLICY_KEYS or key in STATUS_STATS or "loss" in key


class PolicyStatuses:
    """Merges the latest status of each named policy (module docstring).

    Args:
        policies: ``{name: trainable}`` in declaration order; empty for the implicit policy
            (then :meth:`offer` returns each status as it came).
    """

    def __init__(self, policies: dict[str, bool]) -> None:
        self.policies = dict(policies)
        self.writer = next((n for n, t in self.policies.items() if t), None)
        self.latest: dict[str, dict[str, Any]] = {}
        self.newest: dict[str, Any] | None = None
        self.served: dict[str, int] = {}
        """``{frozen policy: the version its policy worker serves}``, as the controller learns them."""

    def offer(self, status: dict[str, Any]) -> dict[str, Any]:
        """Take one ``status`` message; the status to show (a new dict when policies are named)."""
        if not self.policies:
            return status
        name = str(status.get("policy", ""))
        if name in self.policies:
            self.latest[name] = status
        self.newest = status
        return self.merged()

    def merged(self) -> dict[str, Any]:
        """The run-level keys of the episode writer's latest status and every policy's entry."""
        base = self.latest.get(self.writer or "") or self.newest or {}
        names = set(self.policies)
        out = {k: v for k, v in base.items()
               if k != "policy" and (k in RUN_TOO or not _own(k)) and not (k.endswith("_return") and k[:-7] in names)}
        entries: dict[str, dict[str, Any]] = {}
        for name, trainable in self.policies.items():
            own = self.latest.get(name) or {}
            entry: dict[str, Any] = {k: v for k, v in own.items() if _own(k)} if trainable else {"frozen": True}
            if not trainable and name in self.served:
                entry["policy_version"] = self.served[name]
            if f"{name}_return" in base:
                entry["episode_return_mean"] = base[f"{name}_return"]
            entries[name] = entry
        out["policies"] = entries
        return out
