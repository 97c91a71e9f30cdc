"""The trainers' status messages of a run with named policies, merged into one status.

Each trainable policy's trainer rank 0 sends ``status`` messages with ``"policy": P``
(``core/workers/trainer.py``). The controller shows one status per ``log.interval_s``
(``StatusPacer``); with named policies it shows the merge of every policy's latest
(:class:`PolicyStatuses`), so the live display, ``live.json`` and ``zoo watch`` have one row
per policy whichever policy reported last. A run of the one implicit policy shows its
trainer's status unchanged.

The merged status (``docs/live.md``) has the run's figures at the top level and each policy's in
``"policies"``: ``{P: entry}`` for every policy in declaration order.

**Run-level figures.** The run's env steps are the actors' env steps, a property of the run,
not of one policy: every trainable policy receives every env step the actors make (each
sample carries its ring group's env steps), so ``env_steps`` and ``frames`` are the largest
of the trainable policies' latest counts (:data:`RUN_MAX`; a policy that reached the budget
first stops counting while the others still receive). ``episodes``, ``episode_return_mean``
and the episode statistics are the *episode writer*'s (the first trainable policy, whose
samples carry the episodes), as are ``budget_env_steps`` and any other key that is not a
policy's own; until it reports, the latest status of any policy. Figures of what was
*trained* belong to each policy and are only in its entry: ``trained_env_steps`` (env steps
of the samples it trained on), ``trained_samples`` (its agent-slot samples trained on), the
mean rates, its version, updates, lag and dropped counts (:data:`POLICY_KEYS`).

**A policy's entry**: the :data:`POLICY_KEYS` of its own latest status (nothing before its
first), every loss and :data:`STATUS_STATS` key it carries, and ``episode_return_mean``:
``<P>_return`` of the episode writer's status (the mean of P's agents' returns over the
recent episodes; absent before any episode). A frozen policy's entry is ``{"frozen": true}``,
its return and ``policy_version``: the version its first policy worker serves (the
checkpoint's; :attr:`PolicyStatuses.served`, once that worker reported it).
"""
from __future__ import annotations

from typing import Any

STATUS_STATS = ("replay_size", "replay_fill", "replay_ratio", "gradient_steps", "rate_limit_waits")
"""Update stats that status messages carry when the algorithm reports them: the replay's state
(apex-dqn, sac, r2d2: transitions or sequences held, fraction of capacity, replayed per
inserted, gradient steps of the update) and a rate limiter's waits, for the live display."""

POLICY_KEYS = ("policy_version", "updates", "env_steps", "trained_env_steps", "trained_samples", "policy_lag_mean",
               "policy_lag_max", "dropped_samples", "actor_dropped_samples", "dropped_fraction", "nonfinite_updates",
               "mean_env_steps_per_s", "mean_trained_env_steps_per_s")
"""Status keys that belong to one policy: in a merged status they are in its entry only
(``env_steps`` also gives the run's, :data:`RUN_MAX`)."""
RUN_MAX = ("env_steps", "frames")
"""The run's progress at the top level of a merged status: the largest over the trainable
policies' latest statuses (every trainable policy receives every env step of the actors)."""


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

    def serve(self, served: dict[str, int]) -> dict[str, Any] | None:
        """Take the versions the frozen policies' workers serve (the controller's
        :func:`~zoo.core.controller.served_versions`, after each policy worker's heartbeat): the
        status to show when one changed after a trainer's status was shown, else None. An
        opponent follows its source's parameter stream, and its worker's heartbeat saying it
        serves the source's version N comes after the source's status of version N: merged only
        on the trainers' statuses, its row stayed a version behind until the next status."""
        changed = {k: v for k, v in served.items() if self.served.get(k) != v}
        if not changed:
            return None
        self.served.update(changed)
        return self.merged() if self.policies and self.latest else None

    def merged(self) -> dict[str, Any]:
        """The run-level keys of the episode writer's latest status and every policy's entry."""
        base = self.latest.get(self.writer or "") or self.newest or {}
        names = set(self.policies)
        out = {k: v for k, v in base.items()
               if k != "policy" and not _own(k) and not (k.endswith("_return") and k[:-7] in names)}
        for key in RUN_MAX:
            counts = [s[key] for n, s in self.latest.items() if self.policies.get(n) and isinstance(
                s.get(key), (int, float)) and not isinstance(s.get(key), bool)]
            if counts:
                out[key] = max(counts)
            elif key in base:
                out[key] = base[key]
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
