"""n-step Q-learning targets on the time-major batch layout (:mod:`zoo.core.algorithm`).

For step ``t`` of column ``b`` the n-step target is ``ret + disc * Q_target(boot_obs)`` with::

    ret  = sum_{j=0}^{k-1} gamma^j r_{t+j}
    disc = 0 if step t+k-1 terminated, else gamma^k

where ``k <= n`` is the number of steps taken before the first of: ``n`` steps; an episode
boundary (a step ``t+j`` with ``terminated`` or ``truncated`` set, which is the last step
counted); the end of the sample (step ``T - 1``). The bootstrap observation is, exactly as GAE
here (:mod:`zoo.plugins.algorithms.returns`):

- after a *terminated* step: none (``disc = 0``; termination wins when both flags are set);
- after a *truncated* step: that step's ``final_obs`` (the real last observation), never row
  ``t+k``, which is the next episode's reset observation;
- otherwise: ``obs[t+k]`` (row ``T`` at the end of the sample: the bootstrap row).

Nothing flows across an episode boundary. The horizon is cut at the end of a sample (``k < n``
for the last ``n - 1`` steps of each sample): a shorter n-step return, still a correct target
for its horizon; stitching samples would need the same column's next sample, which may reach
another trainer or never arrive (docs/replay.md).
"""
from __future__ import annotations

import numpy as np


def nstep_targets(reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, *, gamma: float,
                  n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns and where each bootstraps (module docstring).

    Args:
        reward: float ``[T, B]``; terminated, truncated: bool ``[T, B]`` (Batch layout).
        gamma: discount in [0, 1]; n: steps, >= 1.

    Returns:
        ``(ret, disc, last, from_final)``: ``ret`` float32 ``[T, B]``, the discounted reward sum;
        ``disc`` float32 ``[T, B]``, the bootstrap's discount (0 after termination);
        ``last`` int64 ``[T, B]``, the last step ``t + k - 1`` counted; ``from_final`` bool
        ``[T, B]``, True when the bootstrap is ``final_obs`` of step ``last`` (a truncated, not
        terminated, step), else it is ``obs[last + 1]`` (unused when ``disc`` is 0).

    Raises:
        ValueError: shapes differ or are not ``[T, B]``, ``n < 1`` or gamma outside [0, 1].
    """
    reward = np.asarray(reward, np.float64)
    terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
    if reward.ndim != 2 or terminated.shape != reward.shape or truncated.shape != reward.shape:
        raise ValueError(f"nstep_targets: reward {reward.shape}, terminated {terminated.shape} and truncated "
                         f"{truncated.shape} must all be time-major [T, B]")
    if n < 1:
        raise ValueError(f"nstep_targets: n={n} must be at least 1")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"nstep_targets: gamma={gamma} must be in [0, 1]")
    T, B = reward.shape
    t0 = np.arange(T)[:, None].repeat(B, 1)
    cols = np.arange(B)[None, :].repeat(T, 0)
    ret = np.zeros((T, B))
    disc = np.ones((T, B))
    last = t0.copy()
    open_ = np.ones((T, B), bool)  # still adding steps
    end_term = np.zeros((T, B), bool)
    end_trunc = np.zeros((T, B), bool)
    for j in range(n):  # one vectorised pass per step of the horizon (n is small)
        t = t0 + j
        inside = open_ & (t < T)
        tc = np.minimum(t, T - 1)
        ret = np.where(inside, ret + disc * reward[tc, cols], ret)
        disc = np.where(inside, disc * gamma, disc)
        last = np.where(inside, tc, last)
        term, trunc = terminated[tc, cols] & inside, truncated[tc, cols] & inside
        end_term |= term
        end_trunc |= trunc & ~term
        open_ = inside & ~term & ~trunc
    disc = np.where(end_term, 0.0, disc)
    return ret.astype(np.float32), disc.astype(np.float32), last.astype(np.int64), end_trunc
