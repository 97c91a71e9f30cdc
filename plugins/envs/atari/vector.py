"""The ``vector`` backend of the ``atari`` plugin (``--set env.backend=vector``): ale-py's C++
``AtariVectorEnv`` (ale-py >= 0.12.1) steps a whole ring group of games in one call, with the
frame skip, max-pooling, grey scale, resize and frame stack done in C++ threads.

:class:`AtariVector` sets it up so that its training signal is the Python path's
(:mod:`zoo.plugins.envs.atari.env`): same observations, rewards, ``terminated`` /
``truncated`` flags and game scores for the same ALE seed and actions, except where
docs/envs.md ("Atari: the two backends") says otherwise. ale-py's own episodic life, reward
clipping, frame limit and FIRE reset are off; this module does them, vectorised over the
group, from the raw rewards, ``lives`` and ``episode_frame_number`` the C++ side reports:

- ``terminated``: the game is over, or (``episodic_life``) ``0 < lives < lives before``;
- ``truncated``: not game over and ``episode_frame_number >= max_episode_frames`` (no-op
  reset frames included) after a complete env step; such games are reset by a partial
  ``reset`` of those envs alone (ale-py's ``reset_mask``);
- rewards: the raw score change, replaced by its sign when ``clip_rewards``; the game score
  (``info["episode"]``) sums the raw rewards over all lives;
- frame stack: ale-py pads a new game's stack with zero frames; here the first frame of the
  game is repeated instead (gymnasium's ``FrameStackObservation(padding_type="reset")``, as
  the Python path), and after a lost life (``episodic_life``) the stack restarts from the
  frame at the loss, as the Python path's stack restarts at its life-loss reset.

Games that end are reset by ale-py inside the same ``step`` call (its ``SameStep``
autoreset mode): the returned row is the new game's first observation and ``info["ended"]``
marks it, so no env step is spent on a reset (ale-py's default ``NextStep`` mode would spend
one, ignoring the action).
"""
from __future__ import annotations

from importlib import metadata
from typing import Any

import numpy as np

from zoo.core.env import EnvSpec
from zoo.core.spaces import ObsFlattener

MIN_ALE_PY = (0, 12, 1)
"""ale-py's first release whose partial resets (``reset_mask``) work (ALE pull request 716)."""
NO_FRAME_LIMIT = 1 << 30
"""The frame limit given to ale-py: never reached; this module truncates instead."""


def ale_seed(seed: int) -> int:
    """The ALE seed the vector backend gives env seed ``seed`` (an int in ``[0, 2**31)``).

    ale-py's Python ``AtariEnv`` seeds its emulator with the second 32-bit word of
    ``numpy.random.SeedSequence(seed)`` (as an int32); the vector env takes only
    non-negative ints, so bit 31 of that word is cleared. The emulators of the two backends
    (sticky actions included) therefore run the same for the seeds whose word has bit 31
    clear, about half of them (e.g. seeds 1, 4, 6, 8), and differently for the others.
    """
    return int(np.random.SeedSequence(int(seed)).generate_state(2)[1]) & 0x7FFFFFFF


def check_ale_py() -> None:
    """Raise ImportError unless ale-py >= 0.12.1 is installed (needed by this backend)."""
    try:
        version = metadata.version("ale-py")
    except metadata.PackageNotFoundError:
        version = None
    parts = tuple(int(p) for p in (version or "0").split(".")[:3] if p.isdigit())
    if version is None or parts < MIN_ALE_PY:
        raise ImportError(f"env.backend='vector' needs ale-py >= {'.'.join(map(str, MIN_ALE_PY))} (its C++ "
                          f"AtariVectorEnv with working partial resets); installed: {version or 'none'}. "
                          "Upgrade it (pip install -U ale-py) or use --set env.backend=python")


class AtariVector:
    """``num_envs`` Atari games of one kind, stepped by one call (a :class:`zoo.core.env.VectorEnv`).

    Observations ``{"obs": uint8 [num_envs, frame_stack, screen_size, screen_size]}`` (RGB:
    ``[num_envs, frame_stack * 3, H, W]``, each frame's colour planes channels-first, as
    :class:`zoo.core.spaces.ObsFlattener` lays out the Python path's), actions ``int
    [num_envs]``, rewards ``float32 [num_envs]``; ``spec`` equals the Python path's.
    ``config.vector_threads`` C++ threads step the games (0: one per game, up to the
    machine's cores).

    Raises:
        ImportError: ale-py older than 0.12.1 (:func:`check_ale_py`).
        ValueError: ``num_envs < 1``.
    """

    def __init__(self, ale_id: str, config: Any, num_envs: int, resolved: dict[str, Any]) -> None:
        import gymnasium as gym
        from ale_py.vector_env import AtariVectorEnv

        check_ale_py()
        if num_envs < 1:
            raise ValueError(f"an Atari vector env needs num_envs >= 1, got {num_envs}")
        self.config, self.num_envs = config, int(num_envs)
        game = gym.spec(ale_id).kwargs["game"]  # "ALE/SpaceInvaders-v5" -> "space_invaders"
        self.venv: AtariVectorEnv | None = AtariVectorEnv(  # None after close()
            game, self.num_envs,
            num_threads=int(config.vector_threads),
            autoreset_mode="SameStep",
            max_num_frames_per_episode=NO_FRAME_LIMIT,
            repeat_action_probability=float(config.sticky_action_prob),
            full_action_space=config.full_action_space,
            img_height=config.screen_size, img_width=config.screen_size,
            grayscale=config.grayscale, stack_num=config.frame_stack, frameskip=config.frame_skip,
            maxpool=config.frame_skip > 1,
            # ale-py draws 0..noop_max-1 no-op frames; the Python path 1..noop_max: same upper bound
            noop_max=config.noop_max + 1 if config.noop_max else 0,
            episodic_life=False, life_loss_info=False, reward_clipping=False, use_fire_reset=False,
        )
        flat = ObsFlattener(self.venv.single_observation_space)
        self.spec = EnvSpec(ale_id, ("agent_0",), dict(flat.spaces), self.venv.single_action_space,
                            config.frame_skip, True, dict(resolved))
        n = self.num_envs
        self.K = config.frame_stack
        self.lives = np.zeros(n, np.int64)
        self.score = np.zeros(n, np.float64)  # raw game score since the game's reset
        self.length = np.zeros(n, np.int64)  # env steps since the game's reset
        self.since = np.zeros(n, np.int64)  # env steps since the frame stack (re)started
        self.envs = np.arange(n)

    # -- observations ----------------------------------------------------------------
    def _pad(self, frames: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Repeat the first frame of a (re)started stack over the older slots, in place:
        ``frames`` ``[n, K, H, W(, 3)]``; row ``i`` is ``since[i]`` steps into its stack
        (``rows``: only those rows). One pass per stack age below ``K - 1``, never per env."""
        since = self.since if rows is None else np.where(rows, self.since, self.K)
        for age in range(self.K - 1):
            idx = np.flatnonzero(since == age)
            if idx.size:
                first = self.K - 1 - age  # where the stack's first frame is now
                frames[idx, :first] = frames[idx, first:first + 1]

    def _obs(self, frames: np.ndarray) -> dict[str, np.ndarray]:
        if not self.config.grayscale:  # [n, K, H, W, 3] -> [n, K * 3, H, W]
            n, k, h, w, c = frames.shape
            frames = np.ascontiguousarray(frames.transpose(0, 1, 4, 2, 3)).reshape(n, k * c, h, w)
        return {"obs": frames}

    # -- VectorEnv ---------------------------------------------------------------------
    def reset(self, seeds: list[int]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start every game, env ``i`` seeded with :func:`ale_seed` ``(seeds[i])``."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds for {self.num_envs} envs")
        assert self.venv is not None, "reset after close()"
        frames, info = self.venv.reset(seed=np.array([ale_seed(s) for s in seeds], np.int64))
        self.lives[:] = info["lives"]
        self.score[:] = 0
        self.length[:] = 0
        self.since[:] = 0
        self._pad(frames)
        return self._obs(frames), {}

    def step(self, action: np.ndarray):
        """One env step of every game (module docstring for the semantics).

        Returns ``(obs, reward float32 [n], terminated bool [n], truncated bool [n], info)``,
        ``info``: ``"ended"`` (bool ``[n]``), ``"final_obs"`` (on truncation), ``"episode"``
        (games that ended: env index, raw score, env steps), as :class:`zoo.core.env.VectorEnv`.
        """
        c = self.config
        venv = self.venv
        assert venv is not None, "step after close()"
        frames, raw, game_over, _, info = venv.step(np.asarray(action, np.int64).reshape(self.num_envs))
        raw = raw.astype(np.float64)
        game_over = np.asarray(game_over, bool)
        lives = info["lives"].astype(np.int64)
        self.score += raw
        self.length += 1
        # rows of games that ended are already the next game's (ale-py's SameStep autoreset)
        life_lost = ~game_over & (lives > 0) & (lives < self.lives) if c.episodic_life else np.zeros_like(game_over)
        truncated = (~game_over & (info["episode_frame_number"] >= c.max_episode_frames) if c.max_episode_frames
                     else np.zeros_like(game_over))
        self.lives = lives
        self.since += 1
        self.since[game_over | life_lost] = 0
        self._pad(frames)
        out: dict[str, Any] = {}
        if truncated.any():
            out["final_obs"] = {k: v.copy() for k, v in self._obs(frames).items()}
            new, new_info = venv.reset(options={"reset_mask": truncated})
            frames[truncated] = new[truncated]
            self.lives[truncated] = new_info["lives"][truncated]
            self.since[truncated] = 0
            self._pad(frames, truncated)
        game_end = game_over | truncated
        if game_end.any():
            ended = self.envs[game_end]
            out["episode"] = {"env": ended, "return": self.score[ended].copy(), "length": self.length[ended].copy()}
            self.score[ended] = 0
            self.length[ended] = 0
        terminated = game_over | life_lost
        out["ended"] = terminated | truncated
        reward = np.sign(raw) if c.clip_rewards else raw
        return self._obs(frames), reward.astype(np.float32), terminated, truncated, out

    def close(self) -> None:
        """Stop and join ale-py's threads (dropping its C++ vectorizer)."""
        venv, self.venv = self.venv, None
        if venv is not None:
            venv.close()
            venv.ale = None  # type: ignore[assignment]  # dropped on purpose: frees ale-py's C++ vectorizer


__all__ = ["AtariVector", "MIN_ALE_PY", "ale_seed", "check_ale_py"]
