"""Mixed-precision training for the algorithm plugins: ``algo.precision`` (issue 25).

``algo.precision`` is ``auto`` (the default), ``float32`` or ``bfloat16``. Under ``bfloat16``
the forward pass of the network runs inside ``torch.autocast(dtype=torch.bfloat16)``
(:func:`zoo.core.devices.training_autocast`): matrix products and convolutions compute in
bfloat16 (8 bits of mantissa, float32's exponent range), and so do their backward passes,
which autograd records in the dtype of the forward op. Everything else stays float32:

- the master weights and every gradient (autocast casts a float32 weight to bfloat16 for
  each op; the cast's backward returns a float32 gradient), so the optimiser state too;
- the network's outputs, cast to float32 as they leave the forward pass (:func:`as_float32`),
  and so the losses, log-probabilities, entropies, importance ratios, advantages, returns,
  value targets (GAE, V-trace) and the observation, reward and value statistics;
- no loss scaling is needed: bfloat16 has float32's exponent range (a gradient that
  underflows float16 does not underflow bfloat16).

A non-finite loss, gradient norm or weight under bfloat16 goes through the same guarded
update as in float32 (:class:`~zoo.plugins.algorithms.tensors.UpdateGuard`). Checkpoints hold
the float32 weights, whatever the precision: precision is a property of the arithmetic, not
of the weights, so a run may resume in another precision.

``auto`` resolves once, when the algorithm is built, by
:func:`zoo.core.devices.choose_training_precision` (native bfloat16 on the device and a
network with a layer of at least :data:`~zoo.core.devices.BF16_MIN_LAYER` weights).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from zoo.core.devices import choose_training_precision, training_autocast

T = TypeVar("T")


def largest_layer(module: nn.Module) -> int:
    """The most weights in one matrix or convolution kernel of ``module``: the largest
    ``numel`` of a parameter of rank 2 or more (0 when it has none). PPO's CartPole MLP:
    64 x 64 = 4,096; the Nature CNN: its dense layer, 3,136 x 512 = 1,605,632."""
    return max((p.numel() for p in module.parameters() if p.dim() >= 2), default=0)


def use_channels_last(module: nn.Module, device: Any) -> int:
    """On the CPU, set ``channels_last_memory`` on every Nature CNN in ``module`` (its frames are
    then channels-last in memory before the convolutions; measured faster in float32 and
    bfloat16 alike, :class:`~zoo.plugins.algorithms.encoders.NatureCNN`); elsewhere nothing
    (not measured on GPUs). Returns how many it set. Results equal the NCHW ones up to float
    rounding (a different order of summation)."""
    from zoo.plugins.algorithms.encoders import NatureCNN

    if torch.device(device).type != "cpu":
        return 0
    cnns = [m for m in module.modules() if isinstance(m, NatureCNN)]
    for m in cnns:
        m.channels_last_memory = True
    return len(cnns)


def as_float32(x: Any) -> Any:
    """``x`` with every bfloat16 or float16 tensor cast to float32, through tuples, lists and
    dicts (other values, float64 and integer tensors unchanged; a float32 tensor is returned
    as itself). ``as_float32({"v": bf16 [3], "s": None})`` -> ``{"v": float32 [3], "s": None}``."""
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    if isinstance(x, dict):
        return type(x)((k, as_float32(v)) for k, v in x.items())
    if isinstance(x, tuple):
        return tuple(as_float32(v) for v in x)
    if isinstance(x, list):
        return [as_float32(v) for v in x]
    return x


class TrainingPrecision:
    """The arithmetic of one algorithm's forward passes (``algo.precision``).

    Args:
        requested: ``auto``, ``float32`` or ``bfloat16`` (the config's value).
        device: the trainer's torch device.
        policy: the network trained (``auto`` reads its :func:`largest_layer`); its Nature CNNs
            get channels-last frames on the CPU (:func:`use_channels_last`), in every precision.

    Attributes:
        requested: as given. name: ``float32`` or ``bfloat16``, what runs. reason: why, in words.

    Raises:
        ValueError: ``requested`` is none of the three.
    """

    def __init__(self, requested: str, device: Any, policy: nn.Module) -> None:
        self.requested, self.device = requested, torch.device(device)
        self.name, self.reason = choose_training_precision(requested, self.device, largest_layer(policy))
        use_channels_last(policy, self.device)

    def __repr__(self) -> str:
        return f"TrainingPrecision({self.name!r}, {self.reason!r})"

    def autocast(self):
        """The context of a forward pass (a no-op in float32); see :func:`training_autocast`."""
        return training_autocast(self.name, self.device)

    def forward(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` under :meth:`autocast`, its tensors returned as float32
        (:func:`as_float32`). In float32 it is ``fn(*args, **kwargs)`` itself."""
        if self.name == "float32":
            return fn(*args, **kwargs)
        with self.autocast():
            out = fn(*args, **kwargs)
        return as_float32(out)


def explain(requested: str, device: str, policy: nn.Module) -> str:
    """What ``zoo train`` prints for ``algo.precision``: the arithmetic chosen and why, e.g.
    ``"bfloat16 (auto: CPU with avx512_bf16, torch capability AVX512: native bfloat16, and a
    layer of 1,605,632 weights)"``."""
    p = TrainingPrecision(requested, device, policy)
    return f"{p.name} ({p.reason})"
