"""The rate limiter of the replay algorithms (apex-dqn, sac, r2d2): how many gradient steps an
update takes for the samples it inserts, Reverb's samples per insert (docs/replay.md, "The rate
limiter"), for one trainer (:func:`rate_limited_steps`) or ``trainer.count`` data-parallel ones,
each with its own replay shard (:func:`pooled_rate_limited_steps`; :func:`global_rate_limited_steps`
pools every rank's counts with one all-reduce).
"""
from __future__ import annotations

from typing import NamedTuple


def rate_limited_steps(credit: float, replay_size: int, inserting: int, *, learning_starts: int,
                       samples_per_insert: float, batch_size: int) -> tuple[int, float]:
    """The rate limiter (Reverb's samples per insert, docs/replay.md) of one trainer: ``(steps,
    credit)`` after ``inserting`` transitions join a replay of ``replay_size``. The credit grows by
    ``inserting x samples_per_insert`` once the replay with them holds ``learning_starts``;
    ``floor(credit / batch_size)`` gradient steps are granted (none from an empty replay, the
    credit then carries) and their samples spent. :func:`pooled_rate_limited_steps` with one shard."""
    return pooled_rate_limited_steps(credit, replay_size, inserting, 1 if replay_size <= 0 else 0, 1,
                                     learning_starts=learning_starts, samples_per_insert=samples_per_insert,
                                     batch_size=batch_size)


def pooled_rate_limited_steps(credit: float, replay_size: int, inserting: int, empty_shards: int, world: int, *,
                              learning_starts: int, samples_per_insert: float, batch_size: int) -> tuple[int, float]:
    """The rate limiter of ``world`` data-parallel trainers, each with its own replay shard:
    ``(steps, credit)``, the same on every rank since every argument is.

    ``replay_size`` and ``inserting`` are summed over the shards (before this insert; the
    transitions joining them now), ``empty_shards`` counts the shards that hold nothing yet. The
    credit grows by ``inserting x samples_per_insert`` once the shards with them hold
    ``learning_starts`` together; a gradient step draws ``batch_size`` from every shard, so it
    spends ``world x batch_size`` and ``floor(credit / (world x batch_size))`` steps are granted,
    none while any shard is empty (that rank could not sample; the credit carries). Every rank
    takes the granted steps together, each one all-reducing its gradients.

    Example: 2 ranks, batch 64, 16 samples per insert, learning after 1,000, credit 100; shards of
    600 and 500 receive 128 transitions each: credit 100 + 256 x 16 = 4,196, 4,196 // 128 = 32
    steps, credit 4,196 - 4,096 = 100 carried.
    """
    if replay_size + inserting >= learning_starts:
        credit += inserting * samples_per_insert
    per_step = world * batch_size
    steps = int(credit // per_step) if empty_shards == 0 else 0
    return steps, credit - steps * per_step


class Grant(NamedTuple):
    """What :func:`global_rate_limited_steps` decided: ``steps`` to take on every rank, the
    ``credit`` left, and every rank's shards together: ``replay_size`` (before this insert) and
    ``inserting`` (the transitions joining them now)."""

    steps: int
    credit: float
    replay_size: int
    inserting: int


def global_rate_limited_steps(credit: float, replay_size: int, inserting: int, *, learning_starts: int,
                              samples_per_insert: float, batch_size: int) -> Grant:
    """:func:`pooled_rate_limited_steps` on the counts of every data-parallel trainer: one
    all-reduce (:func:`zoo.core.distributed.global_sum`) of this rank's ``[replay_size,
    inserting, replay_size == 0]``; every rank must call it once per update. With one trainer it
    is :func:`rate_limited_steps` on the local counts (no collective).

    Raises:
        zoo.core.distributed.PeerLost: the all-reduce failed.
    """
    from zoo.core import distributed as zdist

    world = zdist.world_size()
    if world == 1:
        size, new, empty = replay_size, inserting, int(replay_size <= 0)
    else:
        pooled = zdist.global_sum([float(replay_size), float(inserting), 1.0 if replay_size <= 0 else 0.0])
        size, new, empty = (int(round(float(v))) for v in pooled)
    steps, credit = pooled_rate_limited_steps(credit, size, new, empty, world, learning_starts=learning_starts,
                                              samples_per_insert=samples_per_insert, batch_size=batch_size)
    return Grant(steps, credit, size, new)

