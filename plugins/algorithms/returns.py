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


def _ones_like(x: Array) -> Array:
    if _is_torch(x):
        import torch

        return torch.ones_like(x)
    return np.ones_like(x)


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


def resolve_final_values(fn: str, values: Array, needs_final: Array, final_value: Array | None,
                         final_index: Array | None, final_values: Array | None) -> Array:
    """The value of each truncated step's final observation on the ``[T, B]`` grid of
    ``values[:T]`` (0 where none is read), from either form :func:`gae` accepts; shared by the
    return estimators (:func:`gae`, :func:`decision_gae`, V-trace). ``fn`` names the caller in
    messages; ``needs_final``: bool ``[T, B]``, the steps that read one (active, truncated and
    not terminated).

    Raises:
        ValueError: both forms given, ``final_index`` without ``final_values``, a step of
            ``needs_final`` without a value, or a shape that does not match.
    """
    T, B = values.shape[0] - 1, values.shape[1]
    torch_mode = _is_torch(values)

    def scatter(v: Array) -> Array:
        try:
            return scatter_final_values(final_index, v, values[:T])
        except ValueError as exc:
            raise ValueError(str(exc).replace("gae:", f"{fn}:", 1)) from None

    if final_value is not None and final_index is not None:
        raise ValueError(f"{fn}: give either 'final_value' [T, B] or 'final_index' + 'final_values', not both")
    if final_index is not None:
        if final_values is None:
            raise ValueError(f"{fn}: 'final_index' needs 'final_values' (the value of each final observation)")
        ones = _ones_like(final_values)
        missing = needs_final & ~(scatter(ones) > 0)
        if bool(missing.any()):
            t, b = _first_true(missing)
            raise ValueError(f"{fn}: truncated step (t={t}, b={b}) has no row in 'final_index'; "
                             "every truncated step needs the value of its final observation")
        return scatter(final_values)
    if final_value is None:
        if bool(needs_final.any()):
            raise ValueError(f"{fn}: a step is truncated but neither 'final_value' nor 'final_index' + "
                             "'final_values' was given; truncation bootstraps from the final observation")
        return _zeros_like(values[:T])
    _check_shape("final_value", final_value, (T, B), fn)
    return final_value.to(values.dtype) if torch_mode else np.asarray(final_value).astype(values.dtype)


def _prepare(rewards: Array, values: Array, terminated: Array, truncated: Array, gamma: float, gae_lambda: float,
             final_value: Array | None, final_index: Array | None, final_values: Array | None,
             active: Array | None, fn: str) -> tuple[Any, ...]:
    """:func:`gae`'s and :func:`decision_gae`'s checks and conversions (see :func:`gae`'s Raises):
    ``(where, rewards, values, terminated, truncated, active, final_value)``, every array of
    ``values``' kind and device, ``final_value`` ``[T, B]`` (0 where no truncated step reads it)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"{fn}: gamma={gamma} must be in [0, 1]")
    if not 0.0 <= gae_lambda <= 1.0:
        raise ValueError(f"{fn}: gae_lambda={gae_lambda} must be in [0, 1]")
    torch_mode = _is_torch(values)
    if not torch_mode:
        rewards, values = np.asarray(rewards), np.asarray(values)
    if rewards.ndim != 2:
        raise ValueError(f"{fn}: 'rewards' has shape {tuple(rewards.shape)}, expected time-major [T, B]")
    T, B = rewards.shape
    _check_shape("values", values, (T + 1, B), fn)
    _check_shape("terminated", terminated, (T, B), fn)
    _check_shape("truncated", truncated, (T, B), fn)
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
    _check_shape("active", active, (T, B), fn)

    needs_final = truncated & ~terminated & active
    final_value = resolve_final_values(fn, values, needs_final, final_value, final_index, final_values)
    return where, rewards, values, terminated, truncated, active, final_value


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
    where, rewards, values, terminated, truncated, active, final_value = _prepare(
        rewards, values, terminated, truncated, gamma, gae_lambda, final_value, final_index, final_values, active,
        "gae")
    T = rewards.shape[0]
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


def decision_gae(
    rewards: Array,
    values: Array,
    terminated: Array,
    truncated: Array,
    passive: Array,
    *,
    gamma: float,
    gae_lambda: float,
    final_value: Array | None = None,
    final_index: Array | None = None,
    final_values: Array | None = None,
    final_passive: Array | None = None,
    active: Array | None = None,
) -> tuple[Array, Array, Array]:
    """GAE over the *decisions* of a sample: rows where the agent had no choice (``passive``:
    one legal action, as a waiting player's rows in a turn-based game) are not steps of the
    decision process but part of the transition between two decisions (a semi-MDP, Sutton,
    Precup and Singh, "Between MDPs and semi-MDPs", Artificial Intelligence 112, 1999).

    For a decision row ``d`` followed by ``k`` passive rows and then the next decision ``d'``
    of the same episode (``d' = d + k + 1``), with the rewards ``r_d .. r_{d+k}``::

        delta_d = sum_{j=0..k} gamma^j r_{d+j} + gamma^{k+1} V(s_{d'}) - V(s_d)
        A_d     = delta_d + (gamma^{k+1} lambda) A_{d'}
        G_d     = A_d + V(s_d)

    which is :func:`gae` (arXiv 1506.02438 eq. 16) with ``lambda`` = 1 on every transition into a
    passive row, where ``V`` of the passive rows cancels; with no passive row it is exactly
    :func:`gae`. The value of a passive observation is never used: its network is not trained
    on such rows. Episode ends inside a run of passive rows: a termination ends the sum there
    (no bootstrap); a truncation bootstraps from ``final_value`` of its final observation,
    ``gamma^{j+1} V(final)``. A decision whose bootstrap would be a passive observation (the
    sample ends in passive rows and ``obs[T]`` is passive; a truncation whose final observation
    is passive, ``final_passive``) cannot be valued: it is left out (``trained`` False) and its
    value becomes the bootstrap of the decisions before it, as ``V(obs[T])`` is for the last row
    of :func:`gae`. Inactive rows are skipped as in :func:`gae`.

    Args:
        rewards, values, terminated, truncated, gamma, gae_lambda, final_value, final_index,
        final_values, active: as in :func:`gae`.
        passive: bool ``[T + 1, B]``, the agent had no choice at the row (row ``T``: the
            bootstrap observation).
        final_passive: bool ``[T, B]``, the final observation of the truncated step at the row
            is passive (read only where a step is truncated and not terminated; default none).

    Returns:
        ``(advantages, returns, trained)``, ``[T, B]`` each: advantages and value targets of the
        rows that enter the losses, ``trained`` (bool) those rows: active, not passive, and
        valued. Elsewhere ``advantages = 0`` and ``returns = values[t]``.

    Raises:
        ValueError: as :func:`gae`, or ``passive`` / ``final_passive`` has the wrong shape.
    """
    where, rewards, values, terminated, truncated, active, final_value = _prepare(
        rewards, values, terminated, truncated, gamma, gae_lambda, final_value, final_index, final_values, active,
        "decision_gae")
    T, B = rewards.shape
    torch_mode = _is_torch(values)
    if torch_mode:
        passive = passive.bool().to(values.device)
        final_passive = (passive[:T] & False) if final_passive is None else final_passive.bool().to(values.device)
    else:
        passive = np.asarray(passive, dtype=bool)
        final_passive = np.zeros((T, B), bool) if final_passive is None else np.asarray(final_passive, dtype=bool)
    _check_shape("passive", passive, (T + 1, B), "decision_gae")
    _check_shape("final_passive", final_passive, (T, B), "decision_gae")

    zero = _zeros_like(values[T])
    advantages = _zeros_like(values[:T])
    trained = passive[:T] & False
    no = passive[T] & False      # an all-False row
    next_value = values[T]       # V of the next decision row (or of obs[T])
    next_adv = zero              # its advantage (0 at a bootstrap)
    run_reward = zero            # discounted rewards of the passive rows between this row and the next decision
    run_discount = zero + 1.0    # gamma^k over those k rows; 0 once an episode end cuts the run
    unresolved = passive[T]      # the run ends on a passive observation's value
    for t in range(T - 1, -1, -1):
        on, pas = active[t], passive[t]
        term, trunc = terminated[t], truncated[t] & ~terminated[t]
        cut = term | trunc
        end_value = where(trunc, final_value[t], zero)           # the bootstrap at an episode end
        # the row's continuation needs a passive observation's value (either kind of row)
        row_unresolved = where(cut, trunc & final_passive[t], unresolved)
        # a passive row: its reward joins the run, its value is skipped
        p_reward = where(cut, rewards[t] + gamma * end_value, rewards[t] + gamma * run_reward)
        p_discount = where(cut, zero, gamma * run_discount)
        # a decision row
        follow = run_reward + run_discount * (next_value + gae_lambda * next_adv)
        d_adv = where(cut, rewards[t] + gamma * end_value, rewards[t] + gamma * follow) - values[t]
        decide = on & ~pas
        valued = decide & ~row_unresolved
        advantages[t] = where(valued, d_adv, zero)
        trained[t] = valued
        next_value = where(decide, values[t], next_value)
        next_adv = where(valued, d_adv, where(decide, zero, next_adv))
        run_reward = where(decide, zero, where(on, p_reward, run_reward))
        run_discount = where(decide, zero + 1.0, where(on, p_discount, run_discount))
        unresolved = where(decide, no, where(on, row_unresolved, unresolved))
    return advantages, advantages + values[:T], trained
