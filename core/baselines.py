"""Baselines: fixed players the eval manager plays kept versions against (docs/history.md,
"The eval manager"; hook ``register_baselines``, :mod:`zoo.core.hookspecs`).

A baseline acts as a policy network does: ``act(obs, deterministic=False) -> {"action":
torch.Tensor [N, *action_shape]}`` for a batch ``{key: torch.Tensor [N, ...]}`` of ``N``
agents' observations, so :func:`zoo.play.play` seats it like a network. Built in (registered by the
built-in plugin ``zoo.workers``, :mod:`zoo.core.workers.plugin`):

- ``random``: each action uniform over the legal ones. ``Discrete(n)``: uniform over the
  actions the row's mask allows (``"zoo:action_mask"``, bool ``[N, n]``; every action without
  a mask, and every action for a row whose mask allows none); ``MultiDiscrete(nvec)``: each
  entry uniform over its allowed values (the mask's ``sum(nvec)`` entries, per entry);
  ``MultiBinary(n)``: each bit 0 or 1 with probability 1/2 (a mask of ``2 n`` entries, bit
  ``i``'s 0 and 1 at ``2i``, ``2i + 1``, restricts it); ``Box`` with finite bounds: uniform in
  them. ``deterministic`` changes nothing (a random player has no mode). Its numbers come from
  its own ``numpy`` generator seeded with ``seed``, so a seeded evaluation repeats its games.
"""
from __future__ import annotations

from typing import Any

import numpy as np

MASK_KEY = "zoo:action_mask"


def _uniform_masked(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """One index per row, uniform over the row's True entries (over all where none is True): int64 ``[N]``."""
    mask = np.asarray(mask, bool)
    mask = np.where(mask.any(axis=1, keepdims=True), mask, True)
    u = rng.random(mask.shape[0])
    counts = mask.sum(axis=1)
    pick = np.minimum((u * counts).astype(np.int64), counts - 1)  # the pick-th allowed entry of each row
    order = np.cumsum(mask, axis=1) - 1
    return np.argmax((order == pick[:, None]) & mask, axis=1).astype(np.int64)


class RandomBaseline:
    """Uniform over the legal actions (module docstring).

    Raises:
        ValueError: an action space it cannot play (a ``Box`` with an infinite bound, or a
            space that is not ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or ``Box``).
    """

    def __init__(self, spec: Any, seed: int = 0) -> None:
        from gymnasium import spaces

        self.space = spec.action_space
        self.rng = np.random.default_rng(seed)
        s = self.space
        if isinstance(s, spaces.Box) and not (np.all(np.isfinite(s.low)) and np.all(np.isfinite(s.high))):
            raise ValueError(f"baseline 'random' cannot play action space {s}: a Box needs finite bounds to draw from")
        if not isinstance(s, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)):
            raise ValueError(f"baseline 'random' cannot play action space {s}: it plays Discrete, MultiDiscrete, "
                             "MultiBinary and Box (finite bounds)")

    def act(self, obs: dict[str, Any], deterministic: bool = False, **_: Any) -> dict[str, Any]:
        """``{"action": torch.Tensor [N, *action_shape]}`` for ``N`` rows (``N`` from any entry of ``obs``)."""
        import torch
        from gymnasium import spaces

        first = next(iter(obs.values()))
        n = int(first.shape[0])
        mask = obs.get(MASK_KEY)
        mask = None if mask is None else np.asarray(mask.cpu() if hasattr(mask, "cpu") else mask, bool).reshape(n, -1)
        s = self.space
        if isinstance(s, spaces.Discrete):
            m = np.ones((n, int(s.n)), bool) if mask is None else mask
            out = _uniform_masked(self.rng, m) + int(s.start)
        elif isinstance(s, spaces.MultiDiscrete):
            nvec = np.asarray(s.nvec, np.int64).reshape(-1)
            cols, at = [], 0
            for size in nvec:
                m = np.ones((n, int(size)), bool) if mask is None else mask[:, at:at + int(size)]
                cols.append(_uniform_masked(self.rng, m))
                at += int(size)
            out = np.stack(cols, axis=1).reshape(n, *s.shape) + np.asarray(s.start, np.int64).reshape(s.shape)
        elif isinstance(s, spaces.MultiBinary):
            bits = int(np.prod(s.shape))
            m = np.ones((n, bits, 2), bool) if mask is None else mask.reshape(n, bits, 2)
            flat = _uniform_masked(self.rng, m.reshape(n * bits, 2)).reshape(n, *s.shape)
            out = flat.astype(np.int8)
        else:
            low, high = np.broadcast_to(s.low, s.shape), np.broadcast_to(s.high, s.shape)
            out = (low + (high - low) * self.rng.random((n, *s.shape))).astype(s.dtype)
        return {"action": torch.as_tensor(out)}

    def eval(self) -> RandomBaseline:
        return self


def random_baseline(spec: Any, seed: int) -> RandomBaseline:
    """The ``random`` baseline for ``spec``'s action space (:class:`RandomBaseline`)."""
    return RandomBaseline(spec, seed)
