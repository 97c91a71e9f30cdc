"""The ``atari`` env plugin: DeepMind preprocessing, episodic life, game-score accounting.

Most tests drive the real wrapper stack (:func:`wrap`, via :class:`AtariEnv`) over
:class:`FakeAtari`, a deterministic stand-in for ale-py's ``AtariEnv`` whose every expected
value can be worked out by hand; the last ones run the real ALE.
"""
from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from zoo.plugins.envs.atari.env import AtariConfig, AtariEnv, make, resolve_game

FIRE = np.array([1])
NOOP = np.array([0])


class _FakeALEInterface:
    """The part of ``ale_py.ALEInterface`` that the wrappers use."""

    def __init__(self, game: "FakeAtari") -> None:
        self.game = game

    def lives(self) -> int:
        return self.game.lives_left

    def getEpisodeFrameNumber(self) -> int:  # noqa: N802 (ALE's name)
        return self.game.episode_frame

    def getScreenGrayscale(self, out: np.ndarray) -> None:  # noqa: N802
        out.fill(self.game.screen(self.game.frame))

    def getScreenRGB(self, out: np.ndarray) -> None:  # noqa: N802
        out.fill(self.game.screen(self.game.frame))


class FakeAtari(gym.Env):
    """A deterministic ALE game with ``frameskip=1`` (one ``step`` = one frame).

    ``frame`` counts every frame since construction (each reset and each step shows a new
    one) and every pixel of frame ``f`` is ``screen(f)`` (default: ``f``), so an observation
    tells which frame it came from. ``episode_frame`` counts frames since the last reset.
    A non-NOOP action is a *move* worth ``reward_per_move``; a life is lost after every
    ``moves_per_life`` moves and the game is over (terminated) when no life is left. NOOP
    only advances the frame, so no-op resets change no score or life. ``rgb`` gives
    ``[210, 160, 3]`` frames, as ale-py's ``obs_type="rgb"``, instead of ``[210, 160]``.
    """

    metadata: dict = {}

    def __init__(self, lives: int = 2, moves_per_life: int = 5, reward_per_move: float = 3.0,
                 screen=lambda f: f, rgb: bool = False) -> None:
        self._frameskip = 1
        self.observation_space = spaces.Box(0, 255, (210, 160, 3) if rgb else (210, 160), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.ale = _FakeALEInterface(self)
        self.start_lives, self.moves_per_life, self.reward_per_move = lives, moves_per_life, reward_per_move
        self.screen = screen
        self.frame = 0
        self.resets = 0
        self.episode_frame = self.moves = 0
        self.lives_left = lives

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE"]

    def _obs(self) -> np.ndarray:
        return np.full(self.observation_space.shape, self.screen(self.frame), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.frame += 1
        self.resets += 1
        self.episode_frame = self.moves = 0
        self.lives_left = self.start_lives
        return self._obs(), {"lives": self.lives_left}

    def step(self, action):
        self.frame += 1
        self.episode_frame += 1
        reward = 0.0
        if action != 0 and self.lives_left > 0:
            reward = self.reward_per_move
            self.moves += 1
            if self.moves % self.moves_per_life == 0:
                self.lives_left -= 1
        return self._obs(), reward, self.lives_left == 0, False, {"lives": self.lives_left}


def fake_env(fake: FakeAtari, **config) -> AtariEnv:
    return AtariEnv(fake, AtariConfig(**config), "fake", seed=0)


def frames(obs: dict[str, np.ndarray]) -> list[int]:
    """The frame value of each stacked frame of agent 0's observation ([4, 84, 84], constant)."""
    stack = obs["obs"][0]
    assert all(np.all(f == f.flat[0]) for f in stack)
    return [int(f.flat[0]) for f in stack]


# -- accounting: episodic life and clipping are training signals only ----------------------

def test_two_lives_give_two_training_episodes_and_one_game_score():
    # Default config: frame_skip 4, random no-op reset, episodic life, clipping. A life is
    # 20 moves = 5 env steps of FIRE; 0.75 per move = raw reward 3 per env step.
    fake = FakeAtari(lives=2, moves_per_life=20, reward_per_move=0.75)
    env = fake_env(fake)
    env.reset()
    rewards, terminated, episodes = [], [], []
    for t in range(1, 11):
        _, r, term, trunc, info = env.step(FIRE)
        rewards.append(float(r[0]))
        terminated.append(bool(term[0]))
        assert not trunc[0]
        if "episode" in info:
            episodes.append((t, info["episode"]))
        if term[0] and t == 5:
            _, reset_info = env.reset()  # a lost life: the game goes on
            assert "episode" not in reset_info
    assert rewards == [1.0] * 10
    assert terminated == [False] * 4 + [True] + [False] * 4 + [True]
    # One game score over both lives: 10 moves-steps x 3 = 30, not two episodes of 15.
    # Length: 10 FIRE steps + the no-op step of the life-loss reset.
    assert episodes == [(10, {"return": 30.0, "length": 11})]
    assert fake.resets == 1
    assert env.spec.reports_episodes is True


def test_life_loss_reset_continues_the_game_with_one_noop_step():
    fake = FakeAtari(lives=2, moves_per_life=5)
    env = fake_env(fake, frame_skip=1, noop_max=0)
    obs, _ = env.reset()
    assert frames(obs) == [1, 1, 1, 1]
    for _ in range(5):
        obs, r, term, _, info = env.step(FIRE)
    assert frames(obs) == [3, 4, 5, 6] and term[0] and "episode" not in info
    assert fake.lives_left == 1
    obs, _ = env.reset()
    # Not a new game: the same game, one NOOP frame later (frame 7), the stack restarted.
    assert fake.resets == 1 and fake.lives_left == 1 and fake.episode_frame == 6
    assert frames(obs) == [7, 7, 7, 7]
    for _ in range(5):
        obs, r, term, _, info = env.step(FIRE)
    assert term[0] and info["episode"] == {"return": 30.0, "length": 11}
    # The game is over: the next reset is a real one, and the next game is scored afresh.
    obs, info = env.reset()
    assert fake.resets == 2 and fake.lives_left == 2 and frames(obs) == [13, 13, 13, 13]
    assert "episode" not in info


def test_without_episodic_life_and_clipping_the_signal_is_the_raw_game():
    fake = FakeAtari(lives=2, moves_per_life=5)
    env = fake_env(fake, frame_skip=1, noop_max=0, episodic_life=False, clip_rewards=False)
    env.reset()
    out = [env.step(FIRE) for _ in range(10)]
    assert [float(o[1][0]) for o in out] == [3.0] * 10
    assert [bool(o[2][0]) for o in out] == [False] * 9 + [True]
    assert [o[4]["episode"] for o in out if "episode" in o[4]] == [{"return": 30.0, "length": 10}]


def test_negative_rewards_clip_to_minus_one():
    env = fake_env(FakeAtari(lives=1, moves_per_life=5, reward_per_move=-7.0), frame_skip=1, noop_max=0)
    env.reset()
    out = [env.step(FIRE) for _ in range(5)]
    assert [float(o[1][0]) for o in out] == [-1.0] * 5
    assert out[-1][4]["episode"] == {"return": -35.0, "length": 5}


def test_truncation_at_max_episode_frames_reports_the_game_and_resets_it():
    # frame_skip 4, no no-ops: env step k ends on episode frame 4k, so 12 frames -> step 3.
    fake = FakeAtari(lives=2, moves_per_life=1000, reward_per_move=0.75)
    env = fake_env(fake, noop_max=0, max_episode_frames=12)
    env.reset()
    out = [env.step(FIRE) for _ in range(3)]
    assert [bool(o[3][0]) for o in out] == [False, False, True]
    assert [bool(o[2][0]) for o in out] == [False, False, False]
    assert out[2][4]["episode"] == {"return": 9.0, "length": 3}
    env.reset()  # truncated game: a real reset although lives remain
    assert fake.resets == 2 and fake.episode_frame == 0


# -- observations ---------------------------------------------------------------------------

def test_frame_stack_across_reset_never_aliases_earlier_observations():
    # Two lives of 5 moves: the first life ends on frames 5, 6; its reset (a no-op step of
    # the same game) shows frame 7 and restarts the stack.
    env = fake_env(FakeAtari(lives=2, moves_per_life=5), frame_skip=1, noop_max=0)
    env.reset()
    seen = [env.step(FIRE)[0] for _ in range(5)]
    assert frames(seen[-2]) == [2, 3, 4, 5] and frames(seen[-1]) == [3, 4, 5, 6]
    reset_obs, _ = env.reset()
    assert frames(reset_obs) == [7, 7, 7, 7]
    next_obs = env.step(FIRE)[0]
    assert frames(next_obs) == [7, 7, 7, 8]
    assert frames(reset_obs) == [7, 7, 7, 7]  # still, after the step
    assert frames(seen[-1]) == [3, 4, 5, 6]
    assert next_obs["obs"].dtype == np.uint8 and next_obs["obs"].shape == (1, 4, 84, 84)


def test_frame_stack_across_a_new_game():
    # One life of 5 moves: the game ends on step 5 (frame 6); the real reset shows frame 7.
    env = fake_env(FakeAtari(lives=1, moves_per_life=5), frame_skip=1, noop_max=0)
    env.reset()
    seen = [env.step(FIRE)[0] for _ in range(5)]
    # gymnasium's AtariPreprocessing leaves the frame skip on game over before reading the
    # screen, so a game's last observation repeats the frame before it (5, not 6). Zoo never
    # learns from it: a terminated step is not bootstrapped, and GameScore truncates only
    # after complete steps.
    assert frames(seen[-2]) == [2, 3, 4, 5] and frames(seen[-1]) == [3, 4, 5, 5]
    reset_obs, _ = env.reset()
    assert frames(reset_obs) == [7, 7, 7, 7]
    assert frames(env.step(FIRE)[0]) == [7, 7, 7, 8]
    assert frames(reset_obs) == [7, 7, 7, 7] and frames(seen[-1]) == [3, 4, 5, 5]


def test_frame_skip_max_pools_the_last_two_frames():
    # Frame f shows f when odd, 100 - f when even. Reset: frame 1. Step 1 plays frames 2..5
    # -> max(s(4)=96, s(5)=5) = 96; step 2 plays 6..9 -> max(s(8)=92, s(9)=9) = 92.
    fake = FakeAtari(lives=1, moves_per_life=1000, screen=lambda f: f if f % 2 else 100 - f)
    env = fake_env(fake, noop_max=0)
    obs, _ = env.reset()
    assert frames(obs) == [1, 1, 1, 1]
    assert frames(env.step(FIRE)[0]) == [1, 1, 1, 96]
    assert frames(env.step(FIRE)[0]) == [1, 1, 96, 92]


def test_noop_reset_takes_one_to_noop_max_single_frame_noops_reproducibly():
    counts = []
    for seed in (0, 0, 1, 2, 3):
        fake = FakeAtari()
        obs, _ = AtariEnv(fake, AtariConfig(noop_max=3), "fake", seed=seed).reset()
        n = fake.episode_frame
        assert frames(obs) == [1 + n] * 4  # frame 1 is the reset; each no-op is one frame
        counts.append(n)
    assert all(1 <= n <= 3 for n in counts) and counts[0] == counts[1]


def test_rgb_observations_keep_the_colour_axis():
    # 2 stacked RGB frames [2, 42, 42, 3] reach the CNN channels-first: [2 frames x 3 colours, 42, 42]
    env = fake_env(FakeAtari(rgb=True), grayscale=False, frame_stack=2, screen_size=42, noop_max=0)
    obs, _ = env.reset()
    assert obs["obs"].shape == (1, 6, 42, 42) and obs["obs"].dtype == np.uint8
    assert np.all(obs["obs"] == 1)
    assert env.spec.observation_space["obs"].shape == (6, 42, 42)


# -- config and names -------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, allowed", [
    ("frame_skip", 0, ">= 1"), ("frame_stack", 0, ">= 1"), ("noop_max", -1, ">= 0 (0 = none)"),
    ("screen_size", 0, ">= 1"), ("max_episode_frames", -5, ">= 0 (0 = no limit)"),
    ("sticky_action_prob", 1.5, "in [0, 1]"), ("sticky_action_prob", -0.1, "in [0, 1]"),
    ("sticky_action_prob", float("nan"), "in [0, 1]")])
def test_bad_config_fields_are_named(field, value, allowed):
    with pytest.raises(ValueError) as info:
        AtariConfig(**{field: value})
    assert str(info.value) == f"env.{field} must be {allowed}, got {value!r}"


@pytest.mark.parametrize("arg, ale_id", [("Pong", "ALE/Pong-v5"), ("pong", "ALE/Pong-v5"),
                                         ("space_invaders", "ALE/SpaceInvaders-v5"),
                                         ("SpaceInvaders", "ALE/SpaceInvaders-v5"),
                                         ("ALE/Breakout-v5", "ALE/Breakout-v5")])
def test_game_names_resolve_to_ale_ids(arg, ale_id):
    assert resolve_game(arg) == ale_id


@pytest.mark.parametrize("arg", ["Pongg", "PongNoFrameskip-v4"])
def test_unknown_game_names_the_game_and_the_closest_ale_games(arg):
    with pytest.raises(ValueError) as err:
        make(arg, AtariConfig(), seed=0)
    assert repr(arg) in str(err.value) and "Closest ALE games: Pong" in str(err.value)


def test_missing_game_says_how_to_name_one():
    with pytest.raises(ValueError, match="--env atari:Pong"):
        make(None, AtariConfig(), seed=0)


def test_plugin_registers_without_importing_ale_gymnasium_or_torch():
    import subprocess

    code = (
        "import sys; import zoo.plugins.envs.atari.plugin as p; names = []\n"
        "p.register_envs(lambda name, factory, **kw: names.append((name, factory, kw)))\n"
        "assert names == [('atari', 'zoo.plugins.envs.atari.env:make', {'summary': names[0][2]['summary'],"
        " 'config': 'zoo.plugins.envs.atari.env:AtariConfig', 'default_budget': ('frames', 10_000_000), 'renderer': 'zoo.plugins.envs.atari.env:render',"
        " 'vector_factory': 'zoo.plugins.envs.atari.env:make_vector'})], names\n"
        "heavy = [m for m in ('ale_py', 'gymnasium', 'torch', 'cv2') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the real ALE -------------------------------------------------------------------------------

def test_pong_smoke():
    env = make("Pong", AtariConfig(), seed=0)
    reset_obs, _ = env.reset()
    first = reset_obs["obs"].copy()
    rng = np.random.default_rng(0)
    for _ in range(50):
        obs, r, term, trunc, info = env.step(rng.integers(0, env.spec.action_space.n, size=1))
        assert obs["obs"].dtype == np.uint8 and obs["obs"].shape == (1, 4, 84, 84)
        assert r.dtype == np.float32 and r.shape == (1,) and float(r[0]) in (-1.0, 0.0, 1.0)
        assert term.shape == trunc.shape == (1,) and not term[0] and not trunc[0]
    np.testing.assert_array_equal(reset_obs["obs"], first)  # not overwritten by later steps
    assert env.spec.frame_skip == 4
    assert env.spec.action_space.n == 6
    assert env.spec.resolved["sticky_action_prob"] == 0.25
    assert env.spec.resolved["ale_id"] == "ALE/Pong-v5"
    assert env.spec.resolved["frame_skip"] == 4 and env.spec.resolved["noop_max"] == 30
    assert env.env.unwrapped.ale.getFloat("repeat_action_probability") == 0.25
    env.close()


def test_sticky_action_prob_zero_reaches_the_ale_and_the_resolved_config():
    env = make("Pong", AtariConfig(sticky_action_prob=0.0), seed=0)
    assert env.spec.resolved["sticky_action_prob"] == 0.0
    assert env.env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    env.close()


def test_same_seed_same_game():
    def play(seed):
        env = make("Pong", AtariConfig(), seed=seed)
        out = [env.reset()[0]["obs"]]
        out += [env.step(np.array([k % 6]))[0]["obs"] for k in range(30)]
        env.close()
        return np.stack(out)

    np.testing.assert_array_equal(play(3), play(3))


def test_breakout_life_loss_continues_the_real_game():
    env = make("Breakout", AtariConfig(full_action_space=False), seed=0)
    env.reset()
    ale = env.env.unwrapped.ale
    assert ale.lives() == 5
    for _ in range(5000):
        _, _, term, trunc, info = env.step(np.array([1]))  # FIRE: launch the ball, never move
        if term[0]:
            break
    assert term[0] and not trunc[0] and "episode" not in info and info["lives"] == 4
    frame_before = ale.getEpisodeFrameNumber()
    _, info = env.reset()
    # One no-op env step of 4 frames later, in the same game, with the same 4 lives left.
    assert ale.getEpisodeFrameNumber() == frame_before + 4 and ale.lives() == 4
    env.close()
