"""How many torch CPU threads each role gets: chosen from the machine's cores and the worker graph.

Every actor process steps its envs on one core (env stepping is single-threaded); an actor
that runs the policy itself (``policy.inline``, no policy worker) uses ``policy.threads``
torch threads instead. Every policy worker uses ``policy.threads`` torch threads. The
trainers' threads (unless ``trainer.threads`` > 0 sets them) depend on the network:

- **image observations** (a convolutional encoder, e.g. Atari's Nature CNN): the trainers share
  **every** core, ``max(1, cores // trainers)``. The trainer leaves no cores to the actors and
  policy workers because the sample stream already schedules them: when the update is the
  bottleneck (it costs far more CPU per env step than stepping and inference), the actors are
  held back by the sample stream (:mod:`zoo.core.workers.receiver`) and wait, so cores kept for
  them would sit idle while the update ran on one.
- **rate-limited (replay) algorithms** (``rate_limited = True``, :mod:`zoo.core.algorithm`:
  apex-dqn, r2d2, sac), whatever the network: likewise every core. Their rate limiter makes the
  learner the bottleneck by design (SAC: one gradient step of 256 per env step), and the actors
  wait for it while it takes the steps it was granted. (apex-dqn's and r2d2's presets for vector
  observations set ``trainer.threads = 1``: their small networks lose more to a second spinning
  thread than they gain.)
- **otherwise** (MLPs on vectors): the cores the actors and policy workers leave,
  ``max(1, (cores - actors x actor threads - policy workers x policy.threads) // trainers)``.
  Small matrix products gain nothing from more threads, and the extra threads' spinning takes
  the cores the actors need.

Measured on 2 cores (benchmarks/RESULTS.md, issue 13): at CleanRL's Pong workload (2 actors,
1 policy worker) 1 trainer thread gave 285 trained env steps/s with 34% of the cores idle, 2
threads 345 with the cores 99% busy; at CleanRL's CartPole workload (1 inline actor of 4 envs)
1 trainer thread 8,928, 2 threads 5,403. Rate-limited algorithms (2026-12-06, 2 cores, seed 1):
SAC on HalfCheetah-v5 (1 actor x 4 envs, 1 policy worker; 12k env steps) 65 env steps/s after the
warm-up with 1 trainer thread, 76 with 2; apex-dqn on CartPole-v1 (its presets, 30k env steps) 839
env steps/s with 1, 906 with 2, but over 100k env steps (the replay full, linear exploration) 1,487
with 1 and 978 with 2, and r2d2 on CartPole-v1 (15k) 394 with 1, 312 with 2 (2026-12-06 evening):
hence their vector presets' one thread.

With named policies (docs/policies.md) the counts are every policy's together: policy workers
(each with its policy's ``policy.threads``), trainers of every trainable policy, and an actor
runs one thread per env core plus, for each inline policy, its ``policy.threads`` (at least 1).

**A machine already busy.** The plan assumes the cores are Zoo's. Where other processes keep
some of them busy as a run starts, a trainer of several threads slows far more than its share:
its threads meet at every parallel region, and each waits there while another waits for a time
slice (2026-12-06, 2 cores: SAC's trainer on Hopper-v5 fell from 80 to 1-2 env steps/s beside a
connect-four run; benchmarks/RESULTS.md). ``zoo train`` and ``zoo resume`` then print
:meth:`ThreadPlan.busy_hint` from :func:`busy_cores`, measured before any worker starts; the
plan itself does not change with the load (a run's thread counts stay a function of its config
and machine), so ``--set trainer.threads=1`` is the user's call.

``cores`` is the CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where
that is missing). With a launcher that places roles on several hosts, each trainer counts the
cores of its own host as if every role ran there.

Examples (hand-worked), 1 policy worker of 1 thread and 2 actors: Pong on 16 cores, 16 trainer
threads (2 trainers: 8 each); on 2 cores, 2. CartPole on 16 cores, 16 - 2 - 1 = 13; on 2 cores
2 - 2 - 1 < 1, so 1.
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
    images: bool = False
    replay: bool = False

    @property
    def total(self) -> int:
        """Threads of all roles together."""
        return self.actors * self.actor + self.policy_workers * self.policy + self.trainers * self.trainer

    def describe(self) -> str:
        """One line for ``zoo train``, e.g. ``threads on 16 cores: 2 actors x 1 + 1 policy worker x 1 +
        1 trainer x 13 (the cores the others leave, at least 1; --set trainer.threads=N sets it)``."""
        pw = (f"{self.policy_workers} policy worker{'s' if self.policy_workers != 1 else ''} x {self.policy}"
              if self.policy_workers else "no policy worker (policy.inline)")
        every = ("a convolutional network" if self.images else "a rate-limited (replay) learner")
        how = ("trainer.threads" if not self.trainer_auto else
               f"every core for {every}: held-back actors leave theirs; --set trainer.threads=N sets it"
               if self.images or self.replay else
               "the cores the others leave, at least 1; --set trainer.threads=N sets it")
        share = " each" if self.trainers > 1 and self.trainer_auto else ""
        return (f"threads on {self.cores} cores: {self.actors} actor{'s' if self.actors != 1 else ''} x {self.actor} + "
                f"{pw} + {self.trainers} trainer{'s' if self.trainers != 1 else ''} x {self.trainer}{share} ({how})")


    def busy_hint(self, busy: float | None) -> str | None:
        """The line to print when ``busy`` cores (:func:`busy_cores`) were kept busy by other
        processes as the run started and the plan gave the trainer several threads of its own
        choosing; None when the trainer has 1 thread or ``trainer.threads`` set its count, when
        ``busy`` is None (not measured) or below :data:`BUSY_HINT_CORES`."""
        if busy is None or busy < BUSY_HINT_CORES or not self.trainer_auto or self.trainer < 2:
            return None
        return (f"busy machine: {busy:.2f} of {self.cores} cores were busy with other processes as this run started; "
                f"a trainer's {self.trainer} threads wait for each other's time slices beside such work (a replay or "
                f"convolutional learner can run many times slower); --set trainer.threads=1 if that work goes on")


BUSY_HINT_CORES = 0.5
"""Cores busy with other processes (:func:`busy_cores`) from which :meth:`ThreadPlan.busy_hint` speaks."""

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (guest time is inside user)
_IDLE_FIELDS = (3, 4)  # idle, iowait


def cpu_times(text: str, cpus: set[int] | None = None) -> tuple[int, int, int]:
    """``(busy, total, n)`` clock ticks of the ``n`` per-CPU lines (``cpuN ...``) of ``/proc/stat``'s
    ``text`` whose N is in ``cpus`` (every CPU line for None): busy = user + nice + system + irq +
    softirq + steal, total = busy + idle + iowait (proc(5))."""
    busy = total = n = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()) or (cpus is not None and int(name[3:]) not in cpus):
            continue
        ticks = [int(x) for x in rest.split()]
        ticks += [0] * (8 - len(ticks))
        b = sum(ticks[i] for i in _BUSY_FIELDS)
        busy, total, n = busy + b, total + b + sum(ticks[i] for i in _IDLE_FIELDS), n + 1
    return busy, total, n


def busy_cores(interval_s: float = 0.2, *, read: Any = None, wait: Any = None,
               cpus: set[int] | None = None) -> float | None:
    """Cores kept busy over ``interval_s`` seconds, by every process of the machine, among the CPUs
    this process may run on (``cpus``, default ``os.sched_getaffinity``): the busy share of their
    clock ticks in ``/proc/stat`` between two reads, times their number (0.0 to the cores). None
    where ``/proc/stat`` cannot be read, lists none of them, or no tick passed (not Linux).
    ``read`` (returns the file's text) and ``wait`` (sleeps) stand in for the file and
    ``time.sleep`` in tests."""
    import time

    if read is None:
        def read() -> str:
            with open("/proc/stat") as f:
                return f.read()
    if cpus is None:
        try:
            cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = None
    try:
        b0, t0, _ = cpu_times(read(), cpus)
        (wait or time.sleep)(interval_s)
        b1, t1, n = cpu_times(read(), cpus)
    except (OSError, ValueError):
        return None
    if n == 0 or t1 <= t0:
        return None
    return round(n * (b1 - b0) / (t1 - t0), 3)


def thread_plan(cfg: Any, cores: int | None = None) -> ThreadPlan:
    """The :class:`ThreadPlan` of ``cfg`` on ``cores`` cores (default :func:`machine_cores`); see
    the module docstring for the rule."""
    cores = machine_cores() if cores is None else max(1, int(cores))
    actors, policy = int(cfg.actors.count), int(cfg.policy.threads)
    inline = bool(getattr(cfg.policy, "inline", False))
    actor = policy if inline else 1
    policy_workers = 0 if inline else int(cfg.policy.count)
    policy_threads = policy_workers * policy
    trainers = int(cfg.trainer.count)
    named = getattr(cfg, "policies", None)
    if named is not None and not named.implicit:  # every policy's workers share the machine
        pols = [named.named[n] for n in named.named]
        inline_threads = sum(int(p.policy.threads) for p in pols if p.policy.inline)
        actor = inline_threads or 1
        served = [p for p in pols if not p.policy.inline]
        policy_workers = sum(int(p.policy.count) for p in served)
        policy_threads = sum(int(p.policy.count) * int(p.policy.threads) for p in served)
        policy = max((int(p.policy.threads) for p in served), default=policy)
        trainers = sum(int(p.trainer.count) for p in pols if p.trainable)
    explicit = int(cfg.trainer.threads or 0)
    images = image_observations(getattr(cfg, "spec", None))
    replay = not images and rate_limited(cfg)
    left = cores if images or replay else cores - actors * actor - policy_threads
    trainer = explicit or max(1, left // trainers)
    return ThreadPlan(cores, actors, actor, policy_workers, policy, trainers, trainer, not explicit, images, replay)


def rate_limited(cfg: Any) -> bool:
    """True when the algorithm of every trainable policy of ``cfg`` (the run's ``algo_name``, or each
    named policy's) is rate-limited (its class's ``rate_limited``, :mod:`zoo.core.algorithm`), looked
    up in the plugin registry (which imports the algorithm's module); False for a name the registry
    does not know, or a ``cfg`` without ``algo_name``."""
    named = getattr(cfg, "policies", None)
    if named is not None and not named.implicit:
        names = [p.algo_name for p in named.named.values() if p.trainable]
    else:
        names = [getattr(cfg, "algo_name", None)]
    if not names or None in names:
        return False
    from zoo.core.plugins import get_registry
    from zoo.core.registry import UnknownComponentError

    registry = get_registry()
    try:
        return all(bool(getattr(registry.get("algorithm", n).load(), "rate_limited", False)) for n in names)
    except UnknownComponentError:  # refused elsewhere, with its own message
        return False


def image_observations(spec: Any) -> bool:
    """True when an observation leaf of ``spec`` (an :class:`zoo.core.env.EnvSpec`, or None) is an
    image: a rank-3 Box (``[C, H, W]``), what the algorithms encode with a convolutional network.
    Zoo's own ``zoo:`` keys (action masks) do not count."""
    from zoo.core.spaces import is_zoo_key

    spaces = getattr(spec, "observation_space", None) or {}
    return any(len(getattr(s, "shape", None) or ()) == 3 for k, s in spaces.items() if not is_zoo_key(k))


def thread_problems(cfg: Any, cores: int | None = None) -> list[tuple[str, str]]:
    """``(field, message)`` for explicit thread counts this machine cannot run without
    oversubscribing its cores: ``trainer.threads`` or ``policy.threads`` above ``cores``
    (default :func:`machine_cores`)."""
    cores = machine_cores() if cores is None else max(1, int(cores))
    out = []
    settings = (("trainer.threads", int(cfg.trainer.threads or 0)), ("policy.threads", int(cfg.policy.threads)))
    for path, value in settings:
        if value > cores:
            out.append((path, f"{path}={value} is more than the {cores} CPU cores of this machine, so its threads "
                              f"would share cores; set --set {path}={cores} or less"
                              + (" (0 = chosen from the cores and the network)"
                                 if path == "trainer.threads" else "")))
    return out
