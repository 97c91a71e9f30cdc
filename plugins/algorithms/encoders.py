"""Observation encoders shared by the algorithms: ``dict[str, Tensor [N, ...]] -> float32 [N, F]``.

Observations arrive as the named Box leaves of :mod:`zoo.core.spaces` (Discrete entries
already one-hot, images channels-first). Keys starting with ``"zoo:"`` (action mask,
global state) are Zoo's bookkeeping, not features: an encoder reads them only when
asked for them by name.

- image leaves (rank 3, ``[C, H, W]``): a CNN each; uint8 input scaled by 1/255. Frames
  of at least 36 x 36 get the Nature CNN of Mnih et al., "Human-level control through
  deep reinforcement learning", Nature 518 (2015), Methods "Model architecture" (conv
  32x8x8 stride 4, conv 64x4x4 stride 2, conv 64x3x3 stride 1, dense 512, ReLU); smaller
  grids (e.g. 7 x 7) a :class:`SmallCNN` (two 3x3 convs of 32 and 64 channels, padding 1,
  dense 256, ReLU);
- every other leaf: flattened, as float32 (uint8 scaled by 1/255), concatenated in
  sorted key order (:class:`VectorEncoder`).

Initialisation (CleanRL ``layer_init``): orthogonal weights, zero biases, gain sqrt(2)
(Engstrom et al., "Implementation Matters in Deep Policy Gradients", ICLR 2020).
"""
from __future__ import annotations

import math
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from zoo.core.spaces import is_zoo_key

Obs = dict[str, torch.Tensor]


_Layer = TypeVar("_Layer", nn.Linear, nn.Conv2d)


def layer_init(layer: _Layer, std: float = math.sqrt(2), bias: float = 0.0) -> _Layer:
    """Orthogonal weight init with gain ``std`` and constant bias (CleanRL's ``layer_init``)."""
    nn.init.orthogonal_(layer.weight, std)
    assert layer.bias is not None, "layer_init sets the bias: a layer built with bias=True"
    nn.init.constant_(layer.bias, bias)
    return layer


def is_image_space(space: Any) -> bool:
    """True for a Box of rank 3 (``[C, H, W]``, channels first after :mod:`zoo.core.spaces`)."""
    return len(space.shape) == 3


def feature_keys(spaces: dict[str, Any]) -> list[str]:
    """The env's feature keys (sorted), without Zoo's own ``"zoo:..."`` keys."""
    return sorted(k for k in spaces if not is_zoo_key(k))


def _as_float(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


class VectorEncoder(nn.Module):
    """Flattens and concatenates ``keys`` (default: the feature keys, sorted): ``[N, ...] -> float32 [N, D]``.

    uint8 inputs are scaled by 1/255.
    """

    def __init__(self, observation_space: dict[str, Any], keys: list[str] | None = None) -> None:
        super().__init__()
        self.keys = sorted(keys) if keys is not None else feature_keys(observation_space)
        self.out_dim = int(sum(np.prod(observation_space[k].shape, dtype=np.int64) for k in self.keys))

    def forward(self, obs: Obs) -> torch.Tensor:
        parts = [_as_float(obs[k]).reshape(obs[k].shape[0], -1) for k in self.keys]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


class NatureCNN(nn.Module):
    """Mnih et al. 2015 torso: ``[N, C, H, W]`` (H, W >= 36) -> float32 ``[N, 512]`` (ReLU features).

    ``channels_last_memory`` (False when built; the trainer sets it on the CPU,
    :func:`zoo.plugins.algorithms.precision.use_channels_last`): the frames are laid out
    channels-last in memory (``torch.channels_last``, same shape and values) before the first
    convolution, so that oneDNN runs the convolutions and their backward passes in NHWC: a
    training step on a minibatch of 256 took 0.70-0.76x the CPU time in float32 and 0.92-0.98x
    under bfloat16 (benchmarks/RESULTS.md, "bfloat16 training"). The weights keep their layout
    (channels-last weights as well measured no better).
    """

    channels_last_memory = False

    def __init__(self, shape: tuple[int, int, int], key: str = "obs") -> None:
        super().__init__()
        c, h, w = shape
        self.key = key
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
        x = obs[self.key]
        if self.channels_last_memory and x.dim() == 4:  # before the float cast: 1 byte per value to move
            x = x.contiguous(memory_format=torch.channels_last)
        return self.fc(self.convs(_as_float(x)))


class SmallCNN(nn.Module):
    """For small grids: ``[N, C, H, W]`` -> conv 32x3x3, conv 64x3x3 (padding 1, ReLU) -> dense 256 (ReLU)."""

    def __init__(self, shape: tuple[int, int, int], key: str) -> None:
        super().__init__()
        c, h, w = shape
        self.key = key
        self.convs = nn.Sequential(
            layer_init(nn.Conv2d(c, 32, 3, padding=1)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 3, padding=1)), nn.ReLU(),
            nn.Flatten(),
        )
        self.fc = nn.Sequential(layer_init(nn.Linear(64 * h * w, 256)), nn.ReLU())
        self.out_dim = 256

    def forward(self, obs: Obs) -> torch.Tensor:
        return self.fc(self.convs(_as_float(obs[self.key])))


def make_cnn(shape: tuple[int, int, int], key: str) -> NatureCNN | SmallCNN:
    """:class:`NatureCNN` for frames of at least 36 x 36, else :class:`SmallCNN`."""
    return NatureCNN(shape, key) if min(shape[1], shape[2]) >= 36 else SmallCNN(shape, key)


class ObsEncoder(nn.Module):
    """Every feature leaf with the encoder that fits it (module docstring): a CNN per image
    leaf, the other leaves flattened; the features concatenated, float32 ``[N, out_dim]``."""

    def __init__(self, observation_space: dict[str, Any], keys: list[str] | None = None) -> None:
        super().__init__()
        keys = sorted(keys) if keys is not None else feature_keys(observation_space)
        images = [k for k in keys if is_image_space(observation_space[k])]
        # modules are named by position: observation keys may hold '.' (nested leaves)
        cnns = [make_cnn(tuple(observation_space[k].shape), k) for k in images]
        self.cnns = nn.ModuleList(cnns)
        rest = [k for k in keys if k not in images]
        self.vector = VectorEncoder(observation_space, rest) if rest else None
        self.out_dim = sum(c.out_dim for c in cnns) + (self.vector.out_dim if self.vector else 0)

    @property
    def has_images(self) -> bool:
        return len(self.cnns) > 0

    def forward(self, obs: Obs) -> torch.Tensor:
        parts = [c(obs) for c in self.cnns] + ([self.vector(obs)] if self.vector is not None else [])
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
