"""What Zoo makes of a Gymnasium / PettingZoo space: named observation leaves, action checks.

**Observations.** Whatever observation space an env has, Zoo's adapters hand the actor a
flat ``dict[str, np.ndarray]`` of *leaves*, each described by a ``gymnasium.spaces.Box``
in ``EnvSpec.observation_space`` (:class:`ObsFlattener`):

==============================  =====================================================
env (sub-)space                 leaf (per agent)
==============================  =====================================================
``Box`` rank 3 (an image)       ``[C, H, W]`` in the space's dtype; channels-last
                                ``[H, W, C]`` is transposed (:func:`channels_last`)
``Box`` rank 4, uint8           stacked frames ``[S, H, W, C]`` -> ``[S * C, H, W]``
``Box`` rank 2, uint8           a grey image ``[H, W]`` -> ``[1, H, W]``
any other ``Box``               as it is; floating dtypes as float32
``Discrete(n, start)``          float32 one-hot ``[n]`` of ``x - start``
``MultiDiscrete(nvec, start)``  float32 ``[sum(nvec)]``: the one-hots of each entry, concatenated
``MultiBinary(n)``              float32 ``[*n]`` of 0/1
``Dict`` / ``Tuple``            flattened to any depth: one leaf per Box/Discrete/...
                                entry, named by its path joined with ``"."``
                                (``{"pos": ..., "inv": ({"id": ...}, ...)}`` -> ``pos``,
                                ``inv.0.id``); a plain (non-Dict) space is one leaf ``"obs"``
==============================  =====================================================

Everything else (``Text``, ``Graph``, ``Sequence``, ``OneOf``...) is refused with
:class:`UnsupportedSpaceError`, naming the path of the offending sub-space, when the env is
built: before any worker process starts.

**Zoo's own keys** start with ``"zoo:"`` (:data:`RESERVED_PREFIX`), so they can never clash
with an env's: :data:`ACTION_MASK_KEY` (bool ``[num_logits]``, the legal actions) and
:data:`GLOBAL_STATE_KEY` (the centralised critic's input, from PettingZoo's ``state()``).
An env observation key that itself starts with ``"zoo:"`` is refused.

**Action masks.** A top-level ``"action_mask"`` entry of a Dict observation (PettingZoo's
convention) is not a feature: it becomes :data:`ACTION_MASK_KEY`. So does an
``info["action_mask"]`` (Gymnasium's convention, or PettingZoo's per-agent infos), read by
the adapters. A mask has one entry per logit of the action head (:func:`mask_size`):
``n`` for ``Discrete(n)``, ``sum(nvec)`` for ``MultiDiscrete`` (its per-entry masks
concatenated; a tuple of per-entry masks is accepted too), ``2 * n`` for
``MultiBinary(n)`` (``[may be 0, may be 1]`` per bit); True / 1 = allowed.

**Actions.** :func:`check_action_space` accepts ``Discrete``, ``MultiDiscrete``,
``MultiBinary`` and ``Box``; the actor clips ``Box`` actions to the bounds before they
reach the env (:class:`ActionClipper`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

OBS_KEY = "obs"
RESERVED_PREFIX = "zoo:"
ACTION_MASK_KEY = "zoo:action_mask"
GLOBAL_STATE_KEY = "zoo:global_state"
ENV_MASK_KEY = "action_mask"  # the env's own name for it (PettingZoo obs / infos, Gymnasium info)

SUPPORTED_OBS = "Box, Discrete, MultiDiscrete, MultiBinary, and Dict / Tuple of these (nested to any depth)"
SUPPORTED_ACTIONS = "Discrete, MultiDiscrete, MultiBinary and Box"


class UnsupportedSpaceError(TypeError):
    """A space Zoo cannot train on; ``path`` names the offending sub-space (``obs['a'][0]``)."""

    def __init__(self, path: str, space: Any, what: str) -> None:
        super().__init__(f"{path} is {space!r}: {what}")
        self.path, self.space = path, space


def is_zoo_key(key: str) -> bool:
    """True for Zoo's own observation keys (``"zoo:..."``), which are not env features."""
    return key.startswith(RESERVED_PREFIX)


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a rank-3 image shape is ``[H, W, C]`` rather than ``[C, H, W]``.

    Rule: the channel axis is the smallest one; channels-last when the last axis is strictly
    smaller than both others: ``(84, 84, 4)``, ``(7, 7, 3)`` -> True; ``(4, 84, 84)``,
    ``(3, 3, 3)``, ``(7, 7, 7)`` -> False (ties stay channels-first, PyTorch's layout).
    """
    return len(shape) == 3 and shape[2] < shape[0] and shape[2] < shape[1]


def _path_str(root: str, path: tuple) -> str:
    return root + "".join(f"[{p!r}]" for p in path)


@dataclass
class Leaf:
    """One observation leaf: where it is in the env's observation, how it is converted."""

    name: str
    path: tuple
    space: Any            # the env's sub-space
    out: Any              # the Box Zoo sees
    convert: Callable[[Any], np.ndarray]


def _box(low, high, shape, dtype):
    from gymnasium import spaces

    return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)


def _leaf(name: str, path: tuple, space: Any, where: str) -> Leaf:
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        shape, dt = tuple(space.shape), np.dtype(space.dtype)
        if len(shape) == 3:
            if channels_last(shape):
                out = _box(np.transpose(space.low, (2, 0, 1)), np.transpose(space.high, (2, 0, 1)),
                           (shape[2], shape[0], shape[1]), dt)
                return Leaf(name, path, space, out,
                            lambda x: np.ascontiguousarray(np.transpose(np.asarray(x, dt), (2, 0, 1))))
            return Leaf(name, path, space, space, lambda x: np.asarray(x, dt))
        if len(shape) == 4 and dt == np.uint8 and channels_last(shape[1:]):
            s, h, w, c = shape
            out = _box(0, 255, (s * c, h, w), dt)
            return Leaf(name, path, space, out,
                        lambda x: np.ascontiguousarray(np.transpose(np.asarray(x, dt), (0, 3, 1, 2)))
                        .reshape(s * c, h, w))
        if len(shape) == 2 and dt == np.uint8:
            out = _box(space.low[None], space.high[None], (1, *shape), dt)
            return Leaf(name, path, space, out, lambda x: np.asarray(x, dt)[None])
        if dt.kind == "f" and dt != np.float32:
            out = _box(space.low.astype(np.float32), space.high.astype(np.float32), shape, np.float32)
            return Leaf(name, path, space, out, lambda x: np.asarray(x, np.float32))
        return Leaf(name, path, space, space, lambda x: np.asarray(x, dt))
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        eye = np.eye(n, dtype=np.float32)
        return Leaf(name, path, space, _box(0.0, 1.0, (n,), np.float32), lambda x: eye[int(x) - start])
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.ravel(space.nvec).astype(np.int64)
        starts = np.ravel(getattr(space, "start", np.zeros_like(space.nvec))).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        total = int(nvec.sum())

        def one_hot(x, offsets=offsets, starts=starts, total=total):
            out = np.zeros(total, np.float32)
            out[offsets + (np.ravel(np.asarray(x, np.int64)) - starts)] = 1.0
            return out
        return Leaf(name, path, space, _box(0.0, 1.0, (total,), np.float32), one_hot)
    if isinstance(space, spaces.MultiBinary):
        shape = tuple(np.atleast_1d(space.n).tolist()) if not isinstance(space.n, int) else (int(space.n),)
        return Leaf(name, path, space, _box(0.0, 1.0, shape, np.float32), lambda x: np.asarray(x, np.float32))
    raise UnsupportedSpaceError(where, space, f"Zoo cannot encode this space as a network input; "
                                f"observations may be {SUPPORTED_OBS}")


class ObsFlattener:
    """Flattens one agent's observation of ``space`` into named leaves (module docstring).

    Args:
        space: the env's per-agent observation space.
        root: the name the error messages give the observation (``"observation space"``).
        name_prefix: prepended to every leaf name (``"zoo:global_state"`` for the global state:
            a Box gives exactly that key, nested entries ``zoo:global_state.x``).
        extract_mask: take a top-level Dict entry ``"action_mask"`` out as :data:`ACTION_MASK_KEY`.

    Attributes:
        leaves: the leaves in order; ``spaces``: ``{leaf name: Box}`` (with the mask key, bool
        ``[m]``, when the observation carries one).

    Raises:
        UnsupportedSpaceError: a sub-space Zoo cannot encode, or an env key starting with ``"zoo:"``.
    """

    def __init__(self, space: Any, root: str = "observation space", name_prefix: str = "",
                 extract_mask: bool = True) -> None:
        from gymnasium import spaces

        self.leaves: list[Leaf] = []
        self.mask_path: tuple | None = None
        self.mask_size = 0
        self.plain = not isinstance(space, (spaces.Dict, spaces.Tuple))
        self._prefix = name_prefix
        if self.plain:
            self.leaves.append(_leaf(name_prefix or OBS_KEY, (), space, root))
        else:
            self._walk(space, (), root, extract_mask)
        names = [leaf.name for leaf in self.leaves]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise UnsupportedSpaceError(root, space, f"entries give the same leaf name(s) {sorted(dup)} "
                                        "(keys containing '.'); rename them")
        self.spaces: dict[str, Any] = {leaf.name: leaf.out for leaf in self.leaves}
        if self.mask_path is not None:
            self.spaces[ACTION_MASK_KEY] = _box(0, 1, (self.mask_size,), np.bool_)

    def _walk(self, space: Any, path: tuple, root: str, extract_mask: bool) -> None:
        from gymnasium import spaces

        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        for key, sub in items:
            p = (*path, key)
            where = _path_str(root, p)
            if isinstance(key, str) and is_zoo_key(key) and not self._prefix:
                raise UnsupportedSpaceError(where, sub, f"keys starting with {RESERVED_PREFIX!r} are Zoo's own "
                                            "(action mask, global state); rename the entry")
            if extract_mask and not path and key == ENV_MASK_KEY and isinstance(space, spaces.Dict):
                self.mask_path = p
                self.mask_size = int(np.prod(getattr(sub, "shape", None) or (getattr(sub, "n", 0),)))
                continue
            if isinstance(sub, (spaces.Dict, spaces.Tuple)):
                self._walk(sub, p, root, extract_mask)
            else:
                name = ".".join(str(k) for k in p)
                self.leaves.append(_leaf(f"{self._prefix}.{name}" if self._prefix else name, p, sub, where))

    def __call__(self, obs: Any) -> dict[str, np.ndarray]:
        """One agent's observation -> ``{leaf name: array of the leaf's shape and dtype}``
        (plus :data:`ACTION_MASK_KEY`, bool, when the observation carries a mask)."""
        if self.plain:
            leaf = self.leaves[0]
            return {leaf.name: leaf.convert(obs)}
        out = {}
        for leaf in self.leaves:
            x = obs
            for k in leaf.path:
                x = x[k]
            out[leaf.name] = leaf.convert(x)
        if self.mask_path is not None:
            out[ACTION_MASK_KEY] = np.asarray(obs[self.mask_path[0]]).reshape(-1).astype(bool)
        return out

    def zeros(self) -> dict[str, np.ndarray]:
        """A zero observation (an inactive agent's); its mask allows every action."""
        out = {k: np.zeros(s.shape, s.dtype) for k, s in self.spaces.items()}
        if ACTION_MASK_KEY in out:
            out[ACTION_MASK_KEY][:] = True
        return out


def mask_size(space: Any) -> int:
    """Entries of an action mask for ``space`` (logits of its head); 0 for Box (no mask).

    ``Discrete(n)``: n; ``MultiDiscrete(nvec)``: sum(nvec); ``MultiBinary(n)``: 2 * n.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, spaces.MultiBinary):
        return 2 * int(np.prod(space.n))
    return 0


def as_mask(value: Any, size: int, where: str) -> np.ndarray:
    """An env's action mask (array, or a tuple of per-entry arrays for MultiDiscrete) as bool ``[size]``.

    Raises:
        ValueError: the mask has the wrong number of entries (names ``where``).
    """
    if isinstance(value, (tuple, list)) and value and np.ndim(value[0]) >= 1:
        value = np.concatenate([np.ravel(v) for v in value])
    mask = np.asarray(value).reshape(-1).astype(bool)
    if mask.size != size:
        raise ValueError(f"{where}: action mask has {mask.size} entries, expected {size} (one per action "
                         "logit: n for Discrete(n), sum(nvec) for MultiDiscrete, 2n for MultiBinary(n))")
    return mask


def check_action_space(space: Any, where: str = "action space") -> None:
    """Raise :class:`UnsupportedSpaceError` unless ``space`` is Discrete, MultiDiscrete, MultiBinary or Box."""
    from gymnasium import spaces

    if not isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)):
        raise UnsupportedSpaceError(where, space, f"Zoo's algorithms act in {SUPPORTED_ACTIONS} action spaces")
    if isinstance(space, spaces.Box) and np.dtype(space.dtype).kind != "f":
        raise UnsupportedSpaceError(where, space, "a Box action space must have a floating dtype "
                                    "(use Discrete or MultiDiscrete for integer actions)")


class ActionClipper:
    """Clips ``Box`` actions to the space's bounds for the env, vectorised over agent-slots.

    The policy's sampled (unclipped) action is what samples store and what its
    log-probability is of; only the copy sent to the env is clipped (CleanRL's
    ``ppo_continuous_action``: ``np.clip(action, low, high)`` in the env wrapper).
    Non-Box spaces pass through unchanged.
    """

    def __init__(self, space: Any) -> None:
        from gymnasium import spaces

        self.box = isinstance(space, spaces.Box)
        if self.box:
            self.low = np.asarray(space.low, np.float64)
            self.high = np.asarray(space.high, np.float64)
            self.dtype = np.dtype(space.dtype)

    def __call__(self, action: np.ndarray) -> np.ndarray:
        """``[S, *shape]`` actions -> the env's copy, clipped and in the space's dtype."""
        if not self.box:
            return action
        return np.clip(action, self.low, self.high).astype(self.dtype, copy=False)
