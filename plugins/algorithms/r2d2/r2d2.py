"""R2D2 with the replay inside the trainer.

Kapturowski, Ostrovski, Quan, Munos and Dabney, "Recurrent Experience Replay in Distributed
Reinforcement Learning", ICLR 2019: Ape-X's distributed prioritised replay with a recurrent
(LSTM) dueling double-Q network trained on replayed *sequences*, with the recurrent state
stored at each sequence start, a burn-in that unrolls the state before the loss, n-step
targets under the invertible value rescaling ``h`` (Pohlen et al. 2018) and sequence
priorities ``eta max|delta| + (1 - eta) mean|delta|``
(:mod:`~zoo.plugins.algorithms.r2d2.sequences` has the equations).

As apex-dqn (:mod:`zoo.plugins.algorithms.apex.apex`, docs/replay.md): ``update(batch)`` takes
the gradient steps the rate limiter grants (credit ``samples_per_insert`` per inserted
*sequence*, each step spends ``batch_size`` sequences), then cuts the batch into overlapping
sequences (:func:`~zoo.plugins.algorithms.r2d2.sequences.cut_sequences`) and inserts them with
initial priorities from the current networks (``initial_priority=td``) or the largest so far.
Loss per sampled sequence ``i``: ``w_i * mean_t 0.5 * delta_t^2`` over its trained steps (after
the burn-in, active), mean over the batch; Adam; global gradient-norm clipping; the target
network copies the online one every ``target_period`` gradient steps. Data-parallel trainers
(``trainer.count`` = K) as for apex-dqn: a sequence-replay shard per rank, one global grant (K x
``batch_size`` sequences a step), gradients all-reduced (docs/replay.md, "Data-parallel trainers").
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
from zoo.plugins.algorithms.apex.apex import REPLAY_MAX_POLICY_LAG
from zoo.plugins.algorithms.encoders import is_image_space
from zoo.plugins.algorithms.r2d2.config import R2D2Config
from zoo.plugins.algorithms.r2d2.networks import RecurrentQNetwork
from zoo.plugins.algorithms.r2d2.replay import SequenceReplay, make_sequence_replay
from zoo.plugins.algorithms.r2d2.sequences import cut_sequences, h, h_inv, sequence_priority
from zoo.plugins.algorithms.replay import (
    available_memory,
    check_q_learning_spec,
    global_rate_limited_steps,
    load_rank_state,
    observation_rows,
    rank_rng,
    rank_state,
    restore_replay,
)
from zoo.plugins.algorithms.tensors import UpdateGuard, adam, to_tensor

REQUIRED_KEYS = ("obs", "action", "reward", "terminated", "truncated", "rnn_state")

__all__ = ["R2D2", "R2D2Config"]


class R2D2:
    """The ``r2d2`` algorithm (interface: :mod:`zoo.core.algorithm`)."""

    rate_limited = True
    """A samples-per-insert rate limiter sets its gradient steps (:mod:`zoo.core.algorithm`): the trainer adds
    its waits to the update rows and its ``gradient_steps``, ``replayed``, ``inserted`` to status."""

    Config = R2D2Config

    @classmethod
    def check_spec(cls, spec: EnvSpec) -> None:
        """Raises ``TypeError`` unless ``spec`` has a Discrete action space and no action mask.
        Several agents share the network (independent learners, as PPO does)."""
        check_q_learning_spec(spec, "r2d2")

    @classmethod
    def build_policy(cls, config: R2D2Config, spec: EnvSpec) -> RecurrentQNetwork:
        """The recurrent Q-network for ``spec`` (networks.py).

        Raises:
            TypeError: the action space is not Discrete, or the env masks actions.
        """
        cls.check_spec(spec)
        return RecurrentQNetwork(spec, hidden=config.hidden, lstm=config.lstm, epsilon_base=config.epsilon_base,
                                 epsilon_alpha=config.epsilon_alpha, eval_epsilon=config.eval_epsilon)

    @classmethod
    def presets(cls, spec: EnvSpec) -> dict[str, Any]:
        """Experiment-config overrides for ``spec``.

        Raises:
            ConfigError: the env's action space is not Discrete, or it masks actions.

        Every layout: ``trainer.max_policy_lag`` = 2^30 and actors held back by the sample
        stream, as apex-dqn. Images (Atari): R2D2's sequences of 80 (burn-in 40, period 40) in
        samples of 80 steps, 2 actors x 8 envs, 4 columns per update, replay of 1,000
        sequences (80,000 env steps; frames stored once: 830 MiB, docs/replay.md), learning after 200, LSTM 512, n = 5,
        gamma 0.997, lr 1e-4; not yet run on Atari. Vector observations (CartPole):
        samples of 40 steps, sequences of 20 (burn-in 4, period 10: 3 per column), 2 actors x 4
        envs, 8 columns per update (24 sequences, 320 env steps), replay of 5,000 sequences,
        learning after 200, batch 16, 32 replayed per inserted sequence (48 gradient steps per
        update), LSTM of 64 after two layers of 64, lr 1e-3, Adam eps 1e-8, n = 3, gamma 0.99,
        target every 100 gradient steps, gradient norm 10. Measured on CartPole-v1 (2 loaded
        cores, seed 1): the mean return of all envs' episodes passed 150 after about 10k env
        steps (4 replayed sequences per inserted gave 282 gradient steps in 30k env steps and
        did not learn). One trainer thread, as apex-dqn's vector presets: 394 env steps/s with 1 against
        312 with 2 (2 idle cores, 15k env steps, seed 1).
        """
        try:
            cls.check_spec(spec)
        except TypeError as exc:
            raise ConfigError(str(exc), field="env") from None
        layout = {"actors.count": 2, "actors.ring_size": 2, "actors.drop_when_full": False,
                  "trainer.max_policy_lag": REPLAY_MAX_POLICY_LAG}
        if any(is_image_space(s) for k, s in spec.observation_space.items() if not k.startswith("zoo:")):
            return {"sample_length": 80, "actors.envs_per_actor": 8, "trainer.batch_samples": 4,
                    "trainer.checkpoint_interval": 1_000, "algo.capacity": 1_000, "algo.learning_starts": 200,
                    **layout}
        algo: dict[str, Any] = {
            "lr": 1e-3, "adam_eps": 1e-8, "gamma": 0.99, "n_step": 3, "sequence_length": 20, "burn_in": 4,
            "batch_size": 16, "samples_per_insert": 32.0, "capacity": 5_000, "learning_starts": 200,
            "target_period": 100, "max_grad_norm": 10.0, "hidden": 64, "lstm": 64}
        return {"sample_length": 40, "actors.envs_per_actor": 4, "trainer.batch_samples": 8, "trainer.threads": 1,
                **layout,
                **{f"algo.{k}": v for k, v in algo.items()}}

    def __init__(self, config: R2D2Config, spec: EnvSpec, seed: int) -> None:
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
        self.progress = 0.0
        self.replay: SequenceReplay | None = None
        self.updates = 0
        self.gradient_steps = 0
        self.policy_changed = True  # whether the last update changed the policy's state (core.algorithm)
        self.inserted = 0  # sequences inserted
        self.replayed = 0  # sequences sampled for gradient steps
        self.credit = 0.0  # the rate limiter's credit, in sequences

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

    def _priority(self, td_abs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        c = self.config
        return (sequence_priority(td_abs, mask, c.priority_eta) + c.priority_eps) ** c.priority_alpha

    def sequence_td(self, s: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The TD errors of ``M`` sequences (:func:`cut_sequences` or a replay sample, batch-major).

        The online network unrolls the first ``burn_in`` steps from the stored ``state0``
        without a graph, then the rest with one; the target network unrolls the whole sequence.
        A step's bootstrap is row ``last + 1`` (its Q-values from the same unrolls), or, after a
        truncation, the step's ``final_obs`` fed with the state after step ``last``.

        Returns:
            ``(td, q_sa, mask)``: float32 ``[L, M]`` ``y - Q(s, a)`` (the gradient flows through
            ``Q(s, a)`` only), float32 ``[L, M]`` ``Q(s, a)``, bool ``[L, M]`` the trained steps.
        """
        c, dev = self.config, self.device

        def tm(x: Any, dtype: torch.dtype | None = None) -> torch.Tensor:  # batch-major -> time-major
            return to_tensor(np.asarray(x), dev, dtype).transpose(0, 1)

        obs = {k: tm(v) for k, v in s["obs"].items()}  # [L + 1, M, ...]
        reset, state0 = tm(s["reset"]), to_tensor(np.asarray(s["state0"]), dev, torch.float32)
        active = tm(s["active"])
        L, M = active.shape
        active1 = torch.cat([active, torch.ones_like(active[:1])])  # the bootstrap row is fed like any
        bi = c.burn_in
        if bi > 0:
            with torch.no_grad():
                q_b, after_b = self.policy.unroll({k: v[:bi] for k, v in obs.items()}, state0, reset[:bi], active1[:bi])
            q_r, after_r = self.policy.unroll({k: v[bi:] for k, v in obs.items()}, after_b[-1], reset[bi:],
                                              active1[bi:])
            q_on, after_on = torch.cat([q_b, q_r]), torch.cat([after_b, after_r])
        else:
            q_on, after_on = self.policy.unroll(obs, state0, reset, active1)
        with torch.no_grad():
            q_tg, after_tg = self.target.unroll(obs, state0, reset, active1)
            last = tm(s["last"]).long()
            cols = torch.arange(M, device=dev).expand(L, M)
            boot_on, boot_tg = q_on.detach()[last + 1, cols], q_tg[last + 1, cols]  # [L, M, A]
            fpos = np.asarray(s["final_pos"], np.int64).reshape(-1, 2)
            if fpos.shape[0]:
                fobs = {k: to_tensor(np.asarray(v), dev) for k, v in s["final_obs"].items()}
                fr, ft = torch.as_tensor(fpos[:, 0], device=dev), torch.as_tensor(fpos[:, 1], device=dev)
                qf_on, _ = self.policy.step(fobs, after_on.detach()[ft, fr])
                qf_tg, _ = self.target.step(fobs, after_tg[ft, fr])
                kmap = torch.full((L, M), -1, dtype=torch.long, device=dev)
                kmap[ft, fr] = torch.arange(fpos.shape[0], device=dev)
                k = kmap[last, cols]  # the final row of each step's last step
                use = tm(s["from_final"]) & (k >= 0)
                kk = k.clamp(min=0)
                boot_on = torch.where(use[..., None], qf_on[kk], boot_on)
                boot_tg = torch.where(use[..., None], qf_tg[kk], boot_tg)
            best = boot_on.argmax(dim=-1, keepdim=True)
            v = boot_tg.gather(-1, best).squeeze(-1)
            ret, disc = tm(s["ret"], torch.float32), tm(s["disc"], torch.float32)
            if c.value_rescaling:
                y = h(ret + disc * h_inv(v, c.rescale_eps), c.rescale_eps)
            else:
                y = ret + disc * v
        action = tm(s["action"]).long()
        q_sa = q_on[:L].gather(-1, action[..., None]).squeeze(-1)
        return y - q_sa, q_sa, tm(s["mask"])

    def _make_replay(self, batch: Batch) -> SequenceReplay:
        """The sequence replay, its rows sized for the batch's sample length and columns, frame
        stacks stored once (``algo.frame_stack``); refused when it cannot fit in memory."""
        c = self.config
        obs = {k: np.asarray(v) for k, v in batch["obs"].items()}
        action = np.asarray(batch["action"])
        done = np.asarray(batch["terminated"], bool) | np.asarray(batch["truncated"], bool)
        state_floats = int(np.prod(np.shape(batch["rnn_state"])[2:], dtype=np.int64))
        replay, need = make_sequence_replay(c.capacity, action.shape[0], c.sequence_length, c.period, obs,
                                            state_floats, int(action[0, 0].nbytes), frame_stack=c.frame_stack,
                                            avail=available_memory(), done=done)
        print(f"zoo: r2d2 replay of {c.capacity:,} sequences: {need.describe()}", file=sys.stderr, flush=True)
        return replay

    def update(self, batch: Batch) -> dict[str, float]:
        """Gradient steps on replayed sequences (as many as the rate limiter grants), then the
        insertion of ``batch``'s sequences (layout in :mod:`zoo.core.algorithm`; needs ``rnn_state``).

        Returns:
            ``loss``, ``q_mean`` (mean ``Q(s, a)`` over trained steps), ``td_abs`` (mean ``|TD|``),
            ``grad_norm`` (before clipping), ``gradient_steps``, ``replay_size`` (valid
            sequences), ``replay_fill``, ``replay_ratio`` (replayed / inserted sequences over the
            run), ``beta``, ``lr``, ``agent_steps``, ``sequences`` (inserted now). Zeros for the
            step statistics when no step was taken. Data-parallel trainers: every statistic is
            this rank's except ``replay_ratio`` (every rank's sequences; the rate limiter is
            global, :func:`~zoo.plugins.algorithms.rate_limiter.global_rate_limited_steps`).

        Raises:
            KeyError: a required batch key is missing.
            NonFiniteUpdate: a loss, gradient norm, the final weights or a new sequence's
                initial priority was not finite: the weights, target network, optimiser, RNG,
                priorities and counters are as before, nothing was inserted.
        """
        missing = [k for k in REQUIRED_KEYS if k not in batch]
        if missing:
            raise KeyError(f"r2d2 batch is missing {', '.join(map(repr, missing))} (see zoo.core.algorithm; "
                           "'rnn_state' comes from a recurrent acting policy)")
        c = self.config
        seqs = cut_sequences(batch, c.sequence_length, c.period, c.burn_in, c.gamma, c.n_step)
        if self.replay is None:
            self.replay = self._make_replay(batch)
            self.rng = rank_rng(self.seed, zdist.rank()) if zdist.rank() else self.rng  # each shard its own draws
        replay = self.replay
        m_new = int(seqs["action"].shape[0])
        active = np.asarray(batch["active"], bool) if "active" in batch else np.ones(np.shape(batch["reward"]), bool)

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
                td, q_sa, mask = self.sequence_td(s)
                maskf = mask.float()
                per_seq = (0.5 * td ** 2 * maskf).sum(0) / maskf.sum(0).clamp(min=1.0)
                loss = (to_tensor(s["weight"], self.device) * per_seq).mean()
                self.optimizer.zero_grad()
                loss.backward()
                zdist.reduce_gradients(params, weight=c.batch_size, loss=loss)  # K > 1: the mean over every shard's
                grad_norm = nn.utils.clip_grad_norm_(params, max_norm)
                guard.check(step, loss=loss, grad_norm=grad_norm)
                self.optimizer.step()
                td_abs = td.detach().abs().cpu().numpy()
                mask_np = mask.cpu().numpy()
                journal.append((s["index"], replay.tree.leaves(s["index"]).copy()))
                replay.update_priorities(s["index"], self._priority(td_abs, mask_np))
                self.gradient_steps += 1
                self.replayed += world * c.batch_size
                if self.gradient_steps % c.target_period == 0:
                    self.target.load_state_dict(self.policy.state_dict())
                n_m = max(1, int(mask_np.sum()))
                for k, v in (("loss", float(loss.detach())),
                             ("q_mean", float((q_sa.detach() * maskf).sum()) / n_m),
                             ("td_abs", float((td_abs * mask_np).sum()) / n_m), ("grad_norm", float(grad_norm))):
                    sums[k] += v
            guard.check_weights(steps)
            if c.initial_priority == "max":
                priority = np.full(m_new, replay.max_priority)
            else:
                with torch.no_grad():
                    td, _, mask = self.sequence_td(seqs)
                td_np = td.cpu().numpy()
                finite = bool(np.isfinite(td_np).all())
                if zdist.global_any(not finite):  # K > 1: a non-finite one on any rank skips the update on all
                    bad = math.nan if finite else float(td_np[~np.isfinite(td_np)][0])
                    guard.restore()
                    raise NonFiniteUpdate("initial_priority", steps, bad)
                priority = self._priority(np.abs(td_np), mask.cpu().numpy())
            obs_rows, prev_row = observation_rows(batch)
            replay.insert(seqs, priority, obs_rows, prev_row)
        except NonFiniteUpdate:
            for idx, old in reversed(journal):
                replay.tree.update(idx, old)
            self.credit, self.gradient_steps, self.replayed, replay.max_priority = saved
            self.target.load_state_dict(target_state)
            raise
        self.inserted += grant.inserting
        self.updates += 1
        self.policy_changed = steps > 0  # no gradient step (warm-up): the parameters are as they were
        stats = {k: v / max(1, steps) for k, v in sums.items()}
        stats.update({"gradient_steps": float(steps), "replay_size": float(len(replay)),
                      "replay_fill": len(replay) / c.capacity, "replay_ratio": self.replayed / max(1, self.inserted),
                      "beta": beta, "lr": c.lr, "agent_steps": float(active.sum()), "sequences": float(m_new)})
        return stats

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Online and target networks, optimiser, RNG, counters, the rate limiter's credit and the
        whole replay (sequences, their shared observation rows and planes, priorities, ring positions): an
        exact resume."""
        return {
            "policy": self.policy.state_dict(), "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(), "rng": copy.deepcopy(self.rng.bit_generator.state),
            "updates": self.updates, "gradient_steps": self.gradient_steps, "inserted": self.inserted,
            "replayed": self.replayed, "credit": self.credit,
            "replay": None if self.replay is None else self.replay.state_dict(), "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the stored config is informational).

        Raises:
            ValueError: the checkpoint's replay capacity differs from ``algo.capacity``, or it was
                written before sequences shared their observation rows.
        """
        self.policy.load_state_dict(state["policy"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
        self.updates, self.gradient_steps = int(state["updates"]), int(state["gradient_steps"])
        self.inserted, self.replayed = int(state["inserted"]), int(state["replayed"])
        self.credit = float(state["credit"])
        self.replay = restore_replay(state.get("replay"), self.config.capacity, SequenceReplay, unit="sequences")

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
        self.replay = restore_replay(load_rank_state(state, self.rng), self.config.capacity, SequenceReplay,
                                     unit="sequences", what="replay shard")
