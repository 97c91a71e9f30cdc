"""Actor-critic networks for PPO: an MLP for vector observations, the Nature CNN for frames.

Observation encoders (chosen from ``EnvSpec.observation_space`` by :func:`build_actor_critic`):

- vector observations (every key a float Box; keys flattened and concatenated in sorted
  order): separate actor and critic MLPs, two hidden layers of 64 tanh units (the
  network of CleanRL's ``ppo.py`` / ``ppo_continuous_action.py``);
- image observations (the key ``"obs"`` is a uint8 Box ``[C, H, W]``, channels first,
  e.g. 4 stacked 84x84 frames): the Nature CNN of Mnih et al., "Human-level control
  through deep reinforcement learning", Nature 518 (2015), Methods "Model architecture"
  (conv 32x8x8 stride 4, conv 64x4x4 stride 2, conv 64x3x3 stride 1, dense 512, ReLU),
  input scaled by 1/255, shared by the actor and critic heads (CleanRL's ``ppo_atari.py``).

Action heads (``EnvSpec.action_space``, a gymnasium space):

- ``Discrete(n, start)``: categorical over ``n`` logits; actions int64 ``[N]``;
- ``MultiDiscrete(nvec, start)``: independent categoricals, log-probabilities and
  entropies summed; actions int64 ``[N, *nvec.shape]``;
- ``Box(shape)``: diagonal Gaussian with a state-independent log standard deviation
  (initialised to 0); log-probabilities and entropies summed over dimensions; actions
  float32 ``[N, *shape]``, *not* clipped to the bounds (clip where the action is applied,
  so that the stored action keeps its log-probability).

Initialisation (CleanRL ``layer_init``): orthogonal weights, zero biases, gain sqrt(2)
for hidden layers, 0.01 for the policy head, 1 for the value head (Engstrom et al.,
"Implementation Matters in Deep Policy Gradients", ICLR 2020, lists it among PPO's
code-level optimisations).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from zoo.core.env import OBS_KEY, EnvSpec

Obs = dict[str, torch.Tensor]


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weight init with gain ``std`` and constant bias (CleanRL's ``layer_init``)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def is_image_space(space: Any) -> bool:
    """True for a uint8 Box of rank 3 (``[C, H, W]`` frames)."""
    return np.dtype(space.dtype) == np.uint8 and len(space.shape) == 3


class VectorEncoder(nn.Module):
    """Flattens and concatenates float observation keys (sorted): ``[N, ...] -> float32 [N, D]``."""

    def __init__(self, observation_space: dict[str, Any]) -> None:
        super().__init__()
        self.keys = sorted(observation_space)
        self.out_dim = int(sum(np.prod(observation_space[k].shape, dtype=np.int64) for k in self.keys))

    def forward(self, obs: Obs) -> torch.Tensor:
        parts = [obs[k].reshape(obs[k].shape[0], -1).float() for k in self.keys]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def mlp(in_dim: int, hidden: int, out_dim: int, out_std: float) -> nn.Sequential:
    """Two tanh hidden layers of ``hidden`` units, then a linear head initialised with ``out_std``."""
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, out_dim), std=out_std),
    )


class NatureCNN(nn.Module):
    """Mnih et al. 2015 torso: uint8 ``[N, C, H, W]`` -> float32 ``[N, 512]`` (ReLU features)."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__()
        c, h, w = shape
        self.convs = nn.Sequential(
            layer_init(nn.Conv2d(c, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, c, h, w)).shape[1]  # 64 * 7 * 7 for 84 x 84
        self.fc = nn.Sequential(layer_init(nn.Linear(flat, 512)), nn.ReLU())
        self.out_dim = 512

    def forward(self, obs: Obs) -> torch.Tensor:
        return self.fc(self.convs(obs[OBS_KEY].float() / 255.0))


class ActionHead(nn.Module):
    """Maps the actor's outputs ``[N, num_outputs]`` to a distribution; one subclass per space."""

    num_outputs: int

    def log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def sample(self, out: torch.Tensor, deterministic: bool) -> torch.Tensor:
        raise NotImplementedError


class DiscreteHead(ActionHead):
    def __init__(self, space: Any) -> None:
        super().__init__()
        self.num_outputs, self.start = int(space.n), int(space.start)

    def sample(self, out, deterministic):
        a = out.argmax(-1) if deterministic else Categorical(logits=out).sample()
        return a + self.start

    def log_prob_entropy(self, out, action):
        dist = Categorical(logits=out)
        return dist.log_prob(action.reshape(-1).long() - self.start), dist.entropy()


class MultiDiscreteHead(ActionHead):
    def __init__(self, space: Any) -> None:
        super().__init__()
        self.shape = tuple(space.nvec.shape)
        self.nvec = [int(n) for n in np.ravel(space.nvec)]
        start = np.ravel(getattr(space, "start", np.zeros_like(space.nvec)))
        self.register_buffer("start", torch.as_tensor(start, dtype=torch.int64), persistent=False)
        self.num_outputs = sum(self.nvec)

    def _dists(self, out):
        return [Categorical(logits=x) for x in torch.split(out, self.nvec, dim=-1)]

    def sample(self, out, deterministic):
        if deterministic:
            a = torch.stack([x.argmax(-1) for x in torch.split(out, self.nvec, dim=-1)], dim=-1)
        else:
            a = torch.stack([d.sample() for d in self._dists(out)], dim=-1)
        return (a + self.start).reshape(out.shape[0], *self.shape)

    def log_prob_entropy(self, out, action):
        a = action.reshape(out.shape[0], -1).long() - self.start
        dists = self._dists(out)
        logp = torch.stack([d.log_prob(a[:, i]) for i, d in enumerate(dists)], dim=-1).sum(-1)
        ent = torch.stack([d.entropy() for d in dists], dim=-1).sum(-1)
        return logp, ent


class GaussianHead(ActionHead):
    def __init__(self, space: Any) -> None:
        super().__init__()
        self.shape = tuple(space.shape)
        self.num_outputs = int(np.prod(self.shape, dtype=np.int64))
        self.log_std = nn.Parameter(torch.zeros(self.num_outputs))

    def sample(self, out, deterministic):
        a = out if deterministic else Normal(out, self.log_std.exp().expand_as(out)).sample()
        return a.reshape(out.shape[0], *self.shape)

    def log_prob_entropy(self, out, action):
        dist = Normal(out, self.log_std.exp().expand_as(out))
        a = action.reshape(out.shape[0], -1).to(out.dtype)
        return dist.log_prob(a).sum(-1), dist.entropy().sum(-1)


def make_head(space: Any) -> ActionHead:
    """The head for ``space`` (a Box head owns the ``log_std`` parameter).

    Raises:
        TypeError: the space is not Discrete, MultiDiscrete or Box.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return DiscreteHead(space)
    if isinstance(space, spaces.MultiDiscrete):
        return MultiDiscreteHead(space)
    if isinstance(space, spaces.Box):
        return GaussianHead(space)
    raise TypeError(f"PPO supports Discrete, MultiDiscrete and Box action spaces, not {space}")


class ActorCritic(nn.Module):
    """The PPO policy: ``act`` for the policy worker, ``evaluate`` for the loss.

    All methods take ``obs``: ``dict[str, Tensor [N, ...]]`` (keys of the EnvSpec's
    observation space) and return float32 tensors of shape ``[N]`` for log-probabilities,
    entropies (nats) and values.
    """

    def __init__(self, spec: EnvSpec, hidden: int = 64) -> None:
        super().__init__()
        spaces = spec.observation_space
        self.head = make_head(spec.action_space)
        n_out = self.head.num_outputs
        if OBS_KEY in spaces and is_image_space(spaces[OBS_KEY]):
            if len(spaces) != 1:
                raise ValueError(f"PPO's CNN takes one image key {OBS_KEY!r}; got keys {sorted(spaces)}")
            self.encoder = NatureCNN(tuple(spaces[OBS_KEY].shape))
            self.actor = layer_init(nn.Linear(self.encoder.out_dim, n_out), std=0.01)
            self.critic = layer_init(nn.Linear(self.encoder.out_dim, 1), std=1.0)
        else:
            for k, s in spaces.items():
                if len(s.shape) == 3 and np.dtype(s.dtype) == np.uint8:
                    raise ValueError(f"observation key {k!r} is an image; PPO's CNN reads only key {OBS_KEY!r}")
            self.encoder = VectorEncoder(spaces)
            self.actor = mlp(self.encoder.out_dim, hidden, n_out, out_std=0.01)
            self.critic = mlp(self.encoder.out_dim, hidden, 1, out_std=1.0)

    def _forward(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.encoder(obs)
        return self.actor(x), self.critic(x).squeeze(-1)

    def value(self, obs: Obs) -> torch.Tensor:
        """State values ``V(obs)``, float32 ``[N]``."""
        return self.critic(self.encoder(obs)).squeeze(-1)

    def act(self, obs: Obs, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """Choose actions: ``{"action": [N, ...], "logp": float32 [N], "value": float32 [N]}``.

        ``deterministic`` takes the mode (argmax or Gaussian mean) instead of sampling.
        Runs without building a graph.
        """
        with torch.no_grad():
            out, value = self._forward(obs)
            action = self.head.sample(out, deterministic)
            logp, _ = self.head.log_prob_entropy(out, action)
        return {"action": action, "logp": logp.float(), "value": value.float()}

    def evaluate(self, obs: Obs, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logp, entropy, value)`` of ``action`` under the current weights, each float32 ``[N]``."""
        out, value = self._forward(obs)
        logp, entropy = self.head.log_prob_entropy(out, action)
        return logp, entropy, value
