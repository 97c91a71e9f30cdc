"""zoo.video: the --video path check and the writer creating missing folders."""
from __future__ import annotations

import numpy as np
import pytest

from zoo.video import VideoWriter, check_video_path, headless_gl


def test_writer_creates_missing_folders_with_the_first_frame(tmp_path):
    # `zoo eval RUN --video docs/media/x.gif` outside the repository root: before, ffmpeg failed
    # to open the file and eval ended in an 80-line traceback and a broken pipe.
    path = tmp_path / "docs" / "media" / "x.gif"
    with VideoWriter(path, fps=10) as writer:
        assert not (tmp_path / "docs").exists()  # nothing made before a frame
        for i in range(3):
            writer.append(np.full((8, 8, 3), 80 * i, np.uint8))
    assert writer.count == 3
    assert path.read_bytes()[:6] == b"GIF89a"


def test_a_file_where_a_folder_should_be_is_one_clear_error(tmp_path):
    (tmp_path / "docs").write_text("not a folder")
    with pytest.raises(ValueError) as info:
        check_video_path(tmp_path / "docs" / "media" / "x.gif")
    assert str(info.value) == (f"--video {str(tmp_path / 'docs' / 'media' / 'x.gif')!r}: "
                               f"{str(tmp_path / 'docs')!r} is a file, not a folder; give a path in a folder")
    assert check_video_path(tmp_path / "new" / "x.mp4") == tmp_path / "new" / "x.mp4"


def test_mujoco_renders_headless_with_egl_unless_a_display_or_a_backend_is_given():
    # Before: `zoo eval runs/HOPPER --video x.mp4` on a machine without DISPLAY died in a traceback
    # ("an OpenGL platform library has not been loaded into this process") from MuJoCo's default GLFW.
    import ctypes.util

    env = {"PATH": "/usr/bin"}
    if ctypes.util.find_library("EGL") is not None:
        assert headless_gl(env) == "egl" and env == {"PATH": "/usr/bin", "MUJOCO_GL": "egl"}
    else:  # no libEGL: MuJoCo would fail at import with MUJOCO_GL=egl, so its default stays
        assert headless_gl(env) is None and env == {"PATH": "/usr/bin"}
    for given in ({"DISPLAY": ":0"}, {"WAYLAND_DISPLAY": "wayland-0"}, {"MUJOCO_GL": "osmesa"}):
        env = dict(given)
        assert headless_gl(env) is None and env == given


def test_a_renderer_failing_on_the_first_frame_is_one_clear_error():
    from zoo.evaluate import Recorder, RenderError

    class Writer:
        count = 0

    def render(env):
        raise RuntimeError("an OpenGL platform library has not been loaded into this process\n")

    with pytest.raises(RenderError) as info:
        Recorder(render, Writer(), 1).capture(0, None)
    assert str(info.value) == (
        "--video: the env's renderer failed on the first frame: RuntimeError: an OpenGL platform library has not been "
        "loaded into this process; for a MuJoCo env without a display set MUJOCO_GL=egl (or osmesa)")
