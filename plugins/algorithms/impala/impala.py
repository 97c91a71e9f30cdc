"""IMPALA: an actor-critic that learns from stale samples through V-trace.

Espeholt et al., "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", ICML 2018, arXiv 1802.01561. Actors act with whatever
weights the policy worker holds (the sample's ``policy_version`` per step); the learner
corrects for the lag with V-trace (eq. 1, :mod:`zoo.plugins.algorithms.vtrace`) and takes
one gradient step per batch on (section 4.2)::

    pg_loss      = - sum_s rho_s * (r_s + gamma * v_{s+1} - V(x_s)) * log pi(a_s|x_s)
    v_loss       = 0.5 * sum_s (v_s - V(x_s))^2                     ("baseline loss")
    entropy      = sum_s H(pi(.|x_s))                               ("entropy bonus")
    loss         = pg_loss + vf_coef * v_loss - ent_coef * entropy

summed over the active steps of the batch, as in the paper's implementation (so that its
learning rate, RMSProp epsilon and gradient-norm clipping of 40 keep their meaning);
``rho_s``, ``v_s`` and ``v_{s+1}`` are constants of the loss. Behaviour log-probabilities
``log mu(a_s|x_s)`` come from the sample's ``"logp"`` extra (what the policy's ``act``
returned when it chose the action); target log-probabilities ``log pi`` and all values
``V`` (rows ``0..T``, and the final observations of truncated steps) from the current
network.

Data-parallel trainers (``trainer.count`` = K > 1, :mod:`zoo.core.distributed`): the
losses are sums, so the ranks' gradients are *summed* (the gradient of the loss over the
global batch of K shares), before the norm clipping; the returned losses and statistics
are rank 0's share, ``agent_steps`` counts every rank's.

The networks are PPO's (:mod:`zoo.plugins.algorithms.ppo.networks`): separate tanh MLPs
for vector observations, the Nature CNN shared by both heads for frames.

``algo.precision`` (:mod:`zoo.plugins.algorithms.precision`): under ``bfloat16`` the forward
passes (``evaluate`` and the bootstrap and final values) run under ``torch.autocast`` and their
outputs are cast to float32 before V-trace and the loss.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from zoo.core import distributed as zdist
from zoo.core.algorithm import Batch
from zoo.core.devices import training_precision_field
from zoo.core.env import EnvSpec
from zoo.core.options import bounded, check_bounds
from zoo.plugins.algorithms.normalization import RewardNorm, scaled_rewards
from zoo.plugins.algorithms.ppo.networks import ActorCritic, has_images
from zoo.plugins.algorithms.precision import TrainingPrecision, explain
from zoo.plugins.algorithms.tensors import UpdateGuard, annealed_lr, explained_variance, to_tensor
from zoo.plugins.algorithms.vtrace import vtrace

STATS = ("pg_loss", "v_loss", "entropy", "approx_kl", "rho_mean", "rho_clipfrac", "explained_variance",
         "grad_norm")


@dataclass
class IMPALAConfig:
    """IMPALA hyperparameters (every field settable with ``--set algo.FIELD=VALUE``).

    Defaults are the paper's Atari settings (arXiv 1802.01561, appendix, "Atari"
    hyperparameters: RMSProp lr 0.0006, decay 0.99, epsilon 0.01, momentum 0; discount
    0.99; baseline cost 0.5; entropy cost 0.01; global gradient-norm clipping 40);
    :meth:`IMPALA.presets` tunes them per environment.
    """

    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """rmsprop (the paper's) or adam."""
    lr: float = field(default=6e-4, metadata=bounded(gt=0))
    """Learning rate."""
    rmsprop_alpha: float = field(default=0.99, metadata=bounded(ge=0, lt=1))
    """RMSProp decay of the running mean of squared gradients."""
    rmsprop_eps: float = field(default=0.01, metadata=bounded(gt=0))
    """RMSProp epsilon (torch convention: added to the root of the mean square)."""
    rmsprop_momentum: float = field(default=0.0, metadata=bounded(ge=0))
    """RMSProp momentum."""
    adam_eps: float = field(default=1e-5, metadata=bounded(gt=0))
    """Adam epsilon."""
    anneal_lr: bool = False
    """Decay ``lr`` linearly to 0 (over ``anneal_lr_steps`` or the run's budget), as the paper does."""
    anneal_lr_steps: int = field(default=0, metadata=bounded(ge=0, hint="0 = the run's budget"))
    """Agent steps (active steps trained on) over which ``lr`` decays to 0; 0 = the run's env-step budget."""
    gamma: float = field(default=0.99, metadata=bounded(ge=0, le=1))
    """Discount factor."""
    rho_bar: float = field(default=1.0, metadata=bounded(gt=0))
    """Truncation level of the importance weights rho (eq. 1); also used in the policy gradient."""
    c_bar: float = field(default=1.0, metadata=bounded(gt=0))
    """Truncation level of the trace coefficients c (eq. 1); the paper assumes rho_bar >= c_bar."""
    vtrace_lambda: float = field(default=1.0, metadata=bounded(ge=0, le=1))
    """Trace discount lambda: c_i = lambda * min(c_bar, pi/mu) (section 4.1)."""
    vf_coef: float = field(default=0.5, metadata=bounded(ge=0))
    """Baseline-loss coefficient."""
    ent_coef: float = field(default=0.01, metadata=bounded(ge=0))
    """Entropy-bonus coefficient."""
    max_grad_norm: float = field(default=40.0, metadata=bounded(ge=0, hint="0 = no clipping"))
    """Global L2 gradient-norm clipping threshold on the summed loss (0 disables clipping)."""
    hidden: int = field(default=64, metadata=bounded(ge=1))
    """Hidden units per layer of the MLP (vector observations)."""
    norm_obs: bool = False
    """Running observation normalisation (SB3 VecNormalize; statistics merged over all actors, in checkpoints)."""
    norm_reward: bool = False
    """Scale rewards by the running std of the discounted return (SB3 VecNormalize / CleanRL continuous PPO)."""
    norm_clip: float = field(default=10.0, metadata=bounded(gt=0))
    """Clip normalised observations and rewards to [-norm_clip, norm_clip]."""
    device: str = "cpu"
    """Torch device the trainer's copy of the network lives on."""
    precision: Literal["auto", "float32", "bfloat16"] = training_precision_field()

    def __post_init__(self) -> None:
        check_bounds(self, "algo.")


class IMPALA:
    """The ``impala`` algorithm (see :mod:`zoo.core.algorithm` for the interface)."""

    Config = IMPALAConfig

    @classmethod
    def build_policy(cls, config: IMPALAConfig, spec: EnvSpec) -> ActorCritic:
        """The actor-critic network for ``spec`` (MLP or Nature CNN; PPO's networks).

        Its ``act`` returns ``{"action", "logp", "value"}``; ``logp`` (float32 ``[N]``) is the
        behaviour log-probability V-trace needs.

        Raises:
            TypeError: the action space is not Discrete, MultiDiscrete or Box.
            ValueError: an image observation is under a key other than ``"obs"``.
        """
        return ActorCritic(spec, hidden=config.hidden, norm_obs=config.norm_obs, norm_clip=config.norm_clip)

    @classmethod
    def explain_precision(cls, config: IMPALAConfig, spec: EnvSpec) -> str:
        """``algo.precision`` resolved on this machine, and why (``zoo train`` prints it)."""
        return explain(config.precision, config.device, cls.build_policy(config, spec))

    @classmethod
    def presets(cls, spec: EnvSpec) -> dict[str, Any]:
        """Experiment-config overrides for ``spec``; fully asynchronous, small batches.

        Actors never wait for the trainer (``actors.drop_when_full``): a sample the trainer
        cannot take at once is dropped at the actor and counted (``actor_dropped_samples``).

        Image observations (``"obs"`` a uint8 ``[C, H, W]`` Box, e.g. Atari): the paper's
        Atari settings (unroll T = 20, batch 32 trajectories, RMSProp lr 6e-4 annealed to 0
        over the run, entropy 0.01, clipping 40) on 2 actors x 8 envs; samples up to 16
        versions old are used.

        Vector observations (e.g. CartPole-v1): Adam lr 1e-3 (on summed losses, constant:
        annealing gives a steadier final policy, ``--set algo.anneal_lr=true``, but reached
        450 later in our CartPole runs), T = 16, batch 8 trajectories, gamma 0.99, entropy
        0.003, on 2 actors x 4 envs; samples up to 16 versions old are used.
        """
        image = has_images(spec)
        if image:
            layout = {"sample_length": 20, "actors.count": 2, "actors.envs_per_actor": 8, "actors.ring_size": 2,
                      "trainer.batch_samples": 32, "trainer.max_policy_lag": 16,
                      "actors.drop_when_full": True}
            algo = {"optimizer": "rmsprop", "lr": 6e-4, "anneal_lr": True, "rmsprop_alpha": 0.99,
                    "rmsprop_eps": 0.01, "gamma": 0.99, "vf_coef": 0.5, "ent_coef": 0.01, "max_grad_norm": 40.0}
        else:
            layout = {"sample_length": 16, "actors.count": 2, "actors.envs_per_actor": 4, "actors.ring_size": 2,
                      "trainer.batch_samples": 8, "trainer.max_policy_lag": 16,
                      "actors.drop_when_full": True}
            algo = {"optimizer": "adam", "lr": 1e-3, "anneal_lr": False, "gamma": 0.99, "vf_coef": 0.5,
                    "ent_coef": 0.003, "max_grad_norm": 40.0}
        return {**layout, **{f"algo.{k}": v for k, v in algo.items()}}

    def __init__(self, config: IMPALAConfig, spec: EnvSpec, seed: int) -> None:
        self.config, self.spec = config, spec
        self.device = torch.device(config.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = self.build_policy(config, spec).to(self.device)
        self.precision = TrainingPrecision(config.precision, self.device, self.policy)  # algo.precision resolved
        params = self.policy.parameters()
        if config.optimizer == "rmsprop":
            self.optimizer: torch.optim.Optimizer = torch.optim.RMSprop(
                params, lr=config.lr, alpha=config.rmsprop_alpha, eps=config.rmsprop_eps,
                momentum=config.rmsprop_momentum)
        else:
            self.optimizer = torch.optim.Adam(params, lr=config.lr, eps=config.adam_eps)
        self.agent_steps = 0  # active steps trained on so far (drives lr annealing)
        self.progress = 0.0  # fraction of the run's env-step budget done; set by the trainer
        self.updates = 0
        self.reward_norm = RewardNorm(config.norm_clip).to(self.device) if config.norm_reward else None

    def current_lr(self) -> float:
        """The learning rate of the next update (:func:`~zoo.plugins.algorithms.tensors.annealed_lr`)."""
        c = self.config
        return annealed_lr(c.lr, c.anneal_lr, c.anneal_lr_steps, self.agent_steps, self.progress)

    def _obs(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {k: to_tensor(v, self.device) for k, v in obs.items()}

    def update(self, batch: Batch) -> dict[str, float]:
        """One IMPALA gradient step on ``batch`` (layout in :mod:`zoo.core.algorithm`).

        Returns:
            Per active step means of ``pg_loss``, ``v_loss`` (the optimised losses are
            their sums), ``entropy`` (nats), ``approx_kl`` (``(r - 1) - log r`` of the
            ratio ``r = pi/mu``, behaviour -> current), ``rho_mean`` (truncated weights),
            ``rho_clipfrac`` (fraction with ``pi/mu > rho_bar``); ``grad_norm`` (before
            clipping); ``explained_variance`` of ``V`` for the V-trace targets (nan if the
            targets are constant); ``lr``; ``agent_steps`` (active steps in this batch).
            All zeros except ``lr`` when the batch has no active step (no step is taken).

        Raises:
            KeyError: a required batch key (obs, action, reward, terminated, truncated, logp) is missing.
            ValueError: shapes disagree (from :func:`zoo.plugins.algorithms.vtrace.vtrace`).
            NonFiniteUpdate: the loss or the gradient norm was not finite (no step was taken),
                or the weights were not finite after the step (weights and optimiser state
                are back to what they were; :class:`~zoo.plugins.algorithms.tensors.UpdateGuard`).
        """
        c, dev = self.config, self.device
        obs = self._obs(batch["obs"])
        reward = to_tensor(batch["reward"], dev, torch.float32)
        T, B = reward.shape
        active = (to_tensor(batch["active"], dev, torch.bool) if "active" in batch
                  else torch.ones(T, B, dtype=torch.bool, device=dev))
        n = int(active.sum())
        n_all = zdist.global_count(n)  # active steps of every trainer (n when trainer.count = 1)
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = {k: 0.0 for k in STATS} | {"lr": lr, "agent_steps": float(n_all)}
        if n_all == 0:
            return stats
        reward = scaled_rewards(self.reward_norm, batch, reward, active)

        action = to_tensor(batch["action"], dev)
        flat_obs = {k: v[:T].reshape(T * B, *v.shape[2:]) for k, v in obs.items()}
        # algo.precision: the forward pass (and so its backward) under autocast; outputs float32
        forward = self.precision.forward
        logp, entropy, value = forward(self.policy.evaluate, flat_obs, action.reshape(T * B, *action.shape[2:]))
        logp, entropy, value = logp.reshape(T, B), entropy.reshape(T, B), value.reshape(T, B)
        behaviour_logp = to_tensor(batch["logp"], dev, torch.float32)

        with torch.no_grad():
            bootstrap = forward(self.policy.value, {k: v[T] for k, v in obs.items()})
            final_index = to_tensor(batch.get("final_index", np.zeros((0, 2), np.int64)), dev, torch.int64)
            final_values = (forward(self.policy.value, self._obs(batch["final_obs"])) if final_index.shape[0] > 0
                            else torch.zeros(0, device=dev))
            vt = vtrace(behaviour_logp, logp.detach(), reward, torch.cat([value.detach(), bootstrap[None]]),
                        to_tensor(batch["terminated"], dev, torch.bool), to_tensor(batch["truncated"], dev, torch.bool),
                        gamma=c.gamma, rho_bar=c.rho_bar, c_bar=c.c_bar, vtrace_lambda=c.vtrace_lambda,
                        final_index=final_index, final_values=final_values, active=active)

        mask = active.to(value.dtype)
        # Policy gradient, section 4.2: rho_s * (r_s + gamma v_{s+1} - V(x_s)) * grad log pi(a_s|x_s).
        pg_loss = -(vt.pg_advantages * logp * mask).sum()
        # Baseline loss, section 4.2: (v_s - V(x_s)) * grad V(x_s) is the gradient of 0.5 (v_s - V(x_s))^2.
        v_loss = 0.5 * (((vt.vs - value) ** 2) * mask).sum()
        # Entropy bonus, section 4.2.
        entropy_sum = (entropy * mask).sum()
        loss = pg_loss + c.vf_coef * v_loss - c.ent_coef * entropy_sum

        guard = UpdateGuard(self.policy, self.optimizer)
        self.optimizer.zero_grad()
        loss.backward()
        zdist.reduce_gradients(self.policy.parameters(), loss=loss)  # summed losses: sum the ranks' gradients
        max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
        grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), max_norm)
        guard.check(0, loss=loss, grad_norm=grad_norm)
        self.optimizer.step()
        guard.check_weights(0)

        if n == 0:  # data parallel: this rank had no active step; the others' gradients were applied
            self.agent_steps += n_all
            self.updates += 1
            return stats
        with torch.no_grad():
            logratio = (logp.detach() - behaviour_logp)[active]
            ratio = logratio.exp()
            stats.update({
                "pg_loss": float(pg_loss) / n, "v_loss": float(v_loss) / n, "entropy": float(entropy_sum) / n,
                "approx_kl": float(((ratio - 1) - logratio).mean()),
                "rho_mean": float(vt.rhos[active].mean()),
                "rho_clipfrac": float((ratio > c.rho_bar).float().mean()),
                "explained_variance": explained_variance(value.detach()[active], vt.vs[active]),
                "grad_norm": float(grad_norm),
            })
        self.agent_steps += n_all
        self.updates += 1
        if c.norm_obs:  # after the update, which used the behaviour policy's statistics
            self.policy.update_obs_stats({k: v[:T][active] for k, v in obs.items()})
        return stats

    def state_dict(self) -> dict[str, Any]:
        """Policy and optimiser state, counters and the config."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "agent_steps": self.agent_steps, "updates": self.updates, "config": asdict(self.config),
                "reward_norm": None if self.reward_norm is None else self.reward_norm.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the stored config is informational)."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.agent_steps = int(state.get("agent_steps", 0))
        self.updates = int(state.get("updates", 0))
        if self.reward_norm is not None and state.get("reward_norm") is not None:
            self.reward_norm.load_state_dict(state["reward_norm"])
