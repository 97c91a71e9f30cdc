"""From a time-major batch (:mod:`zoo.core.algorithm`) to the transitions a replay stores:
:func:`observation_rows` (each observation row once, with its predecessor in its env column) and
:func:`batch_transitions` (n-step targets, :mod:`zoo.plugins.algorithms.nstep`, pointing at those
rows), for :meth:`zoo.plugins.algorithms.replay.Replay.insert` (docs/replay.md); and what a
Q-learner (apex-dqn, r2d2) needs of the env spec (:func:`check_q_learning_spec`). This module
imports numpy only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zoo.plugins.algorithms.nstep import nstep_targets


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def observation_rows(batch: dict[str, Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A time-major batch's observation rows, as
    :meth:`~zoo.plugins.algorithms.replay.Replay.insert` stores them: the ``T + 1`` rows per column
    (row ``t * B + b``), then the final observations of its truncated steps (``final_obs``, in
    ``final_index`` order).

    Returns:
        ``({key: [rows, ...]}, prev_row)``: ``prev_row`` int64 ``[rows]`` is each row's
        predecessor in its env column (row ``(t - 1) * B + b``, -1 for ``t = 0``; a final
        observation's is its step's row).
    """
    T, B = np.shape(batch["reward"])
    final_index = np.asarray(batch.get("final_index", np.zeros((0, 2), np.int64)), np.int64).reshape(-1, 2)
    obs_rows = {k: _flat(np.asarray(v)) for k, v in batch["obs"].items()}
    if final_index.shape[0]:
        final = batch["final_obs"]
        obs_rows = {k: np.concatenate([v, np.asarray(final[k]).astype(v.dtype, copy=False)])
                    for k, v in obs_rows.items()}
    prev_row = np.concatenate([np.full(B, -1, np.int64), np.arange(T * B, dtype=np.int64),
                               final_index[:, 0] * B + final_index[:, 1]])
    return obs_rows, prev_row


def batch_transitions(batch: dict[str, Any], *, gamma: float, n: int, who: str) -> dict[str, Any]:
    """The active transitions of a time-major batch (:mod:`zoo.core.algorithm`) with n-step targets,
    ready for :meth:`~zoo.plugins.algorithms.replay.Replay.insert`.

    Observation rows are the batch's ``T + 1`` rows per column (row ``t * B + b``), then the final
    observations of its truncated steps (``final_obs``, in ``final_index`` order). A transition's
    bootstrap row is ``obs[last + 1]``, or the final observation of step ``last`` when it was
    truncated (never the next episode's reset row); after termination (``disc = 0``) it is the
    transition's own row (unused).

    Args:
        batch: needs ``obs``, ``action``, ``reward``, ``terminated``, ``truncated``; optional
            ``active`` (all True without), ``final_obs`` / ``final_index``.
        gamma, n: the discount and the steps of the return (:func:`nstep_targets`).
        who: the algorithm's name, for the error message.

    Returns:
        ``{"obs": {key: [rows, ...]}, "prev_row": int64 [rows], "s_idx": int64 [m], "boot_idx": int64
        [m], "action": [m, ...], "ret": float32 [m], "disc": float32 [m]}``, ``m`` the active steps
        in (t, b) order; ``prev_row`` is each row's predecessor in its column (row ``(t - 1) * B +
        b``, -1 for ``t = 0``; a final observation's is its step's row), for
        :meth:`~zoo.plugins.algorithms.replay.Replay.insert`.

    Raises:
        ValueError: a truncated active step has no row in ``final_index``.
    """
    reward = np.asarray(batch["reward"], np.float32)
    T, B = reward.shape
    active = np.asarray(batch["active"], bool) if "active" in batch else np.ones((T, B), bool)
    ret, disc, last, from_final = nstep_targets(reward, batch["terminated"], batch["truncated"], gamma=gamma, n=n)
    rows = (T + 1) * B
    final_index = np.asarray(batch.get("final_index", np.zeros((0, 2), np.int64)), np.int64).reshape(-1, 2)
    final_row = np.full((T, B), -1, np.int64)
    final_row[final_index[:, 0], final_index[:, 1]] = rows + np.arange(final_index.shape[0])
    cols = np.arange(B)[None, :]
    s_idx = np.arange(T)[:, None] * B + cols
    boot_idx = np.where(from_final, final_row[last, np.broadcast_to(cols, (T, B))], (last + 1) * B + cols)
    if bool((from_final & (boot_idx < 0) & active).any()):
        raise ValueError(f"{who}: a truncated step has no row in 'final_index'; every truncated step needs "
                         "its final observation (zoo.core.algorithm)")
    boot_idx = np.where(disc > 0, boot_idx, s_idx)  # unused after termination: any valid row
    obs_rows, prev_row = observation_rows(batch)
    keep = active.reshape(-1)
    return {"obs": obs_rows, "prev_row": prev_row, "s_idx": s_idx.reshape(-1)[keep],
            "boot_idx": boot_idx.reshape(-1)[keep],
            "action": _flat(np.asarray(batch["action"]))[keep], "ret": ret.reshape(-1)[keep],
            "disc": disc.reshape(-1)[keep]}


def check_q_learning_spec(spec: Any, who: str) -> None:
    """What a Q-learner (apex-dqn, r2d2) needs of ``spec``: a Discrete action space (one Q-value
    per action) and no action mask (its greedy and epsilon-random actions could be illegal).
    Several agents are fine: they share the network as independent learners, as PPO trains them.

    Raises:
        TypeError: either need is not met, naming ``who``, the env and what to use instead.
    """
    from gymnasium import spaces

    from zoo.core.spaces import ACTION_MASK_KEY

    if not isinstance(spec.action_space, spaces.Discrete):
        raise TypeError(f"{who} needs a Discrete action space; env {spec.env_id!r} has {spec.action_space} "
                        "(use ppo or impala for other action spaces)")
    if ACTION_MASK_KEY in spec.observation_space:
        raise TypeError(f"{who} does not apply action masks; env {spec.env_id!r} has {ACTION_MASK_KEY!r} "
                        "(use ppo or mappo, which sample legal actions only)")
