"""Baselines of the ``pettingzoo`` env plugin (hook ``register_baselines``; docs/history.md, "The eval manager").

``lookahead``: a one-step-lookahead player of connect four (PettingZoo classic's
``connect_four_v3``): among the legal moves it **wins** when a move makes four in a row for
it, else **blocks** when the opponent would make four in a row by a move in that column, else
plays a legal move uniformly at random. Ties (two winning moves, two threats to block) are
broken uniformly at random too. It reads only the observation, as a policy network does:

- ``"observation"``: int ``[N, 2, 6, 7]`` (Zoo's channels-first layout of PettingZoo's
  ``[6, 7, 2]``; that layout is read too), channel 0 the acting player's pieces, channel 1 the
  opponent's, row 0 the top of the board (pieces fall to the highest free row index);
- ``"zoo:action_mask"``: bool ``[N, 7]``, the legal columns (a waiting player of
  :class:`zoo.plugins.envs.pettingzoo.env.TurnBasedParallel` is allowed column 0 only: it
  plays that). Without a mask, the columns whose top cell is empty are legal.

A column counts for winning and blocking only when the mask allows it and it is not full; a
row whose mask allows no column draws uniformly among all 7. ``deterministic`` changes nothing
(a lookahead has no mode: its random choices are its own). Its numbers come from its own
``numpy`` generator seeded with ``seed``, so a seeded evaluation repeats its games.
"""
from __future__ import annotations

from typing import Any

import numpy as np

ROWS, COLUMNS, CONNECT = 6, 7, 4
MASK_KEY = "zoo:action_mask"
BOARD_KEY = "observation"
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def drop_row(board: np.ndarray, column: int) -> int:
    """The row a piece dropped in ``column`` lands on (the highest free row index), -1 when it is full.

    ``board``: ``[2, 6, 7]`` (0/1 pieces of the two players)."""
    filled = board[0, :, column].astype(bool) | board[1, :, column].astype(bool)
    free = np.flatnonzero(~filled)
    return int(free[-1]) if free.size else -1


def connects(pieces: np.ndarray, row: int, column: int) -> bool:
    """Whether a piece at ``(row, column)`` would give ``pieces`` (bool ``[6, 7]``, one
    player's) four or more in a row, horizontally, vertically or diagonally."""
    for dr, dc in _DIRECTIONS:
        run = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < ROWS and 0 <= c < COLUMNS and pieces[r, c]:
                run += 1
                r, c = r + sign * dr, c + sign * dc
        if run >= CONNECT:
            return True
    return False


def lookahead_choices(board: np.ndarray, legal: np.ndarray) -> tuple[str, list[int]]:
    """``(reason, columns)``: the columns a one-step lookahead picks from on ``board`` (``[2, 6,
    7]``, channel 0 the mover's) with ``legal`` (bool ``[7]``): ``("win", ...)`` the moves that
    connect four, else ``("block", ...)`` the columns where the opponent would connect four,
    else ``("random", ...)`` every playable legal column (``("random", [])``: none is playable)."""
    mine, theirs = board[0].astype(bool), board[1].astype(bool)
    playable = [(c, drop_row(board, c)) for c in range(COLUMNS) if legal[c]]
    playable = [(c, r) for c, r in playable if r >= 0]
    wins = [c for c, r in playable if connects(mine, r, c)]
    if wins:
        return "win", wins
    blocks = [c for c, r in playable if connects(theirs, r, c)]
    if blocks:
        return "block", blocks
    return "random", [c for c, _ in playable]


def _board_shape_ok(shape: tuple[int, ...]) -> bool:
    return tuple(shape) in ((2, ROWS, COLUMNS), (ROWS, COLUMNS, 2))


class LookaheadBaseline:
    """The one-step-lookahead connect-four player (module docstring).

    Raises:
        ValueError: an env that is not connect four (no ``"observation"`` board of shape
            ``(2, 6, 7)`` or ``(6, 7, 2)``, or an action space other than ``Discrete(7)``).
    """

    def __init__(self, spec: Any, seed: int = 0) -> None:
        from gymnasium import spaces

        obs_space = spec.observation_space
        board = obs_space.get(BOARD_KEY) if isinstance(obs_space, (dict, spaces.Dict)) else None
        action = spec.action_space
        if (board is None or not _board_shape_ok(tuple(board.shape or ())) or not isinstance(action, spaces.Discrete)
                or int(action.n) != COLUMNS or int(action.start) != 0):
            shown = dict(obs_space) if isinstance(obs_space, spaces.Dict) else obs_space
            got = f"observation {shown}, actions {action}"
            raise ValueError(f"baseline 'lookahead' plays connect four only (pettingzoo:pettingzoo.classic."
                             f"connect_four_v3: an 'observation' board of shape (2, 6, 7) and Discrete(7) actions); "
                             f"env {getattr(spec, 'env_id', '?')!r} has {got}")
        self.rng = np.random.default_rng(seed)

    def choose(self, board: np.ndarray, mask: np.ndarray | None) -> int:
        """One column for ``board`` (``[2, 6, 7]`` or ``[6, 7, 2]``) and ``mask`` (bool ``[7]`` or None)."""
        board = np.asarray(board)
        if board.shape == (ROWS, COLUMNS, 2):
            board = np.moveaxis(board, -1, 0)
        legal = np.ones(COLUMNS, bool) if mask is None else np.asarray(mask, bool).reshape(COLUMNS)
        if not legal.any():
            legal = np.ones(COLUMNS, bool)
        _, columns = lookahead_choices(board, legal)
        if not columns:  # no legal column is playable (a waiting player's column 0 is full): any legal one
            columns = [int(c) for c in np.flatnonzero(legal)]
        return int(columns[int(self.rng.integers(len(columns)))])

    def act(self, obs: dict[str, Any], deterministic: bool = False, **_: Any) -> dict[str, Any]:
        """``{"action": torch.Tensor int64 [N]}`` for ``N`` rows of ``obs`` (module docstring)."""
        import torch

        boards = obs[BOARD_KEY]
        boards = np.asarray(boards.cpu() if hasattr(boards, "cpu") else boards)
        n = int(boards.shape[0])
        mask = obs.get(MASK_KEY)
        mask = None if mask is None else np.asarray(mask.cpu() if hasattr(mask, "cpu") else mask, bool).reshape(n, -1)
        out = [self.choose(boards[i], None if mask is None else mask[i]) for i in range(n)]
        return {"action": torch.as_tensor(np.asarray(out, np.int64))}

    def eval(self) -> LookaheadBaseline:
        return self


def lookahead_baseline(spec: Any, seed: int) -> LookaheadBaseline:
    """The ``lookahead`` baseline for ``spec`` (:class:`LookaheadBaseline`)."""
    return LookaheadBaseline(spec, seed)
