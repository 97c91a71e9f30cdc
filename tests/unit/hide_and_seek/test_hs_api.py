"""API conformance: PettingZoo Parallel API, Zoo's Env contract, plugin registration, determinism."""
import subprocess
import sys

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from zoo.core.testing.env_check import check_env
from zoo.plugins.envs.hide_and_seek.config import HideAndSeekConfig
from zoo.plugins.envs.hide_and_seek.env import HideAndSeekEnv
from zoo.plugins.envs.hide_and_seek.zoo_env import make


# The full game's unused slots never play, which the API test reports as a warning.
@pytest.mark.filterwarnings("ignore:No agents present but not all possible_agents")
@pytest.mark.parametrize("scenario", ["quadrant", "full"])
def test_parallel_api(scenario):
    parallel_api_test(HideAndSeekEnv(scenario, seed=0), num_cycles=300)


@pytest.mark.parametrize("scenario", ["quadrant", "full"])
def test_zoo_env_contract(scenario):
    env = make(None if scenario == "quadrant" else scenario, HideAndSeekConfig(), seed=0)
    report = check_env(env, seed=3, episodes=1, max_steps=300, determinism_steps=10)
    assert report.episodes == 1


def test_spaces_and_shapes_follow_the_spec():
    q = make(None, HideAndSeekConfig(), seed=0)
    f = make("full", HideAndSeekConfig(), seed=0)
    assert q.spec.agents == ("hider_0", "hider_1", "seeker_0", "seeker_1")
    assert f.spec.agents == ("hider_0", "hider_1", "hider_2", "seeker_0", "seeker_1", "seeker_2")
    expect = {
        q: {"observation_self": (10,), "agent_qpos_qvel": (3, 10), "box_obs": (2, 12), "ramp_obs": (1, 9),
            "lidar": (30,), "mask_aa_obs": (3,), "mask_ab_obs": (2,), "mask_ar_obs": (1,),
            "mask_aa_obs_spoof": (3,), "mask_ab_obs_spoof": (2,), "mask_ar_obs_spoof": (1,)},
        f: {"observation_self": (10,), "agent_qpos_qvel": (5, 10), "box_obs": (9, 15), "ramp_obs": (2, 15),
            "lidar": (30,), "mask_aa_obs": (5,), "mask_ab_obs": (9,), "mask_ar_obs": (2,),
            "mask_aa_obs_spoof": (5,), "mask_ab_obs_spoof": (9,), "mask_ar_obs_spoof": (2,)},
    }
    for env, shapes in expect.items():
        assert {k: s.shape for k, s in env.spec.observation_space.items()} == shapes
        assert list(env.spec.action_space.nvec) == [11, 11, 11, 2, 2]
        assert env.spec.action_space.dtype == np.int64
        obs, info = env.reset(seed=1)
        a = env.spec.num_agents
        assert {k: v.shape for k, v in obs.items()} == {k: (a, *s) for k, s in shapes.items()}
        assert all(v.dtype == np.float32 for v in obs.values())
        assert info["active"].dtype == bool and info["active"].shape == (a,)


def test_same_seed_same_actions_same_trajectory():
    runs = []
    for _ in range(2):
        env = make("full", HideAndSeekConfig(), seed=7)
        rng = np.random.default_rng(0)
        obs, _ = env.reset(seed=11)
        trace = [obs]
        for _ in range(30):
            act = rng.integers(0, [11, 11, 11, 2, 2], size=(6, 5))
            trace.append(env.step(act))
        runs.append(trace)
    for x, y in zip(*runs):
        for a, b in zip(x if isinstance(x, tuple) else (x,), y if isinstance(y, tuple) else (y,)):
            if isinstance(a, dict):
                assert a.keys() == b.keys()
                for k in a:
                    if isinstance(a[k], np.ndarray):
                        np.testing.assert_array_equal(a[k], b[k])
            else:
                np.testing.assert_array_equal(a, b)


def test_plugin_registers_without_importing_mujoco():
    code = (
        "import sys\n"
        "from zoo.core.plugins import PluginHost\n"
        "host = PluginHost(strict=True, entry_points=False)\n"
        "c = host.registry.get('env', 'hide-and-seek')\n"
        "assert c.options['default_budget'][0] == 'env_steps'\n"
        "assert 'mujoco' not in sys.modules, 'registration imported mujoco'\n"
        "assert c.option('config').__name__ == 'HideAndSeekConfig'\n"
        "env = c.load()(None, c.option('config')(), 0)\n"
        "assert env.spec.env_id == 'hide-and-seek:quadrant'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="unknown hide-and-seek scenario 'small'"):
        make("small", HideAndSeekConfig(), seed=0)
    with pytest.raises(ValueError, match="full_hiders_min"):
        make("full", HideAndSeekConfig(full_hiders_min=3, full_hiders_max=2), seed=0)
    with pytest.raises(ValueError, match="action_bins"):
        make(None, HideAndSeekConfig(action_bins=10), seed=0)
    env = make(None, HideAndSeekConfig(), seed=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected shape \(4, 5\)"):
        env.step(np.zeros((3, 5), np.int64))
    with pytest.raises(ValueError, match="must lie in"):
        env.step(np.full((4, 5), 11, np.int64))


def test_fixed_two_versus_two_full_option():
    cfg = HideAndSeekConfig(full_hiders_min=2, full_hiders_max=2, full_seekers_min=2, full_seekers_max=2)
    env = make("full", cfg, seed=0)
    assert env.spec.agents == ("hider_0", "hider_1", "seeker_0", "seeker_1")
    for seed in range(3):
        _, info = env.reset(seed=seed)
        assert info["active"].tolist() == [True] * 4
