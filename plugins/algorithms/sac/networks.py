"""SAC's networks: the tanh-squashed Gaussian policy and the twin Q networks.

**Policy** (:class:`SquashedGaussianPolicy`): observations through
:class:`~zoo.plugins.algorithms.encoders.ObsEncoder` (vector leaves flattened; a CNN per image
leaf), two ReLU layers of ``hidden`` units, then linear heads for the mean ``mu`` and the log
standard deviation, the latter squashed into ``[log_std_min, log_std_max]`` with a tanh
(CleanRL's ``sac_continuous_action``). An action is ``a = tanh(u)``, ``u ~ N(mu, sigma)``,
in ``(-1, 1)^|A|``, then mapped affinely onto the env's bounds: ``low + (a + 1) (high - low) / 2``.

**The log-probability correction** (Haarnoja et al., "Soft Actor-Critic Algorithms and
Applications", arXiv 1812.05905, appendix C, eq. 26): for ``a = tanh(u)`` with ``u`` of
density ``mu(u | s)``, ::

    log pi(a | s) = log mu(u | s) - sum_i log(1 - tanh(u_i)^2)

computed with the stable identity ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``
(:func:`squashed_gaussian_log_prob`). The log-probability is that of ``a`` in ``(-1, 1)``,
**not** of the env-scaled action: the affine map to the bounds would only subtract the
constant ``sum_i log((high_i - low_i) / 2)``, and leaving it out keeps the target entropy
``-|A|`` meaning the same whatever the bounds (CleanRL includes it; on [-1, 1] bounds, the
MuJoCo case, the two agree).

**Q networks** (:class:`TwinQ`): two independent MLPs ``Q_k(s, a)`` on the encoded observation
concatenated with the action in ``[-1, 1]`` (the env-scaled action mapped back), two ReLU
layers of ``hidden`` units, one output each.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.encoders import ObsEncoder

Obs = dict[str, torch.Tensor]
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def squashed_gaussian_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """``log pi(tanh(u))`` of the tanh-squashed diagonal Gaussian (arXiv 1812.05905, eq. 26).

    Args:
        u: the pre-squash sample, float ``[N, D]``; mean, log_std: the Gaussian's, ``[N, D]``.

    Returns:
        float ``[N]``: ``sum_i [log N(u_i; mean_i, exp(log_std_i)) - log(1 - tanh(u_i)^2)]``, in
        nats, the density of ``a = tanh(u)`` in ``(-1, 1)^D``.
    """
    z = (u - mean) * torch.exp(-log_std)
    log_normal = -0.5 * z * z - log_std - LOG_SQRT_2PI
    log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))  # log(1 - tanh(u)^2), stable for large |u|
    return (log_normal - log_det).sum(-1)


def mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    """Two ReLU layers of ``hidden`` units and a linear output (PyTorch's default initialisation)."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, out_dim))


def action_bounds(spec: EnvSpec) -> tuple[np.ndarray, np.ndarray]:
    """The Box action space's ``(low, high)``, float64 flattened ``[|A|]``."""
    space = spec.action_space
    return (np.asarray(space.low, np.float64).reshape(-1), np.asarray(space.high, np.float64).reshape(-1))


class SquashedGaussianPolicy(nn.Module):
    """The policy the policy workers run (``act``) and the trainer trains (``sample``).

    Buffers: ``center`` and ``half_range`` (float32 ``[|A|]``, the bounds' midpoint and half-width; not
    in the state dict, they follow from the env) and ``warmup`` (float32 scalar, in the state
    dict so that it travels to the policy workers with the weights): while it is 1, ``act``
    (unless ``deterministic``) returns actions uniform within the bounds; the trainer sets it to
    0 once the replay holds ``learning_starts`` transitions.
    """

    center: torch.Tensor
    half_range: torch.Tensor
    warmup: torch.Tensor

    def __init__(self, spec: EnvSpec, hidden: int = 256, log_std_min: float = -5.0, log_std_max: float = 2.0,
                 warmup: bool = True) -> None:
        super().__init__()
        low, high = action_bounds(spec)
        self.shape = tuple(spec.action_space.shape)
        self.dims = int(low.size)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        encoder = ObsEncoder(spec.observation_space)
        self.torso = nn.Sequential(encoder, nn.Linear(encoder.out_dim, hidden), nn.ReLU(),
                                   nn.Linear(hidden, hidden), nn.ReLU())
        self.mean = nn.Linear(hidden, self.dims)
        self.log_std = nn.Linear(hidden, self.dims)
        self.register_buffer("center", torch.as_tensor((high + low) / 2, dtype=torch.float32), persistent=False)
        self.register_buffer("half_range", torch.as_tensor((high - low) / 2, dtype=torch.float32), persistent=False)
        self.register_buffer("warmup", torch.tensor(1.0 if warmup else 0.0))

    def gaussian(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)`` of the pre-squash Gaussian, float32 ``[N, |A|]``; ``log_std`` in
        ``[log_std_min, log_std_max]``."""
        x = self.torso(obs)
        log_std = torch.tanh(self.log_std(x).float())
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1)
        return self.mean(x).float(), log_std

    def sample(self, obs: Obs, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample: ``(a, log pi(a | s))``, ``a = tanh(mean + std * eps)`` float32
        ``[N, |A|]`` in ``(-1, 1)`` (not scaled to the bounds), log-probability float32 ``[N]``
        (:func:`squashed_gaussian_log_prob`). Gradients flow through both; ``eps`` comes from
        ``generator`` (the trainer's, in its checkpoint) or torch's global one."""
        mean, log_std = self.gaussian(obs)
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + torch.exp(log_std) * eps
        return torch.tanh(u), squashed_gaussian_log_prob(u, mean, log_std)

    def to_env(self, a: torch.Tensor) -> torch.Tensor:
        """Actions in ``[-1, 1]`` ``[N, |A|]`` -> the env's bounds, ``[N, *action_shape]``."""
        return (self.center + self.half_range * a).reshape(a.shape[0], *self.shape)

    def from_env(self, action: torch.Tensor) -> torch.Tensor:
        """Env-scaled actions ``[N, *action_shape]`` -> ``[-1, 1]``, float32 ``[N, |A|]``."""
        return (action.reshape(action.shape[0], -1).float() - self.center) / self.half_range

    def act(self, obs: Obs, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """``{"action": float32 [N, *action_shape]}`` within the env's bounds: ``tanh(mean)`` when
        ``deterministic`` (``zoo eval``), else a sample of the policy, or uniformly random while
        ``warmup`` is set. Uses torch's global generator; runs without a graph."""
        with torch.no_grad():
            mean, log_std = self.gaussian(obs)
            if deterministic:
                a = torch.tanh(mean)
            elif bool(self.warmup > 0):
                a = torch.rand(mean.shape, device=mean.device) * 2 - 1
            else:
                a = torch.tanh(mean + torch.exp(log_std) * torch.randn_like(mean))
            return {"action": self.to_env(a)}


class TwinQ(nn.Module):
    """Two Q networks, ``forward(obs, a) -> (q1, q2)``, float32 ``[N]`` each; ``a`` in ``[-1, 1]``
    ``[N, |A|]``."""

    def __init__(self, spec: EnvSpec, hidden: int = 256) -> None:
        super().__init__()
        dims = int(np.prod(spec.action_space.shape, dtype=np.int64))
        encoders = [ObsEncoder(spec.observation_space) for _ in range(2)]
        self.encoders = nn.ModuleList(encoders)
        self.heads = nn.ModuleList([mlp(e.out_dim + dims, hidden, 1) for e in encoders])

    def forward(self, obs: Obs, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q1, q2 = (head(torch.cat([enc(obs), a], dim=1)).squeeze(1).float()
                  for enc, head in zip(self.encoders, self.heads, strict=True))
        return q1, q2
