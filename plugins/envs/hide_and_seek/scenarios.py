"""Scenario layouts: walls, doors and spawn positions of one episode.

A :class:`Layout` is plain data (metres, radians); :mod:`.world` turns it into a MuJoCo
model. :func:`sample_layout` draws one for the ``quadrant`` or ``full`` scenario (docs/hide-and-seek.md,
section "Scenarios"); tests build layouts by hand for scripted placements.

Conventions: the floor is ``[0, floor_size]^2``; walls are axis-aligned segments given by
their centre line; agents are ordered hiders first, then seekers; box and ramp yaw 0 means
body axes along the world axes (the elongated box's long side along x; the ramp rising
towards +x).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .config import Params
from .placement import Grid, footprint

MAX_ATTEMPTS = 200


@dataclass
class Wall:
    """An axis-aligned wall: centre line ``(x0, y0) -> (x1, y1)`` (m), ``height`` (m).

    Outer walls are lengthened by half the thickness at both ends so corners close.
    """

    x0: float
    y0: float
    x1: float
    y1: float
    height: float
    outer: bool = False


@dataclass
class Layout:
    """Everything that varies between episodes before physics starts.

    Arrays: ``agent_xy float64 [H+S, 2]``, ``agent_yaw [H+S]``; ``box_xy [B, 2]``,
    ``box_yaw [B]``, ``box_elongated bool [B]``; ``ramp_xy [R, 2]``, ``ramp_yaw [R]``.
    ``*_z`` (same length as the matching xy) overrides the height of the body origin;
    None rests the body on the floor. ``doors`` are door gaps ``(x0, y0, x1, y1)`` (m) for
    rendering; ``room`` is the quadrant room ``(x0, y0, x1, y1)`` or None.
    """

    walls: list[Wall]
    n_hiders: int
    n_seekers: int
    agent_xy: np.ndarray
    agent_yaw: np.ndarray
    box_xy: np.ndarray
    box_yaw: np.ndarray
    box_elongated: np.ndarray
    ramp_xy: np.ndarray
    ramp_yaw: np.ndarray
    doors: list[tuple[float, float, float, float]] = field(default_factory=list)
    room: tuple[float, float, float, float] | None = None
    agent_z: np.ndarray | None = None
    box_z: np.ndarray | None = None
    ramp_z: np.ndarray | None = None

    @property
    def n_agents(self) -> int:
        return self.n_hiders + self.n_seekers


def outer_walls(p: Params) -> list[Wall]:
    """The four outer walls on the floor's border lines."""
    s, h = p.cfg.floor_size, p.cfg.outer_wall_height
    return [Wall(0, 0, s, 0, h, True), Wall(0, s, s, s, h, True), Wall(0, 0, 0, s, h, True), Wall(s, 0, s, s, h, True)]


def _inner_wall(p: Params, axis: int, line: int, a: int, b: int, door: int | None, walls: list, doors: list,
                grid: Grid | None = None) -> None:
    """Add a wall on grid line ``line`` over cells ``[a, b)`` with an optional door at cells ``[door, door+d)``.

    The wall's cells (not the door's) are blocked in ``grid``.
    """
    c, h, d = p.cell, p.cfg.inner_wall_height, p.cfg.door_cells
    spans = [(a, b)] if door is None else [(a, door), (door + d, b)]

    def seg(u0: float, u1: float) -> tuple[float, float, float, float]:
        return (line * c, u0 * c, line * c, u1 * c) if axis == 0 else (u0 * c, line * c, u1 * c, line * c)

    walls.extend(Wall(*seg(u0, u1), h) for u0, u1 in spans if u1 > u0)
    if grid is not None:
        for u0, u1 in spans:
            grid.block_line(axis, line, u0, u1)
    if door is not None:
        doors.append(seg(door, door + d))


def _yaws(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.uniform(0.0, 2.0 * math.pi, size=n)


def _quadrant(p: Params, rng: np.random.Generator) -> Layout:
    cfg, n, c = p.cfg, p.cfg.grid_cells, p.cell
    k = n - round(cfg.quadrant_room_size / c)  # the room is [k c, n c]^2
    walls = outer_walls(p)
    doors: list[tuple[float, float, float, float]] = []
    has_door = [True, True]
    if rng.random() < cfg.quadrant_one_door_prob:
        has_door[int(rng.integers(2))] = False
    grid = Grid(n, c)
    for line in (0, n):
        grid.block_line(0, line, 0, n)
        grid.block_line(1, line, 0, n)
    for axis in (0, 1):
        door = int(rng.integers(k + 1, n - cfg.door_cells)) if has_door[axis] else None
        _inner_wall(p, axis, k, k, n, door, walls, doors, grid)
    inside = np.zeros((n, n), dtype=bool)
    inside[k:, k:] = True
    a, bx, rp = footprint(2 * cfg.agent_radius, c), footprint(cfg.box_size, c), footprint(cfg.ramp_size, c)
    nh, ns = p.hiders[0], p.seekers[0]
    for _ in range(MAX_ATTEMPTS):
        g = Grid(n, c)
        g.occ[:] = grid.occ
        spots = [g.place(rng, a, a) for _ in range(nh)]
        spots += [g.place(rng, a, a, ~inside) for _ in range(ns)]
        boxes = [g.place(rng, bx, bx, inside) for _ in range(p.boxes[0])]
        ramps = [g.place(rng, rp, rp, ~inside) for _ in range(p.ramps)]
        if all(s is not None for s in spots + boxes + ramps):
            break
    else:
        raise RuntimeError("hide-and-seek quadrant: could not place every agent, box and ramp; "
                           "lower quadrant_hiders/seekers/boxes/ramps or raise floor_size")
    return Layout(
        walls, nh, ns, np.array(spots).reshape(-1, 2), _yaws(rng, nh + ns),
        np.array(boxes).reshape(-1, 2), np.zeros(len(boxes)), np.zeros(len(boxes), dtype=bool),
        np.array(ramps).reshape(-1, 2), rng.integers(4, size=p.ramps) * (math.pi / 2),
        doors=doors, room=(k * c, k * c, n * c, n * c))


def _split_rooms(p: Params, rng: np.random.Generator, walls: list, doors: list, grid: Grid) -> None:
    """Recursive axis-aligned splits into 1-4 rooms, one door per inner wall (docs/hide-and-seek.md, "full")."""
    cfg, n, m, dc = p.cfg, p.cfg.grid_cells, p.cfg.full_min_room_cells, p.cfg.door_cells
    target = int(rng.integers(cfg.full_rooms_min, cfg.full_rooms_max + 1))
    rooms = [(0, 0, n, n)]
    made: list[tuple[int, int, int, int, int]] = []  # axis, line, a, b, door

    def clear(axis: int, s: int, room: tuple) -> bool:
        # a new wall must not end inside a door of the perpendicular walls it meets
        lo, hi = (room[1], room[3]) if axis == 0 else (room[0], room[2])
        for ax, line, a, b, door in made:
            if ax != axis and line in (lo, hi) and a <= s <= b and door - 1 <= s <= door + dc + 1:
                return False
        return True

    while len(rooms) < target:
        options = []
        for ri, room in enumerate(rooms):
            for axis in (0, 1):
                lo, hi = (room[0], room[2]) if axis == 0 else (room[1], room[3])
                cand = [s for s in range(lo + m, hi - m + 1) if clear(axis, s, room)]
                if cand:
                    options.append((ri, axis, cand))
        if not options:
            break
        ri, axis, cand = options[int(rng.integers(len(options)))]
        s = cand[int(rng.integers(len(cand)))]
        x0, y0, x1, y1 = rooms.pop(ri)
        a, b = (y0, y1) if axis == 0 else (x0, x1)
        door = int(rng.integers(a + 1, b - dc))
        made.append((axis, s, a, b, door))
        _inner_wall(p, axis, s, a, b, door, walls, doors, grid)
        rooms += [(x0, y0, s, y1), (s, y0, x1, y1)] if axis == 0 else [(x0, y0, x1, s), (x0, s, x1, y1)]


def _full(p: Params, rng: np.random.Generator) -> Layout:
    cfg, n, c = p.cfg, p.cfg.grid_cells, p.cell
    walls: list[Wall] = []
    doors: list[tuple[float, float, float, float]] = []
    grid = Grid(n, c)
    if rng.random() < cfg.full_outer_walls_prob:
        walls += outer_walls(p)
        for line in (0, n):
            grid.block_line(0, line, 0, n)
            grid.block_line(1, line, 0, n)
    _split_rooms(p, rng, walls, doors, grid)
    nh = int(rng.integers(p.hiders[0], p.hiders[1] + 1))
    ns = int(rng.integers(p.seekers[0], p.seekers[1] + 1))
    nb = int(rng.integers(p.boxes[0], p.boxes[1] + 1))
    ne = int(rng.integers(min(p.elongated[0], nb), min(p.elongated[1], nb) + 1))
    along_y = rng.random(ne) < 0.5
    a, bx, rp = footprint(2 * cfg.agent_radius, c), footprint(cfg.box_size, c), footprint(cfg.ramp_size, c)
    el, ew = footprint(cfg.elongated_length, c), footprint(cfg.elongated_width, c)
    r2 = cfg.full_teammate_radius ** 2
    for _ in range(MAX_ATTEMPTS):
        g = Grid(n, c)
        g.occ[:] = grid.occ
        spots = []
        for size in (nh, ns):
            first = g.place(rng, a, a)
            spots.append(first)
            for _ in range(size - 1):
                near = None if first is None else (lambda xy, f=first: ((xy - f) ** 2).sum(1) <= r2 + 1e-9)
                spots.append(None if first is None else g.place(rng, a, a, anchor_ok=near))
        boxes, turned = [], np.zeros(ne, dtype=bool)
        for i in range(ne):  # the drawn orientation, else the other one if it does not fit
            spot = g.place(rng, *((ew, el) if along_y[i] else (el, ew)))
            if spot is None:
                spot, turned[i] = g.place(rng, *((el, ew) if along_y[i] else (ew, el))), True
            boxes.append(spot)
        boxes += [g.place(rng, bx, bx) for _ in range(nb - ne)]
        ramps = [g.place(rng, rp, rp) for _ in range(p.ramps)]
        if all(s is not None for s in spots + boxes + ramps):
            break
    else:
        raise RuntimeError("hide-and-seek full: could not place every agent, box and ramp; "
                           "lower the full_* counts or raise floor_size")
    box_yaw = np.zeros(nb)
    box_yaw[:ne] = np.where(along_y ^ turned, math.pi / 2, 0.0)
    return Layout(
        walls, nh, ns, np.array(spots).reshape(-1, 2), _yaws(rng, nh + ns),
        np.array(boxes).reshape(-1, 2), box_yaw, np.arange(nb) < ne,
        np.array(ramps).reshape(-1, 2), rng.integers(4, size=p.ramps) * (math.pi / 2), doors=doors)


def sample_layout(p: Params, rng: np.random.Generator) -> Layout:
    """Draw the layout of one episode of scenario ``p.scenario``.

    Raises:
        RuntimeError: the counts do not fit on the floor after ``MAX_ATTEMPTS`` draws.
    """
    return _quadrant(p, rng) if p.scenario == "quadrant" else _full(p, rng)
