"""A column network for board games whose moves are the board's columns (``algo.network = "columns"``).

Connect four (PettingZoo's ``connect_four_v3``) and other drop games observe a board of ``C``
planes ``[C, H, W]`` and act with ``Discrete(W)``: action ``c`` drops a piece into column ``c``.
A flattening encoder (:class:`zoo.plugins.algorithms.encoders.SmallCNN`: convolutions, then a
dense layer over every cell) must learn a tactic (take the win, block the threat) once for each
place on the board it can occur. The column network keeps the board's geometry to the end:

- **tower**: ``layers`` 3x3 convolutions of ``channels`` channels, padding 1 (every layer keeps
  ``H x W``), ReLU, orthogonal initialisation (gain sqrt 2). Its input is the board's planes,
  one plane of ones (zero-padded at the edges, so the floor and the walls are visible to every
  filter near them) and one constant plane per value of the other feature leaves (for example
  connect four's ``"to_move"`` flag). After ``L`` layers each cell's features see the
  ``(2L + 1) x (2L + 1)`` cells around it: 9 x 9 with the default 4, the whole 6 x 7 board.
- **policy head**: one convolution with a ``H x 1`` kernel (one output channel, no padding)
  over the tower's features: column ``c``'s logit is the same linear function of column
  ``c``'s ``H x channels`` features for every ``c`` (weights shared across columns, so a
  pattern learnt in one column is scored alike in every column whose surroundings match:
  translation equivariance along the columns, up to the walls). Initialised with gain 0.01
  (near-uniform first policy, CleanRL's policy head). Logits float32 ``[N, W]``.
- **value head**: a 1x1 convolution to 2 channels (ReLU), flattened (``2 H W``), a dense layer
  of 64 (ReLU) and one output (gain 1). Values float32 ``[N]``.

Cost (one forward pass of one 6 x 7 board of 2 planes, the defaults): 4.7M multiply-adds
(``42 x 9 x 64 x (3 + 3 x 64)`` in the tower), about 3x the small CNN's 1.5M.

The convolutional policy heads of AlphaGo Zero (Silver et al., "Mastering the game of Go without
human knowledge", Nature 550 (2017), Methods "Neural network architecture": a tower of 3x3
convolutions whose policy head scores each board point) are the model; this head reduces a
column instead of a point, the move of a drop game.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from zoo.plugins.algorithms.board_spaces import column_problem
from zoo.plugins.algorithms.encoders import feature_keys, is_image_space, layer_init

Obs = dict[str, torch.Tensor]


class ColumnTower(nn.Module):
    """The tower: ``obs -> float32 [N, channels, H, W]`` (module docstring).

    Raises:
        ValueError: the spaces do not fit (:func:`column_problem`; ``action_space`` needed for it).
    """

    def __init__(self, observation_space: dict[str, Any], action_space: Any, channels: int = 64,
                 layers: int = 4) -> None:
        super().__init__()
        problem = column_problem(observation_space, action_space)
        if problem:
            raise ValueError(f"algo.network=columns: {problem}; use --set algo.network=auto")
        keys = feature_keys(observation_space)
        self.board_key = next(k for k in keys if is_image_space(observation_space[k]))
        self.vector_keys = [k for k in keys if k != self.board_key]
        c, self.height, self.width = (int(v) for v in observation_space[self.board_key].shape)
        self.extra = int(sum(np.prod(observation_space[k].shape, dtype=np.int64) for k in self.vector_keys))
        self.channels = int(channels)
        convs: list[nn.Module] = []
        width = c + 1 + self.extra
        for _ in range(int(layers)):
            convs += [layer_init(nn.Conv2d(width, self.channels, 3, padding=1)), nn.ReLU()]
            width = self.channels
        self.convs = nn.Sequential(*convs)

    def planes(self, obs: Obs) -> torch.Tensor:
        """The tower's input, float32 ``[N, C + 1 + extra, H, W]``: the board (uint8 scaled by
        1/255, other dtypes cast), a plane of ones, each other feature value as a constant plane."""
        board = obs[self.board_key]
        board = board.float() / 255.0 if board.dtype == torch.uint8 else board.float()
        n = board.shape[0]
        parts = [board, board.new_ones(n, 1, self.height, self.width)]
        if self.vector_keys:
            flat = torch.cat([obs[k].reshape(n, -1).float() for k in self.vector_keys], dim=1)
            parts.append(flat[:, :, None, None].expand(n, self.extra, self.height, self.width))
        return torch.cat(parts, dim=1)

    def forward(self, obs: Obs) -> torch.Tensor:
        return self.convs(self.planes(obs))


class ColumnPolicyHead(nn.Module):
    """``[N, channels, H, W] -> float32 [N, W]``: one ``H x 1`` convolution, a logit per column."""

    def __init__(self, channels: int, height: int, std: float = 0.01) -> None:
        super().__init__()
        self.conv = layer_init(nn.Conv2d(channels, 1, (height, 1)), std=std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).flatten(1).float()


class BoardValueHead(nn.Module):
    """``[N, channels, H, W] -> float32 [N, 1]``: 1x1 conv to 2 channels, dense 64, one output."""

    def __init__(self, channels: int, height: int, width: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Conv2d(channels, 2, 1)), nn.ReLU(), nn.Flatten(),
            layer_init(nn.Linear(2 * height * width, hidden)), nn.ReLU(),
            layer_init(nn.Linear(hidden, 1), std=1.0),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).float()


__all__ = ["BoardValueHead", "ColumnPolicyHead", "ColumnTower", "column_problem"]
