"""Every seed of a run, derived from the run seed in one place.

A run has one seed (``cfg.seed``, ``0 <= seed < 2**32``). Each consumer gets its own seed
from :func:`derive_seed`: ``numpy.random.SeedSequence`` with the run seed as entropy and
``(role, index, slot)`` as spawn key, so

- the seeds of different consumers of one run are independent streams (the SeedSequence
  hash mixes every word of the key; neighbouring indices give unrelated seeds, unlike
  ``seed + index``, where run 1's env 0 is run 0's env 1);
- runs with different seeds share no seed (a collision between two 63-bit seeds has
  probability about ``n^2 / 2^64`` for ``n`` seeds; the test checks runs 0 and 1 over
  64 actors x 16 envs exactly);
- a rerun with the same seed derives the same seeds.

Roles (the first word of the key; a new role gets a new code, existing codes never change):

===========  =====  ===========================================================
role         code   index, slot
===========  =====  ===========================================================
``env``      1      actor index, env slot within the actor (0 .. envs_per_actor-1)
``actor``    2      actor index, 0
``policy``   3      policy worker index, 0
``trainer``  4      trainer index, 0
===========  =====  ===========================================================

**Resumes and restarts.** ``resume`` = n (the run's n-th continuation, ``cfg.resume``) and
``attempt`` = a (the worker's a-th process within this run segment: 0 at the start, then
1, 2... after restarts by the supervisor, ``WorkerContext.attempt``) join the key, so a
continued run or a restarted worker starts new episodes and action streams instead of
replaying those of the start or of the crashed attempt (which would crash an env that
fails because of its seeded state the same way every time). The key is
``(code, index, slot)`` for a fresh start (n = a = 0: every seed of a run without resumes
or restarts is unchanged), ``(code, index, slot, n)`` for a resume's first attempt and
``(code, index, slot, n, a)`` for a restart (a >= 1): keys of different lengths, so no
(resume, attempt) pair shares another's seeds.

Env slot ``s`` of an actor is env ``s % per_group`` of ring group ``s // per_group``
(``per_group = envs_per_actor / ring_size``), the order in which the actor builds them.
"""
from __future__ import annotations

import numpy as np

__all__ = ["ROLES", "derive_seed", "env_seeds"]

ROLES = {"env": 1, "actor": 2, "policy": 3, "trainer": 4, "eval": 5}
"""Role name -> the first word of the spawn key (never renumber: seeds of old runs change)."""


def derive_seed(run_seed: int, role: str, index: int = 0, slot: int = 0, resume: int = 0, attempt: int = 0) -> int:
    """The seed of one consumer of run ``run_seed``: an int in ``[0, 2**63)``.

    ``SeedSequence(entropy=run_seed, spawn_key=(ROLES[role], index, slot))``, two 32-bit
    words of its state joined as ``(w0 << 32 | w1)`` and cut to 63 bits (so it fits an
    int64 and any API taking a non-negative int). ``resume`` = n >= 1 (the run's n-th
    continuation, ``cfg.resume``) appends n to the spawn key, and ``attempt`` = a >= 1 (the
    worker's a-th restart, ``WorkerContext.attempt``) appends ``(n, a)``: a resumed run or
    a restarted worker starts new episodes instead of replaying earlier ones, and the seeds
    of attempt 0 of a fresh run stay as above (module docstring).

    Raises:
        KeyError: ``role`` is not in :data:`ROLES`.
        ValueError: a negative ``run_seed``, ``index``, ``slot``, ``resume`` or ``attempt``.
    """
    if min(run_seed, index, slot, resume, attempt) < 0:
        raise ValueError(f"seeds come from non-negative ints, got run_seed={run_seed}, index={index}, slot={slot}, "
                         f"resume={resume}, attempt={attempt}")
    key: tuple[int, ...] = (ROLES[role], int(index), int(slot))
    if attempt:
        key += (int(resume), int(attempt))
    elif resume:
        key += (int(resume),)
    words = np.random.SeedSequence(int(run_seed), spawn_key=key).generate_state(2, np.uint32)
    return ((int(words[0]) << 32) | int(words[1])) & ((1 << 63) - 1)


def env_seeds(run_seed: int, actor: int, envs_per_actor: int, resume: int = 0, attempt: int = 0) -> list[int]:
    """The first-reset seeds of actor ``actor``'s envs, slot 0 first:
    ``derive_seed(run_seed, "env", actor, slot, resume, attempt)``."""
    return [derive_seed(run_seed, "env", actor, slot, resume, attempt) for slot in range(envs_per_actor)]
