"""Running statistics for value and observation normalisation, and the PopArt value head.

Statistics (:class:`RunningMeanStd`) are the debiased exponential moving averages of the
MAPPO code's ``ValueNorm`` (Yu et al., "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games", arXiv 2103.01955, section 4 "Value Normalization": the
value targets are standardised with running estimates of their mean and standard
deviation; the value network regresses the standardised target and its output is
de-normalised when computing GAE). With ``beta`` the weight of the past (MAPPO's
0.99999) and one batch ``x`` of targets per call::

    m  <- beta * m  + (1 - beta) * mean(x)          first moment, biased toward 0
    s  <- beta * s  + (1 - beta) * mean(x ** 2)     second moment, biased toward 0
    d  <- beta * d  + (1 - beta)                    debiasing term (as in Adam, arXiv 1412.6980 eq. 2-3)
    mu = m / d,   var = max(s / d - mu ** 2, var_min),   sigma = sqrt(var)
    normalize(y) = (y - mu) / sigma,     denormalize(z) = z * sigma + mu

Before the first update (``d = 0``) the statistics are ``mu = 0, sigma = 1`` (identity).

:class:`ValueHead` is the value output layer ``z = w . x + b`` (normalised units) with
these statistics as buffers, so they travel with the policy's parameters to the policy
worker, which reports values in real units. In ``"popart"`` mode every statistics update
also rescales ``w`` and ``b`` so that the real-unit outputs are preserved ("Preserving
Outputs Precisely", van Hasselt, Guez, Hessel, Mnih and Silver, "Learning values across
many orders of magnitude", NIPS 2016, arXiv 1602.07714, section 2, eq. 6)::

    w' = w * sigma / sigma',     b' = (sigma * b + mu - mu') / sigma'

In ``"running"`` mode (MAPPO's ValueNorm) the layer is left alone; in ``"none"`` the
statistics are never updated (identity).

All statistics are float64 buffers (precision of ``beta`` close to 1).
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from zoo.core.distributed import global_moments, world_size

ValueNormMode = Literal["none", "running", "popart"]


class RunningMeanStd(nn.Module):
    """Debiased EMA of the mean and variance of ``shape``-sized features (module docstring).

    Args:
        shape: feature shape; statistics are taken over every leading axis of the inputs.
        beta: weight of the past in each update, in [0, 1) (0: the last batch only).
        var_min: floor of the variance (MAPPO: 1e-2 for values).

    Buffers (float64): ``m`` and ``s`` of ``shape``, ``d`` scalar.
    """

    m: torch.Tensor
    s: torch.Tensor
    d: torch.Tensor

    def __init__(self, shape: tuple[int, ...] = (), beta: float = 0.99999, var_min: float = 1e-2) -> None:
        super().__init__()
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"RunningMeanStd: beta={beta} must be in [0, 1)")
        self.beta, self.var_min = float(beta), float(var_min)
        self.shape = tuple(shape)
        self.register_buffer("m", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("s", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("d", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> bool:
        """One EMA step with the rows ``x [..., *shape]`` (any number of leading axes); True if taken.

        With data-parallel trainers (``trainer.count`` > 1) ``mean(x)`` and ``mean(x ** 2)``
        are those of every trainer's rows together
        (:func:`zoo.core.distributed.global_moments`), so the statistics stay identical on
        all ranks; every rank must then call this the same number of times. No row on any
        rank leaves the statistics unchanged (False).
        """
        x = x.detach().to(torch.float64).reshape(-1, *self.shape)
        if world_size() > 1:
            n, mean, mean_sq = global_moments(x)
        elif x.shape[0]:
            n, mean, mean_sq = x.shape[0], x.mean(0), (x * x).mean(0)
        else:
            n = 0
        if n == 0:
            return False
        b = self.beta
        self.m.mul_(b).add_((1 - b) * mean)
        self.s.mul_(b).add_((1 - b) * mean_sq)
        self.d.mul_(b).add_(1 - b)
        return True

    def mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, var)`` float64 of ``shape``: debiased, variance floored; ``(0, 1)`` before any update."""
        if float(self.d) <= 0.0:
            return torch.zeros_like(self.m), torch.ones_like(self.s)
        mu = self.m / self.d
        var = (self.s / self.d - mu * mu).clamp(min=self.var_min)
        return mu, var

    def normalize(self, y: torch.Tensor) -> torch.Tensor:
        """``(y - mu) / sigma`` in ``y``'s dtype."""
        mu, var = self.mean_var()
        return ((y.to(torch.float64) - mu) / var.sqrt()).to(y.dtype)

    def denormalize(self, z: torch.Tensor) -> torch.Tensor:
        """``z * sigma + mu`` in ``z``'s dtype."""
        mu, var = self.mean_var()
        return (z.to(torch.float64) * var.sqrt() + mu).to(z.dtype)


class ValueHead(nn.Module):
    """Value output layer ``[N, in_dim] -> float32 [N]`` in normalised units, with its statistics.

    ``mode``: ``"none"`` (plain linear value, statistics never updated), ``"running"``
    (MAPPO's ValueNorm) or ``"popart"`` (van Hasselt et al. 2016); see the module docstring.
    The weight is initialised orthogonally with gain 1, the bias to 0 (CleanRL's value head).
    """

    def __init__(self, in_dim: int, mode: ValueNormMode = "running", beta: float = 0.99999,
                 var_min: float = 1e-2) -> None:
        super().__init__()
        if mode not in ("none", "running", "popart"):
            raise ValueError(f"value_norm={mode!r} must be 'none', 'running' or 'popart'")
        self.mode = mode
        self.linear = nn.Linear(in_dim, 1)
        nn.init.orthogonal_(self.linear.weight, 1.0)
        nn.init.zeros_(self.linear.bias)
        self.stats = RunningMeanStd((), beta, var_min)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised value ``z``, float32 ``[N]`` (what the value loss regresses)."""
        return self.linear(x).squeeze(-1)

    def normalize(self, y: torch.Tensor) -> torch.Tensor:
        """Real units -> normalised units (identity in mode ``"none"``)."""
        return y if self.mode == "none" else self.stats.normalize(y)

    def denormalize(self, z: torch.Tensor) -> torch.Tensor:
        """Normalised -> real units (identity in mode ``"none"``)."""
        return z if self.mode == "none" else self.stats.denormalize(z)

    @torch.no_grad()
    def update(self, targets: torch.Tensor) -> None:
        """Update the statistics with real-unit ``targets [K]``; in PopArt mode keep outputs (eq. 6)."""
        if self.mode == "none":
            return
        mu_old, var_old = self.stats.mean_var()
        if self.stats.update(targets) and self.mode == "popart":
            mu_new, var_new = self.stats.mean_var()
            sd_old, sd_new = var_old.sqrt(), var_new.sqrt()
            w = self.linear.weight.to(torch.float64) * sd_old / sd_new
            b = (sd_old * self.linear.bias.to(torch.float64) + mu_old - mu_new) / sd_new
            self.linear.weight.copy_(w.to(self.linear.weight.dtype))
            self.linear.bias.copy_(b.to(self.linear.bias.dtype))
