"""Actor-critic networks for PPO (and IMPALA): MLPs for vector observations, CNNs for images.

Observation encoders (:mod:`zoo.plugins.algorithms.encoders`, chosen from
``EnvSpec.observation_space``, Zoo's ``"zoo:..."`` keys excluded):

- vector observations only (every feature leaf of rank other than 3; keys flattened and
  concatenated in sorted order): separate actor and critic MLPs, two hidden layers of 64
  tanh units (the network of CleanRL's ``ppo.py`` / ``ppo_continuous_action.py``);
- with image leaves (rank 3, ``[C, H, W]``, e.g. 4 stacked 84x84 frames): one encoder
  shared by the actor and critic heads (CleanRL's ``ppo_atari.py``): the Nature CNN (or a
  small CNN for small grids) per image, the vector leaves flattened next to it, then a
  linear policy head and a linear value head;
- ``algo.network = "columns"`` (board games whose ``Discrete(W)`` moves are the columns of a
  ``[C, H, W]`` board, such as connect four): :mod:`zoo.plugins.algorithms.board`'s tower of
  3x3 convolutions with a policy head shared by every column and a small value head.

Action heads and masks: :mod:`zoo.plugins.algorithms.distributions` (Discrete,
MultiDiscrete, MultiBinary, Box; the observation key ``"zoo:action_mask"`` masks the
categoricals in ``act`` and ``evaluate`` alike).

Initialisation (CleanRL ``layer_init``): orthogonal weights, zero biases, gain sqrt(2)
for hidden layers, 0.01 for the policy head, 1 for the value head (Engstrom et al.,
"Implementation Matters in Deep Policy Gradients", ICLR 2020, lists it among PPO's
code-level optimisations).
"""
from __future__ import annotations

import torch
from torch import nn

from zoo.core.env import EnvSpec
from zoo.core.spaces import ACTION_MASK_KEY
from zoo.plugins.algorithms.board import BoardValueHead, ColumnPolicyHead, ColumnTower
from zoo.plugins.algorithms.distributions import (  # noqa: F401 - re-exported
    ActionHead,
    DiscreteHead,
    GaussianHead,
    MultiBinaryHead,
    MultiDiscreteHead,
    make_head,
)
from zoo.plugins.algorithms.encoders import NatureCNN, ObsEncoder, VectorEncoder, is_image_space, layer_init  # noqa: F401
from zoo.plugins.algorithms.normalization import ObsNorm

Obs = dict[str, torch.Tensor]


def mlp(in_dim: int, hidden: int, out_dim: int, out_std: float) -> nn.Sequential:
    """Two tanh hidden layers of ``hidden`` units, then a linear head initialised with ``out_std``."""
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, out_dim), std=out_std),
    )


def has_images(spec: EnvSpec) -> bool:
    """True when a feature leaf of ``spec`` is an image (rank-3 Box): the CNN presets apply."""
    return any(is_image_space(s) for k, s in spec.observation_space.items() if not k.startswith("zoo:"))


class ActorCritic(nn.Module):
    """The PPO policy: ``act`` for the policy worker, ``evaluate`` for the loss.

    All methods take ``obs``: ``dict[str, Tensor [N, ...]]`` (keys of the EnvSpec's
    observation space) and return float32 tensors of shape ``[N]`` for log-probabilities,
    entropies (nats) and values.
    """

    def __init__(self, spec: EnvSpec, hidden: int = 64, norm_obs: bool = False, norm_clip: float = 10.0,
                 network: str = "auto", board_channels: int = 64, board_layers: int = 4) -> None:
        """``network``: ``"auto"`` (the encoders above, chosen from the spaces) or ``"columns"``
        (:mod:`zoo.plugins.algorithms.board`: a convolutional tower of ``board_layers`` layers of
        ``board_channels`` channels whose policy head gives each column of the board its logit).

        Raises:
            ValueError: ``network`` is neither, or ``"columns"`` for spaces it does not fit.
        """
        super().__init__()
        if network not in ("auto", "columns"):
            raise ValueError(f"algo.network={network!r} is not one of 'auto', 'columns'")
        # running observation normalisation (normalization.py): buffers, so checkpoints and the
        # policy workers carry the statistics; None when off
        self.obs_norm = ObsNorm(spec.observation_space, norm_clip) if norm_obs else None
        spaces = spec.observation_space
        self.head = make_head(spec.action_space)
        n_out = self.head.num_outputs
        self.masked = ACTION_MASK_KEY in spaces
        self.encoder: nn.Module
        self.actor: nn.Module
        self.critic: nn.Module
        if network == "columns":
            tower = ColumnTower(spaces, spec.action_space, channels=board_channels, layers=board_layers)
            self.encoder = tower
            self.actor = ColumnPolicyHead(tower.channels, tower.height)
            self.critic = BoardValueHead(tower.channels, tower.height, tower.width)
            return
        encoder = ObsEncoder(spaces)
        if encoder.has_images:
            # one image and nothing else (Atari): the Nature CNN itself, as CleanRL's ppo_atari
            # (then its out_dim is the ObsEncoder's)
            self.encoder = encoder.cnns[0] if encoder.vector is None and len(encoder.cnns) == 1 else encoder
            self.actor = layer_init(nn.Linear(encoder.out_dim, n_out), std=0.01)
            self.critic = layer_init(nn.Linear(encoder.out_dim, 1), std=1.0)
        else:
            vector = encoder.vector
            assert vector is not None, "an observation space without images has vector leaves"
            self.encoder = vector
            self.actor = mlp(vector.out_dim, hidden, n_out, out_std=0.01)
            self.critic = mlp(vector.out_dim, hidden, 1, out_std=1.0)

    def _mask(self, obs: Obs) -> torch.Tensor | None:
        return obs.get(ACTION_MASK_KEY) if self.masked else None

    def normalize_obs(self, obs: Obs) -> Obs:
        return self.obs_norm(obs) if self.obs_norm is not None else obs

    def update_obs_stats(self, obs: Obs) -> None:
        """Merge rows ``obs [n, ...]`` (active agent steps) into the observation statistics, if on."""
        if self.obs_norm is not None:
            self.obs_norm.update(obs)

    def _forward(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.encoder(self.normalize_obs(obs))
        return self.actor(x), self.critic(x).squeeze(-1)

    def value(self, obs: Obs) -> torch.Tensor:
        """State values ``V(obs)``, float32 ``[N]``."""
        return self.critic(self.encoder(self.normalize_obs(obs))).squeeze(-1)

    def act(self, obs: Obs, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """Choose actions: ``{"action": [N, ...], "logp": float32 [N], "value": float32 [N]}``.

        ``deterministic`` takes the mode (argmax or Gaussian mean) instead of sampling. With
        ``obs["zoo:action_mask"]`` only allowed actions are sampled and ``logp`` is under the
        masked distribution. Box actions are not clipped (the actor clips the env's copy).
        Runs without building a graph.
        """
        with torch.no_grad():
            out, value = self._forward(obs)
            mask = self._mask(obs)
            action = self.head.sample(out, deterministic, mask)
            logp = self.head.log_prob(out, action, mask)
        return {"action": action, "logp": logp.float(), "value": value.float()}

    def evaluate(self, obs: Obs, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logp, entropy, value)`` of ``action`` under the current weights, each float32 ``[N]``."""
        out, value = self._forward(obs)
        logp, entropy = self.head.log_prob_entropy(out, action, self._mask(obs))
        return logp, entropy, value
