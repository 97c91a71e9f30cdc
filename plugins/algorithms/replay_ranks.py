"""What each data-parallel rank of a replay algorithm (apex-dqn, sac, r2d2) holds of its own: its
sampling generator (:func:`rank_rng`) and, in checkpoints, its replay shard and RNG states
(:func:`rank_state`, :func:`load_rank_state`), and a replay rebuilt on resume after checking its
capacity (:func:`restore_replay`; ``core/workers/checkpointing.py``, "Rank shards"). This module
imports numpy only.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np


def rank_rng(seed: int, rank: int) -> np.random.Generator:
    """The sampling generator of data-parallel rank ``rank``: ``default_rng(seed)`` for rank 0 (as
    one trainer's), ``default_rng([seed, rank])`` for the others, so every shard is sampled from
    its own stream."""
    return np.random.default_rng(seed if rank == 0 else [seed, rank])


def restore_replay(state: dict[str, Any] | None, capacity: int, cls: Any, *, unit: str,
                   what: str = "replay") -> Any:
    """A replay rebuilt from its ``state_dict()`` (``cls.from_state_dict``; None from None), after
    checking it holds as many items as ``algo.capacity`` asks.

    Args:
        state: a replay's ``state_dict()`` (carries ``capacity``), or None (no replay yet).
        capacity: ``algo.capacity`` of the resuming run [items].
        cls: the replay class (:class:`~zoo.plugins.algorithms.replay.Replay`, r2d2's ``SequenceReplay``).
        unit: what one item is, for the message (``transitions``, ``sequences``).
        what: ``replay`` (the whole one of a single trainer) or ``replay shard`` (a rank's).

    Raises:
        ValueError: the stored capacity differs; the message names ``algo.capacity`` and the
            value to resume with.
    """
    if state is None:
        return None
    if int(state["capacity"]) != capacity:
        raise ValueError(f"the checkpoint's {what} holds {state['capacity']:,} {unit} but algo.capacity="
                         f"{capacity:,}; resume with --set algo.capacity={state['capacity']}")
    return cls.from_state_dict(state)


def rank_state(rng: np.random.Generator, replay: Any, generator: Any = None) -> dict[str, Any]:
    """What only one data-parallel rank of a replay algorithm holds: its sampling RNG's state, its
    replay shard (``state_dict()``, or None before its first batch) and, when given, its torch
    generator's state (sac's exploration noise). The rest of the algorithm's state is the same on
    every rank; ranks 1..K-1 write this beside ``latest.pt`` (``core/workers/checkpointing.py``)."""
    out = {"rng": copy.deepcopy(rng.bit_generator.state),
           "replay": None if replay is None else replay.state_dict()}
    if generator is not None:
        out["generator"] = generator.get_state()
    return out


def load_rank_state(state: dict[str, Any] | None, rng: np.random.Generator, generator: Any = None
                    ) -> dict[str, Any] | None:
    """Restore the RNGs that :func:`rank_state` stored (``rng`` and ``generator`` in place) and
    return the stored replay shard's state for :func:`restore_replay`. ``state`` None (no shard
    file: the rank starts with an empty shard, its RNGs drawn afresh) returns None and changes
    nothing."""
    if state is None:
        return None
    rng.bit_generator.state = state["rng"]
    if generator is not None:
        generator.set_state(state["generator"])
    return state["replay"]
