"""Streaming video files (``.mp4``, ``.gif``) through imageio's ffmpeg backend (``imageio-ffmpeg``).

Frames are piped to ffmpeg as they come, so a long Atari game is never held in memory.
Every frame given becomes one frame of the file, identical frames included (Pillow's GIF
writer would merge identical neighbours, which breaks "one frame per env step"):

- ``.mp4``: H.264 (``yuv420p``); H.264 needs an even height and width, so an odd one is
  padded with a copy of the last row or column;
- ``.gif``: an optimal 256-colour palette for the whole clip (ffmpeg's ``palettegen``,
  ``paletteuse`` without dithering), looping; exact size.

No display is needed; ffmpeg is the binary that ``imageio-ffmpeg`` ships.
"""
from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import numpy as np

EXTENSIONS = (".mp4", ".gif")

__all__ = ["VideoWriter", "check_video_path", "headless_gl", "EXTENSIONS"]


def headless_gl(environ: dict[str, str] | os._Environ[str] | None = None) -> str | None:
    """Choose MuJoCo's headless OpenGL backend for rendering without a display: sets
    ``MUJOCO_GL=egl`` in ``environ`` (default ``os.environ``) when neither ``DISPLAY`` nor
    ``WAYLAND_DISPLAY`` is set, ``MUJOCO_GL`` is not given and ``libEGL`` is installed, and
    returns it; else ``None``.
    Without it, MuJoCo's default GLFW backend fails with no display ("an OpenGL platform
    library has not been loaded"). Call it before ``mujoco`` is imported: MuJoCo reads the
    variable once, at import."""
    import ctypes.util

    env = os.environ if environ is None else environ
    if env.get("MUJOCO_GL") or env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
        return None
    if ctypes.util.find_library("EGL") is None:  # MuJoCo would fail at import: leave its default
        return None
    env["MUJOCO_GL"] = "egl"
    return "egl"


def check_video_path(path: str | Path) -> Path:
    """``path`` as a Path if its extension is one :class:`VideoWriter` writes and its folder
    exists or can be made (:class:`VideoWriter` creates missing folders with its first frame).

    Raises:
        ValueError: another extension (the message names it and the supported ones), or the
            nearest existing folder above ``path`` is a file or not writable.
    """
    path = Path(path)
    if path.suffix.lower() not in EXTENSIONS:
        raise ValueError(f"--video {str(path)!r}: unsupported video extension {path.suffix or '(none)'!r}; "
                         f"give a file ending in {' or '.join(EXTENSIONS)}")
    above = path.absolute().parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise ValueError(f"--video {str(path)!r}: {str(above)!r} is a file, not a folder; give a path in a folder")
    if not os.access(above, os.W_OK):
        raise ValueError(f"--video {str(path)!r}: cannot write in {str(above)!r}; give a path in a writable folder")
    return path


class VideoWriter:
    """Append ``uint8 [H, W, 3]`` frames (all one size) to ``path`` at ``fps`` frames per second.

    ``count`` is the number of frames written so far. Use as a context manager or call
    :meth:`close`; a file with no frame is not created. Missing folders of ``path`` are created
    with the first frame.

    Raises (from :meth:`append`):
        ValueError: a frame that is not ``uint8 [H, W, 3]`` or differs in size from the first.
    """

    def __init__(self, path: str | Path, fps: float = 30.0) -> None:
        self.path = check_video_path(path)
        self.fps = float(fps)
        self.count = 0
        self._gen: Generator[None, np.ndarray | None, None] | None = None  # imageio_ffmpeg.write_frames
        self._shape: tuple[int, ...] | None = None
        self._pad = (0, 0)

    def _open(self, frame: np.ndarray) -> None:
        import imageio_ffmpeg

        self.path.parent.mkdir(parents=True, exist_ok=True)  # e.g. docs/media/ run outside the repository
        h, w = frame.shape[:2]
        if self.path.suffix.lower() == ".gif":
            gen = imageio_ffmpeg.write_frames(
                str(self.path), (w, h), fps=self.fps, codec="gif", pix_fmt_out="pal8", macro_block_size=1,
                output_params=["-filter_complex",
                               "split[a][b];[a]palettegen=stats_mode=full[p];[b][p]paletteuse=dither=none",
                               "-loop", "0"], ffmpeg_log_level="error")
        else:
            self._pad = (h % 2, w % 2)
            gen = imageio_ffmpeg.write_frames(
                str(self.path), (w + w % 2, h + h % 2), fps=self.fps, codec="libx264", pix_fmt_out="yuv420p",
                macro_block_size=1, quality=7, ffmpeg_log_level="error")
        gen.send(None)
        self._gen = gen

    def append(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError(f"a video frame must be uint8 [H, W, 3], got {frame.dtype} {list(frame.shape)}")
        if self._shape is None:
            self._shape = frame.shape
            self._open(frame)
        elif frame.shape != self._shape:
            raise ValueError(f"video frame {self.count} is {list(frame.shape)}, the first was {list(self._shape)}")
        if any(self._pad):
            frame = np.pad(frame, ((0, self._pad[0]), (0, self._pad[1]), (0, 0)), mode="edge")
        assert self._gen is not None  # opened with the first frame
        self._gen.send(np.ascontiguousarray(frame))
        self.count += 1

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
