"""CUDA device facts and the checks made on them before any worker starts (issue 21).

- :func:`cuda_count_problem`: ``cuda:N`` beyond the CUDA devices a process sees. The config
  check calls it with this machine's count; a remote launcher (Ray) calls it once the
  placement is known, with the count a worker will see there.
- :func:`bf16_native` / :func:`choose_precision` / :func:`precision_problem`: bfloat16 on a
  GPU only where it is native (``torch.cuda.is_bf16_supported()`` and compute capability
  >= 8.0, Ampere); ``policy.precision=auto`` picks it there and float32 elsewhere.
- :func:`use_device`: ``torch.cuda.set_device`` for a ``cuda:N`` worker, so that it does not
  open a context on GPU 0 as well.
"""
from __future__ import annotations

from typing import Any

# Compute capability from which bfloat16 matrix products are native (Ampere, sm_80).
BF16_MIN_CAPABILITY = (8, 0)


def cuda_index(device: str) -> int | None:
    """The ordinal of ``cuda`` (0) or ``cuda:N`` (N); None for any other device string."""
    if device == "cuda":
        return 0
    if device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    return None


def cuda_count_problem(path: str, device: str, count: int) -> str | None:
    """One line when ``device`` (the value of option ``path``) names a CUDA device a process
    that sees ``count`` CUDA devices lacks, else None. Example: ``cuda_count_problem(
    "algo.device", "cuda:3", 1)`` -> ``"algo.device=cuda:3: this machine has 1 CUDA device
    (cuda:0); use cuda:0"``."""
    index = cuda_index(device)
    if index is None or index < count:
        return None
    if count == 0:
        return f"{path}={device}: this machine has no CUDA device; use cpu"
    names = "cuda:0" if count == 1 else f"cuda:0..cuda:{count - 1}"
    return (f"{path}={device}: this machine has {count} CUDA device{'s' if count != 1 else ''} ({names}); "
            f"use {'cuda:0' if count == 1 else 'one of ' + names}")


def bf16_native(capability: tuple[int, int], is_bf16_supported: bool) -> bool:
    """Whether a GPU of compute ``capability`` runs bfloat16 natively: torch says it supports
    bfloat16 and the capability is at least :data:`BF16_MIN_CAPABILITY` (torch emulates it on
    older GPUs such as V100 (7.0) and T4 (7.5), slower than float32)."""
    return bool(is_bf16_supported) and tuple(capability) >= BF16_MIN_CAPABILITY


def _cuda_facts(device: Any) -> tuple[tuple[int, int], bool, str]:
    import torch

    index = torch.device(device).index or 0
    major, minor = torch.cuda.get_device_capability(index)
    return ((major, minor), bool(torch.cuda.is_bf16_supported()),
            torch.cuda.get_device_name(index))


def choose_precision(precision: str, device: Any) -> str:
    """The inference precision a worker runs: ``float32`` and ``bfloat16`` as asked; ``auto``:
    ``bfloat16`` on a CUDA device where it is native (:func:`bf16_native`), else ``float32``
    (on the CPU too: the gain there depends on AVX512-BF16, see ``policy.precision``)."""
    import torch

    if precision != "auto":
        return precision
    if torch.device(device).type != "cuda":
        return "float32"
    capability, supported, _ = _cuda_facts(device)
    return "bfloat16" if bf16_native(capability, supported) else "float32"


def precision_problem(path: str, precision: str, device: str) -> str | None:
    """One line when ``precision`` is ``bfloat16`` on a CUDA ``device`` without native bfloat16
    (imports torch; call it only for a device that exists), else None."""

    if precision != "bfloat16" or cuda_index(device) is None:
        return None
    capability, supported, name = _cuda_facts(device)
    if bf16_native(capability, supported):
        return None
    return (f"{path}=bfloat16 on {device} ({name}, compute capability {capability[0]}.{capability[1]}): no native "
            f"bfloat16 below {BF16_MIN_CAPABILITY[0]}.{BF16_MIN_CAPABILITY[1]} (Ampere); use float32 or auto")


def use_device(device: Any) -> None:
    """Make ``device`` this process's current CUDA device (``torch.cuda.set_device``) when it is
    ``cuda:N``, before any tensor is made there; nothing for other devices."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
