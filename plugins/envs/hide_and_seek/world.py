"""Builds the MuJoCo model of one episode from a :class:`~.scenarios.Layout` (MJCF string).

docs/hide-and-seek.md, sections "World and timing" and "Bodies". Every movable body (agents, then boxes,
then ramps) is a child of the world with four joints in this order: slide x, slide y,
slide z (world axes) and a hinge about z. Its body origin sits at the world origin, so
the joint values *are* the world coordinates and yaw: ``data.qpos.reshape(-1, 4)[k]`` is
``(x, y, z, yaw)`` of movable body ``k`` and ``data.qvel.reshape(-1, 4)[k]`` its
velocities (m/s, rad/s).

- Agent: sphere (``agent_radius``), mass ``agent_mass``, damping ``agent_damping`` on x, y
  and yaw, ``agent_damping_z`` on z, three motors (x, y, yaw) of gear ``motor_gear``.
- Box: ``box_size`` cube or ``elongated_length x elongated_width x box_size`` box.
- Ramp: a 45-degree wedge mesh in a ``ramp_size`` cube, rising towards body +x. Its body
  origin is the wedge's centroid (inside the solid, so a sight ray aimed at it must hit
  it); the centroid lies ``ramp_size / 6`` towards +x from the bounding-box centre and
  ``ramp_size / 3`` above the floor.
- One inactive weld equality per (agent, object) pair for grabbing: index
  ``agent * n_objects + object`` (objects: boxes, then ramps).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from .config import Params
from .scenarios import Layout


def _f(*xs: float) -> str:
    return " ".join(f"{x:.9g}" for x in xs)


def ramp_vertices(size: float) -> np.ndarray:
    """The wedge's 6 vertices ``float64 [6, 3]`` in its body frame (origin at the centroid)."""
    h = size / 2
    v = np.array([[-h, -h, 0], [h, -h, 0], [h, h, 0], [-h, h, 0], [h, -h, size], [h, h, size]], dtype=np.float64)
    return v - np.array([size / 6, 0.0, size / 3])


def _joints(name: str, damping: tuple[float, float, float, float]) -> str:
    axes = (("x", "1 0 0", "slide"), ("y", "0 1 0", "slide"), ("z", "0 0 1", "slide"), ("r", "0 0 1", "hinge"))
    return "".join(f'<joint name="{name}{a}" type="{t}" axis="{ax}" damping="{d:.9g}"/>'
                   for (a, ax, t), d in zip(axes, damping, strict=True))


def build_xml(p: Params, layout: Layout) -> str:
    """The MJCF text of ``layout`` (see the module docstring for the body conventions)."""
    cfg = p.cfg
    s, t = cfg.floor_size, cfg.wall_thickness
    fo, fa = cfg.object_friction, cfg.agent_friction
    out = [f'<mujoco model="hide-and-seek"><compiler angle="radian"/>'
           f'<option timestep="{cfg.timestep:.9g}" gravity="0 0 {cfg.gravity:.9g}" integrator="{cfg.integrator}"/>'
           f'<asset><mesh name="ramp" vertex="{_f(*ramp_vertices(cfg.ramp_size).ravel())}"/></asset><worldbody>'
           f'<geom name="floor" type="plane" pos="{_f(s / 2, s / 2, 0)}" size="{_f(s, s, 0.1)}" friction="{fo:.9g}"/>']
    for i, w in enumerate(layout.walls):
        ext = t / 2 if w.outer else 0.0
        hx = abs(w.x1 - w.x0) / 2 + (ext if w.x1 != w.x0 else t / 2)
        hy = abs(w.y1 - w.y0) / 2 + (ext if w.y1 != w.y0 else t / 2)
        out.append(f'<geom name="wall{i}" type="box" pos="{_f((w.x0 + w.x1) / 2, (w.y0 + w.y1) / 2, w.height / 2)}" '
                   f'size="{_f(hx, hy, w.height / 2)}" friction="{fa:.9g}"/>')
    d, dz = cfg.agent_damping, cfg.agent_damping_z
    for i in range(layout.n_agents):
        out.append(f'<body name="agent{i}">{_joints(f"agent{i}", (d, d, dz, d))}'
                   f'<geom name="agent{i}" type="sphere" size="{cfg.agent_radius:.9g}" mass="{cfg.agent_mass:.9g}" '
                   f'friction="{fa:.9g}"/></body>')
    for i, elong in enumerate(layout.box_elongated):
        half = (cfg.elongated_length / 2, cfg.elongated_width / 2) if elong else (cfg.box_size / 2,) * 2
        out.append(f'<body name="box{i}">{_joints(f"box{i}", (0, 0, 0, 0))}'
                   f'<geom name="box{i}" type="box" size="{_f(*half, cfg.box_size / 2)}" mass="{cfg.box_mass:.9g}" '
                   f'friction="{fo:.9g}"/></body>')
    for i in range(len(layout.ramp_xy)):
        out.append(f'<body name="ramp{i}">{_joints(f"ramp{i}", (0, 0, 0, 0))}'
                   f'<geom name="ramp{i}" type="mesh" mesh="ramp" mass="{cfg.ramp_mass:.9g}" '
                   f'friction="{fo:.9g}"/></body>')
    out.append("</worldbody><actuator>")
    g = cfg.motor_gear
    for i in range(layout.n_agents):
        out += [f'<motor joint="agent{i}{a}" gear="{g:.9g}" ctrllimited="true" ctrlrange="-1 1"/>' for a in "xyr"]
    out.append("</actuator><equality>")
    objects = [f"box{i}" for i in range(len(layout.box_xy))] + [f"ramp{i}" for i in range(len(layout.ramp_xy))]
    for i in range(layout.n_agents):
        out += [f'<weld body1="agent{i}" body2="{o}" active="false"/>' for o in objects]
    out.append("</equality></mujoco>")
    return "".join(out)


@dataclass
class World:
    """A compiled episode: model, data and index tables.

    ``n_agents`` (A), ``n_boxes`` (B), ``n_ramps`` (R); movable body ``k`` (agents, boxes,
    ramps) has MuJoCo body id ``k + 1``, geom id ``geom[k]`` and joint rows ``k`` of
    ``qpos4``/``qvel4`` (views ``[A+B+R, 4]`` of ``data.qpos``/``data.qvel``).
    ``obj_size float64 [B+R, 3]``: full extents of each box/ramp in its body frame.
    """

    model: mujoco.MjModel
    data: mujoco.MjData
    n_agents: int
    n_boxes: int
    n_ramps: int
    geom: np.ndarray
    obj_size: np.ndarray
    qpos4: np.ndarray
    qvel4: np.ndarray

    @property
    def n_objects(self) -> int:
        return self.n_boxes + self.n_ramps

    def weld_id(self, agent: int, obj: int) -> int:
        """Equality index of the grab weld between ``agent`` and object ``obj``."""
        return agent * self.n_objects + obj

    def obj_dofs(self, obj: int) -> slice:
        """The 4 dof indices of object ``obj``."""
        k = self.n_agents + obj
        return slice(4 * k, 4 * k + 4)


def build_world(p: Params, layout: Layout) -> World:
    """Compile ``layout`` and put every body at its spawn pose (``mj_forward`` done).

    Raises:
        ValueError: the installed mujoco lacks the configured integrator, or MuJoCo rejected
            the generated model (a bug; the message has details).
    """
    cfg = p.cfg
    if cfg.integrator == "discrete" and not hasattr(mujoco.mjtIntegrator, "mjINT_DISCRETE"):
        raise ValueError(f"hide-and-seek config 'integrator': mujoco {mujoco.__version__} has no 'discrete' "
                         "integrator (added in 3.13); upgrade mujoco or set integrator='implicitfast'")
    model = mujoco.MjModel.from_xml_string(build_xml(p, layout))
    data = mujoco.MjData(model)
    a, b, r = layout.n_agents, len(layout.box_xy), len(layout.ramp_xy)
    q = data.qpos.reshape(-1, 4)
    q[:a, :2] = layout.agent_xy
    q[:a, 2] = cfg.agent_radius if layout.agent_z is None else layout.agent_z
    q[:a, 3] = layout.agent_yaw
    q[a:a + b, :2] = layout.box_xy
    q[a:a + b, 2] = cfg.box_size / 2 if layout.box_z is None else layout.box_z
    q[a:a + b, 3] = layout.box_yaw
    if r:
        off = cfg.ramp_size / 6  # bounding-box centre -> centroid, along body +x
        q[a + b:, 0] = layout.ramp_xy[:, 0] + off * np.cos(layout.ramp_yaw)
        q[a + b:, 1] = layout.ramp_xy[:, 1] + off * np.sin(layout.ramp_yaw)
        q[a + b:, 2] = cfg.ramp_size / 3 if layout.ramp_z is None else layout.ramp_z
        q[a + b:, 3] = layout.ramp_yaw
    mujoco.mj_forward(model, data)
    size = np.zeros((b + r, 3))
    for i, elong in enumerate(layout.box_elongated):
        size[i] = (cfg.elongated_length, cfg.elongated_width, cfg.box_size) if elong else (cfg.box_size,) * 3
    size[b:] = cfg.ramp_size
    geom = np.array([model.body_geomadr[k + 1] for k in range(a + b + r)], dtype=np.int32)
    return World(model, data, a, b, r, geom, size, q, data.qvel.reshape(-1, 4))


def yaw_quat(yaw: float) -> np.ndarray:
    """Unit quaternion (w, x, y, z) of a rotation by ``yaw`` radians about z."""
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
