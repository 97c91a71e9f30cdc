"""Checks that every tensor of a batch, a module or an algorithm lives on one device.

Written for the CPU-only suite: run device-sensitive code under torch's ``FakeTensorMode``
(``torch._subclasses.fake_tensor``) with ``device="cuda"`` standing in for a GPU, then
:func:`assert_on_device` names each tensor left behind on the host, by its path::

    with FakeTensorMode(allow_non_fake_inputs=True):
        algo = PPO(PPOConfig(device="cuda", norm_reward=True), spec, seed=0)
        assert_on_device(algo, "cuda")   # policy, optimiser state, reward statistics
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

# Optimiser state entries torch keeps on the host by design (Adam's and RMSprop's ``step``
# counter, a 0-d float32 CPU tensor unless the optimiser is ``capturable`` or ``fused``).
HOST_STATE_KEYS = frozenset({"step"})


def _same(actual: torch.device, expected: torch.device) -> bool:
    """``cuda`` (no index) matches every ``cuda:N``; otherwise type and index must agree."""
    if actual.type != expected.type:
        return False
    return expected.index is None or actual.index is None or actual.index == expected.index


def tensors(obj: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """``(path, tensor)`` for every tensor in ``obj``.

    ``obj`` may be a tensor; a dict, list or tuple of them (nested: the project's batches,
    ``batch["obs"]["image"]`` is the path ``obs.image``); an ``nn.Module`` (its parameters and
    buffers, by their state-dict names); a ``torch.optim.Optimizer`` (its per-parameter state,
    less :data:`HOST_STATE_KEYS`, as ``state.<param index>.<key>``); or any other object, whose
    attributes holding one of these are walked (an algorithm: ``policy``, ``optimizer``,
    ``reward_norm``...). numpy arrays and other values are not tensors and are skipped.
    """
    if isinstance(obj, torch.Tensor):
        yield path or "<tensor>", obj
    elif isinstance(obj, nn.Module):
        for name, t in list(obj.named_parameters()) + list(obj.named_buffers()):
            yield _join(path, name), t
    elif isinstance(obj, torch.optim.Optimizer):
        for i, state in enumerate(obj.state.values()):
            for key, value in state.items():
                if key not in HOST_STATE_KEYS:
                    yield from tensors(value, _join(path, f"state.{i}.{key}"))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from tensors(value, _join(path, str(key)))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from tensors(value, _join(path, str(i)))
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for key, value in vars(obj).items():
            if isinstance(value, (torch.Tensor, nn.Module, torch.optim.Optimizer, dict, list, tuple)):
                yield from tensors(value, _join(path, key))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def misplaced(obj: Any, device: str | torch.device) -> list[str]:
    """``"<path>: <device>"`` for each tensor of ``obj`` (:func:`tensors`) not on ``device``."""
    expected = torch.device(device)
    return [f"{p}: {t.device}" for p, t in tensors(obj) if not _same(t.device, expected)]


def assert_on_device(obj: Any, device: str | torch.device) -> int:
    """Assert every tensor of ``obj`` (:func:`tensors`) is on ``device``; returns how many were checked.

    Raises:
        AssertionError: naming each tensor on another device with its path and device, e.g.
            ``"2 tensors not on cuda: reward_norm.returns.mean: cpu; ..."``; or ``obj`` holds no tensor
            (a check of nothing would pass whatever the code did).
    """
    found = list(tensors(obj))
    if not found:
        raise AssertionError(f"no tensor found in {type(obj).__name__}: nothing to check")
    bad = misplaced(obj, device)
    if bad:
        raise AssertionError(f"{len(bad)} tensor{'s' if len(bad) > 1 else ''} not on {device}: " + "; ".join(bad))
    return len(found)
