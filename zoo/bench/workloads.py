"""The named workloads of ``zoo bench`` and of the side-by-side benchmark (``benchmarks/peers``).

A workload is data: the env and algorithm, the Zoo options that put Zoo at the workload's
shape, and the shape itself (envs x rollout steps, epochs x minibatches), which the peers'
scripts turn into their own options. Adding one is adding an entry to :data:`WORKLOADS`.
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
        epochs: passes over each batch (``update_epochs``).
        minibatches: minibatches per epoch (``num_minibatches``).
        peer_script: CleanRL's script for this workload (``cleanrl/<name>.py``), or None.
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

    @property
    def batch_env_steps(self) -> int:
        """Env steps per update: ``num_envs x rollout_steps`` (Pong: 8 x 128 = 1,024)."""
        return self.num_envs * self.rollout_steps

    @property
    def minibatch_size(self) -> int:
        """``batch_env_steps / minibatches`` (Pong: 1,024 / 4 = 256)."""
        return self.batch_env_steps // self.minibatches


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
