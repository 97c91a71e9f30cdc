"""Top-down rendering and episode files (no display, no OpenGL)."""
import imageio.v2 as imageio
import numpy as np
import pytest

from hs_helpers import game, noop
from zoo.plugins.envs.hide_and_seek import render
from zoo.plugins.envs.hide_and_seek.env import HideAndSeekEnv


def pixel(img, game_, x, y, size):
    x0, y0, ppm = render._view(game_, size)
    return tuple(img[int(size - (y - y0) * ppm), int((x - x0) * ppm)])


def test_topdown_draws_agents_boxes_and_lock_state():
    g, _ = game(hiders=[(2.55, 3.0, 0.0)], seekers=[(1.0, 1.0, np.pi / 2)], boxes=[(3.0, 3.0, 0.0)])
    img = render.render_topdown(g, size=300)
    assert img.shape == (300, 300, 3) and img.dtype == np.uint8
    assert pixel(img, g, 2.55, 3.08, 300) == render.HIDER  # beside the heading line
    assert pixel(img, g, 1.08, 1.0, 300) == render.SEEKER
    assert pixel(img, g, 3.1, 3.1, 300) == render.BOX
    assert pixel(img, g, 0.0, 3.0, 300) == render.OUTER
    a = noop(g)
    a[0, 4] = 1
    g.step(a)
    img = render.render_topdown(g, size=300)
    assert pixel(img, g, 3.1, 3.1, 300) == render.LOCK_H
    # the seeker looks along +y: a point 1 m ahead is tinted by its cone, 1 m behind is plain floor
    assert pixel(img, g, 1.0, 2.0, 300) != render.FLOOR
    assert pixel(img, g, 1.0, 0.5, 300) == render.FLOOR


def test_env_render_and_episode_gif(tmp_path):
    env = HideAndSeekEnv("full", seed=0, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (480, 480, 3)
    assert HideAndSeekEnv(seed=0).render() is None
    path = render.record_random_episode(tmp_path / "episode.gif", "quadrant", seed=1, size=96, max_steps=5)
    frames = imageio.mimread(path)
    assert len(frames) == 6 and frames[0].shape[:2] == (96, 96)


def test_write_episode_rejects_bad_requests(tmp_path):
    frame = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="no frames"):
        render.write_episode(tmp_path / "a.gif", [])
    with pytest.raises(ValueError, match=".gif or .mp4"):
        render.write_episode(tmp_path / "a.avi", [frame])
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="imageio-ffmpeg"):
            render.write_episode(tmp_path / "a.mp4", [frame])
