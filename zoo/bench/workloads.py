"""The named workloads of ``zoo bench`` and of the side-by-side benchmark (``benchmarks/peers``).

A workload is data: the env and algorithm, the Zoo options that put Zoo at the workload's
shape, and the shape itself (envs x rollout steps, epochs x minibatches; for a replay
algorithm, replayed samples per inserted one and the samples of a gradient step), which the
peers' scripts turn into their own options. Adding one is adding an entry to :data:`WORKLOADS`.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Workload", "WORKLOADS", "get_workload", "UnknownWorkload"]


@dataclass(frozen=True)
class Workload:
    """One named workload.

    Attributes:
        name: the name given to ``zoo bench --workload``.
        algo: Zoo algorithm name (``zoo list algorithms``).
        env: Zoo env name (``zoo list envs``), e.g. ``atari:Pong``.
        overrides: ``--set`` options that put Zoo at the workload (after the algorithm's presets).
        summary: the workload in words, printed with the results.
        gym_id: the same env as a Gymnasium id for the peers (CleanRL's ``--env-id``).
        num_envs: envs stepped in lock-step per rollout (the peers' ``num_envs``; Zoo's
            ``actors.count x actors.envs_per_actor``).
        rollout_steps: steps per env per rollout (``num_steps``; Zoo's ``sample_length``).
        epochs: passes over each batch (``update_epochs``); 0 for a replay workload.
        minibatches: minibatches per epoch (``num_minibatches``); 0 for a replay workload.
        peer_script: CleanRL's script for this workload (``cleanrl/<name>.py``), or None.
        samples_per_insert: a replay workload's replayed samples per inserted one (Zoo's
            ``algo.samples_per_insert``; CleanRL's ``batch_size / train_frequency``); 0 for an
            on-policy workload.
        replay_batch: samples per gradient step of a replay workload (``algo.batch_size``); 0
            for an on-policy workload.
    """

    name: str
    algo: str
    env: str
    overrides: tuple[str, ...]
    summary: str
    gym_id: str
    num_envs: int
    rollout_steps: int
    epochs: int
    minibatches: int
    peer_script: str | None = None
    samples_per_insert: float = 0.0
    replay_batch: int = 0

    @property
    def batch_env_steps(self) -> int:
        """Env steps per update: ``num_envs x rollout_steps`` (Pong: 8 x 128 = 1,024)."""
        return self.num_envs * self.rollout_steps

    @property
    def minibatch_size(self) -> int:
        """``batch_env_steps / minibatches`` (Pong: 1,024 / 4 = 256); 0 for a replay workload."""
        return self.batch_env_steps // self.minibatches if self.minibatches else 0

    @property
    def replay(self) -> bool:
        """A replay workload (apex-dqn, sac): its learner replays ``samples_per_insert`` per inserted sample."""
        return self.samples_per_insert > 0

    @property
    def gradient_steps_per_env_step(self) -> float:
        """``samples_per_insert / replay_batch`` for a single-agent replay workload (dqn-cartpole:
        12.8 / 128 = 0.1, CleanRL's one step every 10 env steps); 0 for an on-policy one."""
        return self.samples_per_insert / self.replay_batch if self.replay_batch else 0.0


_PONG_SHAPE = ("sample_length=128", "algo.epochs=4", "algo.minibatches=4")
WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload(
        "pong", "ppo", "atari:Pong",
        ("actors.count=2", "actors.envs_per_actor=4", "trainer.batch_samples=8", *_PONG_SHAPE),
        "CleanRL ppo_atari.py's workload: PPO on Pong, 8 envs x 128 steps, 4 epochs x 4 minibatches of 256, "
        "Nature CNN (Zoo: 2 actors x 4 envs, 8 samples per update)",
        "PongNoFrameskip-v4", 8, 128, 4, 4, "ppo_atari"),
    Workload(
        "pong-defaults", "ppo", "atari:Pong", (),
        "`zoo train ppo --env atari:Pong` with Zoo's own defaults (what a user gets)",
        "PongNoFrameskip-v4", 8, 128, 4, 4, None),
    Workload(
        "cartpole", "ppo", "CartPole-v1",
        ("policy.inline=true", "actors.count=1", "actors.envs_per_actor=4", "actors.ring_size=1",
         "trainer.batch_samples=4", "sample_length=128",
         "algo.epochs=4", "algo.minibatches=4", "algo.lr=2.5e-4", "algo.gamma=0.99", "algo.gae_lambda=0.95",
         "algo.clip_coef=0.2", "algo.ent_coef=0.01", "algo.clip_vloss=true"),
        "CleanRL ppo.py's workload: PPO on CartPole-v1, 4 envs x 128 steps, 4 epochs x 4 minibatches of 128 "
        "(Zoo: 1 actor of 4 envs running the policy itself, policy.inline, 4 samples per update, CleanRL's "
        "hyperparameters)",
        "CartPole-v1", 4, 128, 4, 4, "ppo"),
    Workload(
        "cartpole-defaults", "ppo", "CartPole-v1", (),
        "`zoo train ppo --env CartPole-v1` with Zoo's own defaults (what a user gets)",
        "CartPole-v1", 4, 128, 4, 4, None),
    Workload(
        "dqn-cartpole", "apex-dqn", "CartPole-v1",
        ("algo.batch_size=128", "algo.samples_per_insert=12.8", "algo.capacity=10000", "algo.learning_starts=1000",
         "algo.lr=2.5e-4", "algo.target_period=50", "algo.n_step=1", "algo.priority_alpha=0",
         "algo.double_q=false", "algo.dueling=false", "algo.huber_delta=0", "algo.max_grad_norm=0"),
        "CleanRL dqn.py's replay ratio: DQN on CartPole-v1, batches of 128, one gradient step per 10 env steps "
        "(12.8 replayed samples per inserted one), 1-step targets, uniform replay of 10,000, the squared TD error "
        "unclipped, target every 500 env steps (50 gradient steps) "
        "(Zoo: apex-dqn's layout of 2 actors x 4 envs, T = 16, 128 transitions per update; learning after 1,000 "
        "transitions instead of 10,000 so the window measures training)",
        "CartPole-v1", 8, 16, 0, 0, "dqn", samples_per_insert=12.8, replay_batch=128),
    Workload(
        "apex-pong", "apex-dqn", "atari:Pong",
        ("actors.count=2", "actors.envs_per_actor=4", "trainer.batch_samples=8", "sample_length=32",
         "algo.batch_size=32", "algo.samples_per_insert=8", "algo.capacity=100000", "algo.learning_starts=2000"),
        "Ape-X DQN on Pong at CleanRL dqn_atari.py's replay ratio: batches of 32, one gradient step per 4 env steps "
        "(8 replayed samples per inserted one), Nature CNN (Zoo: apex-dqn's Atari presets otherwise: prioritised "
        "replay of 100,000 with frames stored once, 3-step double dueling Q, target every 1,000 steps; 2 actors x 4 "
        "envs with Ape-X's 8 epsilons, T = 32, 256 transitions and 64 gradient steps per update; learning after "
        "2,000 transitions instead of CleanRL's 80,000 so the window measures training)",
        "PongNoFrameskip-v4", 8, 32, 0, 0, "dqn_atari", samples_per_insert=8.0, replay_batch=32),
    Workload(
        "sac-halfcheetah", "sac", "HalfCheetah-v5", (),
        "CleanRL sac_continuous_action.py's workload: SAC on HalfCheetah-v5 (MuJoCo), batches of 256, one gradient "
        "step per env step (256 replayed samples per inserted one), learning after 5,000 (Zoo's sac presets: 1 actor "
        "x 4 envs, T = 4, 16 transitions and 16 gradient steps per update)",
        "HalfCheetah-v5", 4, 4, 0, 0, None, samples_per_insert=256.0, replay_batch=256),
)}
"""Every named workload, by name."""


class UnknownWorkload(ValueError):
    """``zoo bench --workload NAME`` with a name not in :data:`WORKLOADS`."""


def get_workload(name: str) -> Workload:
    """The workload called ``name``.

    Raises:
        UnknownWorkload: no such workload; the message lists the known ones.
    """
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(f"--workload {name!r} is not a known workload; choose one of: "
                              + ", ".join(WORKLOADS)) from None
