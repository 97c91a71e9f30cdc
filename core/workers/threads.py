"""How many torch CPU threads each role gets: chosen from the machine's cores and the worker graph.

Every actor process steps its envs on one core (env stepping is single-threaded); an actor
that runs the policy itself (``policy.inline``, no policy worker) uses ``policy.threads``
torch threads instead. Every policy worker uses ``policy.threads`` torch threads. The
trainers share the cores that leaves:

    trainer threads = max(1, (cores - actors x actor threads - policy workers x policy.threads) // trainers)

unless ``trainer.threads`` (> 0) sets them. So with the actors and policy workers busy, no
core runs two threads; only when the roles alone already outnumber the cores (each needs at
least one thread) do threads share cores. ``cores`` is the CPUs this process may run on
(``os.sched_getaffinity``; ``os.cpu_count`` where that is missing). With a launcher that
places roles on several hosts, each trainer counts the cores of its own host as if every
actor and policy worker ran there (fewer threads than it could use, never more).

Example (hand-worked): 16 cores, 2 actors, 1 policy worker of 1 thread, 1 trainer:
16 - 2 - 1 = 13 trainer threads, 16 in all. 2 cores with the same graph: 2 - 2 - 1 < 1, so 1
trainer thread, 4 threads on 2 cores (the minimum, one per process).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


def machine_cores() -> int:
    """CPU cores this process may run on (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class ThreadPlan:
    """Threads per role: ``actors`` processes of ``actor`` threads each (1, or
    ``policy.threads`` with ``policy.inline``), ``policy_workers`` x ``policy`` torch threads,
    ``trainers`` x ``trainer`` torch threads, on ``cores`` cores; ``trainer_auto``: the
    trainer's count was chosen (``trainer.threads`` = 0)."""

    cores: int
    actors: int
    actor: int
    policy_workers: int
    policy: int
    trainers: int
    trainer: int
    trainer_auto: bool

    @property
    def total(self) -> int:
        """Threads of all roles together."""
        return self.actors * self.actor + self.policy_workers * self.policy + self.trainers * self.trainer

    def describe(self) -> str:
        """One line for ``zoo train``, e.g. ``threads on 16 cores: 2 actors x 1 + 1 policy worker x 1 +
        1 trainer x 13 (the cores the others leave; trainer.threads=N sets it) = 16``."""
        pw = (f"{self.policy_workers} policy worker{'s' if self.policy_workers != 1 else ''} x {self.policy}"
              if self.policy_workers else "no policy worker (policy.inline)")
        how = ("the cores the others leave, at least 1; --set trainer.threads=N sets it" if self.trainer_auto
               else "trainer.threads")
        line = (f"threads on {self.cores} cores: {self.actors} actor{'s' if self.actors != 1 else ''} x {self.actor} + {pw} + "
                f"{self.trainers} trainer{'s' if self.trainers != 1 else ''} x {self.trainer} ({how}) = {self.total}")
        if self.total > self.cores:
            line += f" (more than the {self.cores} cores: each process needs one)"
        return line


def thread_plan(cfg: Any, cores: int | None = None) -> ThreadPlan:
    """The :class:`ThreadPlan` of ``cfg`` on ``cores`` cores (default :func:`machine_cores`); see
    the module docstring for the rule."""
    cores = machine_cores() if cores is None else max(1, int(cores))
    actors, policy = int(cfg.actors.count), int(cfg.policy.threads)
    inline = bool(getattr(cfg.policy, "inline", False))
    actor = policy if inline else 1
    policy_workers = 0 if inline else int(cfg.policy.count)
    trainers = int(cfg.trainer.count)
    explicit = int(cfg.trainer.threads or 0)
    trainer = explicit or max(1, (cores - actors * actor - policy_workers * policy) // trainers)
    return ThreadPlan(cores, actors, actor, policy_workers, policy, trainers, trainer, not explicit)


def thread_problems(cfg: Any, cores: int | None = None) -> list[tuple[str, str]]:
    """``(field, message)`` for explicit thread counts this machine cannot run without
    oversubscribing its cores: ``trainer.threads`` or ``policy.threads`` above ``cores``
    (default :func:`machine_cores`)."""
    cores = machine_cores() if cores is None else max(1, int(cores))
    out = []
    for path, value in (("trainer.threads", int(cfg.trainer.threads or 0)), ("policy.threads", int(cfg.policy.threads))):
        if value > cores:
            out.append((path, f"{path}={value} is more than the {cores} CPU cores of this machine, so its threads "
                              f"would share cores; set --set {path}={cores} or less"
                              + (" (0 = chosen from the cores the actors and policy workers leave)"
                                 if path == "trainer.threads" else "")))
    return out
