"""Whether the column network (:mod:`zoo.plugins.algorithms.board`) fits an env's spaces, without
torch: config validation asks before any process starts (``algo.network = "columns"``)."""
from __future__ import annotations

from typing import Any

from zoo.core.spaces import is_zoo_key


def column_problem(observation_space: dict[str, Any], action_space: Any) -> str | None:
    """Why the column network cannot serve these spaces, or None when it can.

    It needs exactly one board (a rank-3 feature leaf ``[C, H, W]``, channels first) and
    ``Discrete(W)`` actions, one per column; other feature leaves are allowed (constant planes).
    """
    keys = sorted(k for k in observation_space if not is_zoo_key(k))
    boards = [k for k in keys if len(observation_space[k].shape) == 3]
    n = getattr(action_space, "n", None)
    if len(boards) != 1:
        found = ", ".join(f"{k} {list(observation_space[k].shape)}" for k in keys)
        return (f"it needs exactly one board observation [C, H, W] and the observations are {found or 'none'} "
                f"({len(boards)} of rank 3)")
    shape = tuple(observation_space[boards[0]].shape)
    if n is None or type(action_space).__name__ != "Discrete":
        return (f"it needs Discrete actions, one per column of the board {list(shape)}, and the actions are "
                f"{action_space}")
    if int(n) != shape[2]:
        return (f"it needs one action per column of the board {boards[0]!r} {list(shape)} (Discrete({shape[2]})), "
                f"and the actions are Discrete({int(n)})")
    return None
