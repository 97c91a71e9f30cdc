"""Soft Actor-Critic with the replay inside the trainer.

Haarnoja, Zhou, Hartikainen, Tucker, Ha, Tan, Kumar, Zhu, Gupta, Abbeel and Levine, "Soft
Actor-Critic Algorithms and Applications", arXiv 1812.05905 (Algorithm 1): a tanh-squashed
Gaussian policy (:mod:`~zoo.plugins.algorithms.sac.networks`, eq. 26's log-probability
correction), two Q networks with Polyak-averaged targets, and a learned temperature. The
loss terms follow CleanRL's ``sac_continuous_action.py``. Per gradient step, on ``m``
transitions sampled from the replay (uniformly by default):

- **Q** (eq. 5 with the clipped double-Q of section 5): ``y = ret + disc * (min_k
  Q'_k(s', a') - alpha log pi(a' | s'))`` with ``a' ~ pi(s')``, no gradient; loss ``mean_i w_i
  [(Q_1(s, a) - y)^2 + (Q_2(s, a) - y)^2]`` (``w_i = 1`` without prioritised replay);
- **policy** (eq. 7, reparameterised): ``mean_i [alpha log pi(a~ | s) - min_k Q_k(s, a~)]``,
  ``a~ ~ pi(s)``;
- **temperature** (eq. 18): ``mean_i [-alpha (log pi(a~ | s) + H)]`` on ``alpha = exp(log
  alpha)``, ``log pi`` without gradient, target entropy ``H = -|A|``: alpha grows when the
  policy's entropy ``-log pi`` is below ``H``, shrinks when above;
- **targets**: ``Q'_k <- tau Q_k + (1 - tau) Q'_k`` after each step (:func:`polyak_update`).

``ret`` and ``disc`` are the 1-step (``algo.n_step`` = 1) or n-step targets of
:func:`~zoo.plugins.algorithms.nstep.nstep_targets`: ``disc = 0`` after a terminated step; a
truncated step bootstraps from its ``final_obs`` (docs/replay.md). The replay, the rate limiter
and the batch-to-transitions step are :mod:`zoo.plugins.algorithms.replay` (with
:mod:`~zoo.plugins.algorithms.rate_limiter` and :mod:`~zoo.plugins.algorithms.transitions`), as for Ape-X DQN:
``update(batch)`` takes the gradient steps the rate limiter grants, then inserts the batch.
With ``trainer.count`` = K data-parallel trainers each rank keeps a replay shard fed by its own
actors, all take the steps of one global grant, and the Q, policy and temperature gradients are
all-reduced in every step (docs/replay.md, "Data-parallel trainers").

**Exploration.** The policy workers sample from the policy. Until the replay holds
``learning_starts`` transitions they act uniformly at random within the bounds instead
(CleanRL's warm-up): the policy's ``warmup`` buffer is 1 from the start, travels with the
weights, and the trainer clears it at the update whose insert reaches ``learning_starts``;
actors keep acting uniformly until those weights reach their policy worker (a lag of about one
update). ``zoo eval`` / ``deterministic`` acts with ``tanh(mean)``.

**All-or-nothing updates.** When a loss, a gradient norm or the final weights are not finite,
``update`` raises :class:`~zoo.core.algorithm.NonFiniteUpdate` with every network, target,
the temperature, the three optimisers, both RNGs, the counters, the rate limiter's credit and
the priorities it changed put back, and nothing inserted.
"""
from __future__ import annotations

import copy
import math
import sys
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from torch import nn

from zoo.core import distributed as zdist
from zoo.core.algorithm import Batch, NonFiniteUpdate
from zoo.core.env import EnvSpec
from zoo.core.options import ConfigError
from zoo.plugins.algorithms.encoders import is_image_space
from zoo.plugins.algorithms.replay import (
    Replay,
    batch_transitions,
    global_rate_limited_steps,
    load_rank_state,
    make_replay,
    rank_rng,
    rank_state,
    restore_replay,
)
from zoo.plugins.algorithms.sac.config import (  # noqa: F401 (re-exported) torch-free, loaded first by zoo train
    SACConfig,
    available_memory,
    obs_capacity_for,
)
from zoo.plugins.algorithms.sac.networks import SquashedGaussianPolicy, TwinQ
from zoo.plugins.algorithms.tensors import UpdateGuard, adam, to_tensor

REQUIRED_KEYS = ("obs", "action", "reward", "terminated", "truncated")
REPLAY_MAX_POLICY_LAG = 1 << 30
"""``trainer.max_policy_lag`` of the presets: replayed data is off-policy anyway."""


def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``theta' <- tau theta + (1 - tau) theta'`` for every parameter, in place, without a graph
    (buffers are copied as they are)."""
    with torch.no_grad():
        for t, p in zip(target.parameters(), online.parameters(), strict=True):
            t.mul_(1.0 - tau).add_(p, alpha=tau)
        for tb, b in zip(target.buffers(), online.buffers(), strict=True):
            tb.copy_(b)


def temperature_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """arXiv 1812.05905 eq. 18: ``mean(-exp(log_alpha) (logp + target_entropy))``, ``logp`` (float
    ``[N]``) detached. Its gradient in ``log_alpha`` is negative (alpha grows under gradient
    descent) when the policy's entropy estimate ``-mean(logp)`` is below ``target_entropy``."""
    return (-log_alpha.exp() * (logp.detach() + target_entropy)).mean()


class _Modules(nn.Module):
    """Everything with weights, one state dict for the update guard."""

    def __init__(self, policy: SquashedGaussianPolicy, q: TwinQ, init_alpha: float) -> None:
        super().__init__()
        self.policy, self.q = policy, q
        self.q_target = copy.deepcopy(q)
        self.q_target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)))


class _Guard(UpdateGuard):
    """:class:`UpdateGuard` over several optimisers and a torch generator."""

    def __init__(self, module: nn.Module, optimizers: list[torch.optim.Optimizer], rng: np.random.Generator,
                 generator: torch.Generator) -> None:
        super().__init__(module, optimizers[0], rng)
        self.others = [(o, copy.deepcopy(o.state_dict())) for o in optimizers[1:]]
        self.generator, self.generator_state = generator, generator.get_state()

    def restore(self) -> None:
        super().restore()
        for opt, state in self.others:
            opt.load_state_dict(state)
        self.generator.set_state(self.generator_state)


class SAC:
    """The ``sac`` algorithm (interface: :mod:`zoo.core.algorithm`)."""

    rate_limited = True
    """A samples-per-insert rate limiter sets its gradient steps (:mod:`zoo.core.algorithm`): the trainer adds
    its waits to the update rows and its ``gradient_steps``, ``replayed``, ``inserted`` to status."""

    Config = SACConfig

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        """Raises ``TypeError`` unless ``spec`` has a Box action space with finite
        bounds. Called by :meth:`presets` (before any process starts), :meth:`build_policy` and
        ``__init__``."""
        from gymnasium import spaces

        space = spec.action_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"sac needs a Box action space; env {spec.env_id!r} has {space} "
                            "(use ppo or dqn for discrete actions)")
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise TypeError(f"sac squashes actions into the action space's bounds; env {spec.env_id!r} has "
                            f"unbounded actions {space} (use ppo, or wrap the env with finite bounds)")

    @classmethod
    def build_policy(cls, config: SACConfig, spec: EnvSpec) -> SquashedGaussianPolicy:
        """The policy for ``spec`` (networks.py).

        Raises:
            TypeError: see :meth:`check_spec`.
        """
        cls.check_spec(spec)
        return SquashedGaussianPolicy(spec, hidden=config.hidden, log_std_min=config.log_std_min,
                                      log_std_max=config.log_std_max, warmup=config.uniform_warmup)

    @classmethod
    def presets(cls, spec: EnvSpec) -> dict[str, Any]:
        """Experiment-config overrides for ``spec``.

        Raises:
            ConfigError: the action space is not a bounded Box.

        Vector observations (MuJoCo-like; Pendulum): CleanRL's hyperparameters (the config
        defaults: batch 256, one gradient step per env step, 1M replay, learning after 5,000)
        on 1 actor x 4 envs, T = 4, 4 columns per update: 16 transitions and 16 gradient steps
        an update. The actors, held back by the sample stream, act on a policy about 5 updates
        old (the pipeline's depth in messages, :mod:`zoo.core.workers.receiver`): 80 gradient
        steps with T = 4, where T = 16 left them 320 behind at the same throughput (HalfCheetah-v5,
        2 cores: 65 env steps/s with T = 4, 68 with T = 16; T = 1 costs 54).
        Image observations: the same with a 100,000-transition replay.
        ``trainer.max_policy_lag`` = 2^30 and actors held back (never dropped) as for apex-dqn.
        """
        try:
            cls.check_spec(spec)
        except TypeError as exc:  # refused while resolving the config: before any process starts
            raise ConfigError(str(exc), field="env") from None
        out: dict[str, Any] = {"actors.count": 1, "actors.envs_per_actor": 4, "actors.ring_size": 1,
                               "actors.drop_when_full": False, "sample_length": 4, "trainer.batch_samples": 4,
                               "trainer.max_policy_lag": REPLAY_MAX_POLICY_LAG}
        if any(is_image_space(s) for k, s in spec.observation_space.items() if not k.startswith("zoo:")):
            out["algo.capacity"] = 100_000
        return out

    def __init__(self, config: SACConfig, spec: EnvSpec, seed: int) -> None:
        self.check_spec(spec)
        self.config, self.spec, self.seed = config, spec, seed
        self.device = torch.device(config.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            policy = self.build_policy(config, spec)
            q = TwinQ(spec, hidden=config.hidden)
            self.nets = _Modules(policy, q, config.init_alpha if config.autotune else config.alpha).to(self.device)
        self.policy: SquashedGaussianPolicy = self.nets.policy
        self.target_entropy = -float(self.policy.dims)
        self.q_optimizer = adam(self.nets.q.parameters(), lr=config.q_lr)
        self.policy_optimizer = adam(self.policy.parameters(), lr=config.policy_lr)
        self.alpha_optimizer = adam([self.nets.log_alpha], lr=config.alpha_lr)
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.progress = 0.0  # fraction of the run's env-step budget done; set by the trainer
        self.replay: Replay | None = None  # built at the first batch (its sample length sizes the rows)
        self.updates = 0
        self.gradient_steps = 0
        self.policy_changed = True  # whether the last update changed the policy's state (core.algorithm)
        self.inserted = 0
        self.replayed = 0
        self.credit = 0.0

    # -- helpers ---------------------------------------------------------------------
    @property
    def replicated(self) -> nn.Module:
        """What data-parallel trainers copy from rank 0 when they join: the policy (with its
        ``warmup`` flag), both Q networks, their targets and log alpha."""
        return self.nets

    def _seed_rank(self, rank: int) -> None:
        """Data-parallel rank ``rank`` > 0 samples its shard and its actions from streams of its own."""
        self.rng = rank_rng(self.seed, rank)
        self.generator.manual_seed(int(np.random.SeedSequence([self.seed, rank]).generate_state(1)[0]))

    @property
    def alpha(self) -> float:
        return float(self.nets.log_alpha.detach().exp())

    @property
    def beta(self) -> float:
        b0 = self.config.priority_beta
        return b0 + (1.0 - b0) * min(1.0, max(0.0, float(self.progress)))

    def _tensors(self, obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: to_tensor(v, self.device) for k, v in obs.items()}

    def _make_replay(self, batch: Batch) -> Replay:
        c = self.config
        obs = {k: np.asarray(v) for k, v in batch["obs"].items()}
        done = np.asarray(batch["terminated"], bool) | np.asarray(batch["truncated"], bool)
        replay, need = make_replay(c.capacity, done.shape[0], obs, 4 * self.policy.dims, frame_stack=c.frame_stack,
                                   avail=available_memory(), done=done)
        print(f"zoo: sac replay of {c.capacity:,} transitions: {need.describe()}", file=sys.stderr, flush=True)
        return replay

    def targets(self, boot: dict[str, torch.Tensor], ret: torch.Tensor, disc: torch.Tensor) -> torch.Tensor:
        """The soft Bellman targets ``y = ret + disc * (min_k Q'_k(s', a') - alpha log pi(a' | s'))``,
        ``a' ~ pi(s')`` from the trainer's generator, float32 ``[m]``, without a graph. ``disc`` is 0
        after termination (then ``y = ret``, whatever ``s'``)."""
        with torch.no_grad():
            a2, logp2 = self.policy.sample(boot, self.generator)
            q1, q2 = self.nets.q_target(boot, a2)
            soft_v = torch.minimum(q1, q2) - self.nets.log_alpha.exp() * logp2
            return ret + disc * torch.where(disc > 0, soft_v, torch.zeros_like(soft_v))

    # -- the update ------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        """Gradient steps on replayed transitions (as many as the rate limiter grants), then the
        insertion of ``batch``'s transitions (layout in :mod:`zoo.core.algorithm`).

        Returns:
            means over the steps of ``q_loss``, ``policy_loss``, ``alpha_loss``, ``q_mean`` (mean
            ``Q_1(s, a)``), ``entropy`` (``-log pi`` of fresh samples), ``q_grad_norm``,
            ``policy_grad_norm``; and ``alpha`` (after the update), ``gradient_steps``,
            ``replay_size``, ``replay_fill``, ``replay_ratio`` (replayed / inserted over the run),
            ``warmup`` (1 while the actors act uniformly), ``agent_steps`` (inserted now). Zeros
            for the step statistics when no step was taken. Data-parallel trainers: the step
            statistics and ``replay_size`` / ``replay_fill`` are this rank's (its shard),
            ``agent_steps`` and ``replay_ratio`` count every rank's transitions, and ``warmup``
            ends when all shards together hold ``learning_starts``.

        Raises:
            KeyError: a required batch key is missing.
            NonFiniteUpdate: a loss, a gradient norm or the final weights were not finite: every
                piece of state is as before and nothing was inserted.
        """
        missing = [k for k in REQUIRED_KEYS if k not in batch]
        if missing:
            raise KeyError(f"sac batch is missing {', '.join(map(repr, missing))} (see zoo.core.algorithm)")
        c, dev = self.config, self.device
        reward = np.asarray(batch["reward"], np.float32)
        T, B = reward.shape
        if self.replay is None:
            self.replay = self._make_replay(batch)
            if zdist.rank():
                self._seed_rank(zdist.rank())
        replay = self.replay
        active = np.asarray(batch["active"], bool) if "active" in batch else np.ones((T, B), bool)
        m_new = int(active.sum())

        saved = (self.credit, self.gradient_steps, self.replayed, replay.max_priority)
        guard = _Guard(self.nets, [self.q_optimizer, self.policy_optimizer, self.alpha_optimizer], self.rng,
                       self.generator)
        journal: list[tuple[np.ndarray, np.ndarray]] = []
        grant = global_rate_limited_steps(self.credit, len(replay), m_new, learning_starts=c.learning_starts,
                                          samples_per_insert=c.samples_per_insert, batch_size=c.batch_size)
        steps, self.credit, world = grant.steps, grant.credit, zdist.world_size()
        names = ("q_loss", "policy_loss", "alpha_loss", "q_mean", "entropy", "q_grad_norm", "policy_grad_norm")
        sums = dict.fromkeys(names, 0.0)
        max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
        q_params, pi_params = list(self.nets.q.parameters()), list(self.policy.parameters())
        prioritised = c.priority_alpha > 0
        beta = self.beta if prioritised else 1.0
        try:
            for step in range(steps):
                s = replay.sample(c.batch_size, beta, self.rng)
                obs, boot = self._tensors(s["obs"]), self._tensors(s["boot_obs"])
                a = self.policy.from_env(to_tensor(s["action"], dev))
                y = self.targets(boot, to_tensor(s["ret"], dev), to_tensor(s["disc"], dev))
                q1, q2 = self.nets.q(obs, a)
                td1, td2 = q1 - y, q2 - y
                w = to_tensor(s["weight"], dev) if prioritised else torch.ones_like(y)
                q_loss = (w * (td1 * td1 + td2 * td2)).mean()
                self.q_optimizer.zero_grad()
                q_loss.backward()
                zdist.reduce_gradients(q_params, weight=c.batch_size, loss=q_loss)  # K > 1: mean over every shard's
                q_norm = nn.utils.clip_grad_norm_(q_params, max_norm)
                guard.check(step, q_loss=q_loss, q_grad_norm=q_norm)
                self.q_optimizer.step()

                a_pi, logp = self.policy.sample(obs, self.generator)
                self.nets.q.requires_grad_(False)  # the policy loss's gradient through Q, not into its weights
                try:
                    q1_pi, q2_pi = self.nets.q(obs, a_pi)
                finally:
                    self.nets.q.requires_grad_(True)
                alpha = self.nets.log_alpha.detach().exp()
                policy_loss = (alpha * logp - torch.minimum(q1_pi, q2_pi)).mean()
                self.policy_optimizer.zero_grad()
                policy_loss.backward()
                zdist.reduce_gradients(pi_params, weight=c.batch_size, loss=policy_loss)
                pi_norm = nn.utils.clip_grad_norm_(pi_params, max_norm)
                guard.check(step, policy_loss=policy_loss, policy_grad_norm=pi_norm)
                self.policy_optimizer.step()

                alpha_loss = temperature_loss(self.nets.log_alpha, logp, self.target_entropy)
                if c.autotune:
                    self.alpha_optimizer.zero_grad()
                    alpha_loss.backward()
                    zdist.reduce_gradients([self.nets.log_alpha], weight=c.batch_size, loss=alpha_loss)
                    alpha_grad = self.nets.log_alpha.grad
                    guard.check(step, alpha_loss=alpha_loss, alpha_grad=0.0 if alpha_grad is None else alpha_grad)
                    self.alpha_optimizer.step()
                polyak_update(self.nets.q_target, self.nets.q, c.tau)

                if prioritised:
                    td = 0.5 * (td1.detach().abs() + td2.detach().abs())
                    journal.append((s["index"], replay.tree.leaves(s["index"]).copy()))
                    pr = (td.cpu().numpy().astype(np.float64) + c.priority_eps) ** c.priority_alpha
                    replay.update_priorities(s["index"], pr)
                self.gradient_steps += 1
                self.replayed += world * c.batch_size
                for k, v in (("q_loss", q_loss), ("policy_loss", policy_loss), ("alpha_loss", alpha_loss),
                             ("q_mean", q1.mean()), ("entropy", -logp.mean()), ("q_grad_norm", q_norm),
                             ("policy_grad_norm", pi_norm)):
                    sums[k] += float(v.detach())
            guard.check_weights(steps)
            tr = batch_transitions(batch, gamma=c.gamma, n=c.n_step, who="sac")
            replay.insert(tr["obs"], tr["s_idx"], tr["boot_idx"], np.asarray(tr["action"], np.float32), tr["ret"],
                          tr["disc"], np.full(tr["s_idx"].shape[0], replay.max_priority), tr["prev_row"])
        except NonFiniteUpdate:
            for idx, old in reversed(journal):
                replay.tree.update(idx, old)
            self.credit, self.gradient_steps, self.replayed, replay.max_priority = saved
            raise
        self.inserted += grant.inserting
        self.updates += 1
        warm = bool(self.policy.warmup)
        if grant.replay_size + grant.inserting >= c.learning_starts:  # every rank's shards together
            self.policy.warmup.fill_(0.0)
        # the policy's state changed: a gradient step, or the warm-up's end (its actions are no longer uniform)
        self.policy_changed = steps > 0 or warm != bool(self.policy.warmup)
        stats = {k: v / max(1, steps) for k, v in sums.items()}
        stats.update({"alpha": self.alpha, "gradient_steps": float(steps), "replay_size": float(len(replay)),
                      "replay_fill": len(replay) / c.capacity, "replay_ratio": self.replayed / max(1, self.inserted),
                      "warmup": float(self.policy.warmup), "agent_steps": float(grant.inserting)})
        return stats

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The policy (with its ``warmup`` flag), the Q networks and their targets, log alpha, the
        three optimisers, both RNGs, the counters, the rate limiter's credit and the whole replay:
        an exact resume."""
        return {
            "policy": self.policy.state_dict(),
            "q": self.nets.q.state_dict(),
            "q_target": self.nets.q_target.state_dict(),
            "log_alpha": self.nets.log_alpha.detach().clone(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "policy_optimizer": self.policy_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "generator": self.generator.get_state(),
            "updates": self.updates, "gradient_steps": self.gradient_steps, "inserted": self.inserted,
            "replayed": self.replayed, "credit": self.credit,
            "replay": None if self.replay is None else self.replay.state_dict(),
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the stored config is informational).

        Raises:
            ValueError: the checkpoint's replay capacity differs from ``algo.capacity``.
        """
        self.policy.load_state_dict(state["policy"])
        self.nets.q.load_state_dict(state["q"])
        self.nets.q_target.load_state_dict(state["q_target"])
        with torch.no_grad():
            self.nets.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))
        self.q_optimizer.load_state_dict(state["q_optimizer"])
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.rng.bit_generator.state = state["rng"]
        self.generator.set_state(state["generator"])
        self.updates, self.gradient_steps = int(state["updates"]), int(state["gradient_steps"])
        self.inserted, self.replayed = int(state["inserted"]), int(state["replayed"])
        self.credit = float(state["credit"])
        self.replay = restore_replay(state.get("replay"), self.config.capacity, Replay, unit="transitions")

    def rank_state_dict(self) -> dict[str, Any]:
        """What only this data-parallel rank holds (the rest of :meth:`state_dict` is the same on every
        rank): its replay shard, its sampling RNG and its torch generator
        (:func:`~zoo.plugins.algorithms.replay_ranks.rank_state`).
        Ranks 1..K-1 write it beside ``latest.pt``."""
        return rank_state(self.rng, self.replay, self.generator)

    def load_rank_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore what :meth:`rank_state_dict` returned; None: an empty shard (filled from this
        rank's next batch, its RNGs drawn afresh then).

        Raises:
            ValueError: the shard's capacity differs from ``algo.capacity``.
        """
        self.replay = restore_replay(load_rank_state(state, self.rng, self.generator), self.config.capacity, Replay,
                                     unit="transitions", what="replay shard")
