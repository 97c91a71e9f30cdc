"""CUDA device facts and the checks made on them before any worker starts (issue 21).

- :func:`cuda_count_problem`: ``cuda:N`` beyond the CUDA devices a process sees. The config
  check calls it with this machine's count; a remote launcher (Ray) calls it once the
  placement is known, with the count a worker will see there.
- :func:`bf16_native` / :func:`choose_precision` / :func:`precision_problem`: bfloat16 on a
  GPU only where it is native (``torch.cuda.is_bf16_supported()`` and compute capability
  >= 8.0, Ampere); ``policy.precision=auto`` picks it there and float32 elsewhere.
- :func:`use_device`: ``torch.cuda.set_device`` for a ``cuda:N`` worker, so that it does not
  open a context on GPU 0 as well.
- :func:`cpu_bf16_facts` / :func:`cpu_bf16_native` / :func:`training_bf16_native` /
  :func:`choose_training_precision` / :func:`training_autocast`: ``algo.precision`` (issue 25):
  bfloat16 training on a CPU with AVX512-BF16 or AMX-BF16 or a GPU of compute capability
  >= 8.0; ``auto`` picks it there for networks with a layer of at least :data:`BF16_MIN_LAYER`
  weights (measured faster), float32 elsewhere.
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


# ----------------------------------------------------------------------------- training precision (issue 25)
# /proc/cpuinfo flags of x86 CPUs whose vector units compute bfloat16 dot products natively:
# AVX512-BF16 (Cooper Lake, Zen 4 and later) and AMX-BF16 (Sapphire Rapids and later). oneDNN
# runs torch's bfloat16 matrix products and convolutions on them; elsewhere it emulates them.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16_facts(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, frozenset[str]]:
    """``(torch's CPU capability, the CPU's bfloat16 flags)``: the capability torch's kernels
    were dispatched for (``torch.backends.cpu.get_cpu_capability()``, e.g. ``"AVX512"``,
    ``"AVX2"``) and which of :data:`CPU_BF16_FLAGS` the first ``flags`` line of ``cpuinfo``
    lists (empty where the file is missing, e.g. macOS)."""
    import torch

    capability = str(torch.backends.cpu.get_cpu_capability())
    flags: frozenset[str] = frozenset()
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = frozenset(line.split(":", 1)[1].split()) & frozenset(CPU_BF16_FLAGS)
                    break
    except OSError:
        pass
    return capability, flags


def cpu_bf16_native(capability: str, flags: frozenset[str] | set[str]) -> bool:
    """Whether a CPU computes bfloat16 matrix products natively: torch dispatches AVX512 (or
    AMX) kernels there and the CPU has AVX512-BF16 or AMX-BF16 (:data:`CPU_BF16_FLAGS`).
    ``cpu_bf16_native("AVX512", {"avx512_bf16"})`` is True; ``("AVX2", set())`` is False."""
    return capability.upper().startswith(("AVX512", "AMX")) and bool(set(flags) & set(CPU_BF16_FLAGS))


def training_bf16_native(device: Any) -> tuple[bool, str]:
    """``(native, why)``: whether ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps``) computes
    bfloat16 natively, and the facts in words, e.g. ``(True, "CPU with avx512_bf16, torch
    capability AVX512")``. CPU: :func:`cpu_bf16_native`; CUDA: :func:`bf16_native`; other
    devices: False."""
    import torch

    kind = torch.device(device).type
    if kind == "cpu":
        cpu, flags = cpu_bf16_facts()
        have = ", ".join(sorted(flags)) if flags else "no avx512_bf16/amx_bf16"
        return cpu_bf16_native(cpu, flags), f"CPU with {have}, torch capability {cpu}"
    if kind == "cuda":
        capability, supported, name = _cuda_facts(device)
        return bf16_native(capability, supported), f"{name}, compute capability {capability[0]}.{capability[1]}"
    return False, f"{kind} device"


# The least weights in one layer (matrix or convolution kernel) for which ``algo.precision=auto``
# picks bfloat16: measured (benchmarks/train_precision_bench.py, two interleaved runs) on a CPU
# with AVX512-BF16, a training step (minibatch 256, forward, backward, Adam) under bfloat16
# autocast took 1.17-1.23x the float32 CPU time with MLP layers of 64 x 64, 1.01-1.02x with
# 128 x 128, 0.75-0.76x with 256 x 256, 0.59-0.69x with 512 x 512, 0.60-0.62x for the
# hide-and-seek entity policy and 0.46-0.50x for the Nature CNN (benchmarks/RESULTS.md).
BF16_MIN_LAYER = 256 * 256


TRAINING_PRECISION_HELP = (
    "Arithmetic of the training forward and backward passes: auto (the default): bfloat16 where the "
    "device computes it natively (a CPU with AVX512-BF16 or AMX-BF16, a GPU of compute capability >= 8.0) "
    f"and the network has a layer of at least {BF16_MIN_LAYER:,} weights (measured faster there: the Atari "
    "CNN, the hide-and-seek entity policy), else float32 (CartPole's and MuJoCo's 64-unit MLPs); float32; "
    "bfloat16 (matrix products and convolutions under torch.autocast; weights, optimiser state, losses, "
    "advantages, returns and statistics stay float32). zoo train prints the choice. Learning measured "
    "unchanged in bfloat16 (benchmarks/RESULTS.md, \"bfloat16 training\")."
)
"""The help of ``algo.precision`` (:func:`training_precision_field`)."""


def training_precision_field() -> Any:
    """The ``algo.precision`` field of an algorithm's config (PPO, IMPALA, MAPPO): a
    ``dataclasses.field`` with the default ``"auto"`` and :data:`TRAINING_PRECISION_HELP` as its
    help, so the algorithms share one definition; the trainer resolves it with
    :func:`choose_training_precision`."""
    import dataclasses

    return dataclasses.field(default="auto", metadata={"help": TRAINING_PRECISION_HELP})


def choose_training_precision(precision: str, device: Any, largest_layer: int) -> tuple[str, str]:
    """``(precision, reason)``: the arithmetic a trainer runs for ``algo.precision``.

    ``float32`` and ``bfloat16`` are kept as asked (``reason`` notes an emulated bfloat16).
    ``auto`` picks ``bfloat16`` only where both hold: the device computes it natively
    (:func:`training_bf16_native`) and the network's ``largest_layer`` (the most weights in one
    matrix or convolution kernel) is at least :data:`BF16_MIN_LAYER`: below that, autocast's
    casts and extra ops cost more than the cheaper products save (measured, see the constant).
    No timing is taken at start: the choice depends only on the hardware and the network, so
    a run and its resume on the same machine choose alike. ``reason`` says why in words
    (``zoo train`` prints it).

    Raises:
        ValueError: ``precision`` is none of ``auto``, ``float32``, ``bfloat16``.
    """
    if precision not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"algo.precision must be auto, float32 or bfloat16, got {precision!r}")
    if precision == "float32":
        return "float32", "as set"
    native, facts = training_bf16_native(device)
    if precision == "bfloat16":
        return "bfloat16", "as set" if native else (
            f"as set, but {facts}: no native bfloat16, torch emulates it (expect it slower than float32)")
    if not native:
        return "float32", f"auto: {facts}: no native bfloat16"
    if largest_layer < BF16_MIN_LAYER:
        return "float32", (f"auto: {facts}: native bfloat16, but the largest layer has {largest_layer:,} weights, "
                           f"under the {BF16_MIN_LAYER:,} from which bfloat16 measured faster")
    return "bfloat16", f"auto: {facts}: native bfloat16, and a layer of {largest_layer:,} weights"


def training_autocast(precision: str, device: Any):
    """The context a training forward pass runs in: ``torch.autocast(device type,
    dtype=torch.bfloat16)`` for ``bfloat16`` (matrix products and convolutions in bfloat16,
    their backward passes too; the weights stay float32 and are cast per op), else a no-op.
    Run only the forward pass in it and cast its outputs to float32 before the loss.

    Raises:
        ValueError: ``precision`` is neither ``float32`` nor ``bfloat16`` (resolve ``auto``
            first with :func:`choose_training_precision`).
    """
    import contextlib

    import torch

    if precision == "float32":
        return contextlib.nullcontext()
    if precision == "bfloat16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"algo.precision must be float32 or bfloat16 here (auto resolved first), got {precision!r}")
