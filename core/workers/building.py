"""Building a trainer's algorithm: each rank's torch device (:func:`rank_devices`), the seed of
a policy's initial weights (:func:`initial_seed`), those weights built on the CPU for a frozen
policy that serves them (:func:`initial_policy_state`), the algorithm of one trainer rank
(:func:`make_algorithm`), and the schedule position of its next update (:func:`schedule_progress`,
``algo.progress``; CleanRL's annealing, Huang et al., "The 37 Implementation Details of PPO").
:class:`zoo.core.workers.trainer.Trainer` uses them all.
"""
from __future__ import annotations

from typing import Any

from zoo.core import devices as zdevices
from zoo.core.seeding import derive_seed
from zoo.core.workers.base import WorkerContext
from zoo.core.workers.threads import thread_plan


def schedule_progress(updates_done: int, update_env_steps: int, budget_steps: int) -> float:
    """The schedule position of the next update (``algo.progress``), in [0, 1].

    ``min(1, updates_done x update_env_steps / budget_steps)``: the fraction of the run's
    env-step budget that the updates already done stand for, each counted at the size
    (env steps, every trainer's) of the batch about to be trained on. It is CleanRL's
    ``frac = 1 - (update - 1) / num_updates`` with ``num_updates = budget / batch size``
    (``ppo.py``; Huang et al., "The 37 Implementation Details of PPO", detail 4): the
    first update runs at the configured rate and none at rate 0 (lr 1e-3 annealed over 4
    updates: 1e-3, 7.5e-4, 5e-4, 2.5e-4). ``updates_done`` is the run's update count, which
    a checkpoint restores, so a resumed run continues the schedule where it stopped.
    """
    if budget_steps <= 0:
        return 1.0
    return min(1.0, updates_done * update_env_steps / budget_steps)


def rank_devices(cfg: Any, count: int) -> list[str] | None:
    """Each rank's torch device (``algo.device`` through :func:`zoo.core.graph.worker_device`);
    None when the algorithm has no ``device`` option."""
    from zoo.core.graph import worker_device

    device = getattr(cfg.algo, "device", None)
    return [worker_device(device, r) for r in range(count)] if isinstance(device, str) else None


def initial_seed(cfg: Any, policy: str, attempt: int = 0) -> int:
    """The seed a policy's trainers build its algorithm with, and so its initial weights:
    ``derive_seed(cfg.seed, "trainer", which, attempt)`` with ``which`` the policy's position in
    the run's declaration order (0 for the implicit policy ``""``), so two policies of one
    algorithm start from different weights; the attempt of a restarted trainer draws new ones."""
    which = list(cfg.policies.named).index(policy) if policy else 0
    return derive_seed(cfg.seed, "trainer", which, attempt=attempt)


def initial_policy_state(registry: Any, cfg: Any, spec: Any, policy: str) -> dict[str, Any]:
    """The initial (seeded, untrained) weights of named policy ``policy``: the ``state_dict()``
    of the policy network of its algorithm built as its first trainer builds it (the seed of
    :func:`initial_seed` with attempt 0, ``cfg`` the policy's view, ``spec`` its agents'), on
    the CPU, under a forked torch RNG (the caller's generator is untouched). Bitwise the
    version-0 weights a trainable run of the same config and seed starts from, for algorithms
    that initialise their networks on the CPU before moving them (every built-in one). What a
    frozen policy with ``weights = "init"`` serves (docs/policies.md). Returns ``{name: CPU
    tensor}``."""
    import dataclasses

    import torch

    seed = initial_seed(cfg, policy)
    algo_cfg = cfg.algo
    if isinstance(getattr(algo_cfg, "device", None), str):
        algo_cfg = dataclasses.replace(algo_cfg, device="cpu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        algo = registry.get("algorithm", cfg.algo_name).load()(algo_cfg, spec, seed)
        return {k: v.detach().cpu().clone() for k, v in algo.policy.state_dict().items()}


def make_algorithm(ctx: WorkerContext, devices: list[str] | None) -> Any:
    """The trainer's algorithm (``cfg.algo_name`` with ``cfg.algo``) on this rank's device
    (``devices[ctx.rank]``; None: the algorithm has no ``device`` option), after setting
    torch's threads (:mod:`zoo.core.workers.threads`) and seed."""
    import dataclasses

    import torch

    cfg, rank = ctx.cfg, ctx.rank
    torch.set_num_threads(thread_plan(cfg).trainer)
    # Initial weights and minibatch order (zoo.core.seeding); index 0 for every data-parallel trainer,
    # so they all start from the same weights.
    # A restarted trainer (ctx.attempt >= 1) draws new ones: it does not replay the crashed attempt
    # (its checkpoint, when there is one, then restores the state it continues from).
    # Named policies: the policy's position in the run's declaration order, so two policies of one
    # algorithm start from different weights.
    seed = initial_seed(cfg, ctx.policy, ctx.attempt)
    torch.manual_seed(seed)
    algo_cfg = cfg.algo
    if devices is not None and devices[rank] != algo_cfg.device:
        algo_cfg = dataclasses.replace(algo_cfg, device=devices[rank])
    if devices is not None:  # cuda:N current before any tensor is made there: no stray context on GPU 0
        zdevices.use_device(devices[rank])
    return ctx.registry.get("algorithm", cfg.algo_name).load()(algo_cfg, ctx.spec, seed)

