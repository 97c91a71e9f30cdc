"""Every constant of the hide-and-seek game as a config option, and the two presets.

:class:`HideAndSeekConfig` is the options dataclass registered with the ``hide-and-seek``
plugin. Fields shared by both scenarios have plain names; fields that differ between the
presets are prefixed ``quadrant_`` or ``full_`` and hold that preset's default.
:func:`resolve` turns a config and a scenario name into :class:`Params`, the concrete
values the game uses. Sources: the rules in ``docs/hide-and-seek.md`` (sections named on
each field), which follow the released configuration of Baker et al. 2019 (arXiv 1909.07528).

Units: metres, seconds, kilograms, newtons, radians unless a field says degrees.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from zoo.core.options import bounded, check_bounds

SCENARIOS = ("quadrant", "full")
INTEGRATORS = ("discrete", "implicitfast", "implicit", "Euler", "RK4")


@dataclass
class HideAndSeekConfig:
    """Options of the ``hide-and-seek`` environment (``--env hide-and-seek[:full]``).

    Sections of "Rules" in docs/hide-and-seek.md. "World and timing": ``timestep`` (s),
    ``substeps`` physics steps per env step, ``integrator`` (MuJoCo's: ``discrete``,
    ``implicitfast``, ``implicit``, ``Euler``, ``RK4``; see docs/hide-and-seek.md), ``gravity`` (m/s^2, along z),
    ``floor_size`` (m, square), ``grid_cells`` per side of the placement grid,
    ``wall_thickness``, ``inner_wall_height``, ``outer_wall_height`` (m),
    ``object_friction`` (boxes, floor, ramps) and ``agent_friction`` (agents, walls).

    "Bodies": ``agent_radius``, ``agent_mass``, ``agent_damping`` (x, y, yaw),
    ``agent_damping_z``, ``motor_gear``; ``box_size`` (cube side), ``box_mass``,
    ``elongated_length``, ``elongated_width`` (height is ``box_size``); ``ramp_size``
    (bounding box side of the 45-degree wedge), ``ramp_mass``.

    "Actions": ``action_bins`` per movement dimension, ``action_scale`` (the bins map
    linearly onto ``[-action_scale, action_scale] * motor_gear``).

    "Grab and lock": ``grab_radius`` and ``lock_radius`` (object surface to agent
    centre, m); ``lock_inertia`` (kg, kg m^2: added to a locked object's joints so nothing
    can move it, see docs/hide-and-seek.md).

    "Phases, reward, horizon": ``prep_fraction`` of the horizon, ``out_of_area_reward``.

    "Vision and lidar": ``vision_cone_deg`` (full angle, degrees), ``lidar_rays``,
    ``lidar_range`` (m).

    "Scenarios": ``door_cells`` (door width in grid cells, both scenarios), the
    ``quadrant_*`` and ``full_*`` fields; team and object counts are drawn
    uniformly from ``[min, max]`` inclusive. Set min = max for fixed counts (e.g.
    ``full_hiders_min = full_hiders_max = 2`` for the fixed 2 v 2 option).
    """

    # World and timing
    timestep: float = field(default=0.005, metadata=bounded(gt=0))
    """MuJoCo physics timestep (s)."""
    substeps: int = field(default=15, metadata=bounded(ge=1))
    """Physics steps per env step; one env step simulates substeps x timestep (15 x 0.005 = 0.075 s)."""
    integrator: str = "discrete"
    """MuJoCo integrator: discrete (needs mujoco >= 3.13), implicitfast, implicit, Euler (the original's), RK4."""
    gravity: float = field(default=-50.0, metadata=bounded(finite=True))
    """Gravitational acceleration along world z (m/s^2; negative = down; -50: objects fall fast, bounce little)."""
    floor_size: float = field(default=6.0, metadata=bounded(gt=0))
    """Side of the square floor (m); the floor spans [0, floor_size]^2 in world coordinates."""
    grid_cells: int = field(default=30, metadata=bounded(ge=1))
    """Placement-grid cells per floor side (cell = floor_size / grid_cells = 0.2 m); walls lie on grid lines."""
    wall_thickness: float = field(default=0.1, metadata=bounded(ge=0))
    """Thickness of every wall, inner and outer (m)."""
    inner_wall_height: float = field(default=0.5, metadata=bounded(ge=0))
    """Height of inner (room) walls (m); 0.5 = box and ramp height, so a box or ramp lets agents climb over."""
    outer_wall_height: float = field(default=4.0, metadata=bounded(ge=0))
    """Height of the four outer walls (m); 4 m cannot be climbed."""
    object_friction: float = field(default=0.2, metadata=bounded(ge=0))
    """Friction coefficient of boxes, ramps and floor (MuJoCo uses the larger of two touching surfaces')."""
    agent_friction: float = field(default=0.01, metadata=bounded(ge=0))
    """Friction coefficient of agents and walls (MuJoCo uses the larger of two touching surfaces')."""
    # Bodies
    agent_radius: float = field(default=0.15, metadata=bounded(gt=0))
    """Radius of an agent's sphere (m); agents spawn resting on the floor."""
    agent_mass: float = field(default=1.0, metadata=bounded(ge=0))
    """Mass of an agent (kg)."""
    agent_damping: float = field(default=10.0, metadata=bounded(ge=0))
    """Joint damping of an agent's x and y slide joints (N s/m) and of its yaw hinge (N m s/rad)."""
    agent_damping_z: float = field(default=1.0, metadata=bounded(ge=0))
    """Joint damping of an agent's vertical (z) slide joint (N s/m)."""
    motor_gear: float = field(default=100.0, metadata=bounded(ge=0))
    """Gear of an agent's x, y and yaw motors: force (N) or torque (N m) per unit of motor control in [-1, 1]."""
    box_size: float = field(default=0.5, metadata=bounded(ge=0))
    """Side of a cube box (m); also the height of elongated boxes."""
    box_mass: float = field(default=1.0, metadata=bounded(ge=0))
    """Mass of every box, cube or elongated (kg)."""
    elongated_length: float = field(default=1.65, metadata=bounded(ge=0))
    """Long side of an elongated box (m); aligned with world x or y at random (full game only)."""
    elongated_width: float = field(default=0.15, metadata=bounded(ge=0))
    """Short horizontal side of an elongated box (m); its height is box_size."""
    ramp_size: float = field(default=0.5, metadata=bounded(ge=0))
    """Side of the cube bounding a ramp (m): a 45-degree wedge as long, wide and tall as this."""
    ramp_mass: float = field(default=1.0, metadata=bounded(ge=0))
    """Mass of a ramp (kg)."""
    # Actions
    action_bins: int = field(default=11, metadata=bounded(ge=1))
    """Bins per movement action (force x, force y, torque z); odd: the middle bin (5 of 0-10) is no action."""
    action_scale: float = field(default=0.9, metadata=bounded(ge=0))
    """Bins map linearly onto motor controls [-action_scale, action_scale] (x motor_gear: 0.9 x 100 = 90 N, N m)."""
    # Grab and lock
    grab_radius: float = field(default=0.25, metadata=bounded(ge=0))
    """Grab reach (m), object surface to agent centre; the object must also have been seen on the previous step."""
    lock_radius: float = field(default=0.25, metadata=bounded(ge=0))
    """Lock reach (m), object surface to agent centre; the object must also have been seen on the previous step."""
    lock_inertia: float = field(default=1e9, metadata=bounded(ge=0))
    """Inertia added to each joint of a locked object (kg on slides, kg m^2 on the hinge) so nothing can move it."""
    # Phases and reward
    prep_fraction: float = field(default=0.4, metadata=bounded(ge=0, le=1))
    """Preparation phase as a fraction of the horizon in [0, 1] (steps = round(fraction x horizon)); 0 = none."""
    out_of_area_reward: float = field(default=-10.0, metadata=bounded(finite=True))
    """Reward replacing the game reward of an agent outside the allowed area (0 during preparation)."""
    # Vision and lidar
    vision_cone_deg: float = field(default=135.0, metadata=bounded(gt=0, le=360))
    """Full angle of the vision cone centred on the agent's heading (degrees, in (0, 360])."""
    lidar_rays: int = field(default=30, metadata=bounded(ge=1))
    """Number of lidar rays, evenly spaced around the agent in the world frame (30 = every 12 degrees)."""
    lidar_range: float = field(default=6.0, metadata=bounded(gt=0))
    """Lidar range (m); a ray that hits nothing within it reads exactly lidar_range."""
    # Door width, both scenarios (cells)
    door_cells: int = field(default=2, metadata=bounded(ge=0))
    """Width of every door in grid cells (2 = 0.4 m), both scenarios."""
    # Scenario "quadrant"
    quadrant_horizon: int = field(default=80, metadata=bounded(ge=1))
    """Quadrant episode length (env steps); episodes are truncated there, never terminated early."""
    quadrant_hiders: int = field(default=2, metadata=bounded(ge=1))
    """Hiders in the quadrant game (>= 1); they spawn anywhere, inside the room included."""
    quadrant_seekers: int = field(default=2, metadata=bounded(ge=1))
    """Seekers in the quadrant game (>= 1); they spawn outside the room."""
    quadrant_boxes: int = field(default=2, metadata=bounded(ge=0))
    """Cube boxes in the quadrant game, spawned inside the room."""
    quadrant_ramps: int = field(default=1, metadata=bounded(ge=0))
    """Ramps in the quadrant game, spawned outside the room."""
    quadrant_lock_ramps: bool = False
    """Whether quadrant ramps can be locked (the quadrant ramp observation has no lock flags either way)."""
    quadrant_room_size: float = field(default=3.0, metadata=bounded(ge=0))
    """Side of the square room in the (floor_size, floor_size) corner (m, rounded to whole grid cells)."""
    quadrant_one_door_prob: float = field(default=0.5, metadata=bounded(ge=0, le=1))
    """Probability that only one of the room's two walls (picked at random) has a door; else both do."""
    quadrant_area_min: float = field(default=0.1, metadata=bounded(ge=0))
    """Lower bound of the quadrant game's allowed square [min, max]^2 (m, world coordinates)."""
    quadrant_area_max: float = field(default=5.9, metadata=bounded(ge=0))
    """Upper bound of the quadrant game's allowed square [min, max]^2 (m, world coordinates)."""
    quadrant_penalize_objects_out: bool = True
    """Quadrant: a box or ramp outside the allowed square gives every agent out_of_area_reward."""
    # Scenario "full"
    full_horizon: int = field(default=240, metadata=bounded(ge=1))
    """Full-game episode length (env steps); episodes are truncated there, never terminated early."""
    full_hiders_min: int = field(default=1, metadata=bounded(ge=1))
    """Fewest hiders in the full game (>= 1); each episode draws the count uniformly from [min, max]."""
    full_hiders_max: int = field(default=3, metadata=bounded(ge=0))
    """Most hiders in the full game; also the number of hider observation slots."""
    full_seekers_min: int = field(default=1, metadata=bounded(ge=1))
    """Fewest seekers in the full game (>= 1); drawn uniformly from [min, max], independently of hiders."""
    full_seekers_max: int = field(default=3, metadata=bounded(ge=0))
    """Most seekers in the full game; also the number of seeker observation slots."""
    full_boxes_min: int = field(default=3, metadata=bounded(ge=0))
    """Fewest boxes (cube and elongated together) in the full game; drawn uniformly from [min, max]."""
    full_boxes_max: int = field(default=9, metadata=bounded(ge=0))
    """Most boxes (cube and elongated together) in the full game; also the number of box slots."""
    full_elongated_min: int = field(default=3, metadata=bounded(ge=0))
    """Fewest elongated boxes among the drawn boxes; drawn from [min, max], both capped at the box count."""
    full_elongated_max: int = field(default=9, metadata=bounded(ge=0))
    """Most elongated boxes among the drawn boxes (capped at the episode's box count)."""
    full_ramps: int = field(default=2, metadata=bounded(ge=0))
    """Ramps in the full game."""
    full_lock_ramps: bool = True
    """Whether ramps can be locked in the full game."""
    full_rooms_min: int = field(default=1, metadata=bounded(ge=1))
    """Fewest rooms in the full game (>= 1; 1 = no inner walls); drawn from [min, max], fewer if no split fits."""
    full_rooms_max: int = field(default=4, metadata=bounded(ge=0))
    """Most rooms in the full game (recursive axis-aligned splits, one door per inner wall)."""
    full_min_room_cells: int = field(default=6, metadata=bounded(ge=0))
    """Smallest room side a split may leave in the full game (grid cells; 6 = 1.2 m)."""
    full_outer_walls_prob: float = field(default=0.5, metadata=bounded(ge=0, le=1))
    """Probability that a full-game episode has the four outer walls (0 = never, 1 = always)."""
    full_teammate_radius: float = field(default=0.5, metadata=bounded(ge=0))
    """Teammates spawn with their centres within this distance (m) of their team's first member."""
    full_area_min: float = field(default=-6.0, metadata=bounded(finite=True))
    """Lower bound of the full game's allowed square [min, max]^2 (m, world coordinates; may be negative)."""
    full_area_max: float = field(default=12.0, metadata=bounded(ge=0))
    """Upper bound of the full game's allowed square [min, max]^2 (m, world coordinates)."""
    full_penalize_objects_out: bool = False
    """Full game: a box or ramp outside the allowed square gives every agent out_of_area_reward."""


@dataclass(frozen=True)
class Params:
    """The concrete values of one scenario (the result of :func:`resolve`).

    ``hiders``/``seekers``/``boxes``/``elongated`` are inclusive ``(min, max)`` ranges;
    ``max_*`` give the padded slot counts of the observations. ``prep_steps`` is
    ``round(prep_fraction * horizon)`` (32 of 80, 96 of 240). ``full_obs`` selects the
    full game's observation widths (box size features; ramp padding and lock flags).
    """

    scenario: str
    cfg: HideAndSeekConfig
    horizon: int
    prep_steps: int
    hiders: tuple[int, int]
    seekers: tuple[int, int]
    boxes: tuple[int, int]
    elongated: tuple[int, int]
    ramps: int
    lock_ramps: bool
    area: tuple[float, float]
    penalize_objects_out: bool
    full_obs: bool

    @property
    def max_agents(self) -> int:
        return self.hiders[1] + self.seekers[1]

    @property
    def cell(self) -> float:
        """Side of one placement-grid cell (m)."""
        return self.cfg.floor_size / self.cfg.grid_cells


def _check(cond: bool, name: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"hide-and-seek config {name!r}: {msg}")


def resolve(config: HideAndSeekConfig | None, scenario: str | None) -> Params:
    """Validate ``config`` and pick the ``scenario``'s values.

    Args:
        config: the options (``None``: all defaults).
        scenario: ``"quadrant"``, ``"full"`` or ``None`` (``"quadrant"``).

    Raises:
        ValueError: unknown scenario, or a field out of range (the message names it).
    """
    cfg = config or HideAndSeekConfig()
    scenario = scenario or "quadrant"
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown hide-and-seek scenario {scenario!r}; choose one of {', '.join(SCENARIOS)} "
                         "(--env hide-and-seek or --env hide-and-seek:full)")
    check_bounds(cfg, "env.")  # every field's own range (its ``bounded`` metadata; floats finite)
    _check(cfg.integrator in INTEGRATORS, "integrator",
           f"must be one of {', '.join(INTEGRATORS)}, got {cfg.integrator!r}")
    _check(cfg.action_bins % 2 == 1, "action_bins",
           f"must be odd so the middle bin is no action, got {cfg.action_bins}")
    if scenario == "quadrant":
        horizon = cfg.quadrant_horizon
        hiders, seekers = (cfg.quadrant_hiders,) * 2, (cfg.quadrant_seekers,) * 2
        boxes, elongated = (cfg.quadrant_boxes,) * 2, (0, 0)
        ramps, lock_ramps = cfg.quadrant_ramps, cfg.quadrant_lock_ramps
        area = (cfg.quadrant_area_min, cfg.quadrant_area_max)
        penalize, full_obs = cfg.quadrant_penalize_objects_out, False
        cells = round(cfg.quadrant_room_size / (cfg.floor_size / cfg.grid_cells))
        _check(2 * cfg.door_cells + 4 <= cells < cfg.grid_cells - 4, "quadrant_room_size",
               f"must leave room for doors and spawns, got {cfg.quadrant_room_size}")
    else:
        horizon = cfg.full_horizon
        hiders, seekers = (cfg.full_hiders_min, cfg.full_hiders_max), (cfg.full_seekers_min, cfg.full_seekers_max)
        boxes, elongated = (cfg.full_boxes_min, cfg.full_boxes_max), (cfg.full_elongated_min, cfg.full_elongated_max)
        ramps, lock_ramps = cfg.full_ramps, cfg.full_lock_ramps
        area = (cfg.full_area_min, cfg.full_area_max)
        penalize, full_obs = cfg.full_penalize_objects_out, True
        for rng, name in ((hiders, "full_hiders"), (seekers, "full_seekers"), (boxes, "full_boxes"),
                          (elongated, "full_elongated"), ((cfg.full_rooms_min, cfg.full_rooms_max), "full_rooms")):
            _check(rng[0] <= rng[1], f"{name}_min", f"must be <= {name}_max, got {rng[0]} > {rng[1]}")
    _check(hiders[0] >= 1 and seekers[0] >= 1, f"{scenario}_hiders/seekers", "each team needs at least one agent")
    _check(area[0] < area[1], f"{scenario}_area_min", "must be < the area maximum")
    prep_steps = int(round(cfg.prep_fraction * horizon))
    return Params(scenario, cfg, horizon, prep_steps, hiders, seekers, boxes, elongated, ramps, bool(lock_ramps),
                  area, bool(penalize), full_obs)
