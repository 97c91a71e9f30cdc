"""Proximal Policy Optimisation with the clipped surrogate objective.

Schulman, Wolski, Dhariwal, Radford and Klimov, "Proximal Policy Optimization
Algorithms", arXiv 1707.06347: eq. 7 (clipped surrogate ``L^CLIP``) and eq. 9 (combined
objective ``L^CLIP - c1 * L^VF + c2 * S``); advantages by GAE (arXiv 1506.02438, see
:mod:`zoo.plugins.algorithms.returns`). The loss is written term by term as in CleanRL's
``ppo.py`` (Huang et al., "The 37 Implementation Details of Proximal Policy
Optimization", ICLR Blog Track 2022), including its optional value clipping, per-minibatch
advantage normalisation, global gradient-norm clipping and Adam epsilon 1e-5.

Data-parallel trainers (``trainer.count`` = K > 1, :mod:`zoo.core.distributed`): the
losses are means over a minibatch, so each gradient is the size-weighted mean of the ranks'
gradients (the gradient over the union of their minibatch parts), taken before clipping;
advantages are standardised with the moments of that union, the ``target_kl`` early stop
uses the pooled KL, and every rank takes ``epochs x minibatches`` steps. A global
minibatch is thus the union of the K ranks' parts: K x the per-trainer minibatch. The
returned losses and statistics are rank 0's share; ``agent_steps`` counts every rank's.

The batch follows :mod:`zoo.core.algorithm` (time-major ``[T, B]``, bootstrap row
``obs[T]``, ``final_obs`` / ``final_index`` for truncated steps, ``active`` mask, and the
behaviour policy's ``"logp"`` extra; its ``"value"`` extra is not used: every value
is the current network's, see :meth:`PPO.update`). Samples may come from slightly older
weights (policy lag); the importance ratio ``exp(logp_new - logp_behaviour)`` and its
clipping account for that.

``algo.precision`` (:mod:`zoo.plugins.algorithms.precision`): under ``bfloat16`` every forward
pass of the network (the values for GAE and each minibatch's ``evaluate``) runs under
``torch.autocast`` and its outputs are cast to float32 before GAE and the loss, so the loss,
advantages, returns and the clipping arithmetic are float32, as are the weights and Adam's moments.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from torch import nn

from zoo.core import distributed as zdist
from zoo.core.algorithm import Batch
from zoo.core.env import EnvSpec
from zoo.core.spaces import ACTION_MASK_KEY
from zoo.core.workers.receiver import ON_POLICY_MAX_LAG
from zoo.plugins.algorithms.normalization import RewardNorm, scaled_rewards
from zoo.plugins.algorithms.ppo.config import PPOConfig  # torch-free, loaded first by zoo train
from zoo.plugins.algorithms.ppo.networks import ActorCritic, has_images
from zoo.plugins.algorithms.precision import TrainingPrecision, explain
from zoo.plugins.algorithms.returns import decision_gae, gae, scatter_final_values
from zoo.plugins.algorithms.tensors import UpdateGuard, annealed_lr, explained_variance, to_tensor

REQUIRED_KEYS = ("obs", "action", "reward", "terminated", "truncated", "logp")
STATS = ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "grad_norm")


def normalize_advantages(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(adv - mean) / (std + eps)`` over one minibatch, finite for any size.

    ``std`` is the unbiased sample standard deviation (as in CleanRL). A minibatch of one
    sample has no defined spread (its unbiased std is nan), so it is only centred: the
    result is ``0``. An empty tensor is returned unchanged.

    With data-parallel trainers (``trainer.count`` > 1) the minibatch is the union of every
    rank's part: mean and std are pooled over all of them
    (:func:`zoo.core.distributed.global_moments`; ``std = sqrt((sum x^2 - n mean^2) / (n - 1))``),
    as one trainer would compute them on the concatenated minibatch.
    """
    if zdist.world_size() > 1:
        n, m1, m2 = zdist.global_moments(adv.reshape(-1, 1))
        if n <= 1:
            return adv - m1.to(adv.dtype) if n == 1 else adv
        std = ((m2 - m1 * m1).clamp(min=0) * n / (n - 1)).sqrt()
        return (adv - m1.to(adv.dtype)) / (std.to(adv.dtype) + eps)
    if adv.numel() <= 1:
        return adv - adv.mean() if adv.numel() == 1 else adv
    return (adv - adv.mean()) / (adv.std() + eps)


def minibatch_indices(n: int, minibatches: int, rng: np.random.Generator,
                      keep_empty: bool = False) -> list[np.ndarray]:
    """A random permutation of ``range(n)`` cut into ``minibatches`` near-equal parts.

    Sizes follow ``np.array_split``: the first ``n % minibatches`` parts hold one more
    sample (5 samples in 3 parts: 2, 2, 1). Empty parts (``n < minibatches``) are dropped,
    unless ``keep_empty`` (data-parallel trainers: every rank takes the same number of steps).
    """
    return [mb for mb in np.array_split(rng.permutation(n), minibatches) if len(mb) > 0 or keep_empty]


def _pooled_kl(approx_kl: torch.Tensor, size: int, data_parallel: bool) -> float:
    """The last minibatch's approximate KL, averaged over every rank's part (weighted by its
    size) with data-parallel trainers, so all ranks take the same early-stop decision."""
    if not data_parallel:
        return float(approx_kl)
    total, count = zdist.global_sum([float(approx_kl) * size, float(size)]).tolist()
    return total / count if count else 0.0


class PPO:
    """The ``ppo`` algorithm (see :mod:`zoo.core.algorithm` for the interface)."""

    Config = PPOConfig

    @classmethod
    def build_policy(cls, config: PPOConfig, spec: EnvSpec) -> ActorCritic:
        """The actor-critic network for ``spec`` (MLP or Nature CNN, or ``algo.network = "columns"``'s
        board network; see networks.py).

        Raises:
            TypeError: the action space is not Discrete, MultiDiscrete or Box.
            ValueError: an image observation is under a key other than ``"obs"``; ``"columns"`` for
                spaces it does not fit.
        """
        return ActorCritic(spec, hidden=config.hidden, norm_obs=config.norm_obs, norm_clip=config.norm_clip,
                           network=config.network, board_channels=config.board_channels,
                           board_layers=config.board_layers)

    @classmethod
    def explain_precision(cls, config: PPOConfig, spec: EnvSpec) -> str:
        """``algo.precision`` resolved on this machine, and why (``zoo train`` prints it):
        :func:`zoo.plugins.algorithms.precision.explain` on the network :meth:`build_policy` makes."""
        return explain(config.precision, config.device, cls.build_policy(config, spec))

    @classmethod
    def presets(cls, spec: EnvSpec) -> dict[str, Any]:
        """Experiment-config overrides for ``spec``.

        Image observations (``"obs"`` a uint8 ``[C, H, W]`` Box): CleanRL ``ppo_atari.py``'s
        version of the Atari settings of arXiv 1707.06347 Table 5 (8 envs, T = 128, 4 epochs
        x 4 minibatches, lr 2.5e-4, clip 0.1, entropy 0.01, value 0.5, gamma 0.99, lambda 0.95).
        Vector observations: rl-baselines3-zoo's tuned CartPole-v1 PPO (8 envs, T = 32,
        gamma 0.98, lambda 0.8, 20 epochs of one minibatch of 256 steps, lr 1e-3 decayed
        linearly to 0 over the run's env-step budget, clip 0.2, no entropy bonus). Each update takes
        ``trainer.batch_samples`` (8) samples of ``sample_length`` steps; 8 environments
        = 2 actors x 4 envs.
        Every layout: ``trainer.max_policy_lag`` = :data:`ON_POLICY_MAX_LAG` (8): the actors are held
        back by the sample stream (no samples are made that would be dropped), so the lag is
        bounded by the pipeline's depth (measured at most 4 with these layouts) and every sample
        is trained on, the older ones with PPO's clipped importance ratio (docs/flow.md).
        Box actions, vector observations: CleanRL ``ppo_continuous_action.py`` (2048 env steps
        per update, here 8 envs x T = 256; 10 epochs x 32 minibatches, lr 3e-4 decayed
        linearly to 0 over the run, gamma 0.99, lambda 0.95, clip 0.2, value clipping, no
        entropy bonus, value 0.5, gradient norm 0.5, running observation and reward normalisation).
        """
        from gymnasium import spaces

        layout = {"actors.count": 2, "actors.envs_per_actor": 4, "actors.ring_size": 2,
                  "trainer.batch_samples": 8, "trainer.max_policy_lag": ON_POLICY_MAX_LAG}
        image = has_images(spec)
        if image:
            algo = {"lr": 2.5e-4, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.1, "clip_vloss": True,
                    "vf_coef": 0.5, "ent_coef": 0.01, "max_grad_norm": 0.5, "epochs": 4, "minibatches": 4}
            return {"sample_length": 128, **layout, **{f"algo.{k}": v for k, v in algo.items()}}
        if isinstance(spec.action_space, spaces.Box):
            algo = {"lr": 3e-4, "anneal_lr": True, "anneal_lr_steps": 0, "gamma": 0.99, "gae_lambda": 0.95,
                    "clip_coef": 0.2, "clip_vloss": True, "vf_coef": 0.5, "ent_coef": 0.0, "max_grad_norm": 0.5,
                    "epochs": 10, "minibatches": 32, "norm_obs": True, "norm_reward": True}
            return {"sample_length": 256, **layout, **{f"algo.{k}": v for k, v in algo.items()}}
        algo = {"lr": 1e-3, "anneal_lr": True, "anneal_lr_steps": 0, "gamma": 0.98,
                "gae_lambda": 0.8, "clip_coef": 0.2, "clip_vloss": False, "vf_coef": 0.5, "ent_coef": 0.0,
                "max_grad_norm": 0.5, "epochs": 20, "minibatches": 1}
        return {"sample_length": 32, **layout, **{f"algo.{k}": v for k, v in algo.items()}}

    def __init__(self, config: PPOConfig, spec: EnvSpec, seed: int) -> None:
        self.config, self.spec = config, spec
        self.device = torch.device(config.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = self.build_policy(config, spec).to(self.device)
        self.precision = TrainingPrecision(config.precision, self.device, self.policy)  # algo.precision resolved
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr, eps=config.adam_eps)
        self.rng = np.random.default_rng(seed)
        self.agent_steps = 0  # active steps trained on so far (drives lr annealing)
        self.progress = 0.0  # fraction of the run's env-step budget done; set by the trainer
        self.updates = 0
        self.reward_norm = RewardNorm(config.norm_clip).to(self.device) if config.norm_reward else None

    # -- helpers -------------------------------------------------------------------
    def current_lr(self) -> float:
        """The learning rate of the next update (:func:`~zoo.plugins.algorithms.tensors.annealed_lr`)."""
        c = self.config
        return annealed_lr(c.lr, c.anneal_lr, c.anneal_lr_steps, self.agent_steps, self.progress)

    def _obs(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {k: to_tensor(v, self.device) for k, v in obs.items()}

    def _forced(self, batch: Batch, obs: dict[str, torch.Tensor], final_index: torch.Tensor,
                like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``algo.skip_forced``: bool ``[T + 1, B]``, the rows whose action mask allows one action
        (one per component of a MultiDiscrete action), and bool ``[T, B]``, the truncated steps whose
        final observation is such a row.

        Raises:
            KeyError: the observations have no ``"zoo:action_mask"`` entry.
        """
        from gymnasium import spaces

        if ACTION_MASK_KEY not in obs:
            raise KeyError(f"algo.skip_forced=true needs action masks: the batch has no {ACTION_MASK_KEY!r} "
                           "observation entry")
        space = self.spec.action_space
        one = len(space.nvec) if isinstance(space, spaces.MultiDiscrete) else 1
        forced = obs[ACTION_MASK_KEY].reshape(*obs[ACTION_MASK_KEY].shape[:2], -1).sum(-1) <= one
        final_forced = torch.zeros_like(like, dtype=torch.bool)
        if final_index.shape[0] > 0:
            mask = to_tensor(batch["final_obs"][ACTION_MASK_KEY], self.device)
            flags = (mask.reshape(mask.shape[0], -1).sum(-1) <= one).to(like.dtype)
            final_forced = scatter_final_values(final_index, flags, like) > 0
        return forced, final_forced

    def _with_images(self, obs: dict[str, torch.Tensor], action: torch.Tensor, logp: torch.Tensor,
                     values: torch.Tensor, adv: torch.Tensor, returns: torch.Tensor) -> tuple[Any, ...]:
        """``algo.augment_symmetries``: the trained rows followed by their images under each of the
        env's symmetries (:mod:`zoo.core.symmetry`), in that order: observations and actions mapped,
        advantages and value targets the same, the images' log-probabilities and values the current
        network's (before any step of this update)."""
        parts = [(obs, action, logp, values)]
        for sym in self.spec.symmetries:
            o, a = sym.observation(obs), sym.action(action)
            with torch.no_grad():
                lp, _, v = self.precision.forward(self.policy.evaluate, o, a)
            parts.append((o, a, lp.float(), v.float()))
        k = len(parts)
        return ({key: torch.cat([p[0][key] for p in parts]) for key in obs}, torch.cat([p[1] for p in parts]),
                torch.cat([p[2] for p in parts]), torch.cat([p[3] for p in parts]), adv.repeat(k), returns.repeat(k))

    def _targets(self, batch: Batch, obs: dict[str, torch.Tensor]
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Values ``[T, B]`` (the current network's, float32 whatever ``algo.precision``), advantages
        and value targets (GAE, float32) under no_grad, and the rows that enter the losses (bool
        ``[T, B]``: the active rows; with ``algo.skip_forced`` the valued decisions,
        :func:`~zoo.plugins.algorithms.returns.decision_gae`)."""
        c, dev, value = self.config, self.device, self.precision.forward
        reward = to_tensor(batch["reward"], dev, torch.float32)
        T, B = reward.shape
        active = to_tensor(batch["active"], dev, torch.bool) if "active" in batch else None
        reward = scaled_rewards(self.reward_norm, batch, reward, active)
        with torch.no_grad():
            # one network for every value (update docstring): the rows' recorded "value" is not used
            values = value(self.policy.value, {k: v[:T].reshape(T * B, *v.shape[2:]) for k, v in obs.items()})
            values = values.reshape(T, B)
            bootstrap = value(self.policy.value, {k: v[T] for k, v in obs.items()})
            final_index = to_tensor(batch.get("final_index", np.zeros((0, 2), np.int64)), dev, torch.int64)
            if final_index.shape[0] > 0:
                final_values = value(self.policy.value, self._obs(batch["final_obs"]))
            else:
                final_values = torch.zeros(0, device=dev)
            args = (reward, torch.cat([values, bootstrap[None]]), to_tensor(batch["terminated"], dev, torch.bool),
                    to_tensor(batch["truncated"], dev, torch.bool))
            kwargs: dict[str, Any] = {"gamma": c.gamma, "gae_lambda": c.gae_lambda, "final_index": final_index,
                      "final_values": final_values, "active": active}
            if c.skip_forced:
                forced, final_forced = self._forced(batch, obs, final_index, values)
                adv, ret, trained = decision_gae(*args, forced, final_passive=final_forced, **kwargs)
            else:
                adv, ret = gae(*args, **kwargs)
                trained = torch.ones(T, B, dtype=torch.bool, device=dev) if active is None else active
        return values, adv, ret, trained

    # -- the update ----------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        """One PPO update on ``batch`` (layout in :mod:`zoo.core.algorithm`).

        **Values: one network for all.** GAE's values of the rows ``0..T-1``, of the bootstrap
        row ``obs[T]`` and of ``final_obs`` (truncated steps) are all computed by the current
        network at the start of the update; the behaviour policy's recorded ``"value"`` is not
        used. A sample may be up to ``trainer.max_policy_lag`` versions old, and the recorded
        values cannot cover the bootstrap (``obs[T]`` is acted on, by a later version, only in
        the next sample; ``final_obs`` never is), so mixing them with the current network's
        would mix two critics in one TD error. Recomputing values (and so advantages) with the
        current network is what Andrychowicz et al., "What Matters in On-Policy Reinforcement
        Learning?", ICLR 2021 (arXiv 2006.05990), recommend in their study of the training
        setup (recompute the advantages, here once per update); without lag the current network
        is the behaviour network, as in CleanRL's ``ppo.py``. The value clipping and
        ``explained_variance`` use these values too (the prediction before this update). Only
        active steps enter the losses and statistics; with ``algo.skip_forced`` only the
        decisions (:func:`~zoo.plugins.algorithms.returns.decision_gae`: not the forced moves,
        nor a decision whose bootstrap would be the value of a forced move's observation).

        Returns:
            Means over the minibatch steps taken on this trainer's data (empty parts of
            data-parallel trainers not counted) of ``pg_loss``, ``v_loss``, ``entropy`` (nats),
            ``approx_kl`` (the ``(r - 1) - log r`` estimator), ``clipfrac`` (fraction of
            samples with ``|r - 1| > clip_coef``) and ``grad_norm`` (before clipping);
            ``explained_variance`` of the values before the update (nan if the targets are
            constant); ``lr``; ``agent_steps`` (active steps in this batch). All zeros
            except ``lr`` when the batch has no active step.

        Raises:
            KeyError: a required batch key (obs, action, reward, terminated, truncated, logp) is missing.
            ValueError: shapes disagree (from :func:`zoo.plugins.algorithms.returns.gae`).
            NonFiniteUpdate: a minibatch's loss or gradient norm, or the final weights, were not
                finite: no step was taken with them and the weights, optimiser state and
                minibatch RNG are back to what they were before this update
                (:class:`~zoo.plugins.algorithms.tensors.UpdateGuard`).
        """
        missing = [k for k in REQUIRED_KEYS if k not in batch]
        if missing:
            raise KeyError(f"PPO batch is missing {', '.join(map(repr, missing))}; the policy's act() extras "
                           "'logp' and 'value' must be stored in every sample (see zoo.core.algorithm)")
        c, dev = self.config, self.device
        obs = self._obs(batch["obs"])
        values, adv, ret, trained = self._targets(batch, obs)
        T, B = values.shape
        idx = trained.reshape(-1).nonzero().squeeze(-1)
        n = int(idx.numel())
        n_all = zdist.global_count(n)  # active steps of every trainer (n when trainer.count = 1)
        data_parallel = zdist.world_size() > 1

        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = {k: 0.0 for k in STATS} | {"lr": lr, "agent_steps": float(n_all)}
        if n_all == 0:
            return stats

        guard = UpdateGuard(self.policy, self.optimizer, self.rng)
        action = to_tensor(batch["action"], dev)
        b_obs = {k: v[:T].reshape(T * B, *v.shape[2:])[idx] for k, v in obs.items()}
        b_action = action.reshape(T * B, *action.shape[2:])[idx]
        b_logp = to_tensor(batch["logp"], dev, torch.float32).reshape(-1)[idx]
        b_values, b_adv, b_returns = values.reshape(-1)[idx], adv.reshape(-1)[idx], ret.reshape(-1)[idx]
        stats_obs, n_env = b_obs, n  # the observation statistics and explained variance: the env's rows only
        if c.augment_symmetries:
            b_obs, b_action, b_logp, b_values, b_adv, b_returns = self._with_images(
                b_obs, b_action, b_logp, b_values, b_adv, b_returns)
            n = int(b_action.shape[0])

        sums = {k: 0.0 for k in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")}
        steps = taken = 0  # every optimiser step; the ones on this rank's data (the statistics' count)
        params = list(self.policy.parameters())
        max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
        for _ in range(c.epochs):
            # data-parallel trainers keep empty parts: every rank takes epochs x minibatches steps
            for mb_np in minibatch_indices(n, c.minibatches, self.rng, keep_empty=data_parallel):
                if len(mb_np) == 0:  # data parallel: no step of this rank here; the others' gradients count
                    if c.norm_adv:
                        normalize_advantages(b_adv[:0])  # the pooled moments need every rank
                    self.optimizer.zero_grad()
                    zdist.reduce_gradients(params, weight=0)
                    guard.check(steps, grad_norm=nn.utils.clip_grad_norm_(params, max_norm))
                    self.optimizer.step()
                    approx_kl = torch.zeros(())
                    steps += 1
                    continue
                mb = torch.as_tensor(mb_np, device=dev)
                # algo.precision: the forward pass (and so its backward) under autocast, outputs float32
                newlogp, entropy, newvalue = self.precision.forward(
                    self.policy.evaluate, {k: v[mb] for k, v in b_obs.items()}, b_action[mb])
                logratio = newlogp - b_logp[mb]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfrac = ((ratio - 1.0).abs() > c.clip_coef).float().mean()

                mb_adv = normalize_advantages(b_adv[mb]) if c.norm_adv else b_adv[mb]

                # Policy loss: clipped surrogate, arXiv 1707.06347 eq. 7 (negated for descent).
                pg_loss1 = -mb_adv * ratio
                pg_loss2 = -mb_adv * torch.clamp(ratio, 1 - c.clip_coef, 1 + c.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss: squared error to the GAE target, optionally clipped (CleanRL).
                v_loss_unclipped = (newvalue - b_returns[mb]) ** 2
                if c.clip_vloss:
                    v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -c.clip_coef, c.clip_coef)
                    v_loss_clipped = (v_clipped - b_returns[mb]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * v_loss_unclipped.mean()

                # Entropy bonus S, arXiv 1707.06347 eq. 9.
                entropy_loss = entropy.mean()
                loss = pg_loss - c.ent_coef * entropy_loss + c.vf_coef * v_loss

                self.optimizer.zero_grad()
                loss.backward()
                # mean losses: weight by the minibatch size
                zdist.reduce_gradients(params, weight=len(mb_np), loss=loss)
                grad_norm = nn.utils.clip_grad_norm_(params, max_norm)
                guard.check(steps, loss=loss, grad_norm=grad_norm)
                self.optimizer.step()

                for k, v in (("pg_loss", pg_loss), ("v_loss", v_loss), ("entropy", entropy_loss),
                             ("approx_kl", approx_kl), ("clipfrac", clipfrac), ("grad_norm", grad_norm)):
                    sums[k] += float(v.detach())
                steps += 1
                taken += 1
            if c.target_kl > 0 and _pooled_kl(approx_kl, len(mb_np), data_parallel) > c.target_kl:
                break
        guard.check_weights(steps)

        self.agent_steps += n_all
        self.updates += 1
        if c.norm_obs:  # after the update, which used the behaviour policy's statistics
            self.policy.update_obs_stats(stats_obs)
        stats.update({k: v / max(1, taken) for k, v in sums.items()})  # empty parts add nothing
        stats["explained_variance"] = explained_variance(b_values[:n_env], b_returns[:n_env])
        return stats

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Policy (with the observation statistics) and optimiser state, counters, minibatch RNG
        state, the config and the reward-normalisation statistics (None when off)."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "agent_steps": self.agent_steps,
            "updates": self.updates,
            "rng": self.rng.bit_generator.state,
            "config": asdict(self.config),
            "reward_norm": None if self.reward_norm is None else self.reward_norm.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the stored config is informational)."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.agent_steps = int(state.get("agent_steps", 0))
        self.updates = int(state.get("updates", 0))
        if self.reward_norm is not None and state.get("reward_norm") is not None:
            self.reward_norm.load_state_dict(state["reward_norm"])
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
