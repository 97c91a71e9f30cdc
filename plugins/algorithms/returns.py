"""Return estimators shared by the algorithm plugins.

Generalised Advantage Estimation (GAE), Schulman, Moritz, Levine, Jordan and Abbeel,
"High-Dimensional Continuous Control Using Generalized Advantage Estimation", ICLR 2016,
arXiv 1506.02438, equations 11-16::

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)                         (eq. 11-12)
    A_t     = sum_{l>=0} (gamma * lambda)^l * delta_{t+l}                 (eq. 16)
            = delta_t + gamma * lambda * A_{t+1}                          (reverse scan)
    G_t     = A_t + V(s_t)                   value target (the lambda-return)

All arrays are time-major ``[T, B]`` (``T`` steps of ``B`` agent-slots), numpy arrays or
torch tensors (not mixed); the result has the type, device and floating dtype of
``values``. No torch import happens in this module: numpy and torch share the operations
used here.

Episode boundaries, per step ``t`` of column ``b``:

- ``terminated``: the MDP ended, ``V(s_{t+1}) = 0`` (no bootstrap);
- ``truncated`` (and not terminated): a time limit cut the episode; ``V(s_{t+1})`` is the
  value of the step's *final observation* (``final_value``), never of row ``t + 1``,
  which is already the reset observation of the next episode;
- termination wins when both flags are set;
- at either flag the recursion is cut: ``A_t = delta_t``, nothing flows from the next
  episode into this one.

Inactive steps (``active[t, b]`` False: the agent did not act, e.g. it already finished
in a multi-agent episode) are treated as *not present*: their reward and value are
ignored, their advantage is 0 and their value target equals their value, and the scan
links the active step before them directly to the active step after them (or to the
bootstrap row ``T`` when no active step follows in the sample).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Array = Any  # np.ndarray or torch.Tensor


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _zeros_like(x: Array) -> Array:
    if _is_torch(x):
        import torch

        return torch.zeros_like(x)
    return np.zeros_like(x)


def _check_shape(name: str, x: Array, shape: tuple[int, ...], fn: str = "gae") -> None:
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{fn}: {name!r} has shape {tuple(x.shape)}, expected {tuple(shape)}")


def _first_true(mask: Array) -> tuple[int, int]:
    t, b = np.argwhere(np.asarray(mask.cpu() if _is_torch(mask) else mask))[0]
    return int(t), int(b)


def scatter_final_values(final_index: Array, final_values: Array, like: Array) -> Array:
    """Spread per-truncation values onto a ``[T, B]`` grid.

    Args:
        final_index: int ``[K, 2]``, the ``(t, b)`` of each truncated step (the Batch's
            ``final_index``).
        final_values: float ``[K]``, the value of each step's final observation, same order.
        like: a ``[T, B]`` array whose type, dtype and device the result takes.

    Returns:
        ``[T, B]``: ``final_values[k]`` at ``final_index[k]``, 0 elsewhere.

    Raises:
        ValueError: ``final_index`` is not ``[K, 2]``, lengths differ, or an index is out of range.
    """
    k = final_index.shape[0] if final_index.ndim >= 1 else -1
    if final_index.ndim != 2 or final_index.shape[1] != 2:
        raise ValueError(f"gae: 'final_index' has shape {tuple(final_index.shape)}, expected [K, 2]")
    if tuple(final_values.shape) != (k,):
        raise ValueError(f"gae: 'final_values' has shape {tuple(final_values.shape)}, "
                         f"expected [{k}] (one per final_index row)")
    out = _zeros_like(like)
    if k == 0:
        return out
    t, b = final_index[:, 0], final_index[:, 1]
    T, B = like.shape
    if int(t.min()) < 0 or int(t.max()) >= T or int(b.min()) < 0 or int(b.max()) >= B:
        raise ValueError(f"gae: 'final_index' has an entry outside the [T, B] = [{T}, {B}] grid")
    out[t, b] = final_values.to(out.dtype) if _is_torch(out) else final_values
    return out


def gae(
    rewards: Array,
    values: Array,
    terminated: Array,
    truncated: Array,
    *,
    gamma: float,
    gae_lambda: float,
    final_value: Array | None = None,
    final_index: Array | None = None,
    final_values: Array | None = None,
    active: Array | None = None,
) -> tuple[Array, Array]:
    """Generalised advantage estimates and value targets (arXiv 1506.02438, eq. 11-16).

    Args:
        rewards: float ``[T, B]``, reward received for the action at step ``t``.
        values: float ``[T + 1, B]``, ``V(obs[t])`` for every observation row; row ``T`` is
            the bootstrap observation after the last step. (A ``[T, B]`` array is not
            accepted: the bootstrap row is needed.)
        terminated: bool ``[T, B]``, the MDP ended at step ``t``.
        truncated: bool ``[T, B]``, a time limit cut the episode at step ``t``.
        gamma: discount factor in [0, 1].
        gae_lambda: GAE lambda in [0, 1] (0: one-step TD, 1: Monte-Carlo return).
        final_value: float ``[T, B]``, the value of the final observation of each
            truncated step (read only where ``truncated & ~terminated``). Give either
            this or ``final_index`` + ``final_values``.
        final_index: int ``[K, 2]``, ``(t, b)`` of each truncated step (Batch layout).
        final_values: float ``[K]``, value of the final observation of each ``final_index`` row.
        active: bool ``[T, B]`` (default all True); inactive steps are skipped, see the
            module docstring.

    Returns:
        ``(advantages, returns)``, both ``[T, B]`` with the dtype of ``values``;
        ``returns = advantages + values[:T]``. At inactive steps ``advantages = 0`` and
        ``returns = values[t]``.

    Raises:
        ValueError: a shape does not match, gamma or lambda is outside [0, 1], both or
            neither final-value forms are given while an active step is truncated (and
            not terminated), or such a step has no entry in ``final_index``.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gae: gamma={gamma} must be in [0, 1]")
    if not 0.0 <= gae_lambda <= 1.0:
        raise ValueError(f"gae: gae_lambda={gae_lambda} must be in [0, 1]")
    torch_mode = _is_torch(values)
    if not torch_mode:
        rewards, values = np.asarray(rewards), np.asarray(values)
    if rewards.ndim != 2:
        raise ValueError(f"gae: 'rewards' has shape {tuple(rewards.shape)}, expected time-major [T, B]")
    T, B = rewards.shape
    _check_shape("values", values, (T + 1, B))
    _check_shape("terminated", terminated, (T, B))
    _check_shape("truncated", truncated, (T, B))
    if torch_mode:
        import torch

        active = torch.ones((T, B), dtype=torch.bool, device=values.device) if active is None else active.bool()
        terminated, truncated = terminated.bool(), truncated.bool()
        rewards = rewards.to(values.dtype)
        where: Callable[..., Any] = torch.where
    else:
        if not np.issubdtype(values.dtype, np.floating):
            values = values.astype(np.float64)
        active = np.ones((T, B), dtype=bool) if active is None else np.asarray(active, dtype=bool)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        rewards = np.asarray(rewards).astype(values.dtype)
        where = np.where
    _check_shape("active", active, (T, B))

    needs_final = truncated & ~terminated & active
    if final_value is not None and final_index is not None:
        raise ValueError("gae: give either 'final_value' [T, B] or 'final_index' + 'final_values', not both")
    if final_index is not None:
        if final_values is None:
            raise ValueError("gae: 'final_index' needs 'final_values' (the value of each final observation)")
        ones = torch.ones_like(final_values) if torch_mode else np.ones_like(final_values)
        covered = scatter_final_values(final_index, ones, values[:T]) > 0
        missing = needs_final & ~covered
        if bool(missing.any()):
            t, b = _first_true(missing)
            raise ValueError(f"gae: truncated step (t={t}, b={b}) has no row in 'final_index'; "
                             "every truncated step needs the value of its final observation")
        final_value = scatter_final_values(final_index, final_values, values[:T])
    elif final_value is None:
        if bool(needs_final.any()):
            raise ValueError("gae: a step is truncated but neither 'final_value' nor 'final_index' + "
                             "'final_values' was given; truncation bootstraps from the final observation")
        final_value = _zeros_like(values[:T])
    else:
        _check_shape("final_value", final_value, (T, B))
        final_value = final_value.to(values.dtype) if torch_mode else np.asarray(final_value).astype(values.dtype)

    advantages = _zeros_like(values[:T])
    next_value = values[T]             # V of the successor observation of the step being scanned
    next_adv = _zeros_like(values[T])  # A of the successor step (0 at the bootstrap row)
    gl = gamma * gae_lambda
    for t in range(T - 1, -1, -1):
        cut = terminated[t] | truncated[t]
        zero = _zeros_like(next_value)
        bootstrap = where(terminated[t], zero, where(truncated[t], final_value[t], next_value))
        delta = rewards[t] + gamma * bootstrap - values[t]
        adv = where(active[t], delta + gl * where(cut, zero, next_adv), zero)
        advantages[t] = adv
        next_value = where(active[t], values[t], next_value)
        next_adv = where(active[t], adv, next_adv)
    return advantages, advantages + values[:T]
