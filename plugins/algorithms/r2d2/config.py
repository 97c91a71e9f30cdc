"""R2D2's hyperparameters, in a module without torch (``zoo train`` checks ``--set algo.*`` keys
against :class:`R2D2Config` before torch is imported). :mod:`zoo.plugins.algorithms.r2d2.r2d2`
re-exports it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zoo.core.options import bounded, check_bounds
from zoo.plugins.algorithms.replay import check_frame_stack


@dataclass
class R2D2Config:
    """R2D2 (Kapturowski et al., ICLR 2019). Defaults follow the paper where it applies to one
    trainer (its Atari values: sequences of 80 with burn-in 40, period 40, n = 5, gamma 0.997,
    eta 0.9, priority exponent 0.9, IS exponent 0.6, LSTM of 512, Adam 1e-4 with eps 1e-3);
    the presets shrink them for vector envs (:meth:`~zoo.plugins.algorithms.r2d2.r2d2.R2D2.presets`).
    """

    lr: float = field(default=1e-4, metadata=bounded(gt=0))
    """Adam learning rate (R2D2: 1e-4)."""
    adam_eps: float = field(default=1e-3, metadata=bounded(gt=0))
    """Adam epsilon (R2D2: 1e-3)."""
    gamma: float = field(default=0.997, metadata=bounded(ge=0, le=1))
    """Discount factor (R2D2: 0.997)."""
    n_step: int = field(default=5, metadata=bounded(ge=1))
    """Steps of the n-step return, cut at episode ends and at the end of a sequence."""
    sequence_length: int = field(default=80, metadata=bounded(ge=2))
    """Steps per replayed sequence, m (burn-in included); must be at most ``sample_length``."""
    sequence_period: int = field(default=0, metadata=bounded(ge=0, hint="0 = sequence_length // 2"))
    """Steps between the starts of consecutive sequences of a sample (0: m / 2, R2D2's overlap)."""
    burn_in: int = field(default=40, metadata=bounded(ge=0))
    """First steps of each sequence that only unroll the recurrent state (no loss, no priority)."""
    batch_size: int = field(default=64, metadata=bounded(ge=1))
    """Sequences per gradient step per trainer (R2D2: 64): with ``trainer.count`` = K
    data-parallel trainers a step trains on K x ``batch_size``, drawn ``batch_size`` from each
    trainer's shard."""
    samples_per_insert: float = field(default=1.0, metadata=bounded(gt=0))
    """Rate limiter: replayed sequences per inserted sequence; each update takes
    ``floor(credit / batch_size)`` gradient steps, the remainder carried to the next update.
    With K data-parallel trainers the credit counts every trainer's inserts and a step spends
    K x ``batch_size`` (docs/replay.md): every rank takes the same steps."""
    capacity: int = field(default=10_000, metadata=bounded(ge=1))
    """Replay capacity in sequences, per trainer (K data-parallel trainers each keep a shard of
    this size, fed by their own actors)."""
    learning_starts: int = field(default=500, metadata=bounded(ge=0))
    """Sequences in the replay before the first gradient step (also the rate limiter's start);
    with data-parallel trainers, in every trainer's shard together."""
    target_period: int = field(default=2_500, metadata=bounded(ge=1))
    """Gradient steps between copies of the online network into the target network (R2D2: 2,500)."""
    priority_eta: float = field(default=0.9, metadata=bounded(ge=0, le=1))
    """Sequence priority mix: ``eta * max|TD| + (1 - eta) * mean|TD|`` over the sequence's trained steps."""
    priority_alpha: float = field(default=0.9, metadata=bounded(ge=0, hint="0 = uniform sampling"))
    """Priority exponent alpha (R2D2: 0.9); 0 samples uniformly."""
    priority_beta: float = field(default=0.6, metadata=bounded(ge=0, le=1))
    """Importance-sampling exponent at the start of the run (R2D2: 0.6), annealed linearly to 1."""
    priority_eps: float = field(default=1e-6, metadata=bounded(gt=0))
    """Added to the mixed |TD| before the exponent, so no stored sequence has priority 0."""
    initial_priority: str = "td"
    """Priority of new sequences: ``td`` (their mixed |TD| under the current networks at insertion;
    R2D2 computes it on the actors) or ``max`` (the largest priority so far)."""
    rescale_eps: float = field(default=1e-3, metadata=bounded(ge=0))
    """epsilon of the value rescaling h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x (R2D2: 1e-3); the
    rescaling is off with ``value_rescaling=false``."""
    value_rescaling: bool = True
    """Targets ``h(ret + disc * h^-1(Q_target))`` (Pohlen et al. 2018) instead of ``ret + disc * Q_target``."""
    max_grad_norm: float = field(default=40.0, metadata=bounded(ge=0, hint="0 = no clipping"))
    """Global L2 gradient-norm clipping threshold."""
    hidden: int = field(default=128, metadata=bounded(ge=1))
    """Units of the MLP torso's two ReLU layers (vector observations)."""
    lstm: int = field(default=512, metadata=bounded(ge=1))
    """Units of the LSTM (R2D2: 512)."""
    epsilon_base: float = field(default=0.4, metadata=bounded(ge=0, le=1))
    """Per-env exploration eps_i = epsilon_base ** (1 + epsilon_alpha * i / (N - 1)), as apex-dqn."""
    epsilon_alpha: float = field(default=7.0, metadata=bounded(ge=0))
    """Exponent spread of the per-env epsilons."""
    eval_epsilon: float = field(default=0.0, metadata=bounded(ge=0, le=1))
    """Epsilon when act() gets no env index (zoo eval, watch) and ``deterministic`` is false."""
    frame_stack: str = "auto"
    """``auto``: uint8 observations ``[P, H, W(, C)]`` (a stack axis first, as the atari env gives)
    whose consecutive rows share planes are stored once per new frame, shared by overlapping
    sequences and rebuilt at sampling (docs/replay.md); ``off``: whole observations per row (rows
    are shared by overlapping sequences either way)."""
    device: str = "cpu"
    """Torch device the trainer's copy of the network lives on."""

    @property
    def period(self) -> int:
        """The steps between sequence starts: ``sequence_period`` or ``sequence_length // 2``."""
        return self.sequence_period or max(1, self.sequence_length // 2)

    def __post_init__(self) -> None:
        check_bounds(self, "algo.")
        if self.burn_in >= self.sequence_length:
            raise ValueError(f"algo.burn_in={self.burn_in} leaves no trained step in a sequence of "
                             f"algo.sequence_length={self.sequence_length}; set --set algo.burn_in="
                             f"{self.sequence_length // 2} or less")
        if self.learning_starts > self.capacity:
            raise ValueError(f"algo.learning_starts={self.learning_starts:,} is more than algo.capacity="
                             f"{self.capacity:,} sequences: learning could never start; set --set "
                             f"algo.learning_starts={self.capacity} or less")
        if self.initial_priority not in ("td", "max"):
            raise ValueError(f"algo.initial_priority={self.initial_priority!r} is not one of 'td', 'max'; "
                             "set --set algo.initial_priority=td or max")
        check_frame_stack(self.frame_stack)

    def check_experiment(self, cfg: Any) -> None:
        """Called by config validation before anything starts (:mod:`zoo.core.algorithm`).

        Raises:
            ValueError: ``algo.sequence_length`` is longer than ``sample_length`` (sequences are
                cut inside each sample), one batch's sequences do not fit in ``capacity``, or
                (``local`` launcher) the replays do not fit in memory (``trainer.count``
                data-parallel trainers each keep a shard of ``capacity`` sequences).
        """
        from zoo.core.config import batch_agent_steps
        from zoo.plugins.algorithms.replay import available_memory

        T = int(cfg.sample_length)
        if self.sequence_length > T:
            raise ValueError(f"algo.sequence_length={self.sequence_length} is longer than sample_length={T}: "
                             f"sequences are cut inside each sample; set --set algo.sequence_length={T} or less")
        steps, _ = batch_agent_steps(cfg, cfg.spec)
        per_batch = (steps // T) * (len(range(0, T - self.sequence_length + 1, self.period)))
        if per_batch > self.capacity:
            raise ValueError(f"algo.capacity={self.capacity:,} sequences is less than one batch's {per_batch:,} "
                             f"sequences; set --set algo.capacity={per_batch} or more")
        if getattr(cfg, "launcher", "local") != "local":
            return  # the trainer may run on another machine: it checks there
        from zoo.plugins.algorithms.r2d2.replay import sequence_memory_problem, sequence_replay_bytes
        from zoo.plugins.algorithms.replay import is_frame_stack

        obs = {k: (tuple(s.shape), s.dtype) for k, s in cfg.spec.observation_space.items()}
        auto = self.frame_stack == "auto"
        stacks = {k: 1 for k, (shape, dtype) in obs.items() if auto and is_frame_stack(shape, dtype)}
        need = sequence_replay_bytes(self.capacity, T, self.sequence_length, self.period, steps // T, obs,
                                     2 * self.lstm, stacks)
        problem = sequence_memory_problem(need, available_memory(), trainers=int(cfg.trainer.count))
        if problem:
            raise ValueError(problem)
