"""The non-finite guard: no update is trained on NaN or infinities, and a run that keeps
producing them stops.

Before an update the batch's floating-point arrays are checked for NaN and infinities (one
float64 sum per array; a non-finite sum is then located by column: :func:`nonfinite_columns`,
:func:`describe_sources`). A non-finite batch is not trained on; an update whose loss,
gradient or resulting weights are not finite is undone by the algorithm
(:class:`~zoo.core.algorithm.NonFiniteUpdate`). Either way the update is *skipped*
(:meth:`NonFiniteGuard.skip`): no new policy version, a ``{"type": "nonfinite"}`` row in
``metrics.jsonl`` naming what was not finite and where the batch came from (actor index, env
index within that actor, agent), a ``warning`` to the controller, and the counters
``nonfinite_updates`` (total) and ``nonfinite_streak`` (consecutive). After
``trainer.max_nonfinite_updates`` consecutive skips the trainer writes its checkpoint (the last
finite weights: skipped updates change nothing) and stops with :class:`NonFiniteRunError`
naming the likely source. A checkpoint is never written with non-finite weights
(:mod:`zoo.core.checkpoint`). With data-parallel trainers every rank checks its own batch and
all skip the same update (:mod:`zoo.core.workers.sync`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


class NonFiniteRunError(RuntimeError):
    """``trainer.max_nonfinite_updates`` consecutive updates were skipped as non-finite."""


Origin = tuple[int, int, int, int]
"""Where a sample's columns come from: ``(actor, env_offset, agents, columns)``; column
``c`` of the sample is env ``env_offset + c // agents`` of that actor, agent ``c % agents``."""


def sample_origin(meta: dict[str, Any], sample: dict[str, Any], agents: int) -> Origin:
    """The :data:`Origin` of a sample from its message ``meta`` (``actor``, ``env_offset``, ``agents``)."""
    return (int(meta.get("actor", -1)), int(meta.get("env_offset", 0)), int(meta.get("agents", agents)),
            int(sample["reward"].shape[1]))


def _float_arrays(batch: dict[str, Any]):
    """``(key, array, columns)`` for every floating-point array of ``batch``; ``columns`` maps the
    array's rows to batch columns for ``final_obs`` (``final_index[:, 1]``), else None (axis 1)."""
    for key, value in batch.items():
        if key == "final_index":
            continue
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, arr in items:
            if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and arr.size:
                name = key if sub is None else f"{key}.{sub}"
                yield name, arr, (batch["final_index"][:, 1] if key == "final_obs" else None)


def nonfinite_columns(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """Which batch columns hold a NaN or an infinity, per key: ``{"reward": int64 [k], ...}``
    (``"obs.obs"`` for a dict entry); ``{}`` when the batch is finite.

    Each floating-point array is first summed in float64 (one pass, no temporary: a float32
    array cannot overflow it); only an array whose sum is not finite is searched column by column.
    """
    out: dict[str, np.ndarray] = {}
    for name, arr, columns in _float_arrays(batch):
        if np.isfinite(np.add.reduce(arr, axis=None, dtype=np.float64)):
            continue
        if columns is None:  # [T(+1), B, ...]: bad columns along axis 1
            bad = ~np.isfinite(arr.reshape(arr.shape[0], arr.shape[1], -1)).all(axis=(0, 2))
            cols = np.flatnonzero(bad)
        else:  # final_obs [K, ...]: row k belongs to column final_index[k, 1]
            bad = ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)
            cols = np.unique(columns[bad])
        if cols.size:
            out[name] = cols
    return out


def describe_sources(bad: dict[str, np.ndarray], origins: list[Origin], limit: int = 8) -> list[dict[str, Any]]:
    """``[{"actor", "env", "agent", "keys"}]`` for the non-finite columns of a batch (at most ``limit``).

    ``bad`` is :func:`nonfinite_columns`' result; ``origins`` the :data:`Origin` of each
    sample of the batch, in batch order.
    """
    starts = np.cumsum([0] + [o[3] for o in origins])
    found: dict[int, list[str]] = {}
    for key, cols in bad.items():
        for c in cols.tolist():
            found.setdefault(c, []).append(key)
    out = []
    for c in sorted(found)[:limit]:
        i = int(np.searchsorted(starts, c, side="right")) - 1
        actor, offset, agents, _ = origins[i]
        local = c - int(starts[i])
        out.append({"actor": actor, "env": offset + local // agents, "agent": local % agents, "keys": found[c]})
    return out


def _where(sources: list[dict[str, Any]]) -> str:
    return "; ".join(f"actor {s['actor']} env {s['env']} agent {s['agent']}: {', '.join(s['keys'])}"
                     for s in sources)


# ----------------------------------------------------------------------------- RNG state


@dataclass(frozen=True)
class Skip:
    """One skipped update: ``what`` was not finite (``"batch values"``, or the
    :class:`~zoo.core.algorithm.NonFiniteUpdate`'s ``what``), ``sources`` where the batch came
    from, ``detail`` the explanation; ``streak`` and ``total`` the counters after it; ``last``:
    the streak reached ``trainer.max_nonfinite_updates`` (the run stops)."""

    what: str
    sources: list[dict[str, Any]]
    detail: str
    streak: int
    total: int
    last: bool

    def row(self) -> dict[str, Any]:
        """The fields of the ``{"type": "nonfinite"}`` row besides the run's counters and ``time_s``."""
        return {"what": self.what, "sources": self.sources, "streak": self.streak, "nonfinite_updates": self.total}

    def warning(self) -> str:
        """The ``warning`` message sent to the controller."""
        return (f"update skipped (non-finite {self.what}; {self.detail}); "
                f"{self.streak} in a row, {self.total} in all")


BATCH_DETAIL = ("the batch holds NaN/inf from {where}: "
                "check that environment (its rewards and observations) or the policy's outputs")
UPDATE_DETAIL = ("{error}; the batch itself was finite, so the update diverged: "
                 "lower the learning rate (algo.lr) or the gradient-norm clip (algo.max_grad_norm)")


class NonFiniteGuard:
    """Checks batches and counts skipped updates in ``state`` (a
    :class:`~zoo.core.workers.accounting.TrainerState`: ``nonfinite_updates``,
    ``nonfinite_streak``, ``version``), allowing at most ``limit`` consecutive skips.

    ``learn``: False for a sampling benchmark (``trainer.learn = false``), whose batches are
    not trained on and so not checked.
    """

    def __init__(self, state: Any, limit: int, learn: bool = True) -> None:
        self.state, self.limit, self.learn = state, int(limit or 1), learn

    def check(self, batch: dict[str, Any] | None, origins: list[Origin]) -> list[dict[str, Any]]:
        """Where ``batch``'s non-finite values come from (:func:`describe_sources`); ``[]`` when it
        is finite, None, or not to be trained on."""
        if batch is None or not self.learn:
            return []
        bad = nonfinite_columns(batch)
        return describe_sources(bad, origins) if bad else []

    def skip_batch(self, sources: list[dict[str, Any]]) -> Skip:
        """Skip the update of a non-finite batch (every data-parallel rank's ``sources``)."""
        return self.skip("batch values", sources, BATCH_DETAIL.format(where=_where(sources)))

    def skip_update(self, error: Any, origins: list[Origin]) -> Skip:
        """Skip an update the algorithm undid (``error``: its
        :class:`~zoo.core.algorithm.NonFiniteUpdate`); ``origins``: the batch's samples."""
        where = [{"actor": o[0], "env_offset": o[1], "columns": o[3]} for o in origins]
        return self.skip(error.what, where, UPDATE_DETAIL.format(error=error))

    def skip(self, what: str, sources: list[dict[str, Any]], detail: str) -> Skip:
        """Count one skipped update (every rank: the streak decides for all)."""
        self.state.nonfinite_updates += 1
        self.state.nonfinite_streak += 1
        return Skip(what, sources, detail, self.state.nonfinite_streak, self.state.nonfinite_updates,
                    self.state.nonfinite_streak >= self.limit)

    def error(self, skip: Skip, checkpoint: str) -> NonFiniteRunError:
        """The error that stops the run after ``skip`` (its ``last``); ``checkpoint``: the path of
        the checkpoint that holds the last finite weights."""
        return NonFiniteRunError(
            f"{skip.streak} consecutive updates were skipped because of non-finite values "
            f"(trainer.max_nonfinite_updates={self.limit}); the last one: non-finite {skip.what}; {skip.detail}. "
            f"The checkpoint {checkpoint} holds the last finite weights "
            f"(policy version {self.state.version}).")
