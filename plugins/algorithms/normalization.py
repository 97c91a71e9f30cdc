"""Running observation and reward normalisation, as SB3's ``VecNormalize`` and CleanRL's continuous PPO do it.

- **Observations** (:class:`ObsNorm`, inside the policy network): each feature leaf (not
  images, not Zoo's ``"zoo:..."`` keys) becomes ``clip((x - mean) / sqrt(var + eps), -clip, clip)``
  with ``eps = 1e-8`` and ``clip = 10`` (SB3 ``VecNormalize.normalize_obs``).
- **Rewards** (:class:`RewardNorm`, in the algorithm): ``clip(r / sqrt(var_R + eps), -clip, clip)``
  where ``var_R`` is the running variance of the discounted return ``R_t = gamma R_{t-1} + r_t``
  (reset to 0 when the episode ends), which the actor keeps per agent-slot and sends in
  each sample as ``disc_return`` (SB3 ``VecNormalize.normalize_reward``; Engstrom et al.,
  "Implementation Matters in Deep Policy Gradients", ICLR 2020, "reward scaling").

Statistics are exact running moments over every sample seen (Chan, Golub and LeVeque's
parallel update, the ``RunningMeanStd`` of SB3 / OpenAI baselines):
``delta = m_b - m; M = n + n_b; m' = m + delta n_b / M;
var' = (var n + var_b n_b + delta^2 n n_b / M) / M``, starting from ``m = 0, var = 1, n = 1e-4``.

Merged across actors: the trainer updates them from each batch (which holds the samples
of every actor), *after* the update, so that the update uses the statistics the
behaviour policy acted with. Merged across data-parallel trainers (``trainer.count`` = K
> 1): each update's moments are those of the K shares concatenated
(:func:`zoo.core.distributed.pooled_mean_var`, the same parallel formula across ranks), so
every rank holds the same statistics, those one trainer would keep on the whole batch;
every rank must therefore call ``update`` the same number of times (with 0 rows if it has
none). Saved in checkpoints: observation statistics are buffers
of the policy (so the policy worker and ``zoo eval`` use them too), reward statistics
are part of the algorithm's ``state_dict``.
"""
from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from zoo.core import distributed as zdist
from zoo.core.spaces import is_zoo_key

EPS = 1e-8


class RunningMeanStd(nn.Module):
    """Running mean and variance over the leading axis, per feature (``shape``); float64 buffers."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the moments of ``x [n, *shape]`` (module docstring); with data-parallel
        trainers those of every rank's ``x`` (a collective: call it on every rank). No rows
        (on every rank) change nothing.

        Raises:
            PeerLost: data-parallel trainers only: the all-reduce failed.
        """
        x = x.detach().to(torch.float64).reshape(-1, *self.mean.shape)
        n, b_mean, b_var = zdist.pooled_mean_var(x)
        if n == 0:
            return
        b_mean, b_var = b_mean.to(self.mean.device), b_var.to(self.mean.device)
        delta = b_mean - self.mean
        total = self.count + n
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + b_var * n + delta ** 2 * self.count * n / total) / total)
        self.count.copy_(total)  # on the device: no host sync per update


def norm_keys(observation_space: dict[str, Any]) -> list[str]:
    """The leaves :class:`ObsNorm` normalises: every feature key except images (rank-3 Boxes)."""
    return sorted(k for k, s in observation_space.items() if not is_zoo_key(k) and len(s.shape) != 3)


class ObsNorm(nn.Module):
    """``obs -> obs`` with the :func:`norm_keys` leaves normalised (float32) and clipped to ``[-clip, clip]``."""

    def __init__(self, observation_space: dict[str, Any], clip: float = 10.0) -> None:
        super().__init__()
        self.keys = norm_keys(observation_space)
        self.clip = float(clip)
        # named by position: observation keys may hold '.'
        self.stats = nn.ModuleList([RunningMeanStd(tuple(observation_space[k].shape)) for k in self.keys])

    def forward(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = dict(obs)
        for k, rms in self._stats():
            x = obs[k].float()
            out[k] = ((x - rms.mean.float()) / torch.sqrt(rms.var.float() + EPS)).clamp(-self.clip, self.clip)
        return out

    def update(self, obs: dict[str, torch.Tensor]) -> None:
        """Merge rows ``obs[k] [n, ...]`` (pass the active agent steps only)."""
        for k, rms in self._stats():
            rms.update(obs[k])

    def _stats(self) -> list[tuple[str, RunningMeanStd]]:
        """Each normalised key with its statistics (nn.ModuleList holds them untyped)."""
        return [(k, cast(RunningMeanStd, rms)) for k, rms in zip(self.keys, self.stats, strict=True)]


class RewardNorm(nn.Module):
    """Reward scaling by the running standard deviation of the discounted return (module docstring)."""

    def __init__(self, clip: float = 10.0) -> None:
        super().__init__()
        self.clip = float(clip)
        self.returns = RunningMeanStd(())

    def update(self, disc_return: torch.Tensor) -> None:
        """Merge discounted returns ``[n]`` (active agent steps)."""
        self.returns.update(disc_return)

    def forward(self, reward: torch.Tensor) -> torch.Tensor:
        """``clip(reward / sqrt(var_R + eps), -clip, clip)``, float32, same shape."""
        scale = torch.sqrt(self.returns.var + EPS).to(torch.float32)
        return (reward.float() / scale).clamp(-self.clip, self.clip)


def scaled_rewards(reward_norm: RewardNorm | None, batch: dict[str, Any], reward: torch.Tensor,
                   active: torch.Tensor | None) -> torch.Tensor:
    """The rewards an update trains on: ``reward`` as is, or (``reward_norm`` given) after merging
    the batch's active ``disc_return`` into the statistics, scaled by them.

    Raises:
        KeyError: reward normalisation is on but the batch has no ``disc_return``.
    """
    if reward_norm is None:
        return reward
    if "disc_return" not in batch:
        raise KeyError("norm_reward is on but the batch has no 'disc_return' (the actor adds it when the "
                       "algorithm config has norm_reward=True)")
    ret = torch.as_tensor(batch["disc_return"], device=reward.device)
    reward_norm.update(ret[active] if active is not None else ret.reshape(-1))
    return reward_norm(reward)
