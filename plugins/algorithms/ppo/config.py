"""PPO's hyperparameters, in a module without torch: ``zoo train`` checks ``--set algo.*``
keys against :class:`PPOConfig` before the algorithm (and torch) is imported, so a typo costs
no torch import. :mod:`zoo.plugins.algorithms.ppo.ppo` re-exports it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from zoo.core.devices import training_precision_field
from zoo.core.options import bounded, check_bounds
from zoo.core.spaces import ACTION_MASK_KEY


@dataclass
class PPOConfig:
    """PPO hyperparameters (every field settable with ``--set algo.FIELD=VALUE``).

    Defaults are CleanRL's Atari settings; :meth:`PPO.presets` tunes them per environment.
    """

    lr: float = field(default=2.5e-4, metadata=bounded(gt=0))
    """Adam learning rate."""
    adam_eps: float = field(default=1e-5, metadata=bounded(gt=0))
    """Adam epsilon."""
    anneal_lr: bool = False
    """Decay the learning rate linearly from ``lr`` to 0 (over ``anneal_lr_steps`` or the run's budget)."""
    anneal_lr_steps: int = field(default=0, metadata=bounded(ge=0, hint="0 = the run's budget"))
    """Agent steps (active steps trained on) over which ``lr`` decays to 0; 0 = over the run's env-step budget."""
    gamma: float = field(default=0.99, metadata=bounded(ge=0, le=1))
    """Discount factor."""
    gae_lambda: float = field(default=0.95, metadata=bounded(ge=0, le=1))
    """GAE lambda (arXiv 1506.02438, eq. 16)."""
    clip_coef: float = field(default=0.1, metadata=bounded(gt=0))
    """Surrogate clipping epsilon (arXiv 1707.06347, eq. 7); also the value-clipping range."""
    clip_vloss: bool = True
    """Clip the value prediction around the behaviour policy's value (CleanRL)."""
    vf_coef: float = field(default=0.5, metadata=bounded(ge=0))
    """Value-loss coefficient c1 (arXiv 1707.06347, eq. 9)."""
    ent_coef: float = field(default=0.01, metadata=bounded(ge=0))
    """Entropy-bonus coefficient c2 (arXiv 1707.06347, eq. 9)."""
    max_grad_norm: float = field(default=0.5, metadata=bounded(ge=0, hint="0 = no clipping"))
    """Global L2 gradient-norm clipping threshold (0 disables clipping)."""
    epochs: int = field(default=4, metadata=bounded(ge=1))
    """Passes over each batch."""
    minibatches: int = field(default=4, metadata=bounded(ge=1))
    """Minibatches per epoch; the active steps are split into this many near-equal parts."""
    norm_adv: bool = True
    """Normalise advantages per minibatch (see :func:`normalize_advantages`)."""
    target_kl: float = field(default=0.0, metadata=bounded(ge=0, hint="0 = no early stop"))
    """Stop the epochs of an update early once the approximate KL exceeds this (0: never)."""
    hidden: int = field(default=64, metadata=bounded(ge=1))
    """Hidden units per layer of the MLP (vector observations)."""
    network: Literal["auto", "columns"] = "auto"
    """``auto``: the encoder chosen from the observations (MLP, small CNN, Nature CNN);
    ``columns``: for board games whose ``Discrete(W)`` moves are the ``W`` columns of one board
    observation ``[C, H, W]`` (connect four), a tower of 3x3 convolutions keeping the board's
    size and a policy head shared by every column (:mod:`zoo.plugins.algorithms.board`)."""
    board_channels: int = field(default=64, metadata=bounded(ge=1))
    """Channels of each convolution of the ``columns`` network's tower."""
    board_layers: int = field(default=4, metadata=bounded(ge=1))
    """3x3 convolutions in the ``columns`` network's tower (each cell then sees ``2 L + 1`` cells each way)."""
    norm_obs: bool = False
    """Running observation normalisation (SB3 VecNormalize; statistics merged over all actors, in checkpoints)."""
    norm_reward: bool = False
    """Scale rewards by the running std of the discounted return (SB3 VecNormalize / CleanRL continuous PPO)."""
    norm_clip: float = field(default=10.0, metadata=bounded(gt=0))
    """Clip normalised observations and rewards to [-norm_clip, norm_clip]."""
    skip_forced: bool = False
    """Leave forced moves out of training: rows whose action mask allows one action (a waiting
    player's rows in a turn-based game, ``env.random_seats`` or not) are not decisions; GAE runs
    over the decisions, each forced row's reward credited to the decision before it
    (:func:`~zoo.plugins.algorithms.returns.decision_gae`), and the losses, statistics and
    ``agent_steps`` count the decisions only. Needs action masks (``"zoo:action_mask"``)."""
    augment_symmetries: bool = False
    """Train on the images of each update's samples under the env's symmetries as well
    (``EnvSpec.symmetries``, :mod:`zoo.core.symmetry`; connect four's left-right mirror): every
    trained row gains one row per symmetry with its observation and action mapped and the same
    advantage and value target; the image's behaviour log-probability and value are the
    network's at the start of the update (its ratio starts at 1). Minibatches grow by that
    factor, their number stays. Needs an env that declares a symmetry."""
    device: str = "cpu"
    """Torch device the trainer's copy of the network lives on."""
    precision: Literal["auto", "float32", "bfloat16"] = training_precision_field()

    def __post_init__(self) -> None:
        check_bounds(self, "algo.")

    def check_experiment(self, cfg: Any) -> None:
        """Called by config validation before anything starts (:mod:`zoo.core.algorithm`).

        Raises:
            ValueError: ``skip_forced`` on an env without action masks (no row would be forced);
                ``augment_symmetries`` on an env that declares no symmetry; ``network = "columns"``
                on spaces it does not fit (:func:`zoo.plugins.algorithms.board_spaces.column_problem`).
        """
        spec = getattr(cfg, "spec", None)
        if self.network == "columns" and spec is not None:
            from zoo.plugins.algorithms.board_spaces import column_problem

            problem = column_problem(spec.observation_space, spec.action_space)
            if problem:
                raise ValueError(f"algo.network=columns does not fit {spec.env_id}: {problem}; "
                                 "use --set algo.network=auto")
        if self.skip_forced and spec is not None and ACTION_MASK_KEY not in spec.observation_space:
            raise ValueError(f"algo.skip_forced=true needs action masks, and {spec.env_id}'s observations have no "
                             f"{ACTION_MASK_KEY!r} entry (keys: {', '.join(spec.observation_space)}); leave it out")
        if self.augment_symmetries and spec is not None and not getattr(spec, "symmetries", ()):
            raise ValueError(f"algo.augment_symmetries=true needs an env that declares its symmetries, and "
                             f"{spec.env_id} declares none (EnvSpec.symmetries: connect four's mirror is one); "
                             "leave it out")

    def check_batch(self, agent_steps: int, text: str) -> None:
        """Called by config validation with one trainer's batch: at least one step per minibatch.

        Raises:
            ValueError: ``minibatches`` exceeds ``agent_steps`` (some minibatches would be empty).
        """
        if self.minibatches > agent_steps:
            raise ValueError(
                f"algo.minibatches={self.minibatches} is more than the {agent_steps:,} agent steps of one "
                f"trainer's batch ({text}), so {self.minibatches - agent_steps:,} minibatch(es) would be empty; "
                f"set --set algo.minibatches={agent_steps} or fewer, or raise trainer.batch_samples or sample_length")
