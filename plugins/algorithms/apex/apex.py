"""Ape-X DQN with the replay inside the trainer.

Horgan, Quan, Budden, Barth-Maron, Hessel, van Hasselt and Silver, "Distributed Prioritized
Experience Replay", ICLR 2018 (arXiv 1803.00933): many actors with per-actor epsilons feed a
prioritised replay; the learner trains a double (van Hasselt et al. 2016) dueling (Wang et al.
2016) Q-network on n-step targets with a target network, and writes the |TD| errors back as
priorities. Here the replay lives in the algorithm's state, one per trainer (docs/replay.md;
with ``trainer.count`` = K data-parallel trainers each rank keeps a shard fed by its own actors,
and all take the steps of one global grant, their gradients all-reduced: "Data-parallel trainers"):

- ``update(batch)`` first takes ``k`` gradient steps on transitions replayed from what earlier
  batches inserted, then inserts this batch's transitions (n-step targets,
  :mod:`~zoo.plugins.algorithms.nstep`; observations stored once per step,
  :mod:`~zoo.plugins.algorithms.replay`, shared with SAC). ``k`` is set by the rate limiter: each inserted
  transition adds ``samples_per_insert`` to a credit (once the replay holds
  ``learning_starts``), each gradient step spends ``batch_size``; the remainder carries over,
  so replayed / inserted stays at ``samples_per_insert`` whatever the number of actors.
  When the learner is slower, the trainer's receive path holds the actors back through the
  sample stream (docs/flow.md): nothing is dropped (the presets set ``trainer.max_policy_lag``
  to :data:`REPLAY_MAX_POLICY_LAG`: Q-learning trains on any behaviour policy's data).
- Loss per sampled transition: ``w_i * huber(y_i - Q(s_i, a_i))`` (``huber_delta``; 0: the
  squared error ``td^2 / 2``) with ``y = ret + disc * Q_target(s', argmax_a Q(s', a))`` (double
  Q; ``max_a Q_target`` without ``double_q``), mean over the batch; Adam; global gradient-norm
  clipping; the target network copies the online one every ``target_period`` gradient steps.
- New transitions get priorities ``(|TD| + eps) ** alpha`` computed at insertion with the
  current networks (``initial_priority=td``; Ape-X computes them on the actors, docs/replay.md
  says why not here), or the largest priority so far (``max``).
- ``beta`` is annealed linearly from ``priority_beta`` to 1 over the run by ``progress``.
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
from zoo.plugins.algorithms.apex.config import (  # noqa: F401 (re-exported) torch-free, loaded first by zoo train
    ApeXConfig,
    available_memory,
    obs_capacity_for,
)
from zoo.plugins.algorithms.apex.networks import QNetwork
from zoo.plugins.algorithms.encoders import is_image_space
from zoo.plugins.algorithms.replay import (
    Replay,
    batch_transitions,
    check_q_learning_spec,
    global_rate_limited_steps,
    load_rank_state,
    make_replay,
    rank_rng,
    rank_state,
    restore_replay,
)
from zoo.plugins.algorithms.tensors import UpdateGuard, adam, huber, to_tensor

REQUIRED_KEYS = ("obs", "action", "reward", "terminated", "truncated")
REPLAY_MAX_POLICY_LAG = 1 << 30
"""``trainer.max_policy_lag`` of the replay presets: no sample is ever too old for Q-learning."""


class ApeX:
    """The ``apex-dqn`` algorithm (alias ``dqn``; interface: :mod:`zoo.core.algorithm`)."""

    rate_limited = True
    """A samples-per-insert rate limiter sets its gradient steps (:mod:`zoo.core.algorithm`): the trainer adds
    its waits to the update rows and its ``gradient_steps``, ``replayed``, ``inserted`` to status."""

    Config = ApeXConfig

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        """Raises ``TypeError`` unless ``spec`` has a Discrete action space and no action mask. Called by
        :meth:`presets` (so ``zoo train`` refuses the env before any process starts),
        :meth:`build_policy` and ``__init__``."""
        check_q_learning_spec(spec, "apex-dqn")

    @classmethod
    def build_policy(cls, config: ApeXConfig, spec: EnvSpec) -> QNetwork:
        """The Q-network for ``spec`` (networks.py).

        Raises:
            TypeError: the action space is not Discrete, or the env masks actions.
        """
        cls.check_spec(spec)
        return QNetwork(spec, hidden=config.hidden, dueling=config.dueling, epsilon_base=config.epsilon_base,
                        epsilon_alpha=config.epsilon_alpha, eval_epsilon=config.eval_epsilon,
                        exploration=config.exploration, start_epsilon=config.start_epsilon,
                        end_epsilon=config.end_epsilon, exploration_fraction=config.exploration_fraction)

    @classmethod
    def presets(cls, spec: EnvSpec) -> dict[str, Any]:
        """Experiment-config overrides for ``spec``.

        Raises:
            ConfigError: the env's action space is not Discrete, or it masks actions.

        Every layout: ``trainer.max_policy_lag`` = :data:`REPLAY_MAX_POLICY_LAG` (never drop:
        replay data is off-policy anyway) and actors held back by the sample stream
        (``actors.drop_when_full`` false).
        Image observations (Atari): 2 actors x 8 envs (16 epsilons), T = 32, 8 columns per
        update (256 transitions); replay of 100,000 transitions (716 MiB: 4x84x84 uint8
        stacks stored once per frame, docs/replay.md), learning after 20,000; batch 64, 8
        replayed per inserted transition (DQN's 32 every 4 steps), lr 1e-4, Adam eps 1.5e-4,
        3-step, target every 1,000 gradient steps, gradient norm 10; a checkpoint every 1,000 updates (and every
        ``trainer.checkpoint_interval_s``), as each one holds the replay (up to 716 MiB).
        Vector observations (CartPole): 2 actors x 4 envs, T = 16, 8 columns per update (128
        transitions); replay of 50,000, learning after 1,000; batch 64, 16 replayed per
        inserted transition (32 gradient steps per update), lr 1e-3, 3-step, target every 100
        gradient steps (400 env steps), gradient norm 10, two ReLU layers of 128, and the
        squared TD error (``huber_delta`` 0: a delta of 1 caps each transition's gradient where
        CartPole's TD errors are tens, and the values fit far more slowly). Measured on
        CartPole-v1 (2 idle cores, 100k env steps, seed 1, benchmarks/RESULTS.md): the mean
        return of the last 100 episodes of all envs (the epsilon-0.4 env included) 396 at 100k
        env steps, against 224 with a target every 500 gradient steps; with ``algo.exploration
        = linear`` 477-500 at 100k (seeds 1-3). One trainer thread (``trainer.threads`` 1): a rate-limited
        learner gets every core otherwise (core/workers/threads.py), and this network's products of
        64-128 rows are too small to gain from a second thread while its spinning takes the actors'
        core: 1,487 env steps/s end to end with 1 thread against 978 with 2 (2 idle cores, 100k
        env steps, seed 1, benchmarks/RESULTS.md).
        """
        try:
            cls.check_spec(spec)
        except TypeError as exc:  # refused while resolving the config: before any process starts
            raise ConfigError(str(exc), field="env") from None
        layout = {"actors.count": 2, "actors.ring_size": 2, "actors.drop_when_full": False,
                  "trainer.max_policy_lag": REPLAY_MAX_POLICY_LAG, "trainer.batch_samples": 8}
        if any(is_image_space(s) for k, s in spec.observation_space.items() if not k.startswith("zoo:")):
            algo: dict[str, Any] = {
                "lr": 1e-4, "adam_eps": 1.5e-4, "gamma": 0.99, "n_step": 3, "batch_size": 64,
                "samples_per_insert": 8.0, "capacity": 100_000, "learning_starts": 20_000, "target_period": 1_000,
                "max_grad_norm": 10.0}
            return {"sample_length": 32, "actors.envs_per_actor": 8, "trainer.checkpoint_interval": 1_000, **layout,
                    **{f"algo.{k}": v for k, v in algo.items()}}
        algo = {"lr": 1e-3, "adam_eps": 1e-8, "gamma": 0.99, "n_step": 3, "batch_size": 64,
                "samples_per_insert": 16.0, "capacity": 50_000, "learning_starts": 1_000, "target_period": 100,
                "max_grad_norm": 10.0, "huber_delta": 0.0, "hidden": 128}
        return {"sample_length": 16, "actors.envs_per_actor": 4, "trainer.threads": 1, **layout,
                **{f"algo.{k}": v for k, v in algo.items()}}

    def __init__(self, config: ApeXConfig, spec: EnvSpec, seed: int) -> None:
        self.check_spec(spec)
        self.config, self.spec, self.seed = config, spec, seed
        self.device = torch.device(config.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = self.build_policy(config, spec).to(self.device)
        self.target = copy.deepcopy(self.policy)
        self.target.requires_grad_(False)
        self.optimizer = adam(self.policy.parameters(), lr=config.lr, eps=config.adam_eps)
        self.rng = np.random.default_rng(seed)
        self.progress = 0.0  # fraction of the run's env-step budget done; set by the trainer
        self.replay: Replay | None = None  # built at the first batch (its sample length sizes the rows)
        self.updates = 0
        self.gradient_steps = 0
        self.policy_changed = True  # whether the last update changed the policy's state (core.algorithm)
        self.inserted = 0  # transitions inserted
        self.replayed = 0  # transitions sampled for gradient steps
        self.credit = 0.0  # the rate limiter's replay credit, in transitions

    # -- helpers ---------------------------------------------------------------------
    @property
    def replicated(self) -> nn.Module:
        """What data-parallel trainers copy from rank 0 when they join: the online and the target
        network (every rank then starts from identical weights, fresh or resumed)."""
        return nn.ModuleDict({"policy": self.policy, "target": self.target})

    @property
    def beta(self) -> float:
        """The importance-sampling exponent of the next update: ``priority_beta`` -> 1 over the run."""
        b0 = self.config.priority_beta
        return b0 + (1.0 - b0) * min(1.0, max(0.0, float(self.progress)))

    def _tensors(self, obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: to_tensor(v, self.device) for k, v in obs.items()}

    def _td(self, obs: dict[str, torch.Tensor], boot: dict[str, torch.Tensor], action: torch.Tensor,
            ret: torch.Tensor, disc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(td, q_sa)``, float32 ``[m]``: the n-step TD error ``y - Q(s, a)`` and ``Q(s, a)``; the
        gradient flows through ``Q(s, a)`` only.

        The online network's bootstrap values (double Q) come from a forward pass of their own
        without a graph: were the ``2m`` rows one forward pass, the backward pass would run every
        layer over the ``m`` bootstrap rows too (their gradients zero): 1.36x the time per gradient
        step of an update at the Atari presets (benchmarks/RESULTS.md, "Ape-X on Pong: the
        bootstrap forward without a graph")."""
        m = action.shape[0]
        q = self.policy.q(obs)
        q_sa = q.gather(1, action.long().reshape(m, 1)).squeeze(1)
        with torch.no_grad():
            q_boot_online = self.policy.q(boot) if self.config.double_q else None
            q_boot_target = self.target.q(boot)
            if q_boot_online is not None:
                next_v = q_boot_target.gather(1, q_boot_online.argmax(dim=1, keepdim=True)).squeeze(1)
            else:
                next_v = q_boot_target.max(dim=1).values
            y = ret + disc * next_v
        return y - q_sa, q_sa

    def _priority(self, td: np.ndarray) -> np.ndarray:
        c = self.config
        return (np.abs(td).astype(np.float64) + c.priority_eps) ** c.priority_alpha

    def _make_replay(self, batch: Batch) -> Replay:
        """The replay, sized for the batch's sample length and columns, frame stacks stored once
        (``algo.frame_stack``); refused when it cannot fit in memory."""
        c = self.config
        obs = {k: np.asarray(v) for k, v in batch["obs"].items()}
        action = np.asarray(batch["action"])
        done = np.asarray(batch["terminated"], bool) | np.asarray(batch["truncated"], bool)
        replay, need = make_replay(c.capacity, action.shape[0], obs, int(action[0, 0].nbytes),
                                   frame_stack=c.frame_stack, avail=available_memory(), done=done)
        print(f"zoo: apex-dqn replay of {c.capacity:,} transitions: {need.describe()}", file=sys.stderr, flush=True)
        return replay

    # -- the update ------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        """Gradient steps on replayed transitions (as many as the rate limiter grants), then the
        insertion of ``batch``'s transitions (layout in :mod:`zoo.core.algorithm`).

        Returns:
            ``loss`` (weighted Huber, mean over the steps), ``q_mean`` (mean ``Q(s, a)`` of the
            replayed transitions), ``td_abs`` (mean ``|TD|``), ``grad_norm`` (before clipping),
            ``gradient_steps`` (this update's), ``replay_size`` (valid transitions after the
            insert), ``replay_fill`` (its fraction of ``capacity``), ``replay_ratio`` (replayed
            / inserted over the run), ``beta``, ``lr``, ``agent_steps`` (inserted now). Zeros
            for the step statistics when no step was taken. Data-parallel trainers: the step
            statistics and ``replay_size`` / ``replay_fill`` are this rank's (its shard),
            ``agent_steps`` and ``replay_ratio`` count every rank's transitions.

        Raises:
            KeyError: a required batch key is missing.
            NonFiniteUpdate: a loss, gradient norm, the final weights or a new transition's
                initial priority was not finite: the weights, target network, optimiser, RNG,
                priorities and counters are as before, nothing was inserted.
        """
        missing = [k for k in REQUIRED_KEYS if k not in batch]
        if missing:
            raise KeyError(f"apex-dqn batch is missing {', '.join(map(repr, missing))} (see zoo.core.algorithm)")
        c, dev = self.config, self.device
        reward = np.asarray(batch["reward"], np.float32)
        T, B = reward.shape
        if self.replay is None:
            self.replay = self._make_replay(batch)
            self.rng = rank_rng(self.seed, zdist.rank()) if zdist.rank() else self.rng  # each shard its own draws
        replay = self.replay
        active = np.asarray(batch["active"], bool) if "active" in batch else np.ones((T, B), bool)
        m_new = int(active.sum())

        # the rate limiter: credit for this batch's transitions once the replay is warm
        saved = (self.credit, self.gradient_steps, self.replayed, replay.max_priority)
        target_state = {k: v.clone() for k, v in self.target.state_dict().items()}
        guard = UpdateGuard(self.policy, self.optimizer, self.rng)
        journal: list[tuple[np.ndarray, np.ndarray]] = []
        grant = global_rate_limited_steps(self.credit, len(replay), m_new, learning_starts=c.learning_starts,
                                          samples_per_insert=c.samples_per_insert, batch_size=c.batch_size)
        steps, self.credit, world = grant.steps, grant.credit, zdist.world_size()
        sums = {"loss": 0.0, "q_mean": 0.0, "td_abs": 0.0, "grad_norm": 0.0}
        params = list(self.policy.parameters())
        max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
        beta = self.beta
        try:
            for step in range(steps):
                s = replay.sample(c.batch_size, beta, self.rng)
                td, q_sa = self._td(self._tensors(s["obs"]), self._tensors(s["boot_obs"]),
                                    to_tensor(s["action"], dev), to_tensor(s["ret"], dev),
                                    to_tensor(s["disc"], dev))
                weight = to_tensor(s["weight"], dev)
                loss = (weight * huber(td, c.huber_delta)).mean()
                self.optimizer.zero_grad()
                loss.backward()
                zdist.reduce_gradients(params, weight=c.batch_size, loss=loss)  # K > 1: the mean over every shard's
                grad_norm = nn.utils.clip_grad_norm_(params, max_norm)
                guard.check(step, loss=loss, grad_norm=grad_norm)
                self.optimizer.step()
                td_np = td.detach().cpu().numpy()
                journal.append((s["index"], replay.tree.leaves(s["index"]).copy()))
                replay.update_priorities(s["index"], self._priority(td_np))
                self.gradient_steps += 1
                self.replayed += world * c.batch_size
                if self.gradient_steps % c.target_period == 0:
                    self.target.load_state_dict(self.policy.state_dict())
                for k, v in (("loss", float(loss.detach())), ("q_mean", float(q_sa.detach().mean())),
                             ("td_abs", float(np.abs(td_np).mean())), ("grad_norm", float(grad_norm))):
                    sums[k] += v
            guard.check_weights(steps)
            self._insert(batch, guard, steps)
        except NonFiniteUpdate:
            for idx, old in reversed(journal):
                replay.tree.update(idx, old)
            self.credit, self.gradient_steps, self.replayed, replay.max_priority = saved
            self.target.load_state_dict(target_state)
            raise
        self.inserted += grant.inserting
        self.updates += 1
        self.policy_changed = steps > 0  # no gradient step (warm-up): the parameters are as they were
        if steps > 0 and c.exploration == "linear":  # the actors' epsilon follows, with these weights
            self.policy.get_buffer("progress").fill_(min(1.0, max(0.0, float(self.progress))))
        stats = {k: v / max(1, steps) for k, v in sums.items()}
        stats.update({"gradient_steps": float(steps), "replay_size": float(len(replay)),
                      "replay_fill": len(replay) / c.capacity, "replay_ratio": self.replayed / max(1, self.inserted),
                      "beta": beta, "lr": c.lr, "agent_steps": float(grant.inserting)})
        return stats

    def _insert(self, batch: Batch, guard: UpdateGuard, step: int) -> None:
        """Insert the batch's active transitions (observation rows once per step)."""
        c = self.config
        replay = self.replay
        assert replay is not None, "made by update"
        tr = batch_transitions(batch, gamma=c.gamma, n=c.n_step, who="apex-dqn")
        obs_rows, s_idx, boot_idx = tr["obs"], tr["s_idx"], tr["boot_idx"]
        if c.initial_priority == "max":
            priority = np.full(s_idx.shape[0], replay.max_priority)
        else:
            td_np = np.zeros(0, np.float32)  # no active step in the batch (e.g. every agent slot inactive)
            if s_idx.shape[0]:
                with torch.no_grad():
                    td, _ = self._td(self._tensors({k: v[s_idx] for k, v in obs_rows.items()}),
                                     self._tensors({k: v[boot_idx] for k, v in obs_rows.items()}),
                                     to_tensor(tr["action"], self.device), to_tensor(tr["ret"], self.device),
                                     to_tensor(tr["disc"], self.device))
                td_np = td.cpu().numpy()
            finite = bool(np.isfinite(td_np).all())
            if zdist.global_any(not finite):  # K > 1: a non-finite one on any rank skips the update on every rank
                bad = math.nan if finite else float(td_np[~np.isfinite(td_np)][0])
                guard.restore()
                raise NonFiniteUpdate("initial_priority", step, bad)
            priority = self._priority(td_np)
        replay.insert(obs_rows, s_idx, boot_idx, tr["action"], tr["ret"], tr["disc"], priority, tr["prev_row"])

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Online and target networks, optimiser, RNG, counters, the rate limiter's credit and the
        whole replay (contents, priorities, ring positions): an exact resume."""
        return {
            "policy": self.policy.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": copy.deepcopy(self.rng.bit_generator.state),
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
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
        self.updates, self.gradient_steps = int(state["updates"]), int(state["gradient_steps"])
        self.inserted, self.replayed = int(state["inserted"]), int(state["replayed"])
        self.credit = float(state["credit"])
        self.replay = restore_replay(state.get("replay"), self.config.capacity, Replay, unit="transitions")

    def rank_state_dict(self) -> dict[str, Any]:
        """What only this data-parallel rank holds (the rest of :meth:`state_dict` is the same on every
        rank): its replay shard and its sampling RNG (:func:`~zoo.plugins.algorithms.replay_ranks.rank_state`).
        Ranks 1..K-1 write it beside ``latest.pt``."""
        return rank_state(self.rng, self.replay)

    def load_rank_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore what :meth:`rank_state_dict` returned; None: an empty shard (filled from this
        rank's next batch, its RNG drawn afresh then).

        Raises:
            ValueError: the shard's capacity differs from ``algo.capacity``.
        """
        self.replay = restore_replay(load_rank_state(state, self.rng), self.config.capacity, Replay,
                                     unit="transitions", what="replay shard")
