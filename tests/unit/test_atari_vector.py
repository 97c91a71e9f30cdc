"""The ``atari`` plugin's vector backend (``env.backend=vector``, ale-py's C++ ``AtariVectorEnv``)
against the Python path (gymnasium wrappers), on the real ALE with fixed action sequences,
and the actor's :class:`VectorEnvGroup` against its per-env :class:`EnvGroup`.

The two backends share the ALE seed for seeds whose SeedSequence word has bit 31 clear
(:func:`ale_seed`); seeds 1 and 4 are such seeds, so with ``noop_max=0`` (the two backends
draw their no-op counts from different generators) every observation, reward and flag must be
equal, sticky actions (p = 0.25) included. Where they differ by design (a lost life: the
Python path spends one NOOP env step, docs/envs.md) the test pins the difference.
"""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.core.options import ConfigError
from zoo.core.testing import EnvCheckError, check_vector_env
from zoo.core.workers.actor import EnvGroup, SampleBuffer, VectorEnvGroup
from zoo.plugins.envs.atari.env import AtariConfig, make, make_vector
from zoo.plugins.envs.atari.vector import ale_seed, check_ale_py


def python_ale_seed(seed: int) -> int:
    """The ALE seed of ale-py's Python AtariEnv.seed_game: int32 of SeedSequence word 1."""
    return int(np.random.SeedSequence(seed).generate_state(2)[1].astype(np.int32))


def both(game: str, seed: int, **config):
    cfg = AtariConfig(noop_max=0, backend="vector", **config)
    py, vec = make(game, cfg, seed), make_vector(game, cfg, 1)
    return py, vec


def py_step(env, action: int):
    """One env step of the Python path as the actor takes it: reset after the episode's end."""
    obs, reward, terminated, truncated, info = env.step(np.array([action]))
    final = obs
    if terminated[0] or truncated[0]:
        obs, reset_info = env.reset()
        info = {**info, **reset_info}
    return obs, reward, terminated, truncated, info, final


def test_seeds_1_and_4_give_both_backends_the_same_ale_seed_and_others_clear_bit_31():
    assert ale_seed(1) == python_ale_seed(1) == 1731038949
    assert ale_seed(4) == python_ale_seed(4) == 1819501355
    # seed 0's word is 3677149159 (bit 31 set): int32 -617818137 for Python, 3677149159 - 2**31 for the vector env
    assert python_ale_seed(0) == 3677149159 - 2**32 and ale_seed(0) == 3677149159 - 2**31


def test_pong_one_whole_game_step_for_step_equal_to_the_python_path():
    py, vec = both("Pong", 1)
    try:
        assert vec.spec.observation_space == py.spec.observation_space
        assert vec.spec.action_space == py.spec.action_space == spaces.Discrete(6)
        assert (vec.spec.frame_skip, vec.spec.reports_episodes) == (4, True)
        p_obs, _ = py.reset()
        v_obs, _ = vec.reset([1])
        # ale-py pads a new stack with zero frames; the backend repeats the first frame as the Python path
        assert np.array_equal(v_obs["obs"], p_obs["obs"]) and v_obs["obs"].shape == (1, 4, 84, 84)
        assert np.array_equal(v_obs["obs"][0, 0], v_obs["obs"][0, 3]) and v_obs["obs"].max() > 0
        actions = np.random.default_rng(0).integers(0, 6, 870)
        rewards, ends, games = [], [], []
        for t, a in enumerate(actions):
            p_obs, p_r, p_term, p_trunc, p_info, _ = py_step(py, int(a))
            v_obs, v_r, v_term, v_trunc, v_info = vec.step(np.array([a]))
            assert np.array_equal(v_obs["obs"], p_obs["obs"]), f"step {t}"
            assert (v_r.tolist(), v_term.tolist(), v_trunc.tolist()) == (p_r.tolist(), p_term.tolist(),
                                                                          p_trunc.tolist()), f"step {t}"
            assert v_info["ended"].tolist() == [bool(p_term[0] or p_trunc[0])]
            rewards.append(float(v_r[0]))
            if v_info["ended"][0]:
                ends.append(t)
            if "episode" in v_info:
                games.append((t, v_info["episode"]["return"].tolist(), v_info["episode"]["length"].tolist(),
                              p_info["episode"]))
        # A random Pong player loses 0:21: 21 points of -1, none of +1, and the game ends on the
        # step of the 21st point, step 851 (852 env steps); both paths report that game score.
        assert rewards.count(-1.0) == 21 and rewards.count(1.0) == 0
        assert ends == [851]
        assert games == [(851, [-21.0], [852], {"return": -21.0, "length": 852})]
        # the 18 steps after the game's reset were equal as well (the loop compared them)
    finally:
        vec.close()
        py.close()


def test_truncation_at_max_episode_frames_matches_with_final_observation_and_reset():
    # noop_max=0: 400 frames = 100 env steps of 4 frames, so both truncate at step index 99.
    py, vec = both("Pong", 4, max_episode_frames=400)
    try:
        py.reset()
        vec.reset([4])
        score = 0.0
        for t, a in enumerate(np.random.default_rng(1).integers(0, 6, 110)):
            p_obs, p_r, p_term, p_trunc, p_info, p_final = py_step(py, int(a))
            v_obs, v_r, v_term, v_trunc, v_info = vec.step(np.array([a]))
            assert np.array_equal(v_obs["obs"], p_obs["obs"]), f"step {t}"
            assert (v_term[0], v_trunc[0]) == (p_term[0], p_trunc[0]) == (False, t == 99)
            score += float(p_r[0])  # Pong's raw rewards are -1, 0, 1: clipping keeps them
            if t == 99:
                assert np.array_equal(v_info["final_obs"]["obs"], p_final["obs"])
                assert not np.array_equal(v_info["final_obs"]["obs"], v_obs["obs"])
                assert v_info["episode"]["return"].tolist() == [score] == [p_info["episode"]["return"]]
                assert v_info["episode"]["length"].tolist() == [100] and p_info["episode"]["length"] == 100
            else:
                assert "final_obs" not in v_info and "episode" not in v_info
    finally:
        vec.close()
        py.close()


def test_rgb_frames_lay_out_as_the_python_path():
    py, vec = both("Pong", 1, grayscale=False)
    try:
        assert vec.spec.observation_space["obs"].shape == (12, 84, 84)  # 4 frames x 3 colour planes
        assert np.array_equal(vec.reset([1])[0]["obs"], py.reset()[0]["obs"])
        for t, a in enumerate(np.random.default_rng(2).integers(0, 6, 30)):
            assert np.array_equal(vec.step(np.array([a]))[0]["obs"], py_step(py, int(a))[0]["obs"]), f"step {t}"
    finally:
        vec.close()
        py.close()


def test_breakout_life_loss_equal_flags_then_the_documented_noop_step():
    py, vec = both("Breakout", 1)
    try:
        py.reset()
        vec.reset([1])
        actions = np.random.default_rng(0).integers(0, 4, 40)
        first_diff, loss = None, None
        for t, a in enumerate(actions):
            p_obs, p_r, p_term, p_trunc, _, _ = py_step(py, int(a))
            v_obs, v_r, v_term, v_trunc, v_info = vec.step(np.array([a]))
            if loss is None:  # up to the first lost life both paths are the same game
                assert (v_r[0], v_term[0], v_trunc[0]) == (p_r[0], p_term[0], p_trunc[0]), f"step {t}"
                if v_term[0]:
                    loss = t
                    # a lost life ends the training episode, not the game: no game score
                    assert v_info["ended"].tolist() == [True] and "episode" not in v_info
                    # the stack restarts at the loss: four copies of the newest frame
                    assert all(np.array_equal(v_obs["obs"][0, i], v_obs["obs"][0, 3]) for i in range(3))
            if first_diff is None and not np.array_equal(v_obs["obs"], p_obs["obs"]):
                first_diff = t
        # The Python path's reset after the loss takes one NOOP env step the agent did not choose;
        # the vector backend continues with the agent's next action: from then on the games differ.
        assert loss == 27 and first_diff == 28
        assert vec.lives.tolist() == [4]
    finally:
        vec.close()
        py.close()


# -- the actor's vector group ------------------------------------------------------------

class VectorCounter:
    """``n`` counters as one VectorEnv: obs = 100 * episode + t, reward = t + 1, every episode
    ends after 3 steps (env 0 truncated, env 1 terminated) and restarts inside that step."""

    def __init__(self, n: int = 2) -> None:
        self.spec = EnvSpec("counter", ("a",), {"obs": spaces.Box(0, 1e6, (1,))}, spaces.Discrete(2))
        self.num_envs = n
        self.episode = np.zeros(n)
        self.t = np.zeros(n)
        self.closed = False

    def _obs(self):
        return {"obs": (100.0 * self.episode + self.t).astype(np.float32)[:, None]}

    def reset(self, seeds):
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = self.t.astype(np.float32)
        done = self.t == 3
        final = self._obs()
        self.episode[done] += 1
        self.t[done] = 0
        info = {"ended": done.copy()}
        truncated = done & (np.arange(self.num_envs) == 0)
        if truncated.any():
            info["final_obs"] = final
        return self._obs(), reward, done & ~truncated, truncated, info

    def close(self):
        self.closed = True


def test_vector_group_records_the_samples_the_per_env_group_records():
    # Same values as test_actor_sampling's Counter pair, stepped by one call per group step.
    group = VectorEnvGroup(VectorCounter(), [0, 1])
    buf = SampleBuffer(4, group.obs)
    episodes: list[dict] = []
    for step in range(4):
        reply = {"action": np.zeros(2, np.int64)}
        buf.record_policy(reply, version=step, active=group.active, on_reset=group.on_reset)
        group.step(reply["action"], buf, episodes)
    sample = buf.bundle()
    assert sample["obs"]["obs"][:, :, 0].T.tolist() == [[0, 1, 2, 100, 101], [0, 1, 2, 100, 101]]
    assert sample["reward"].T.tolist() == [[1, 2, 3, 1], [1, 2, 3, 1]]
    assert sample["truncated"].T.tolist() == [[False, False, True, False], [False] * 4]
    assert sample["terminated"].T.tolist() == [[False] * 4, [False, False, True, False]]
    assert sample["final_index"].tolist() == [[2, 0]] and sample["final_obs"]["obs"][:, 0].tolist() == [3.0]
    assert sample["on_reset"].T.tolist() == [[True, False, False, True]] * 2
    assert [(e["return"], e["length"]) for e in episodes] == [(6.0, 3), (6.0, 3)]  # 1 + 2 + 3, 3 steps
    assert group.n_envs == 2 and group.steps == 4 and group.envs == [group.venv]
    with pytest.raises(ValueError, match="actions for 3 agent-slots; this group has 2 envs x 1 agents"):
        group.step(np.zeros(3, np.int64), buf, episodes)


def test_vector_group_on_pong_equals_the_per_env_group_with_truncation():
    # Envs seeded 1 and 4 (same ALE seeds), 200-frame games = 50 env steps: both truncate at t = 49.
    cfg = AtariConfig(noop_max=0, max_episode_frames=200, backend="vector")
    seeds = [1, 4]
    groups = [EnvGroup([make("Pong", cfg, s) for s in seeds], seeds),
              VectorEnvGroup(make_vector("Pong", cfg, 2), seeds)]
    actions = np.random.default_rng(3).integers(0, 6, (60, 2))
    samples, episodes = [], []
    for group in groups:
        buf, eps = SampleBuffer(60, group.obs), []
        for a in actions:
            buf.record_policy({"action": a}, version=0, active=group.active, on_reset=group.on_reset)
            group.step(a, buf, eps)
        samples.append(buf.bundle())
        episodes.append(eps)
        for env in group.envs:
            env.close()
    py, vec = samples
    for key in ("reward", "terminated", "truncated", "on_reset", "final_index"):
        assert np.array_equal(vec[key], py[key]), key
    assert np.array_equal(vec["obs"]["obs"], py["obs"]["obs"])
    assert np.array_equal(vec["final_obs"]["obs"], py["final_obs"]["obs"])
    assert vec["final_index"].tolist() == [[49, 0], [49, 1]]
    assert np.flatnonzero(vec["on_reset"][:, 0]).tolist() == [0, 50]
    assert episodes[0] == episodes[1] and [e["length"] for e in episodes[1]] == [50, 50]


# -- validation ---------------------------------------------------------------------------

def test_backend_and_threads_are_validated_by_name(monkeypatch):
    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry

    registry = get_registry()
    with pytest.raises(ConfigError, match="env.backend expects one of 'python', 'vector', got 'gpu'"):
        build_config(registry, "ppo", "atari:Pong", steps=4096, name="x", overrides=["env.backend=gpu"])
    with pytest.raises(ConfigError, match=r"env.vector_threads must be >= 0 \(0 = one per game, up to the cores\), "
                                          "got -1"):
        build_config(registry, "ppo", "atari:Pong", steps=4096, name="x", overrides=["env.vector_threads=-1"])
    monkeypatch.setattr("importlib.metadata.version", lambda name: "0.11.2")
    with pytest.raises(ConfigError, match=r"the env failed to build: ImportError: env.backend='vector' needs "
                                          r"ale-py >= 0.12.1 .*installed: 0.11.2.*--set env.backend=python"):
        build_config(registry, "ppo", "atari:Pong", steps=4096, name="x", overrides=["env.backend=vector"])
    with pytest.raises(ImportError, match="installed: 0.11.2"):
        check_ale_py()


def test_python_backend_has_no_vector_env_and_the_vector_one_passes_its_check():
    assert AtariConfig().backend == "vector"  # the default (benchmarks/RESULTS.md: faster)
    assert make_vector("Pong", AtariConfig(backend="python"), 2) is None
    py = make("Pong", AtariConfig(backend="python"), 0)
    check_vector_env(make_vector("Pong", AtariConfig(backend="vector"), 2), py.spec, steps=3)
    py.close()
    with pytest.raises(EnvCheckError, match="spec.observation_space"):  # a 3-frame stack is not the policy's 4
        check_vector_env(make_vector("Pong", AtariConfig(backend="vector", frame_stack=3), 1), py.spec)
