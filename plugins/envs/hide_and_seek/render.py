"""Top-down rendering with numpy and Pillow (no display, no OpenGL).

:func:`render_topdown` draws the arena seen from above: floor, walls (outer dark, inner
lighter; doors are the gaps, marked by a thin line), boxes (orange; blue when locked by
hiders, red when locked by seekers, with a dark outline while held), ramps (a wedge
with a line at the high edge, same colours), agents by team (hiders blue, seekers red;
a grey ring for agents above the floor) with their vision cones and headings, and a
status line (step, preparation). :func:`write_episode` writes frames to a GIF or MP4
with imageio; :func:`record_random_episode` plays one episode with random actions.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

HIDER, SEEKER = (40, 110, 230), (220, 50, 50)
BOX, LOCK_H, LOCK_S = (235, 160, 40), (90, 140, 255), (255, 110, 110)
FLOOR, OUTER, INNER, DOOR = (236, 233, 224), (60, 60, 60), (120, 110, 100), (200, 190, 170)
CONE_RADIUS = 1.5  # m, drawing only


def _view(game, size: int) -> tuple[float, float, float]:
    """(x0, y0, pixels per metre) framing the floor with a margin."""
    s = game.p.cfg.floor_size
    margin = 0.3
    return -margin, -margin, size / (s + 2 * margin)


def render_topdown(game, size: int = 480) -> np.ndarray:
    """``uint8 [size, size, 3]`` image of ``game`` (a :class:`~.game.Game` after reset)."""
    w, layout, cfg = game.world, game.layout, game.p.cfg
    x0, y0, ppm = _view(game, size)

    def px(x: float, y: float) -> tuple[float, float]:
        return (x - x0) * ppm, size - (y - y0) * ppm

    img = Image.new("RGB", (size, size), (250, 250, 250))
    draw = ImageDraw.Draw(img, "RGBA")
    s = cfg.floor_size
    draw.rectangle([px(0, s), px(s, 0)], fill=FLOOR)
    t = cfg.wall_thickness
    for wall in layout.walls:
        ext = t / 2 if wall.outer else 0.0
        hx = abs(wall.x1 - wall.x0) / 2 + (ext if wall.x1 != wall.x0 else t / 2)
        hy = abs(wall.y1 - wall.y0) / 2 + (ext if wall.y1 != wall.y0 else t / 2)
        cx, cy = (wall.x0 + wall.x1) / 2, (wall.y0 + wall.y1) / 2
        draw.rectangle([px(cx - hx, cy + hy), px(cx + hx, cy - hy)], fill=OUTER if wall.outer else INNER)
    for dx0, dy0, dx1, dy1 in layout.doors:
        draw.line([px(dx0, dy0), px(dx1, dy1)], fill=DOOR, width=max(1, int(ppm * 0.03)))
    q = w.qpos4
    n = w.n_agents
    half = math.radians(cfg.vision_cone_deg / 2)
    for i in range(n):  # vision cones under everything else
        x, y, _, yaw = q[i]
        colour = HIDER if game.is_hider[i] else SEEKER
        cx, cy = px(x, y)
        rad = CONE_RADIUS * ppm
        # Pillow angles run clockwise from +x in image space (y down): negate world angles
        draw.pieslice([cx - rad, cy - rad, cx + rad, cy + rad], math.degrees(-yaw - half), math.degrees(-yaw + half),
                      fill=colour + (40,))
    lock, held = game.grablock.lock_team, set(int(o) for o in game.grablock.held if o >= 0)
    for o in range(w.n_objects):
        x, y, _, yaw = q[n + o]
        colour = BOX if lock[o] < 0 else (LOCK_H if lock[o] == 0 else LOCK_S)
        c, sn = math.cos(yaw), math.sin(yaw)
        hx, hy = w.obj_size[o, 0] / 2, w.obj_size[o, 1] / 2
        off = 0.0 if o < w.n_boxes else -cfg.ramp_size / 6  # ramp: centroid -> bounding-box centre
        to_px = lambda u, v, x=x, y=y, c=c, sn=sn: px(x + c * u - sn * v, y + sn * u + c * v)  # noqa: E731
        outline = (40, 40, 40) if o in held else (120, 90, 40)
        if o < w.n_boxes:
            draw.polygon([to_px(off + sx * hx, sy * hy) for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1))],
                         fill=colour, outline=outline)
            continue
        # ramp: strips darkening towards the high edge (body +x)
        for k in range(4):
            u0, u1 = off - hx + 2 * hx * k / 4, off - hx + 2 * hx * (k + 1) / 4
            shade = tuple(int(ch * (1.0 - 0.12 * k)) for ch in colour)
            draw.polygon([to_px(u0, -hy), to_px(u1, -hy), to_px(u1, hy), to_px(u0, hy)], fill=shade)
        draw.polygon([to_px(off + sx * hx, sy * hy) for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1))],
                     outline=outline)
    r = cfg.agent_radius
    for i in range(n):
        x, y, z, yaw = q[i]
        colour = HIDER if game.is_hider[i] else SEEKER
        cx, cy = px(x, y)
        ar = r * ppm
        draw.ellipse([cx - ar, cy - ar, cx + ar, cy + ar], fill=colour,
                     outline=(90, 90, 90) if z > r + 0.05 else None, width=max(1, int(ppm * 0.04)))
        tip = (cx + ar * 1.6 * math.cos(yaw), cy - ar * 1.6 * math.sin(yaw))
        draw.line([(cx, cy), tip], fill=(20, 20, 20), width=2)
    prep = game.t < game.p.prep_steps
    draw.text((4, 2), f"{game.p.scenario}  step {game.t}/{game.p.horizon}" + ("  PREPARATION" if prep else ""),
              fill=(0, 0, 0))
    return np.asarray(img, dtype=np.uint8)


def render_env(env, size: int = 320) -> np.ndarray:
    """The top-down picture (:func:`render_topdown`, ``uint8 [size, size, 3]``) of a Zoo
    hide-and-seek env (:class:`~.zoo_env.ZooHideAndSeek`): the ``renderer`` this plugin
    registers, which ``zoo eval --video`` calls after each reset and env step."""
    return render_topdown(env.env.game, size)


def write_episode(path: str | Path, frames, fps: int = 10) -> Path:
    """Write ``frames`` (``uint8 [H, W, 3]`` each, all one size) to ``path``: ``.gif`` or ``.mp4``.

    GIF: one image per frame, ``1000 / fps`` ms each, looping. MP4: H.264 (yuv420p) at
    ``fps`` frames per second through the ``imageio-ffmpeg`` package (its own ffmpeg
    binary, no display needed); H.264 needs an even height and width, so an odd one gains a
    copy of the last row or column. Frames are not rescaled.

    Raises:
        ValueError: no frames, or an extension other than .gif/.mp4.
        RuntimeError: ``.mp4`` without the ``imageio-ffmpeg`` package installed.
    """
    import imageio.v2 as imageio

    path, frames = Path(path), [np.asarray(f, dtype=np.uint8) for f in frames]
    if not frames:
        raise ValueError("write_episode: no frames to write")
    ext = path.suffix.lower()
    if ext == ".gif":
        imageio.mimsave(path, frames, duration=1000.0 / fps, loop=0)
    elif ext == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError as exc:
            raise RuntimeError("writing .mp4 needs the imageio-ffmpeg package (pip install imageio-ffmpeg); "
                               "or write a .gif") from exc
        h, w = frames[0].shape[:2]
        if h % 2 or w % 2:
            frames = [np.pad(f, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge") for f in frames]
        # macro_block_size=1: imageio would otherwise upscale to multiples of 16
        imageio.mimsave(path, frames, fps=fps, macro_block_size=1)
    else:
        raise ValueError(f"write_episode: {path.name!r} must end in .gif or .mp4")
    return path


def record_random_episode(path: str | Path, scenario: str | None = None, seed: int = 0, config=None,
                          size: int = 320, fps: int = 10, max_steps: int | None = None) -> Path:
    """Play one episode with uniformly random actions and write it with :func:`write_episode`.

    Writes ``1 + steps`` frames of ``size x size`` pixels (the reset, then every step; an
    odd ``size`` gains a pixel in MP4); ``steps`` is the horizon (80 quadrant, 240 full)
    unless ``max_steps`` is smaller.
    """
    from .env import HideAndSeekEnv

    env = HideAndSeekEnv(scenario, config, seed=seed, render_mode="rgb_array")
    env.reset(seed=seed)
    space = env.action_space(env.possible_agents[0])
    space.seed(seed)
    frames = [render_topdown(env.game, size)]
    steps = 0
    while env.agents and (max_steps is None or steps < max_steps):
        env.step({a: space.sample() for a in env.agents})
        frames.append(render_topdown(env.game, size))
        steps += 1
    return write_episode(path, frames, fps)
