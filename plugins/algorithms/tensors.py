"""Tensor helpers shared by the algorithm plugins."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


def to_tensor(x: Any, device: torch.device | str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x`` (array-like or tensor) as a tensor on ``device``, cast to ``dtype`` when given.

    Arrays decoded from the wire are read-only views (``np.frombuffer``); torch cannot
    share a read-only buffer, so those are copied once here.
    """
    if not isinstance(x, torch.Tensor):
        x = np.asarray(x)
        if not x.flags.writeable:
            x = x.copy()
    t = torch.as_tensor(x, device=device)
    return t.to(dtype) if dtype is not None else t


def explained_variance(y_pred: torch.Tensor, y: torch.Tensor) -> float:
    """``1 - Var[y - y_pred] / Var[y]`` (population variances); nan when ``Var[y] = 0``."""
    var_y = float(y.var(unbiased=False)) if y.numel() else 0.0
    return float("nan") if var_y == 0 else 1.0 - float((y - y_pred).var(unbiased=False)) / var_y


def annealed_lr(lr: float, anneal: bool, anneal_steps: int, agent_steps: int, progress: float) -> float:
    """Learning rate decayed linearly to 0 (PPO's Atari schedule, arXiv 1707.06347 Table 5).

    ``lr`` when ``anneal`` is False; else ``lr * max(0, 1 - agent_steps / anneal_steps)``,
    or ``lr * max(0, 1 - progress)`` when ``anneal_steps`` is 0 (``progress``: the fraction of
    the run's env-step budget done, set by the trainer before each update).
    """
    if not anneal:
        return lr
    done = agent_steps / anneal_steps if anneal_steps else progress
    return lr * max(0.0, 1.0 - done)
