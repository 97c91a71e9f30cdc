"""SAC's hyperparameters, in a module without torch (``zoo train`` checks ``--set algo.*`` keys
against :class:`SACConfig` before torch is imported). :mod:`zoo.plugins.algorithms.sac.sac`
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


@dataclass
class SACConfig:
    """Soft Actor-Critic hyperparameters (every field settable with ``--set algo.FIELD=VALUE``).

    Defaults are CleanRL's ``sac_continuous_action.py`` (MuJoCo): Adam at 3e-4 for the policy
    and 1e-3 for the Q networks and the temperature, batch 256, tau 0.005, gamma 0.99, a 1M
    replay, learning after 5,000 transitions, one gradient step per inserted transition (256
    replayed per insert), automatic temperature with target entropy ``-|A|`` (Haarnoja et al.,
    "Soft Actor-Critic Algorithms and Applications", arXiv 1812.05905). Units: ``capacity``,
    ``learning_starts`` are transitions (env steps).
    """

    policy_lr: float = field(default=3e-4, metadata=bounded(gt=0))
    """Adam learning rate of the policy (CleanRL: 3e-4)."""
    q_lr: float = field(default=1e-3, metadata=bounded(gt=0))
    """Adam learning rate of the two Q networks (CleanRL: 1e-3)."""
    alpha_lr: float = field(default=1e-3, metadata=bounded(gt=0))
    """Adam learning rate of log alpha, the entropy temperature (CleanRL: the Q rate)."""
    gamma: float = field(default=0.99, metadata=bounded(ge=0, le=1))
    """Discount factor."""
    tau: float = field(default=0.005, metadata=bounded(gt=0, le=1))
    """Polyak averaging of the target Q networks after each gradient step:
    ``target <- tau x online + (1 - tau) x target``."""
    n_step: int = field(default=1, metadata=bounded(ge=1))
    """Steps of the return (1: the soft Bellman target of the paper; cut at episode ends and at the
    end of a sample, docs/replay.md). Uncorrected n-step returns are biased off-policy."""
    batch_size: int = field(default=256, metadata=bounded(ge=1))
    """Transitions per gradient step per trainer: with ``trainer.count`` = K data-parallel
    trainers a step trains on K x ``batch_size``, drawn ``batch_size`` from each trainer's shard."""
    samples_per_insert: float = field(default=256.0, metadata=bounded(gt=0))
    """Rate limiter: replayed transitions per inserted transition (256 = one gradient step of 256
    per env step, CleanRL's ratio); each update takes ``floor(credit / batch_size)`` steps. With
    K data-parallel trainers the credit counts every trainer's inserts and a step spends K x
    ``batch_size`` (docs/replay.md): every rank takes the same steps."""
    capacity: int = field(default=1_000_000, metadata=bounded(ge=1))
    """Replay capacity in transitions, per trainer (docs/replay.md states the bytes); K
    data-parallel trainers each keep a shard of this size, fed by their own actors."""
    learning_starts: int = field(default=5_000, metadata=bounded(ge=0))
    """Transitions in the replay (data-parallel trainers: in every trainer's shard together)
    before the first gradient step; until then the actors take uniformly random actions
    (``uniform_warmup``)."""
    uniform_warmup: bool = True
    """Act uniformly at random within the action bounds until the replay holds ``learning_starts``
    transitions (the policy's ``warmup`` flag, published with its weights; docs/replay.md)."""
    autotune: bool = True
    """Learn the temperature alpha towards the target entropy ``-|A|`` (arXiv 1812.05905, eq. 18);
    false keeps ``alpha`` fixed."""
    alpha: float = field(default=0.2, metadata=bounded(gt=0))
    """The fixed temperature when ``autotune`` is false (CleanRL: 0.2)."""
    init_alpha: float = field(default=1.0, metadata=bounded(gt=0))
    """Initial temperature with ``autotune`` (log alpha starts at log init_alpha; CleanRL: 1)."""
    hidden: int = field(default=256, metadata=bounded(ge=1))
    """Hidden units of each of the two ReLU layers of the policy and of each Q network."""
    log_std_min: float = field(default=-5.0, metadata=bounded(ge=-20, le=2))
    """Lower bound of the log standard deviation of the policy's Gaussian (before the action's tanh)."""
    log_std_max: float = field(default=2.0, metadata=bounded(ge=-5, le=5))
    """Upper bound of the policy's log standard deviation."""
    max_grad_norm: float = field(default=0.0, metadata=bounded(ge=0, hint="0 = no clipping"))
    """Global L2 gradient-norm clipping of each network's step (CleanRL: none)."""
    priority_alpha: float = field(default=0.0, metadata=bounded(ge=0, hint="0 = uniform sampling"))
    """Prioritised replay exponent (0: uniform, the default); priorities are the mean |TD| of the two Q networks."""
    priority_beta: float = field(default=0.4, metadata=bounded(ge=0, le=1))
    """Importance-sampling exponent at the start of the run, annealed to 1 (only with priority_alpha > 0)."""
    priority_eps: float = field(default=1e-6, metadata=bounded(gt=0))
    """Added to |TD| before the exponent."""
    frame_stack: str = "auto"
    """``auto``: uint8 observations ``[P, H, W(, C)]`` (a stack axis first) whose consecutive rows
    share planes are stored once per new frame (docs/replay.md); ``off``: whole observations per row."""
    device: str = "cpu"
    """Torch device the trainer's networks live on."""

    def __post_init__(self) -> None:
        check_bounds(self, "algo.")
        if self.learning_starts > self.capacity:
            raise ValueError(f"algo.learning_starts={self.learning_starts:,} is more than algo.capacity="
                             f"{self.capacity:,}: the replay could never hold enough to start learning; "
                             f"set --set algo.learning_starts={self.capacity} or less")
        if not self.log_std_min < self.log_std_max:
            raise ValueError(f"algo.log_std_min={self.log_std_min} must be below algo.log_std_max="
                             f"{self.log_std_max}; set --set algo.log_std_min=-5 algo.log_std_max=2")
        check_frame_stack(self.frame_stack)

    def check_batch(self, agent_steps: int, text: str) -> None:
        """Called by config validation with one trainer's batch: one batch must fit in the replay.

        Raises:
            ValueError: ``capacity`` is smaller than the batch's ``agent_steps``.
        """
        if agent_steps > self.capacity:
            raise ValueError(f"algo.capacity={self.capacity:,} is smaller than one trainer's batch of "
                             f"{agent_steps:,} transitions ({text}): one insert would not fit; set --set "
                             f"algo.capacity={agent_steps} or more, or lower trainer.batch_samples or sample_length")

    def check_experiment(self, cfg: Any) -> None:
        """Called by config validation before anything starts (:mod:`zoo.core.algorithm`).

        Raises:
            ValueError: with the ``local`` launcher, the replays cannot fit in the memory available
                here: ``trainer.count`` data-parallel trainers each keep a shard of ``capacity``
                transitions (each trainer checks its own again where it runs).
        """
        import numpy as np

        if getattr(cfg, "launcher", "local") != "local":
            return
        dims = int(np.prod(getattr(cfg.spec.action_space, "shape", ()) or (1,), dtype=np.int64))
        need = experiment_replay_bytes(self.capacity, cfg, 4 * dims, self.frame_stack)  # float32 actions
        problem = replay_memory_problem(need, available_memory(), int(cfg.trainer.count))
        if problem:
            raise ValueError(problem)
