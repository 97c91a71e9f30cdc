"""Observation flattening, channels-last detection, refused spaces, Box clipping (issue 15)."""
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import GymnasiumEnv
from zoo.core.spaces import (ACTION_MASK_KEY, ActionClipper, ObsFlattener, UnsupportedSpaceError, as_mask,
                             channels_last, mask_size)
from zoo.plugins.algorithms.distributions import GaussianHead


def nested_space():
    return spaces.Dict({
        "pos": spaces.Box(-1.0, 1.0, (2,), np.float64),
        "inv": spaces.Tuple((spaces.Discrete(3, start=1),
                             spaces.Dict({"bits": spaces.MultiBinary(2), "md": spaces.MultiDiscrete([2, 3])}))),
        "img": spaces.Box(0, 255, (5, 6, 3), np.uint8),
    })


def test_a_nested_dict_tuple_flattens_to_named_leaves():
    flat = ObsFlattener(nested_space())
    # gymnasium sorts Dict keys: img, inv, pos; the Tuple's entries are named by position
    assert list(flat.spaces) == ["img", "inv.0", "inv.1.bits", "inv.1.md", "pos"]
    shapes = {k: s.shape for k, s in flat.spaces.items()}
    # img: channels-last (5, 6, 3) -> (3, 5, 6); Discrete(3) -> one-hot 3; MultiDiscrete [2, 3] -> 2 + 3 = 5
    assert shapes == {"img": (3, 5, 6), "inv.0": (3,), "inv.1.bits": (2,), "inv.1.md": (5,), "pos": (2,)}
    assert flat.spaces["pos"].dtype == np.float32 and flat.spaces["img"].dtype == np.uint8
    img = np.arange(90, dtype=np.uint8).reshape(5, 6, 3)
    obs = {"pos": np.array([0.5, -0.25]), "img": img,
           "inv": (2, {"bits": np.array([1, 0], np.int8), "md": np.array([1, 2])})}
    out = flat(obs)
    assert out["inv.0"].tolist() == [0.0, 1.0, 0.0]            # 2 - start 1 = index 1
    assert out["inv.1.md"].tolist() == [0.0, 1.0, 0.0, 0.0, 1.0]  # [one-hot(1 of 2), one-hot(2 of 3)]
    assert out["inv.1.bits"].tolist() == [1.0, 0.0]
    assert out["pos"].dtype == np.float32 and out["pos"].tolist() == [0.5, -0.25]
    assert out["img"].shape == (3, 5, 6) and out["img"][2, 4, 5] == img[4, 5, 2] == 89
    for k, v in out.items():
        assert flat.spaces[k].contains(v), k


@pytest.mark.parametrize("shape, last", [((84, 84, 4), True), ((7, 7, 3), True), ((64, 48, 1), True),
                                         ((4, 84, 84), False), ((3, 3, 3), False), ((7, 7, 7), False),
                                         ((1, 10, 10), False)])
def test_channels_last_detection(shape, last):
    assert channels_last(shape) is last


def test_channels_first_images_and_grey_frames():
    flat = ObsFlattener(spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert flat.spaces["obs"].shape == (4, 84, 84)
    grey = ObsFlattener(spaces.Box(0, 255, (10, 12), np.uint8))
    assert grey.spaces["obs"].shape == (1, 10, 12)
    assert grey(np.full((10, 12), 7, np.uint8))["obs"].shape == (1, 10, 12)


def test_an_unsupported_space_is_refused_naming_its_path():
    space = spaces.Dict({"a": spaces.Tuple((spaces.Discrete(2), spaces.Dict({"words": spaces.Text(5)})))})
    with pytest.raises(UnsupportedSpaceError, match=r"observation space\['a'\]\[1\]\['words'\] is Text\(") as err:
        ObsFlattener(space)
    assert err.value.path == "observation space['a'][1]['words']"
    with pytest.raises(UnsupportedSpaceError, match=r"observation space\['s'\] is Sequence"):
        ObsFlattener(spaces.Dict({"s": spaces.Sequence(spaces.Discrete(2))}))
    with pytest.raises(UnsupportedSpaceError, match=r"keys starting with 'zoo:' are Zoo's own"):
        ObsFlattener(spaces.Dict({"zoo:x": spaces.Discrete(2)}))


def test_a_pettingzoo_style_mask_entry_is_taken_out_of_the_features():
    space = spaces.Dict({"observation": spaces.Box(0, 1, (3,), np.float32),
                         "action_mask": spaces.Box(0, 1, (4,), np.int8)})
    flat = ObsFlattener(space)
    assert sorted(flat.spaces) == ["observation", ACTION_MASK_KEY]
    out = flat({"observation": np.zeros(3, np.float32), "action_mask": np.array([1, 0, 0, 1], np.int8)})
    assert out[ACTION_MASK_KEY].dtype == bool and out[ACTION_MASK_KEY].tolist() == [True, False, False, True]
    assert flat.zeros()[ACTION_MASK_KEY].tolist() == [True] * 4  # an inactive agent's padding allows all


def test_mask_sizes_and_tuple_masks():
    assert mask_size(spaces.Discrete(5)) == 5
    assert mask_size(spaces.MultiDiscrete([2, 3])) == 5
    assert mask_size(spaces.MultiBinary(3)) == 6
    assert mask_size(spaces.Box(-1, 1, (2,))) == 0
    # MultiDiscrete masks as Gymnasium gives them: one array per entry, concatenated
    assert as_mask((np.array([1, 0], np.int8), np.array([0, 1, 1], np.int8)), 5, "m").tolist() == \
        [True, False, False, True, True]
    with pytest.raises(ValueError, match="action mask has 3 entries, expected 5"):
        as_mask(np.ones(3), 5, "m")


def test_box_actions_are_clipped_for_the_env_and_the_unclipped_sample_keeps_its_log_prob():
    space = spaces.Box(-2.0, 2.0, (1,), np.float32)
    head = GaussianHead(space)  # log_std = 0: std 1
    mean = torch.zeros(1, 1)
    sampled = torch.tensor([[2.5]])
    logp, entropy = head.log_prob_entropy(mean, sampled)
    # N(0, 1) density at 2.5: -2.5^2 / 2 - ln(2 pi) / 2 = -3.125 - 0.9189385 = -4.0439385
    assert logp.item() == pytest.approx(-3.125 - 0.5 * math.log(2 * math.pi), abs=1e-6)
    assert entropy.item() == pytest.approx(0.5 + 0.5 * math.log(2 * math.pi), abs=1e-6)  # 1.4189385
    clip = ActionClipper(space)
    actions = np.array([[2.5], [-3.0], [0.5]])
    env_actions = clip(actions)
    assert env_actions.tolist() == [[2.0], [-2.0], [0.5]] and env_actions.dtype == np.float32
    assert actions.tolist() == [[2.5], [-3.0], [0.5]]  # the stored sample is untouched


def test_gymnasium_info_masks_and_episode_statistics():
    import gymnasium

    class InfoMasked(gymnasium.Env):
        observation_space = spaces.Discrete(4)
        action_space = spaces.Discrete(3)

        def reset(self, seed=None, options=None):
            return 2, {"action_mask": np.array([1, 1, 0], np.int8)}

        def step(self, action):
            return 1, 1.0, True, False, {"action_mask": np.array([0, 1, 0], np.int8)}

    env = GymnasiumEnv(gymnasium.wrappers.RecordEpisodeStatistics(InfoMasked()), "info-masked")
    assert env.spec.observation_space[ACTION_MASK_KEY].shape == (3,)
    obs, _ = env.reset(seed=0)
    assert obs["obs"].tolist() == [[0.0, 0.0, 1.0, 0.0]] and obs[ACTION_MASK_KEY].tolist() == [[True, True, False]]
    obs, _, _, _, info = env.step(np.array([1]))
    assert obs[ACTION_MASK_KEY].tolist() == [[False, True, False]]
    assert info["episode"] == {"return": 1.0, "length": 1}  # RecordEpisodeStatistics' r / l, translated


def test_policies_take_flattened_nested_observations_with_images_and_masks():
    from zoo.core.env import EnvSpec
    from zoo.plugins.algorithms.mappo.networks import MLPPolicy
    from zoo.plugins.algorithms.ppo.networks import ActorCritic

    space = spaces.Dict({"grid": spaces.Box(0, 255, (7, 7, 3), np.uint8),
                         "inv": spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32))),
                         "action_mask": spaces.Box(0, 1, (4,), np.int8)})
    flat = ObsFlattener(space)
    spec = EnvSpec("nested", ("a",), flat.spaces, spaces.Discrete(4))
    raw = {"grid": np.full((7, 7, 3), 255, np.uint8), "inv": (1, np.array([0.5, -0.5], np.float32)),
           "action_mask": np.array([0, 0, 1, 0], np.int8)}
    obs = {k: torch.as_tensor(np.stack([v] * 5)) for k, v in flat(raw).items()}
    policy = ActorCritic(spec)
    assert len(policy.encoder.cnns) == 1 and policy.encoder.vector.keys == ["inv.0", "inv.1"]
    # features: small CNN (7x7 grid) 256 + one-hot 3 + Box 2; the mask is no feature
    assert policy.encoder.out_dim == 256 + 3 + 2
    out = policy.act(obs)
    assert out["action"].tolist() == [2] * 5 and out["logp"].tolist() == pytest.approx([0.0] * 5, abs=1e-6)
    logp, entropy, _ = policy.evaluate(obs, out["action"])
    assert entropy.tolist() == pytest.approx([0.0] * 5, abs=1e-6)  # one legal action: no entropy
    # MAPPO's MLP policy reads vectors only: the same spec without the image
    vec_spec = EnvSpec("nested", ("a",), {k: s for k, s in flat.spaces.items() if k != "grid"}, spaces.Discrete(4))
    mappo = MLPPolicy(vec_spec)
    assert mappo.actor_keys == ["inv.0", "inv.1"]
    assert mappo.act({k: v for k, v in obs.items() if k != "grid"})["action"].tolist() == [2] * 5


def test_zoo_eval_play_clips_box_actions_like_the_actors():
    import gymnasium

    from zoo.play import play

    class Recording(gymnasium.Env):
        observation_space = spaces.Box(-1, 1, (1,), np.float32)
        action_space = spaces.Box(-2.0, 2.0, (1,), np.float32)
        received = []

        def reset(self, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            Recording.received.append(np.asarray(action).tolist())
            return np.zeros(1, np.float32), 0.0, True, False, {}

    class Pushy(torch.nn.Module):  # always asks for 5.0: outside the bounds
        def act(self, obs, deterministic=False):
            return {"action": torch.full((next(iter(obs.values())).shape[0], 1), 5.0)}

    play(Pushy(), [GymnasiumEnv(Recording(), "recording")], episodes=2, seed=0)
    assert Recording.received == [[2.0], [2.0]]


def test_the_actor_stores_the_sampled_box_action_and_steps_the_env_with_the_clipped_one():
    import gymnasium

    from zoo.core.workers.actor import EnvGroup, SampleBuffer

    class Recording(gymnasium.Env):
        observation_space = spaces.Box(-1, 1, (1,), np.float32)
        action_space = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))

        def __init__(self):
            self.received = []

        def reset(self, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.received.append(np.asarray(action).tolist())
            return np.zeros(1, np.float32), 0.0, False, False, {}

    envs = [GymnasiumEnv(Recording(), "rec"), GymnasiumEnv(Recording(), "rec")]
    group = EnvGroup(envs, [0, 1])
    buf = SampleBuffer(2, group.obs)
    sampled = np.array([[2.5, -0.5], [0.25, 0.75]], np.float32)  # env 0 out of bounds on both axes
    action = buf.record_policy({"action": sampled}, 0, group.active, group.on_reset)
    group.step(action, buf, [])
    assert envs[0].env.received == [[2.0, 0.0]] and envs[1].env.received == [[0.25, 0.75]]
    assert buf.action[0].tolist() == [[2.5, -0.5], [0.25, 0.75]]  # the sample keeps what the policy drew
