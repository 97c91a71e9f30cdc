"""PettingZoo environments through :class:`zoo.core.env.PettingZooEnv`: Parallel envs as they
are, turn-based AEC envs (a module with ``env()`` and no ``parallel_env()``, such as
``pettingzoo.classic.tictactoe_v3`` and ``connect_four_v3``) through :class:`TurnBasedParallel`."""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any

from zoo.core.env import PaddedSpaces, PettingZooEnv
from zoo.core.options import bounded
from zoo.core.spaces import ACTION_MASK_KEY
from zoo.core.symmetry import Symmetry
from zoo.plugins.envs.kwargs import parse_kwargs  # noqa: F401 - also importable from here


@dataclass
class PettingZooConfig:
    """Options of the ``pettingzoo`` environment plugin."""

    kwargs: str = ""
    """Keyword arguments of the module's ``parallel_env``, as comma-separated ``key=value`` pairs.

    Values are Python literals (a bare word is a string), e.g. ``--set env.kwargs=N=3,max_cycles=25``.
    """
    mixed_spaces: bool = False
    """Agents with different observation spaces, each space group with a named policy of its own
    (docs/policies.md): the env is laid out by :class:`zoo.core.env.PaddedSpaces`. ``zoo train``
    sets it when the run names policies; left False, such an env is refused as before."""
    random_seats: bool = False
    """Turn-based games only (a module with an AEC ``env()``, played by :class:`TurnBasedParallel`):
    draw the order of play at random each episode, so the policy of agent ``player_0`` plays
    first in about half the episodes and second in the others (self-play of a learner against
    an opponent policy mapped to the other agent, docs/history.md). The draw is seeded by the
    env's seed (and by a seed given to ``reset``). The eval manager's envs play without it: it
    seats its players itself. Refused for a Parallel env."""
    to_move: bool = False
    """Turn-based games only: add an observation entry ``"to_move"`` (float32 ``[1]``, 1.0 for
    the player to move, 0.0 for a waiting one) to every agent's observation. A board seen from
    its own side does not say whose turn it is once the order of play is drawn
    (``random_seats``: equal piece counts mean either player may be to move), and a value
    estimate of the same board differs by the turn (a threat of one's own is a win on one's own
    move and is blocked on the opponent's). Refused for a Parallel env."""
    opening_moves: int = field(default=0, metadata=bounded(ge=0, hint="0 = every game from the start"))
    """Turn-based games only: start each episode from a random opening, ``k`` uniformly random legal
    moves (the players in turn) with ``k`` drawn uniformly from ``0 .. opening_moves``, both by the
    env's seeded generator; an opening that ends the game is drawn again. The opening's moves are
    played inside ``reset``: no agent acts, no reward, no env step is counted. Self-play then meets
    positions its own games would not reach (a policy trained only on its own games' positions may
    miss the tactics of others: benchmarks/RESULTS.md, connect four). Evaluation plays from the
    start: the eval manager's envs and ``zoo eval`` take :meth:`evaluation`'s options. Needs
    dict observations with an ``"action_mask"`` (PettingZoo classic's); refused for a Parallel env."""

    def evaluation(self) -> PettingZooConfig:
        """The options an evaluation plays with: these, without the random opening."""
        return dataclasses.replace(self, opening_moves=0)


def make(arg: str | None, config: PettingZooConfig, seed: int) -> PettingZooEnv | PaddedSpaces:
    """Import ``arg`` (a module with ``parallel_env(**kwargs)``) and adapt its env (with
    ``config.mixed_spaces`` and agents of different spaces: :class:`PaddedSpaces` over it).

    A module without ``parallel_env`` but with an AEC ``env()`` (PettingZoo's classic board
    games) is played through :class:`TurnBasedParallel`.

    Raises:
        ValueError: no module given, it cannot be imported, or it has neither ``parallel_env`` nor ``env``.
    """
    if not arg:
        raise ValueError("env 'pettingzoo' needs a module: --env pettingzoo:mpe2.simple_spread_v3")
    try:
        module = importlib.import_module(arg)
    except ImportError as exc:
        raise ValueError(f"--env pettingzoo:{arg}: cannot import {arg!r} ({exc}); "
                         "install the package that provides it") from None
    random_seats = bool(getattr(config, "random_seats", False))
    to_move = bool(getattr(config, "to_move", False))
    opening_moves = getattr(config, "opening_moves", 0)
    if not isinstance(opening_moves, int) or isinstance(opening_moves, bool) or opening_moves < 0:
        raise ValueError(f"env.opening_moves={opening_moves!r} must be a whole number >= 0 (0: every game from the "
                         "start); set --set env.opening_moves=8, for example")
    if hasattr(module, "parallel_env"):
        for name, on in (("random_seats", random_seats), ("to_move", to_move), ("opening_moves", opening_moves > 0)):
            if on:
                raise ValueError(f"env.{name}: --env pettingzoo:{arg} is a Parallel env (its agents move at once); "
                                 f"{name} is for turn-based games (a module with an AEC env()); leave it out")
        parallel = module.parallel_env(**parse_kwargs(config.kwargs))
    elif hasattr(module, "env"):
        parallel = TurnBasedParallel(module.env(**parse_kwargs(config.kwargs)), random_seats=random_seats, seed=seed,
                                     to_move=to_move, opening_moves=opening_moves)
    else:
        raise ValueError(f"--env pettingzoo:{arg}: module {arg!r} has no parallel_env() (nor an AEC env())")
    mixed = bool(getattr(config, "mixed_spaces", False))
    env = PettingZooEnv(parallel, arg, mixed_spaces=mixed)
    symmetries = known_symmetries(arg, env.spec.observation_space, env.spec.action_space)
    if symmetries:
        env.spec = dataclasses.replace(env.spec, symmetries=symmetries)
    return PaddedSpaces(env) if env.spec.mixed else env


def known_symmetries(module: str, observation_space: dict[str, Any], action_space: Any) -> tuple[Symmetry, ...]:
    """The symmetries of the games this plugin knows (``EnvSpec.symmetries``), for the spec's
    observation layout; ``()`` for any other env.

    ``connect_four_v3``: the left-right mirror. Its ``"observation"`` is two 6 x 7 planes (the
    mover's pieces and the other player's, in whichever axis order the spec has them): the axis
    of the 7 columns is reversed, as is the action mask, and column ``c`` is played as ``6 - c``.
    A game's win, loss or draw is the same in its mirror image.
    """
    if module.rsplit(".", 1)[-1] == "connect_four_v3":
        board = observation_space.get("observation")
        shape = tuple(getattr(board, "shape", ()))
        if getattr(action_space, "n", None) != 7 or sorted(shape) != [2, 6, 7]:
            return ()  # a layout this table does not describe
        flip: tuple[tuple[str, tuple[int, ...]], ...] = (("observation", (shape.index(7) - len(shape),)),)
        if ACTION_MASK_KEY in observation_space:
            flip += ((ACTION_MASK_KEY, (-1,)),)
        return (Symmetry("left-right mirror", flip, tuple(range(6, -1, -1))),)
    return ()


class TurnBasedParallel:
    """A turn-based PettingZoo AEC env (players move one after the other: classic board games
    such as ``tictactoe_v3``, ``connect_four_v3``) as a Parallel env, so every player is an
    agent of every env step.

    Each Parallel step is one move: every live agent is given an action, and only the action
    of the player to move (``agent_selection``) is played; the others wait. A waiting player's
    observation is the AEC env's ``observe(agent)`` with its ``"action_mask"`` allowing action 0
    only (the AEC env gives a waiting player no legal action; its action is ignored, and a
    policy that honours the mask has nothing to choose, so its sample teaches nothing about
    moves). Rewards are the AEC env's ``rewards`` after the move (a win: +1 to the winner, -1
    to the loser in the classic games), so an agent's return is its game result. When the
    game ends (any termination or truncation) every agent gets the AEC env's flags and
    ``agents`` becomes empty.

    ``random_seats``: each ``reset`` draws a random permutation of the players (numpy
    generator seeded with ``seed``, seeded again by ``reset(seed=...)``), and agent
    ``possible_agents[i]`` of this env plays the AEC env's agent ``seats[i]`` (``seats``,
    the draw; the AEC's first agent moves first): the agents keep their names, observations,
    rewards and flags are those of the AEC agent each plays. False: ``seats`` is always
    ``possible_agents``.

    ``to_move``: every observation gains ``"to_move"``, float32 ``[1]``: 1.0 for the player to
    move, 0.0 for a waiting one. Needs an AEC env whose observations are dicts (PettingZoo
    classic's).

    ``opening_moves``: each ``reset`` then plays ``k`` uniformly random legal moves (the AEC
    env's ``"action_mask"``), ``k`` drawn uniformly from ``0 .. opening_moves`` (the generator
    of ``random_seats``, drawn after the seats); an opening that ends the game (a win or a full
    board) resets the AEC env and is drawn again, up to 100 times.

    Raises:
        ValueError: ``to_move`` with an env whose observation space is not a Dict;
            ``opening_moves`` with one whose observations have no ``"action_mask"``.
    """

    def __init__(self, aec: Any, random_seats: bool = False, seed: int | None = None, to_move: bool = False,
                 opening_moves: int = 0) -> None:
        import numpy as np

        self.aec = aec
        self.possible_agents = list(aec.possible_agents)
        self.agents: list[str] = []
        self.metadata = dict(getattr(aec, "metadata", {}) or {})
        self.random_seats = bool(random_seats)
        self.rng = np.random.default_rng(seed)
        self.seats = list(self.possible_agents)
        self.to_aec = {a: a for a in self.possible_agents}
        self.from_aec = dict(self.to_aec)
        self.to_move = bool(to_move)
        self.opening_moves = int(opening_moves)
        if self.opening_moves:
            for a in self.possible_agents:
                space = aec.observation_space(a)
                if "action_mask" not in getattr(space, "spaces", {}):
                    raise ValueError(f"env.opening_moves: agent {a}'s observations are {space}, without an "
                                     "\"action_mask\" to draw legal moves from; leave it out")
        if self.to_move:
            from gymnasium import spaces

            for a in self.possible_agents:
                space = aec.observation_space(a)
                if not isinstance(space, spaces.Dict):
                    raise ValueError(f"env.to_move: agent {a}'s observations are {space}, not a dict; the "
                                     "\"to_move\" entry needs dict observations (PettingZoo classic's); leave it out")

    def observation_space(self, agent: str) -> Any:
        space = self.aec.observation_space(agent)
        if not self.to_move:
            return space
        import numpy as np
        from gymnasium import spaces

        return spaces.Dict({**space.spaces, "to_move": spaces.Box(0.0, 1.0, (1,), np.float32)})

    def action_space(self, agent: str) -> Any:
        return self.aec.action_space(agent)

    def _observe(self, name: str) -> Any:
        import numpy as np

        agent = self.to_aec[name]
        obs = self.aec.observe(agent)
        moving = agent == self.aec.agent_selection
        if agent != self.aec.agent_selection and isinstance(obs, dict) and "action_mask" in obs:
            mask = np.zeros_like(np.asarray(obs["action_mask"]))
            mask.reshape(-1)[0] = 1
            obs = {**obs, "action_mask": mask}
        if self.to_move:
            obs = {**obs, "to_move": np.array([1.0 if moving else 0.0], np.float32)}
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        import numpy as np

        self.aec.reset(seed=seed, options=options)
        if seed is not None and (self.random_seats or self.opening_moves):
            self.rng = np.random.default_rng(seed)
        if self.random_seats:
            order = self.rng.permutation(len(self.possible_agents))
            self.seats = [self.possible_agents[int(i)] for i in order]
            self.to_aec = dict(zip(self.possible_agents, self.seats, strict=True))
            self.from_aec = {v: k for k, v in self.to_aec.items()}
        if self.opening_moves:
            self._open(options)
        self.agents = [self.from_aec[a] for a in self.aec.agents]
        self.agents = [a for a in self.possible_agents if a in self.agents]
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def _open(self, options: dict | None) -> None:
        """Play a random opening (``opening_moves``) on the freshly reset AEC env."""
        import numpy as np

        for _ in range(100):
            for _ in range(int(self.rng.integers(0, self.opening_moves + 1))):
                mover = self.aec.agent_selection
                legal = np.flatnonzero(np.asarray(self.aec.observe(mover)["action_mask"]).reshape(-1))
                self.aec.step(int(self.rng.choice(legal)))
                if not self.aec.agents or any(self.aec.terminations.values()) or any(self.aec.truncations.values()):
                    break
            else:
                return
            self.aec.reset(options=options)  # the opening ended the game: draw another
        raise RuntimeError(f"env.opening_moves={self.opening_moves}: 100 random openings in a row ended the game; "
                           "lower env.opening_moves")

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        mover = self.from_aec[self.aec.agent_selection]
        self.aec.step(actions[mover])
        live = list(self.agents)
        rewards = {a: float(self.aec.rewards.get(self.to_aec[a], 0.0)) for a in live}
        terms = {a: bool(self.aec.terminations.get(self.to_aec[a], False)) for a in live}
        truncs = {a: bool(self.aec.truncations.get(self.to_aec[a], False)) for a in live}
        obs = {a: self._observe(a) for a in live}
        if any(terms.values()) or any(truncs.values()) or not self.aec.agents:
            over = not any(truncs.values())
            terms = {a: terms[a] or over for a in live}
            self.agents = []
        return obs, rewards, terms, truncs, {a: {} for a in live}

    def close(self) -> None:
        self.aec.close()
