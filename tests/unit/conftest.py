"""Fixtures of the unit tests (a test module never imports another test module: a fixture that
several of them use lives here).

- ``one_gpu``: this machine as one with one CUDA device of compute capability 9.0 (native
  bfloat16), for the checks that GPU commands build valid configs without a GPU
  (tests/unit/test_gpu_check.py, tests/unit/test_gpu_apex_pong.py).
- ``two_cores``: this process as one that may run on 2 CPUs, for the tests whose configs set 2
  trainer or policy threads (refused above the cores: ``zoo.core.workers.threads.thread_problems``),
  so that they pass where the tests run on 1 CPU (``taskset -c 0 pytest``, a 1-core container).
"""
from __future__ import annotations

import pytest


@pytest.fixture
def one_gpu(monkeypatch):
    """This machine as one with one CUDA device of compute capability 9.0 (native bfloat16)."""
    import torch

    from zoo.core import devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(devices, "_cuda_facts", lambda device: ((9, 0), True, "a stand-in GPU"))


@pytest.fixture
def two_cores(monkeypatch):
    """This process as one that may run on 2 CPUs (``machine_cores() == 2``)."""
    from zoo.core.workers import threads

    monkeypatch.setattr(threads, "machine_cores", lambda: 2)
