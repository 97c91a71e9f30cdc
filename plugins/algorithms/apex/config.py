"""Ape-X DQN's hyperparameters, in a module without torch (``zoo train`` checks ``--set algo.*``
keys against :class:`ApeXConfig` before torch is imported). :mod:`zoo.plugins.algorithms.apex.apex`
re-exports it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zoo.core.options import bounded, check_bounds
from zoo.plugins.algorithms.replay import (  # noqa: F401 (re-exported)
    available_memory,
    check_frame_stack,
    experiment_replay_bytes,
    obs_capacity_for,
    replay_memory_problem,
)

EXPLORATIONS = ("per-env", "linear")
"""The values of ``algo.exploration``."""


@dataclass
class ApeXConfig:
    """Ape-X DQN hyperparameters (every field settable with ``--set algo.FIELD=VALUE``).

    Defaults are the Atari settings of Horgan et al., "Distributed Prioritized Experience
    Replay" (ICLR 2018, arXiv 1803.00933), scaled to one machine; :meth:`ApeX.presets` tunes
    them per environment. Units: ``capacity``, ``learning_starts`` are transitions (agent
    steps); ``target_period`` is gradient steps.
    """

    lr: float = field(default=6.25e-5, metadata=bounded(gt=0))
    """Adam learning rate (Ape-X: 0.00025 / 4)."""
    adam_eps: float = field(default=1.5e-4, metadata=bounded(gt=0))
    """Adam epsilon (Ape-X / Rainbow: 1.5e-4)."""
    gamma: float = field(default=0.99, metadata=bounded(ge=0, le=1))
    """Discount factor."""
    n_step: int = field(default=3, metadata=bounded(ge=1))
    """Steps of the n-step return (cut at episode ends and at the end of a sample, docs/replay.md)."""
    batch_size: int = field(default=512, metadata=bounded(ge=1))
    """Transitions per gradient step per trainer (Ape-X: 512): with ``trainer.count`` = K
    data-parallel trainers a step trains on K x ``batch_size``, drawn ``batch_size`` from each
    trainer's shard."""
    samples_per_insert: float = field(default=8.0, metadata=bounded(gt=0))
    """Rate limiter: replayed transitions per inserted transition; each update takes
    ``floor(credit / batch_size)`` gradient steps, the remainder carried to the next update.
    With K data-parallel trainers the credit counts every trainer's inserts and a step spends
    K x ``batch_size`` (docs/replay.md): every rank takes the same steps."""
    capacity: int = field(default=100_000, metadata=bounded(ge=1))
    """Replay capacity in transitions, per trainer (observation rows: ``capacity x (T+1)/T`` +
    the final observations of truncated steps; docs/replay.md states the bytes); K data-parallel
    trainers each keep a shard of this size, fed by their own actors."""
    learning_starts: int = field(default=20_000, metadata=bounded(ge=0))
    """Transitions in the replay before the first gradient step (also the rate limiter's start);
    with data-parallel trainers, in every trainer's shard together."""
    target_period: int = field(default=2_500, metadata=bounded(ge=1))
    """Gradient steps between copies of the online network into the target network."""
    priority_alpha: float = field(default=0.6, metadata=bounded(ge=0, hint="0 = uniform sampling"))
    """Priority exponent alpha (P(i) ~ p_i^alpha; arXiv 1511.05952); 0 samples uniformly."""
    priority_beta: float = field(default=0.4, metadata=bounded(ge=0, le=1))
    """Importance-sampling exponent beta at the start of the run, annealed linearly to 1 over the run."""
    priority_eps: float = field(default=1e-6, metadata=bounded(gt=0))
    """Added to |TD| before the exponent, so no stored transition has priority 0."""
    initial_priority: str = "td"
    """Priority of new transitions: ``td`` (|TD| under the current networks at insertion, Ape-X's
    choice computed in the trainer) or ``max`` (the largest priority so far, Schaul et al.)."""
    max_grad_norm: float = field(default=40.0, metadata=bounded(ge=0, hint="0 = no clipping"))
    """Global L2 gradient-norm clipping threshold (Ape-X: 40)."""
    huber_delta: float = field(default=1.0, metadata=bounded(ge=0, hint="0 = squared error"))
    """Huber loss threshold on the TD error (1 suits rewards clipped to [-1, 1], as Atari's); 0: the
    squared error ``td^2 / 2``, for unclipped returns such as CartPole's, where a delta of 1 caps each
    transition's gradient far below the TD errors."""
    double_q: bool = True
    """Double Q-learning: the online network picks the bootstrap action, the target network values it."""
    dueling: bool = True
    """Dueling head: Q = V + A - mean(A) (Wang et al. 2016)."""
    hidden: int = field(default=128, metadata=bounded(ge=1))
    """Hidden units per layer of the MLP torso (vector observations; two ReLU layers)."""
    exploration: str = "per-env"
    """How the actors' epsilons are set: ``per-env`` (Ape-X, arXiv 1803.00933 section 4.1: each env
    its own fixed epsilon, ``epsilon_base`` and ``epsilon_alpha``) or ``linear`` (DQN, Mnih et al.
    2015, as CleanRL's ``dqn.py``: every env the same epsilon, from ``start_epsilon`` down to
    ``end_epsilon`` linearly over the first ``exploration_fraction`` of the run's env-step budget,
    then held; the trainer publishes the schedule's position with the weights)."""
    start_epsilon: float = field(default=1.0, metadata=bounded(ge=0, le=1))
    """``exploration = "linear"``: the epsilon at the start of the run (DQN, CleanRL: 1.0)."""
    end_epsilon: float = field(default=0.05, metadata=bounded(ge=0, le=1))
    """``exploration = "linear"``: the epsilon from ``exploration_fraction`` of the budget on (CleanRL: 0.05)."""
    exploration_fraction: float = field(default=0.5, metadata=bounded(ge=0, le=1))
    """``exploration = "linear"``: the fraction of the run's env-step budget over which epsilon falls
    from ``start_epsilon`` to ``end_epsilon`` (CleanRL: 0.5; 0 = ``end_epsilon`` from the start)."""
    epsilon_base: float = field(default=0.4, metadata=bounded(ge=0, le=1))
    """Ape-X per-env exploration: eps_i = epsilon_base ** (1 + epsilon_alpha * i / (N - 1)), i the global env index."""
    epsilon_alpha: float = field(default=7.0, metadata=bounded(ge=0))
    """Exponent spread of the per-env epsilons (Ape-X: 7)."""
    eval_epsilon: float = field(default=0.0, metadata=bounded(ge=0, le=1))
    """Epsilon when act() gets no env index (zoo eval, watch) and ``deterministic`` is false."""
    frame_stack: str = "auto"
    """``auto``: uint8 observations ``[P, H, W(, C)]`` (a stack axis first, as the atari env gives)
    whose consecutive rows share planes are stored once per new frame, stacks rebuilt at sampling
    (docs/replay.md); ``off``: whole observations per row."""
    device: str = "cpu"
    """Torch device the trainer's copy of the network lives on."""

    def __post_init__(self) -> None:
        check_bounds(self, "algo.")
        if self.learning_starts > self.capacity:
            raise ValueError(f"algo.learning_starts={self.learning_starts:,} is more than algo.capacity="
                             f"{self.capacity:,}: the replay could never hold enough to start learning; "
                             f"set --set algo.learning_starts={self.capacity} or less")
        if self.initial_priority not in ("td", "max"):
            raise ValueError(f"algo.initial_priority={self.initial_priority!r} is not one of 'td', 'max'; "
                             "set --set algo.initial_priority=td or max")
        check_frame_stack(self.frame_stack)
        if self.exploration not in EXPLORATIONS:
            raise ValueError(f"algo.exploration={self.exploration!r} is not one of "
                             f"{', '.join(map(repr, EXPLORATIONS))}; set --set algo.exploration=per-env "
                             "(Ape-X's fixed per-env epsilons) or linear (DQN's annealed epsilon)")

    def check_batch(self, agent_steps: int, text: str) -> None:
        """Called by config validation with one trainer's batch: one batch must fit in the replay.

        Raises:
            ValueError: ``capacity`` is smaller than the batch's ``agent_steps`` (an insert would
                not fit).
        """
        if agent_steps > self.capacity:
            raise ValueError(f"algo.capacity={self.capacity:,} is smaller than one trainer's batch of "
                             f"{agent_steps:,} transitions ({text}): one insert would not fit; set --set "
                             f"algo.capacity={agent_steps} or more, or lower trainer.batch_samples or sample_length")

    def check_experiment(self, cfg: Any) -> None:
        """Called by config validation before anything starts (:mod:`zoo.core.algorithm`).

        Raises:
            ValueError: with the ``local`` launcher (the trainers run on this machine), the
                replays cannot fit in the memory available here: ``trainer.count`` data-parallel
                trainers each keep a shard of ``capacity`` transitions
                (:func:`replay_memory_problem`; each trainer checks its own again where it runs).
        """
        if getattr(cfg, "launcher", "local") != "local":
            return  # the trainer may run on another machine: it checks there
        need = experiment_replay_bytes(self.capacity, cfg, 8, self.frame_stack)  # int64 actions
        problem = replay_memory_problem(need, available_memory(), int(cfg.trainer.count))
        if problem:
            raise ValueError(problem)
