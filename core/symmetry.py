"""Symmetries an environment declares (``EnvSpec.symmetries``), for algorithms that train on
the mirror images of their samples as well (PPO's ``algo.augment_symmetries``).

A :class:`Symmetry` maps the env onto itself: the observation of a state's image is the
state's observation with some axes reversed, its legal actions and the action taken are
permuted, and rewards, values and episode ends are the same. Training on the image of every
sample doubles the data a network sees of each pattern without an env step, as AlphaGo Zero
trained on the 8 symmetries of the Go board (Silver et al., "Mastering the game of Go without
human knowledge", Nature 550, 2017, Methods: "data augmentation").

Declared by env plugins for games they know: the ``pettingzoo`` plugin's ``connect_four_v3``
has its left-right mirror (columns reversed, column ``c`` played as ``6 - c``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Symmetry:
    """One symmetry of an env.

    Attributes:
        name: what it is, for messages (``"left-right mirror"``).
        flip: ``((key, axes), ...)``: the observation entries whose axes are reversed, each axis
            negative, counted from the end of one agent's array (so it holds under any leading
            batch dimensions); entries not listed are unchanged. The action mask
            (``"zoo:action_mask"``) is listed like any entry.
        actions: Discrete actions: action ``a`` in a state is action ``actions[a]`` in its
            image (a permutation of ``range(n)``).

    Raises:
        ValueError: an axis is not negative, or ``actions`` is not a permutation.
    """

    name: str
    flip: tuple[tuple[str, tuple[int, ...]], ...]
    actions: tuple[int, ...]

    def __post_init__(self) -> None:
        for key, axes in self.flip:
            if not axes or any(a >= 0 for a in axes):
                raise ValueError(f"symmetry {self.name!r}: entry {key!r} flips axes {axes}; give negative axes "
                                 "(counted from the end of one agent's array)")
        if sorted(self.actions) != list(range(len(self.actions))):
            raise ValueError(f"symmetry {self.name!r}: actions {self.actions} is not a permutation of "
                             f"0..{len(self.actions) - 1}")

    def observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        """The image of ``obs`` (``{key: array}``, numpy arrays or torch tensors of any leading
        dimensions): the listed entries with their axes reversed (new arrays), the others as they are."""
        out = dict(obs)
        for key, axes in self.flip:
            if key in out:
                v = out[key]
                out[key] = v.flip(axes) if type(v).__module__.startswith("torch") else _np_flip(v, axes)
        return out

    def action(self, action: Any) -> Any:
        """The image of Discrete ``action`` (an int array or tensor of any shape): ``actions[action]``."""
        if type(action).__module__.startswith("torch"):
            import torch

            return torch.as_tensor(self.actions, device=action.device, dtype=action.dtype)[action]
        import numpy as np

        return np.asarray(self.actions, dtype=np.asarray(action).dtype)[action]


def _np_flip(v: Any, axes: tuple[int, ...]) -> Any:
    import numpy as np

    return np.flip(np.asarray(v), axes).copy()
