"""Action distributions shared by every algorithm (PPO, IMPALA, MAPPO): one head per action space.

A head maps the actor's outputs ``[N, num_outputs]`` to a distribution over actions of the
env's per-agent action space (:func:`make_head`):

- ``Discrete(n, start)``: a categorical over ``n`` logits; actions int64 ``[N]``.
- ``MultiDiscrete(nvec, start)``: independent categoricals, one per entry (``sum(nvec)``
  logits); log-probabilities and entropies summed; actions int64 ``[N, *nvec.shape]``.
- ``MultiBinary(n)``: one categorical over ``{0, 1}`` per bit (2 logits each, i.e. a
  Bernoulli), as a MultiDiscrete of 2s; actions int64 ``[N, *shape]``.
- ``Box(shape)``: a diagonal Gaussian with a state-independent log standard deviation
  (a parameter initialised to 0), CleanRL's ``ppo_continuous_action`` (Huang et al., "The
  37 Implementation Details of PPO", continuous-action details 1-3): log-probabilities
  and entropies summed over dimensions; actions float32 ``[N, *shape]``, **not** clipped:
  the sampled action is what samples store and what the log-probability is of; the actor
  clips only the copy sent to the env (:class:`zoo.core.spaces.ActionClipper`).

**Action masks** (bool ``[N, num_outputs]``, True = allowed; the observation key
``"zoo:action_mask"``): a categorical's masked logits are set to the lowest finite value
of their dtype before the softmax, so an illegal action has probability exactly 0 in
sampling, contributes nothing to the entropy, and the log-probabilities of legal actions
are renormalised over the legal ones (Huang and Ontañón, "A Closer Look at Invalid Action
Masking in Policy Gradient Algorithms", FLAIRS 2022, eq. 3)::

    pi(a | s) = exp(l_a) / sum_{b legal} exp(l_b)        (a legal; 0 otherwise)
    H         = - sum_{a legal} pi(a | s) log pi(a | s)

A row whose mask allows nothing (an inactive agent's padding) is treated as unmasked, so
that it stays finite. Gaussian heads take no mask.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with disallowed entries set to ``finfo(dtype).min`` (rows allowing nothing unchanged)."""
    if mask is None:
        return logits
    mask = mask.to(torch.bool)
    mask = mask | ~mask.any(-1, keepdim=True)
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)


def categorical_sample(logits: torch.Tensor, mask: torch.Tensor | None, deterministic: bool) -> torch.Tensor:
    """One index per row of ``logits [N, n]`` (int64 ``[N]``): the mode or a sample, legal ones only."""
    z = masked_logits(logits.float(), mask)
    if deterministic:
        return z.argmax(-1)
    # torch.distributions.Categorical(logits=z).sample(), without its per-call object and argument
    # checks: the same normalised probabilities and the same multinomial draw (identical results for
    # the same generator state; tests/unit/test_distributions.py), a third of its CPU time on small batches.
    probs = torch.softmax(z - z.logsumexp(-1, keepdim=True), -1)
    return torch.multinomial(probs.reshape(-1, z.shape[-1]), 1, True).reshape(z.shape[:-1])


def categorical_logp(logits: torch.Tensor, index: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``log pi(index)``, float32 ``[N]``: :func:`categorical_logp_entropy`'s first output alone."""
    logp_all = torch.log_softmax(masked_logits(logits.float(), mask), dim=-1)
    return logp_all.gather(-1, index.long().unsqueeze(-1)).squeeze(-1)


def categorical_logp_entropy(logits: torch.Tensor, index: torch.Tensor,
                             mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log pi(index), H(pi))``, float32 ``[N]``, of the masked categorical (module docstring)."""
    z = masked_logits(logits.float(), mask)
    logp_all = torch.log_softmax(z, dim=-1)
    logp = logp_all.gather(-1, index.long().unsqueeze(-1)).squeeze(-1)
    p = logp_all.exp()
    # p is exactly 0 where masked: select those terms away instead of multiplying 0 by -3e38.
    entropy = -torch.where(p > 0, p * logp_all, torch.zeros_like(p)).sum(-1)
    return logp, entropy


class ActionHead(nn.Module):
    """Maps the actor's outputs ``[N, num_outputs]`` to a distribution; one subclass per space."""

    num_outputs: int

    def sample(self, out: torch.Tensor, deterministic: bool = False,
               mask: torch.Tensor | None = None) -> torch.Tensor:
        """Actions ``[N, *action_shape]`` (the mode when ``deterministic``)."""
        raise NotImplementedError

    def log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor,
                         mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log pi(action), entropy)``, float32 ``[N]`` each (nats)."""
        raise NotImplementedError

    def log_prob(self, out: torch.Tensor, action: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``log pi(action)``, float32 ``[N]``: :meth:`log_prob_entropy` without the entropy (what
        acting needs)."""
        return self.log_prob_entropy(out, action, mask)[0]


class DiscreteHead(ActionHead):
    """``Discrete(n, start)``: one categorical."""

    def __init__(self, space: Any) -> None:
        super().__init__()
        self.num_outputs, self.start = int(space.n), int(space.start)

    def sample(self, out, deterministic=False, mask=None):
        return categorical_sample(out, mask, deterministic) + self.start

    def log_prob_entropy(self, out, action, mask=None):
        return categorical_logp_entropy(out, action.reshape(-1).long() - self.start, mask)

    def log_prob(self, out, action, mask=None):
        return categorical_logp(out, action.reshape(-1).long() - self.start, mask)


class MultiDiscreteHead(ActionHead):
    """``MultiDiscrete(nvec, start)``: one categorical per entry, log-probs and entropies summed."""

    start: torch.Tensor  # a buffer: int64 [len(nvec)]

    def __init__(self, space: Any, nvec: list[int] | None = None, start: Any = None,
                 shape: tuple[int, ...] | None = None) -> None:
        super().__init__()
        self.shape = tuple(space.nvec.shape) if shape is None else tuple(shape)
        self.nvec = [int(n) for n in np.ravel(space.nvec)] if nvec is None else list(nvec)
        if start is None:
            start = np.ravel(getattr(space, "start", np.zeros_like(space.nvec)))
        self.register_buffer("start", torch.as_tensor(np.asarray(start), dtype=torch.int64), persistent=False)
        self.num_outputs = sum(self.nvec)

    def _parts(self, out, mask):
        outs = torch.split(out, self.nvec, dim=-1)
        masks = torch.split(mask, self.nvec, dim=-1) if mask is not None else [None] * len(outs)
        return zip(outs, masks, strict=True)

    def sample(self, out, deterministic=False, mask=None):
        a = torch.stack([categorical_sample(o, m, deterministic) for o, m in self._parts(out, mask)], dim=-1)
        return (a + self.start).reshape(out.shape[0], *self.shape)

    def log_prob_entropy(self, out, action, mask=None):
        a = action.reshape(out.shape[0], -1).long() - self.start
        logps, ents = zip(*(categorical_logp_entropy(o, a[:, i], m) for i, (o, m) in enumerate(self._parts(out, mask))),
                          strict=True)
        return torch.stack(logps, -1).sum(-1), torch.stack(ents, -1).sum(-1)

    def log_prob(self, out, action, mask=None):
        a = action.reshape(out.shape[0], -1).long() - self.start
        return torch.stack([categorical_logp(o, a[:, i], m) for i, (o, m) in enumerate(self._parts(out, mask))],
                           -1).sum(-1)


class MultiBinaryHead(MultiDiscreteHead):
    """``MultiBinary(n)``: a categorical over {0, 1} per bit (a MultiDiscrete of 2s)."""

    def __init__(self, space: Any) -> None:
        shape = tuple(space.shape)
        bits = int(np.prod(shape, dtype=np.int64))
        super().__init__(space, nvec=[2] * bits, start=np.zeros(bits, np.int64), shape=shape)


class GaussianHead(ActionHead):
    """``Box``: diagonal Gaussian ``N(mean = out, std = exp(log_std))``, ``log_std`` state-independent."""

    def __init__(self, space: Any) -> None:
        super().__init__()
        self.shape = tuple(space.shape)
        self.num_outputs = int(np.prod(self.shape, dtype=np.int64))
        self.log_std = nn.Parameter(torch.zeros(self.num_outputs))

    def _dist(self, out):
        return Normal(out.float(), self.log_std.float().exp().expand(out.shape))

    def sample(self, out, deterministic=False, mask=None):
        a = out.float() if deterministic else self._dist(out).sample()
        return a.reshape(out.shape[0], *self.shape)

    def log_prob_entropy(self, out, action, mask=None):
        dist = self._dist(out)
        a = action.reshape(out.shape[0], -1).float()
        return dist.log_prob(a).sum(-1), dist.entropy().sum(-1)


def make_head(space: Any) -> ActionHead:
    """The head for ``space`` (a Box head owns the ``log_std`` parameter).

    Raises:
        TypeError: the space is not Discrete, MultiDiscrete, MultiBinary or Box.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return DiscreteHead(space)
    if isinstance(space, spaces.MultiDiscrete):
        return MultiDiscreteHead(space)
    if isinstance(space, spaces.MultiBinary):
        return MultiBinaryHead(space)
    if isinstance(space, spaces.Box):
        return GaussianHead(space)
    raise TypeError(f"Zoo's algorithms support Discrete, MultiDiscrete, MultiBinary and Box action spaces, not {space}")
