"""Fakes shared by several unit test modules (a test module never imports another test module).

- :class:`Counter`: a two-action env whose observations count episodes and steps.
- :class:`FakeServer`: records the replies a policy worker's answer sends.
- :func:`make_supervisor` (with :class:`FakeLauncher`, :class:`FakeHandle`, :class:`Clock`),
  :func:`beat`, :func:`all_beat`: a :class:`Supervisor` over fake workers and a fake clock.
- :func:`assert_same_state`: bit-for-bit equality of nested checkpoint data.
- :func:`one_line_error`: a CLI refusal (``typer.testing.CliRunner`` result) in one ``error:`` line.
- :func:`round_trip_counts`: an actor's round-trip histogram as heartbeats and snapshots carry it.
- :func:`load_benchmark`: a script of ``benchmarks/`` as a module.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
from gymnasium import spaces

from zoo.core.config import SupervisionConfig
from zoo.core.env import EnvSpec
from zoo.core.launcher import Launcher, WorkerHandle
from zoo.core.supervision import Supervisor


class Counter:
    """obs = 100 * episode + t; reward = t + 1; episode ends after 3 steps (truncated or terminated)."""

    def __init__(self, terminate: bool) -> None:
        self.spec = EnvSpec("counter", ("a",), {"obs": spaces.Box(0, 1e6, (1,))}, spaces.Discrete(2))
        self.terminate, self.episode, self.t = terminate, -1, 0

    def reset(self, seed=None):
        self.episode += 1
        self.t = 0
        return {"obs": np.array([[100.0 * self.episode]], np.float32)}, {}

    def step(self, action):
        self.t += 1
        done = self.t == 3
        obs = {"obs": np.array([[100.0 * self.episode + self.t]], np.float32)}
        r = np.array([float(self.t)], np.float32)
        return obs, r, np.array([done and self.terminate]), np.array([done and not self.terminate]), {}

    def close(self):
        pass


class FakeServer:
    def __init__(self):
        self.replies = []

    def reply(self, client_id, bundle, meta, timeout):
        self.replies.append((client_id, bundle, meta))
        return True


class FakeHandle(WorkerHandle):
    def __init__(self, ctx):
        self.role, self.index, self.ctx = ctx[0], ctx[1], ctx
        self.code = None
        self.calls: list[str] = []

    def exitcode(self):
        return self.code

    def stop(self):
        self.calls.append("stop")

    def kill(self):
        self.calls.append("kill")
        if self.code is None:
            self.code = -9

    def wait(self, timeout):
        return self.code


class FakeLauncher(Launcher):
    def __init__(self):
        self.started: list[tuple] = []
        self.handles: list[FakeHandle] = []
        self.closed = False

    def start(self, ctx):
        self.started.append(ctx)
        self.handles.append(FakeHandle(ctx))
        return self.handles[-1]

    def close(self):
        self.closed = True


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


GRAPH = [("trainer", 0), ("policy", 0), ("actor", 0), ("actor", 1)]


def make_supervisor(**sv):
    launcher, clock = FakeLauncher(), Clock()
    s = Supervisor(launcher, lambda role, index, attempt: (role, index, attempt),
                   SupervisionConfig(**{"heartbeat_timeout_s": 10.0, "start_timeout_s": 30.0,
                                        "restart_backoff_s": 1.0, "restart_backoff_max_s": 3.0, **sv}), clock)
    s.start_all(GRAPH)
    return s, launcher, clock


def beat(s, role, index, attempt=0, **extra):
    s.on_message({"type": "heartbeat", "role": role, "index": index, "attempt": attempt, **extra})


def all_beat(s, attempt=0):
    for role, index in GRAPH:
        beat(s, role, index, attempt)


def assert_same_state(a, b, path: str = "") -> None:
    """Bit-for-bit equality of nested checkpoint data (tensors, arrays, numbers, RNG tuples)."""
    import torch

    assert type(a) is type(b), path
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same_state(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def one_line_error(result, *needles: str) -> None:
    """``result`` (what ``typer.testing.CliRunner.invoke`` returns) is a refusal as the CLI writes
    one: exit code 2, and one line that starts with ``error: `` and holds each of ``needles``."""
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "\n" not in text and text.startswith("error: "), text
    for needle in needles:
        assert needle in text, text


def round_trip_counts(**buckets: int) -> list[int]:
    """An actor's inference round trips per bucket (``zoo.core.health``: 18 buckets of
    ``ROUND_TRIP_EDGES_S``), 0 but where ``buckets`` says: ``b6=4`` is 4 round trips in
    bucket 6, [512, 1024) µs."""
    counts = [0] * 18
    for key, n in buckets.items():
        counts[int(key[1:])] = n
    return counts


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``benchmarks_<name>``, registered in ``sys.modules``
    while and after it runs (its dataclasses look their module up)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
