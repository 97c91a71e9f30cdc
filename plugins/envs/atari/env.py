"""Atari 2600 games (ale-py) with DeepMind-style preprocessing, in Zoo's env interface.

Wrapper stack, innermost first (:func:`wrap`):

1. the ALE game, ``frameskip=1``, sticky actions with probability ``sticky_action_prob``
   (Machado et al. 2018, "Revisiting the Arcade Learning Environment", JAIR 61, sec. 5.2),
   no frame limit of its own;
2. ``gymnasium.wrappers.AtariPreprocessing``: no-op reset (1..``noop_max`` NOOPs, uniform),
   frame-skip with a max over the last two frames, ``screen_size`` x ``screen_size``
   grayscale (or RGB) uint8 via OpenCV's area interpolation (Mnih et al. 2015, "Human-level
   control through deep reinforcement learning", Nature 518, Methods: preprocessing).
   On the step that ends a game it stops before reading the final screen, so that last
   observation repeats the previous frame; harmless, since a terminated step is never
   bootstrapped and :class:`GameScore` truncates only after complete steps;
3. :class:`GameScore`: the raw score and length of the *whole game*, put in
   ``info["episode"]`` when the game ends, and truncation at ``max_episode_frames``;
4. :class:`EpisodicLife` (training signal): ``terminated`` on a life loss, while the next
   ``reset()`` continues the same game with one no-op step (OpenAI baselines'
   ``EpisodicLifeEnv``);
5. reward clipping to its sign (training signal; Mnih et al. 2015, Methods);
6. ``gymnasium.wrappers.FrameStackObservation``: the last ``frame_stack`` frames, padded
   with the reset frame; each returned stack is a fresh array.

Units: an env step is one agent decision = ``frame_skip`` ALE frames.

``env.backend="vector"`` replaces this stack, in the actors, by ale-py's C++
``AtariVectorEnv`` stepping a whole ring group per call, set up to give the same training
signal (:mod:`zoo.plugins.envs.atari.vector`; the differences are listed in docs/envs.md).
Single envs (the config check, ``zoo eval``) always use this Python stack.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np

from zoo.core.env import GymnasiumEnv
from zoo.core.options import bounded, check_bounds

NOOP = 0  # ALE's action 0 is NOOP in both the minimal and the full action set


@dataclass
class AtariConfig:
    """Options of the ``atari`` environment plugin (defaults: DeepMind / Machado et al. 2018).

    - ``noop_max``: at a game's reset, take a uniform random number in ``1..noop_max`` of
      NOOP env steps of one frame each (0 disables).
    - ``frame_skip``: ALE frames per env step; the observation is the pixel-wise max of the
      last two frames.
    - ``screen_size``: observations are ``screen_size`` x ``screen_size`` pixels.
    - ``grayscale``: luminance frames ``uint8 [H, W]``; False gives RGB ``uint8 [H, W, 3]``.
    - ``frame_stack``: frames per observation: ``uint8 [frame_stack, H, W(, 3)]``.
    - ``sticky_action_prob``: probability that the ALE repeats the previous action on a
      frame instead of the new one (Machado et al. 2018).
    - ``episodic_life``: ``terminated`` on every life loss (training signal only).
    - ``clip_rewards``: rewards are replaced by their sign (training signal only).
    - ``full_action_space``: all 18 joystick actions instead of the game's minimal set.
    - ``max_episode_frames``: a game is ``truncated`` at the first env step at which it has
      run this many ALE frames (no-op reset frames included); 0 means no limit.
      108,000 frames = 30 minutes of play at 60 Hz.
    - ``backend``: how the actors step their games: ``"vector"`` (default), one ale-py
      ``AtariVectorEnv`` per ring group, preprocessing in C++ threads
      (:mod:`zoo.plugins.envs.atari.vector`; needs ale-py >= 0.12.1), measured faster
      (benchmarks/RESULTS.md); ``"python"``, one gymnasium wrapper stack per game
      (:mod:`zoo.plugins.envs.atari.env`). Single envs (the config check, ``zoo eval``) always
      use the Python path.
    - ``vector_threads``: C++ threads stepping each ring group's games with the vector
      backend (ale-py's ``num_threads``; 0 = one per game, up to the machine's cores).

    Raises:
        ValueError: a field is out of range (the message names it and the valid range).
    """

    noop_max: int = field(default=30, metadata=bounded(ge=0, hint="0 = none"))
    frame_skip: int = field(default=4, metadata=bounded(ge=1))
    screen_size: int = field(default=84, metadata=bounded(ge=1))
    grayscale: bool = True
    frame_stack: int = field(default=4, metadata=bounded(ge=1))
    sticky_action_prob: float = field(default=0.25, metadata=bounded(ge=0, le=1))
    episodic_life: bool = True
    clip_rewards: bool = True
    full_action_space: bool = False
    max_episode_frames: int = field(default=108_000, metadata=bounded(ge=0, hint="0 = no limit"))
    backend: Literal["python", "vector"] = "vector"
    vector_threads: int = field(default=1, metadata=bounded(ge=0, hint="0 = one per game, up to the cores"))

    def __post_init__(self) -> None:
        check_bounds(self, "env.")


# -- game names -----------------------------------------------------------------------

def _ale_ids() -> dict[str, str]:
    """Every ALE game as ``{"Pong": "ALE/Pong-v5", ...}`` (imports ale-py)."""
    import ale_py

    gym.register_envs(ale_py)
    return {
        env_id[len("ALE/"):-len("-v5")]: env_id
        for env_id in gym.registry
        if env_id.startswith("ALE/") and env_id.endswith("-v5")
    }


def _normal(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def game_names() -> list[str]:
    """The ALE game names accepted by :func:`make`, sorted: ``["Adventure", ..., "Zaxxon"]``."""
    return sorted(_ale_ids())


def resolve_game(arg: str | None) -> str:
    """The ALE id for a game name: ``"Pong"``, ``"pong"`` or ``"ALE/Pong-v5"`` -> ``"ALE/Pong-v5"``.

    Case, ``_`` and ``-`` are ignored (``space_invaders`` -> ``ALE/SpaceInvaders-v5``).

    Raises:
        ValueError: no game given, or no ALE game has that name; the message names the game
            and the closest ALE game names.
    """
    if not arg:
        raise ValueError("env 'atari' needs a game name: --env atari:Pong (or Breakout, SpaceInvaders, ...)")
    ids = _ale_ids()
    if arg in ids.values():
        return arg
    by_normal = {_normal(name): name for name in ids}
    name = by_normal.get(_normal(arg))
    if name is not None:
        return ids[name]
    # Suggest from the bare game name: "PongNoFrameskip-v4" or "ALE/Pongg-v5" -> "Pong".
    bare = re.sub(r"^ALE/|(NoFrameskip|Deterministic)?-v\d+$", "", arg)
    close = difflib.get_close_matches(_normal(bare), list(by_normal), n=3, cutoff=0.6)
    hint = f" Closest ALE games: {', '.join(by_normal[c] for c in close)}." if close else ""
    raise ValueError(
        f"unknown Atari game {arg!r}.{hint} Give an ALE game name such as --env atari:Pong "
        f"({len(ids)} games; zoo.plugins.envs.atari.env.game_names() lists them)."
    )


# -- wrappers -------------------------------------------------------------------------

class GameScore(gym.Wrapper):
    """Accounts the whole game (all lives) and truncates it at ``max_episode_frames``.

    Wraps a frame-skipped ALE env (``env.unwrapped.ale`` gives ``getEpisodeFrameNumber()``).
    When a game ends (``terminated`` or ``truncated``), ``info["episode"]`` is
    ``{"return": float, "length": int}``: the sum of the *raw* (unclipped) rewards and the
    number of env steps since the game's reset, counting the no-op steps that
    :class:`EpisodicLife` takes after a life loss.
    ``truncated`` is set (unless ``terminated``) once the game has run
    ``max_episode_frames`` ALE frames; 0 disables the limit.
    """

    def __init__(self, env: gym.Env, max_episode_frames: int) -> None:
        super().__init__(env)
        self.max_episode_frames = max_episode_frames
        self.score, self.length = 0.0, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.score, self.length = 0.0, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.score += float(reward)
        self.length += 1
        if (self.max_episode_frames and not terminated
                and _ale(self.env).getEpisodeFrameNumber() >= self.max_episode_frames):
            truncated = True
        if terminated or truncated:
            info = {**info, "episode": {"return": self.score, "length": self.length}}
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """``terminated`` on a life loss; ``reset()`` then continues the game (training signal).

    After a life is lost (``env.unwrapped.ale.lives()`` decreased and is still > 0),
    ``step`` returns ``terminated=True``; the following ``reset()`` does not reset the game
    but takes one NOOP env step and returns its observation (and info), as OpenAI
    baselines' ``EpisodicLifeEnv``. The game is really reset only when it is over
    (terminated or truncated below this wrapper), when ``reset`` gets a ``seed``, or when
    that no-op step itself ends the game (then the ended game's ``info["episode"]`` is
    passed on in the reset's info). Unlike gymnasium's ``AtariPreprocessing(
    terminal_on_life_loss=True)``, which starts a new game on every reset.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = _ale(self.env).lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:
                ended = info.get("episode")
                obs, info = self.env.reset(options=options)
                if ended is not None:
                    info = {**info, "episode": ended}
        self.game_over = False
        self.lives = _ale(self.env).lives()
        return obs, info


def sign_reward(reward: SupportsFloat) -> float:
    """``-1.0``, ``0.0`` or ``1.0``: the sign of ``reward`` (Mnih et al. 2015, Methods)."""
    return float(np.sign(float(reward)))


def _ale(env: gym.Env) -> Any:
    """ale-py's ``ALEInterface`` of an Atari env (its unwrapped ``AtariEnv``'s ``ale``)."""
    unwrapped: Any = env.unwrapped
    return unwrapped.ale


def wrap(env: gym.Env, config: AtariConfig) -> gym.Env:
    """Apply the preprocessing stack (module docstring) to an ALE env with ``frameskip=1``.

    ``env`` is ale-py's ``AtariEnv`` or anything offering the same: ``env.unwrapped._frameskip
    == 1``, ``get_action_meanings()[0] == "NOOP"``, ``np_random``, and ``env.unwrapped.ale``
    with ``lives()``, ``getEpisodeFrameNumber()``, ``getScreenGrayscale(out)`` and
    ``getScreenRGB(out)``. Returns an env whose observations are ``uint8 [frame_stack,
    screen_size, screen_size]`` (RGB: ``[..., 3]``) and which never resets by itself.

    Raises:
        ImportError: OpenCV (``cv2``) is not installed.
        ValueError: ``env`` skips frames itself or action 0 is not NOOP.
    """
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward

    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    except ImportError as exc:
        raise ImportError("the atari env resizes frames with OpenCV: pip install opencv-python-headless") from exc
    env = AtariPreprocessing(
        env,
        noop_max=config.noop_max,
        frame_skip=config.frame_skip,
        screen_size=config.screen_size,
        terminal_on_life_loss=False,  # it would reset the game on every life; see EpisodicLife
        grayscale_obs=config.grayscale,
        scale_obs=False,
    )
    env = GameScore(env, config.max_episode_frames)
    if config.episodic_life:
        env = EpisodicLife(env)
    if config.clip_rewards:
        env = TransformReward(env, sign_reward)
    return FrameStackObservation(env, config.frame_stack, padding_type="reset")


# -- Zoo env ----------------------------------------------------------------------------

class AtariEnv(GymnasiumEnv):
    """A preprocessed Atari game in Zoo's interface (one agent).

    Observations ``{"obs": uint8 [1, frame_stack, screen_size, screen_size]}`` (RGB:
    ``[1, frame_stack * 3, H, W]``, the stacked frames' colour planes channels-first, see
    :mod:`zoo.core.spaces`), actions ``int [1]`` (Discrete), rewards ``float32 [1]``
    (clipped to the sign when ``clip_rewards``). ``info["episode"]`` carries the raw game
    score and length (env steps) when a game ends; a life loss alone never produces it, so
    ``spec.reports_episodes`` is True. In the rare case that the no-op step of a life-loss
    reset ends the game, that ``info["episode"]`` comes in the ``reset``'s info.

    ``base_env`` is an ALE env with ``frameskip=1`` (see :func:`wrap`). ``seed`` seeds the
    first ``reset`` when it is called without one (ALE, sticky actions, no-op count) and the
    action space. Pass a seed to ``reset`` only to start a new game: a seeded reset always
    resets the game, even after a mere life loss.
    """

    def __init__(self, base_env: gym.Env, config: AtariConfig, env_id: str, seed: int | None = None,
                 resolved: dict[str, Any] | None = None) -> None:
        env = wrap(base_env, config)
        if seed is not None:
            env.action_space.seed(seed)
        # reports_episodes: only info["episode"] (a whole game) is a logged episode; a lost
        # life ends a training episode without one.
        super().__init__(env, env_id, frame_skip=config.frame_skip, resolved=resolved, reports_episodes=True,
                         action_mask=False)
        self._pending_seed = seed

    def reset(self, seed: int | None = None):
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return super().reset(seed)


def _resolved(ale_id: str, config: AtariConfig) -> dict[str, Any]:
    import ale_py

    return {"ale_id": ale_id, "frame_skip": config.frame_skip, "sticky_action_prob": float(config.sticky_action_prob),
            "noop_max": config.noop_max, "max_episode_frames": config.max_episode_frames,
            "ale_py_version": ale_py.__version__, "backend": config.backend}


def make(arg: str | None, config: AtariConfig | None = None, seed: int | None = 0) -> AtariEnv:
    """Build the ALE game ``arg`` (``"Pong"``, ``"Breakout"``, ``"ALE/Pong-v5"``...) with
    DeepMind-style preprocessing (module docstring).

    ``spec.frame_skip`` is ``config.frame_skip`` (frames = env steps x frame_skip) and
    ``spec.resolved`` holds ``ale_id``, ``frame_skip``, ``sticky_action_prob``, ``noop_max``,
    ``max_episode_frames``, ``ale_py_version`` and ``backend`` for the run's config. The
    env is always the Python stack, whatever ``config.backend`` (the actors build the
    vector backend through :func:`make_vector`).

    Raises:
        ValueError: unknown game (naming the closest ALE games) or a bad config field.
        ImportError: OpenCV is not installed, or ``config.backend == "vector"`` and ale-py is
            older than 0.12.1.
    """
    config = config if config is not None else AtariConfig()
    ale_id = resolve_game(arg)
    if config.backend == "vector":  # refused here, in the config check, before any worker starts
        from zoo.plugins.envs.atari.vector import check_ale_py

        check_ale_py()
    base = gym.make(
        ale_id,
        frameskip=1,
        repeat_action_probability=float(config.sticky_action_prob),
        full_action_space=config.full_action_space,
        obs_type="grayscale" if config.grayscale else "rgb",
        max_num_frames_per_episode=None,  # GameScore truncates, at an env-step boundary
        disable_env_checker=True,
    )
    return AtariEnv(base, config, ale_id, seed, _resolved(ale_id, config))


def make_vector(arg: str | None, config: AtariConfig | None, num_envs: int):
    """The ``vector_factory`` of the plugin: with ``config.backend == "vector"``, an
    :class:`~zoo.plugins.envs.atari.vector.AtariVector` of ``num_envs`` games ``arg``
    (one ring group of an actor); with ``"python"``, None (the actor builds :func:`make`
    envs one by one).

    Raises:
        ValueError: unknown game, or ``num_envs < 1``.
        ImportError: ale-py older than 0.12.1.
    """
    config = config if config is not None else AtariConfig()
    if config.backend != "vector":
        return None
    from zoo.plugins.envs.atari.vector import AtariVector

    ale_id = resolve_game(arg)
    return AtariVector(ale_id, config, num_envs, _resolved(ale_id, config))


def render(env: AtariEnv) -> np.ndarray:
    """The real game screen, ``uint8 [210, 160, 3]`` RGB, as the ALE shows it now: the last
    emulator frame of the last env step (the ``renderer`` this plugin registers; ``zoo eval
    --video`` calls it after each reset and env step, so one video frame = one env step =
    ``frame_skip`` emulator frames). Colour whatever the observation settings (grayscale,
    size, frame stack)."""
    return env.env.unwrapped.ale.getScreenRGB()


__all__ = ["AtariConfig", "AtariEnv", "EpisodicLife", "GameScore", "game_names", "make", "make_vector", "render",
           "resolve_game", "sign_reward", "wrap"]
