"""R2D2's sequences, value rescaling and sequence priorities (numpy and torch, no network).

Kapturowski, Ostrovski, Quan, Munos and Dabney, "Recurrent Experience Replay in Distributed
Reinforcement Learning", ICLR 2019 (R2D2), section 2-3:

- **Sequences**: each sample (time-major ``[T, B]``, :mod:`zoo.core.algorithm`) is cut, per
  column, into sequences of ``m`` steps starting every ``period`` steps (``m / 2``: adjacent
  sequences overlap by half, never crossing a sample's end), :func:`sequence_starts`. Each
  sequence stores the recurrent state the acting policy had at its first step (the batch's
  ``rnn_state``: the state the policy worker fed, zeros at ``on_reset``) — R2D2's "stored
  state" strategy.
- **Burn-in**: the first ``burn_in`` steps of a sequence only unroll the network from the
  stored state (no gradient, no loss, no priority); the loss covers steps ``burn_in..m-1``.
- **Targets** (R2D2 eq. 1 with Pohlen et al.'s rescaling): for a trained step ``t`` with the
  n-step horizon ``k`` of :func:`zoo.plugins.algorithms.nstep.nstep_targets` (cut at an
  episode end and at the end of the sequence), ``a* = argmax_a Q(s_{t+k}, a; theta)`` and::

      y_t = h( sum_{j<k} gamma^j r_{t+j} + disc_t * h^{-1}( Q(s_{t+k}, a*; theta^-) ) )

  ``disc_t = gamma^k``, or 0 after termination; after a truncation ``s_{t+k}`` is the
  truncated step's ``final_obs`` fed with the state after that step.
- **Priorities** (R2D2 section 3, "Distributed prioritized replay"):
  ``p = eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t|`` over the trained steps.

The value rescaling (Pohlen et al., "Observe and Look Further: Achieving Consistent
Performance on Atari", arXiv 1805.11593, 2018, section 3.2 and Proposition A.2)::

    h(x)      = sign(x) (sqrt(|x| + 1) - 1) + eps x
    h^{-1}(x) = sign(x) ( ((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1 )

with ``eps = 1e-3`` in R2D2; for ``eps = 0``, ``h^{-1}(x) = sign(x)((|x| + 1)^2 - 1)``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from zoo.plugins.algorithms.nstep import nstep_targets


def h(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Pohlen et al.'s value rescaling ``sign(x)(sqrt(|x| + 1) - 1) + eps x`` (module docstring),
    elementwise, same shape and dtype."""
    return torch.sign(x) * (torch.sqrt(torch.abs(x) + 1.0) - 1.0) + eps * x


def h_inv(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The inverse of :func:`h` (Pohlen et al., Proposition A.2), elementwise."""
    if eps == 0:
        return torch.sign(x) * ((torch.abs(x) + 1.0) ** 2 - 1.0)
    root = (torch.sqrt(1.0 + 4.0 * eps * (torch.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root ** 2 - 1.0)


def sequence_starts(T: int, m: int, period: int) -> np.ndarray:
    """First steps of the sequences cut from a sample of ``T`` steps: ``0, period, 2 period, ...``
    while a whole sequence of ``m`` steps fits (``start + m <= T``). int64 ``[S]``.

    Raises:
        ValueError: ``m > T`` or ``period < 1``.
    """
    if m > T or period < 1:
        raise ValueError(f"sequence_starts: sequences of {m} steps every {period} do not fit a sample of {T} steps")
    return np.arange(0, T - m + 1, period, dtype=np.int64)


def sequence_priority(td_abs: np.ndarray, mask: np.ndarray, eta: float) -> np.ndarray:
    """R2D2's sequence priority ``eta * max|delta| + (1 - eta) * mean|delta|`` over each
    sequence's masked steps.

    Args:
        td_abs: float ``[L, M]``, |TD| per step of ``M`` sequences; mask: bool ``[L, M]``, the
            steps that count (trained: after the burn-in, active).
        eta: the mix, in [0, 1] (R2D2: 0.9).

    Returns:
        float64 ``[M]``; 0 for a sequence without a masked step.
    """
    td_abs = np.abs(np.asarray(td_abs, np.float64))
    mask = np.asarray(mask, bool)
    count = mask.sum(axis=0)
    mx = np.where(mask, td_abs, 0.0).max(axis=0, initial=0.0)
    mean = np.where(mask, td_abs, 0.0).sum(axis=0) / np.maximum(count, 1)
    return np.where(count > 0, eta * mx + (1.0 - eta) * mean, 0.0)


def cut_sequences(batch: dict[str, Any], m: int, period: int, burn_in: int, gamma: float,
                  n: int) -> dict[str, Any]:
    """Cut a batch (:mod:`zoo.core.algorithm` layout, with ``rnn_state``) into sequences.

    Sequence ``i * B + b`` is column ``b`` from step ``s_i`` (:func:`sequence_starts`) to
    ``s_i + m - 1``. n-step targets are computed per sequence (their horizon cut at its end).

    Returns:
        ``obs``: dict of ``[M, m + 1, ...]`` (rows ``s_i .. s_i + m``; row ``m`` bootstraps the
        last steps); ``state0`` float32 ``[M, *S]`` (``rnn_state[s_i, b]``); ``action`` ``[M, m]``;
        ``ret``, ``disc`` float32 ``[M, m]`` and ``last`` int64 ``[M, m]`` (within the
        sequence), ``from_final`` bool ``[M, m]`` (:func:`nstep_targets`); ``reset`` bool
        ``[M, m + 1]`` (``on_reset``; row ``m``: step ``m - 1`` ended the episode); ``active``
        bool ``[M, m]``; ``mask`` bool ``[M, m]`` (trained: ``t >= burn_in`` and active);
        ``final_obs`` dict of ``[K, ...]`` and ``final_pos`` int64 ``[K, 2]`` (sequence, step)
        of every truncated, not terminated, active step of every sequence (a step in two
        overlapping sequences is listed for each), sequence-major; where the rows live in the
        batch's observation rows (:func:`~zoo.plugins.algorithms.transitions.observation_rows`):
        ``row0`` int64 ``[M]`` (the first row, ``s_i * B + b``), ``stride`` (``B``: row ``j`` of
        a sequence is ``row0 + j * B``), ``final_row`` int64 ``[K]`` (``(T + 1) * B`` + the
        ``final_index`` position of each ``final_pos`` entry).

    Raises:
        KeyError: ``rnn_state`` is missing (the acting policy was not recurrent).
        ValueError: a truncated step has no ``final_index`` row.
    """
    if "rnn_state" not in batch:
        raise KeyError("r2d2: the batch has no 'rnn_state' (the recurrent state the policy worker fed at each "
                       "step); the acting policy must be r2d2's recurrent network")
    reward = np.asarray(batch["reward"], np.float32)
    T, B = reward.shape
    terminated = np.asarray(batch["terminated"], bool)
    truncated = np.asarray(batch["truncated"], bool)
    active = np.asarray(batch["active"], bool) if "active" in batch else np.ones((T, B), bool)
    on_reset = np.asarray(batch["on_reset"], bool) if "on_reset" in batch else np.zeros((T, B), bool)
    done = terminated | truncated
    reset_rows = np.concatenate([on_reset, done[-1:]], axis=0)  # [T + 1, B]
    rnn_state = np.asarray(batch["rnn_state"], np.float32)
    starts = sequence_starts(T, m, period)
    S = starts.shape[0]
    t_idx = starts[:, None] + np.arange(m)[None, :]  # [S, m]
    r_idx = starts[:, None] + np.arange(m + 1)[None, :]  # [S, m + 1]

    def seq(x: np.ndarray, idx: np.ndarray) -> np.ndarray:  # [T', B, ...] -> [S * B, L, ...]
        y = x[idx]  # [S, L, B, ...]
        y = np.moveaxis(y, 2, 1)  # [S, B, L, ...]
        return y.reshape(S * B, idx.shape[1], *x.shape[2:])

    term_s, trunc_s = seq(terminated, t_idx), seq(truncated, t_idx)
    ret, disc, last, from_final = nstep_targets(seq(reward, t_idx).T, term_s.T, trunc_s.T, gamma=gamma, n=n)
    act_s = seq(active, t_idx)
    mask = act_s & (np.arange(m)[None, :] >= burn_in)
    # final observations: batch row of each truncated (t, b), then per sequence
    final_index = np.asarray(batch.get("final_index", np.zeros((0, 2), np.int64)), np.int64).reshape(-1, 2)
    final_row = np.full((T, B), -1, np.int64)
    final_row[final_index[:, 0], final_index[:, 1]] = np.arange(final_index.shape[0])
    seq_rows = seq(final_row, t_idx)  # [M, m]
    # a step both terminated and truncated bootstraps from nothing: the actor keeps no final
    # observation for it (nor for an inactive agent's step)
    pos = np.argwhere(trunc_s & ~term_s & act_s)  # [K, 2] (sequence, step), sequence-major
    rows = seq_rows[pos[:, 0], pos[:, 1]]
    if bool((rows < 0).any()):
        raise ValueError("r2d2: a truncated step has no row in 'final_index'; every truncated step needs its final "
                         "observation (zoo.core.algorithm)")
    final = batch.get("final_obs", {})
    obs = {k: seq(np.asarray(v), r_idx) for k, v in batch["obs"].items()}
    return {
        "obs": obs, "state0": rnn_state[starts].reshape(S * B, *rnn_state.shape[2:]),
        "action": seq(np.asarray(batch["action"]), t_idx),
        "ret": ret.T.copy(), "disc": disc.T.copy(), "last": last.T.copy(), "from_final": from_final.T.copy(),
        "reset": seq(reset_rows, r_idx), "active": act_s, "mask": mask,
        "final_obs": {k: np.asarray(final[k])[rows] if k in final else np.zeros((0, *v.shape[2:]), v.dtype)
                      for k, v in obs.items()},
        "final_pos": pos.astype(np.int64),
        "row0": (starts[:, None] * B + np.arange(B)[None, :]).reshape(-1).astype(np.int64), "stride": B,
        "final_row": ((T + 1) * B + rows).astype(np.int64),
    }
