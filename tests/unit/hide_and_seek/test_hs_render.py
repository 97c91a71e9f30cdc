"""Top-down rendering and episode files (no display, no OpenGL)."""
import sys

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


def frames_of(height, width, count=7):
    """``count`` distinct frames: a grey level per frame, its inverse in the first 8 columns."""
    out = []
    for k in range(count):
        f = np.full((height, width, 3), 30 * k, np.uint8)
        f[:, :8] = 255 - f[:, :8]
        out.append(f)
    return out


def test_write_episode_gif_reads_back_exactly(tmp_path):
    frames = frames_of(48, 64)  # height != width catches swapped axes
    path = render.write_episode(tmp_path / "a.gif", frames, fps=10)
    back = imageio.mimread(path)
    assert len(back) == 7 and back[0].shape == (48, 64, 3)
    assert all(np.array_equal(b, f) for b, f in zip(back, frames))  # two colours per frame: no loss
    assert imageio.get_reader(path).get_meta_data()["duration"] == 100  # ms per frame at 10 fps


def test_write_episode_mp4(tmp_path):
    frames = frames_of(48, 64)
    path = render.write_episode(tmp_path / "a.mp4", frames, fps=10)
    back = imageio.mimread(path)
    assert len(back) == 7 and back[0].shape == (48, 64, 3) and back[0].dtype == np.uint8
    meta = imageio.get_reader(path).get_meta_data()
    assert meta["codec"] == "h264" and meta["fps"] == 10.0 and meta["size"] == (64, 48)
    # lossy, but close: the mean error per channel is about 1 grey level
    assert max(np.abs(b.astype(int) - f).mean() for b, f in zip(back, frames)) < 3


def test_write_episode_mp4_pads_odd_sizes_without_rescaling(tmp_path):
    back = imageio.mimread(render.write_episode(tmp_path / "odd.mp4", frames_of(33, 45, count=3)))
    assert len(back) == 3 and back[0].shape == (34, 46, 3)


def test_random_episode_mp4(tmp_path):
    path = render.record_random_episode(tmp_path / "episode.mp4", "quadrant", seed=1, size=96, max_steps=5)
    frames = imageio.mimread(path)
    assert len(frames) == 6 and frames[0].shape == (96, 96, 3)


def test_write_episode_rejects_bad_requests(tmp_path, monkeypatch):
    frame = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="no frames"):
        render.write_episode(tmp_path / "a.gif", [])
    with pytest.raises(ValueError, match=".gif or .mp4"):
        render.write_episode(tmp_path / "a.avi", [frame])
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if the package were not installed
    with pytest.raises(RuntimeError, match="imageio-ffmpeg"):
        render.write_episode(tmp_path / "a.mp4", [frame])
