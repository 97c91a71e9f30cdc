"""Fakes shared by the replay-based algorithms' unit test modules (a test module never imports
another test module; see tests/unit/test_suite_layout.py).

- :class:`CountingFrames`: a gymnasium env of small uint8 frames that are all different.
- :class:`Actors`: ``B`` :class:`CountingFrames` under ``FrameStackObservation``, autoreset as Zoo's
  actors do, giving batches ``[T + 1, B, ...]`` (tests/unit/test_replay_frames.py,
  tests/unit/test_r2d2_frames.py).
- apex-dqn: :func:`apex_spec` (a 4-float observation, 2 actions), :func:`apex_batch` (a random batch).
- sac: :func:`sac_spec` (a Box action in [-2, 2]), :func:`sac_config` (a small ``SACConfig``),
  :func:`sac_batch` (a random batch).
- r2d2: :func:`r2d2_spec`, :func:`r2d2_config` (a small ``R2D2Config``, :data:`R2D2_LSTM` LSTM units),
  :func:`r2d2_batch` (a random batch with ``rnn_state`` and ``on_reset``).

The algorithms' helpers serve their own test modules (test_apex.py, test_sac.py, test_r2d2.py)
and the data-parallel checks of tests/unit/test_replay_data_parallel.py.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import FrameStackObservation

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.r2d2.r2d2 import R2D2Config
from zoo.plugins.algorithms.sac.sac import SACConfig

# -- frame stacks ----------------------------------------------------------------------------

class CountingFrames(gym.Env):
    """2x2 uint8 frames that are all different: bytes of (env id, frame counter). An episode
    ends by termination or truncation with probability 0.15 each step (seeded)."""

    observation_space = gym.spaces.Box(0, 255, (2, 2), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_id: int, seed: int, size: int = 2) -> None:
        self.env_id, self.count, self.rng, self.size = env_id, 0, np.random.default_rng(seed), size
        self.observation_space = gym.spaces.Box(0, 255, (size, size), np.uint8)

    def _frame(self) -> np.ndarray:
        self.count += 1
        frame = np.zeros((self.size, self.size), np.uint8)
        frame.flat[:4] = (self.env_id, self.count % 256, self.count // 256 % 256, self.count // 65536)
        return frame

    def reset(self, *, seed=None, options=None):
        return self._frame(), {}

    def step(self, action):
        u = self.rng.random()
        return self._frame(), 0.0, bool(u < 0.15), bool(0.15 <= u < 0.3), {}


class Actors:
    """``B`` envs under gymnasium's ``FrameStackObservation`` (as the atari env stacks), autoreset as
    Zoo's actors do: a batch ``[T + 1, B, ...]`` whose row 0 is the previous batch's row ``T``."""

    def __init__(self, B: int, stack: int, seed: int, padding: str = "reset", size: int = 2) -> None:
        self.envs = [FrameStackObservation(CountingFrames(b, seed + b, size), stack, padding_type=padding)
                     for b in range(B)]
        self.obs = [e.reset()[0] for e in self.envs]
        self.rng = np.random.default_rng(seed)

    def batch(self, T: int) -> dict:
        B = len(self.envs)
        obs = np.zeros((T + 1, B, *self.obs[0].shape), np.uint8)
        terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
        final, final_index = [], []
        for t in range(T):
            for b, env in enumerate(self.envs):
                obs[t, b] = self.obs[b]
                o, _, term, trunc, _ = env.step(0)
                terminated[t, b], truncated[t, b] = term, trunc
                if trunc and not term:
                    final.append(o)
                    final_index.append((t, b))
                self.obs[b] = env.reset()[0] if term or trunc else o
        obs[T] = np.stack(self.obs)
        return {"obs": {"obs": obs}, "action": self.rng.integers(0, 2, (T, B)),
                "reward": self.rng.standard_normal((T, B)).astype(np.float32), "terminated": terminated,
                "truncated": truncated, "final_obs": {"obs": np.asarray(final, np.uint8).reshape(-1, *obs.shape[2:])},
                "final_index": np.asarray(final_index, np.int64).reshape(-1, 2)}


# -- apex-dqn ------------------------------------------------------------------------------

def apex_spec(action_space=None):
    obs = {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)}
    return EnvSpec("Toy-v0", ("agent_0",), obs, action_space or spaces.Discrete(2))


def apex_batch(T, B, seed, reward=None, terminated=None, truncated=None, obs=None, final=None):
    rng = np.random.default_rng(seed)
    trunc = np.zeros((T, B), bool) if truncated is None else np.asarray(truncated, bool)
    idx = np.argwhere(trunc)
    return {
        "obs": {"obs": rng.standard_normal((T + 1, B, 4)).astype(np.float32) if obs is None else obs},
        "action": rng.integers(0, 2, (T, B)),
        "reward": rng.standard_normal((T, B)).astype(np.float32) if reward is None else np.asarray(reward, np.float32),
        "terminated": (rng.random((T, B)) < 0.1) if terminated is None else np.asarray(terminated, bool),
        "truncated": trunc,
        "active": np.ones((T, B), bool),
        "policy_version": np.zeros((T, B), np.int64),
        "final_obs": {"obs": (rng.standard_normal((len(idx), 4)).astype(np.float32) if final is None else final)},
        "final_index": idx.astype(np.int64).reshape(-1, 2),
    }


# -- sac -----------------------------------------------------------------------------------

def sac_spec(action_space=None, obs_dim=3):
    obs = {"obs": spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)}
    return EnvSpec("Toy-v0", ("agent_0",), obs, action_space or spaces.Box(-2.0, 2.0, (1,), np.float32))


def sac_config(**kw):
    base = {"batch_size": 8, "samples_per_insert": 8.0, "learning_starts": 0, "capacity": 1000, "hidden": 16}
    return SACConfig(**{**base, **kw})


def sac_batch(T, B, seed, terminated=None, truncated=None, obs=None, final=None, reward=None):
    rng = np.random.default_rng(seed)
    trunc = np.zeros((T, B), bool) if truncated is None else np.asarray(truncated, bool)
    idx = np.argwhere(trunc)
    return {
        "obs": {"obs": rng.standard_normal((T + 1, B, 3)).astype(np.float32) if obs is None else obs},
        "action": rng.uniform(-2, 2, (T, B, 1)).astype(np.float32),
        "reward": rng.standard_normal((T, B)).astype(np.float32) if reward is None else np.asarray(reward, np.float32),
        "terminated": (rng.random((T, B)) < 0.1) if terminated is None else np.asarray(terminated, bool),
        "truncated": trunc,
        "active": np.ones((T, B), bool),
        "final_obs": {"obs": rng.standard_normal((len(idx), 3)).astype(np.float32) if final is None else final},
        "final_index": idx.astype(np.int64).reshape(-1, 2),
    }


# -- r2d2 ----------------------------------------------------------------------------------

R2D2_LSTM = 8  # LSTM units of the small test network


def r2d2_spec(action_space=None):
    obs = {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)}
    return EnvSpec("Toy-v0", ("agent_0",), obs, action_space or spaces.Discrete(2))


def r2d2_config(**kw):
    base = dict(sequence_length=4, sequence_period=2, burn_in=1, n_step=2, gamma=0.9, hidden=16, lstm=R2D2_LSTM,
                batch_size=4, samples_per_insert=2.0, learning_starts=0, capacity=100, target_period=5, lr=1e-3)
    base.update(kw)
    return R2D2Config(**base)


def r2d2_batch(T, B, seed, truncate_every=0):
    """A random batch with ``rnn_state`` (zeros at ``on_reset``) and consistent episode flags."""
    rng = np.random.default_rng(seed)
    terminated = rng.random((T, B)) < 0.1
    truncated = np.zeros((T, B), bool)
    if truncate_every:
        truncated = (rng.random((T, B)) < 1 / truncate_every) & ~terminated
    done = terminated | truncated
    on_reset = np.concatenate([np.zeros((1, B), bool), done[:-1]])
    rnn = rng.standard_normal((T, B, 2, R2D2_LSTM)).astype(np.float32) * 0.1
    rnn[on_reset] = 0.0
    idx = np.argwhere(truncated)
    return {
        "obs": {"obs": rng.standard_normal((T + 1, B, 4)).astype(np.float32)},
        "action": rng.integers(0, 2, (T, B)), "reward": rng.standard_normal((T, B)).astype(np.float32),
        "terminated": terminated, "truncated": truncated, "active": np.ones((T, B), bool), "on_reset": on_reset,
        "policy_version": np.zeros((T, B), np.int64), "rnn_state": rnn,
        "final_obs": {"obs": rng.standard_normal((len(idx), 4)).astype(np.float32)},
        "final_index": idx.astype(np.int64).reshape(-1, 2),
    }
