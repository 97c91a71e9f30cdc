"""MAPPO policies: the actor-critic interface MAPPO trains, recurrence helpers, the MLP/GRU policy.

Every MAPPO policy is an :class:`ActorCriticBase`: a separate **actor tower** and
**critic tower** (no shared weights: the critic reads the centralised input), each an
observation encoder ``obs -> float32 [N, F]`` followed, for recurrent policies, by a
recurrent core (GRU or LSTM cell) and a LayerNorm. The actor ends in a linear layer of
action logits (orthogonal init, gain 0.01) read by PPO's action heads
(:func:`zoo.plugins.algorithms.distributions.make_head`: one categorical per
MultiDiscrete dimension, masked by the observation key ``"zoo:action_mask"`` when the env
gives one); the critic ends in a :class:`~.valuenorm.ValueHead`.

Recurrent state (the policy worker's protocol, see :mod:`zoo.plugins.algorithms.mappo.mappo`):
``state_shape = (2 * k, H)`` stacks the actor's ``k`` state rows and then the critic's
(``k = 1`` for a GRU: ``h``; ``k = 2`` for an LSTM: ``h, c``); ``None`` for a
feed-forward policy. The initial state is zeros.

:class:`MLPPolicy` is the MAPPO paper's MLP network (arXiv 2103.01955, appendix
"Network architecture" / the reference code): running observation normalisation, two
hidden layers of ``hidden`` ReLU units each followed by LayerNorm, optionally a GRU of
``hidden`` units followed by LayerNorm ("rMAPPO", config ``recurrent``). The actor reads
every env observation key (none of Zoo's ``"zoo:..."`` keys); the critic reads the
environment's global state (the keys starting with ``"zoo:global_state"``, which the
PettingZoo adapter adds when the env has ``state()``) when present, else the same keys as
the actor. An env observation entry named ``"state"`` is an ordinary actor input.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, cast

import numpy as np
import torch
from torch import nn

from zoo.core.env import EnvSpec
from zoo.core.spaces import ACTION_MASK_KEY, GLOBAL_STATE_KEY
from zoo.plugins.algorithms.distributions import make_head
from zoo.plugins.algorithms.encoders import VectorEncoder, feature_keys, layer_init
from zoo.plugins.algorithms.mappo.valuenorm import RunningMeanStd, ValueHead, ValueNormMode

Obs = dict[str, torch.Tensor]


class CriticSequence(TypedDict):
    """What :meth:`ActorCriticBase.critic_sequence` returns (shapes in its docstring)."""

    value: torch.Tensor
    fed: torch.Tensor | None
    after: torch.Tensor | None


class SequenceEvaluation(CriticSequence):
    """What :meth:`ActorCriticBase.evaluate` returns (shapes in its docstring)."""

    logp: torch.Tensor
    entropy: torch.Tensor
STATE_KEY = GLOBAL_STATE_KEY


# ----------------------------------------------------------------------------- recurrence
def unroll(
    step: Callable[[Any, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    x: Any,
    state0: torch.Tensor,
    reset: torch.Tensor,
    active: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run a recurrent ``step`` over ``L`` time steps, resetting and holding the state as at rollout.

    At each step ``t``: the state is set to zeros in the rows where ``reset[t]`` (the
    observation starts an episode: the policy worker resets there before the forward
    pass); ``y_t, s' = step(x[t], s)``; in rows where ``active[t]`` is False the state is
    *held* (``s' = s``), because the policy worker is sent no request for an inactive
    agent and so never advances its state.

    Args:
        step: ``(x_t, s [M, *S]) -> (y_t, s' [M, *S])``.
        x: ``[L, M, ...]`` tensor (anything indexable by ``t`` with ``len``).
        state0: ``[M, *S]`` state fed at step 0 (before the reset of step 0).
        reset: bool ``[L, M]``.
        active: bool ``[L, M]`` or None (all active).

    Returns:
        ``(y [L, M, ...], fed [L, M, *S], after [L, M, *S])``: the outputs, the state fed
        at each step (after its reset), the state after each step.
    """
    L = reset.shape[0]
    extra = (1,) * (state0.dim() - 1)
    state = state0
    ys, fed, after = [], [], []
    for t in range(L):
        s = torch.where(reset[t].reshape(-1, *extra), torch.zeros_like(state), state)
        y, new = step(x[t], s)
        if active is not None:
            new = torch.where(active[t].reshape(-1, *extra), new, s)
        ys.append(y)
        fed.append(s)
        after.append(new)
        state = new
    return torch.stack(ys), torch.stack(fed), torch.stack(after)


class GRUCore(nn.Module):
    """One GRU cell: ``x [M, F], s [M, 1, H] -> (y [M, H], s' [M, 1, H])`` with ``y = h'``
    (Cho et al. 2014, arXiv 1406.1078, eq. 5-8; torch's ``GRUCell``)."""

    rows = 1

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell = nn.GRUCell(in_dim, hidden)
        for name, p in self.cell.named_parameters():
            (nn.init.orthogonal_ if "weight" in name else nn.init.zeros_)(p)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.cell(x, s[:, 0])
        return h, h[:, None]


class LSTMCore(nn.Module):
    """One LSTM cell: ``x [M, F], s [M, 2, H] (h, c) -> (y [M, H], s' [M, 2, H])`` with ``y = h'``
    (Hochreiter and Schmidhuber 1997; torch's ``LSTMCell``)."""

    rows = 2

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell = nn.LSTMCell(in_dim, hidden)
        for name, p in self.cell.named_parameters():
            (nn.init.orthogonal_ if "weight" in name else nn.init.zeros_)(p)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = self.cell(x, (s[:, 0], s[:, 1]))
        return h, torch.stack([h, c], dim=1)


def make_core(kind: str | None, in_dim: int, hidden: int) -> GRUCore | LSTMCore | None:
    """``"gru"`` -> :class:`GRUCore`, ``"lstm"`` -> :class:`LSTMCore`, ``None`` -> no core."""
    if kind is None:
        return None
    cores: dict[str, type[GRUCore] | type[LSTMCore]] = {"gru": GRUCore, "lstm": LSTMCore}
    return cores[kind](in_dim, hidden)


# ----------------------------------------------------------------------------- observation normalisation
class ObsNormalizer(nn.Module):
    """Running mean/std normalisation of selected observation keys, clipped to ``[-clip, clip]``.

    ``keys`` maps an observation key to ``(feature_shape, exist_key)``: statistics are
    kept per feature (shape ``feature_shape``, the trailing axes of the per-agent
    observation), over all leading axes; for entity arrays ``[E, F]`` with
    ``feature_shape = (F,)`` and ``exist_key`` naming a ``[E]`` 0/1 mask, only existing
    entities enter the statistics. Keys not listed (masks) pass through unchanged.
    Statistics are :class:`~.valuenorm.RunningMeanStd` (debiased EMA, ``beta``) with
    variance floor ``var_min``; normalised value ``clip((x - mu) / sigma, -clip, clip)``.
    """

    def __init__(self, keys: dict[str, tuple[tuple[int, ...], str | None]], beta: float = 0.99999,
                 var_min: float = 1e-4, clip: float = 10.0) -> None:
        super().__init__()
        self.keys = dict(keys)
        self.clip = float(clip)
        self.stats = nn.ModuleDict({k.replace(".", "_"): RunningMeanStd(shape, beta, var_min)
                                    for k, (shape, _) in self.keys.items()})

    def forward(self, obs: Obs) -> Obs:
        """Normalised copy of ``obs`` (float32 for the listed keys)."""
        out = dict(obs)
        for k in self.keys:
            x = obs[k].float()
            mu, var = self._stats(k).mean_var()
            out[k] = ((x - mu.float()) / var.sqrt().float()).clamp(-self.clip, self.clip)
        return out

    @torch.no_grad()
    def update(self, obs: Obs) -> None:
        """One statistics update from the rows of ``obs`` (``[N, ...]``: pass active agent steps only)."""
        for k, (shape, exist) in self.keys.items():
            x = obs[k].float()
            rows = x.reshape(-1, *shape)
            if exist is not None and exist in obs:
                rows = rows[obs[exist].reshape(-1) > 0.5]
            self._stats(k).update(rows)

    def _stats(self, key: str) -> RunningMeanStd:
        """The statistics of observation key ``key`` (nn.ModuleDict holds them untyped)."""
        return cast(RunningMeanStd, self.stats[key.replace(".", "_")])


# ----------------------------------------------------------------------------- the base class
class ActorCriticBase(nn.Module):
    """What :class:`~zoo.plugins.algorithms.mappo.mappo.MAPPO` trains (see the module docstring).

    Subclasses set ``actor_encoder`` / ``critic_encoder`` (``obs -> [N, F]`` on normalised
    observations), ``feat_dim`` (F), then call :meth:`_finish`.

    Shapes: ``N`` rows (agent-slots), ``L`` time steps, ``M`` sequences; actions as in the
    EnvSpec (MultiDiscrete ``int64 [N, d]``); log-probabilities, entropies (nats) and
    values float32.
    """

    actor_encoder: nn.Module
    critic_encoder: nn.Module
    obs_norm: ObsNormalizer | None

    def _finish(self, spec: EnvSpec, feat_dim: int, core: str | None, hidden: int,
                value_norm: ValueNormMode, value_norm_beta: float) -> None:
        self.head = make_head(spec.action_space)
        self.actor_core = make_core(core, feat_dim, hidden)
        self.critic_core = make_core(core, feat_dim, hidden)
        out_dim = hidden if core else feat_dim
        self.actor_post = nn.LayerNorm(hidden) if core else nn.Identity()
        self.critic_post = nn.LayerNorm(hidden) if core else nn.Identity()
        self.actor_out = layer_init(nn.Linear(out_dim, self.head.num_outputs), std=0.01)
        self.value_head = ValueHead(out_dim, value_norm, value_norm_beta)
        self.k = self.actor_core.rows if self.actor_core is not None else 0
        self.state_shape: tuple[int, ...] | None = (2 * self.k, hidden) if core else None

    # -- parameter groups (clipped separately, as the MAPPO code's two optimisers) --
    def actor_parameters(self) -> list[nn.Parameter]:
        mods = [self.actor_encoder, self.actor_core, self.actor_post, self.actor_out, self.head]
        return [p for m in mods if m is not None for p in m.parameters()]

    def critic_parameters(self) -> list[nn.Parameter]:
        mods = [self.critic_encoder, self.critic_core, self.critic_post, self.value_head]
        return [p for m in mods if m is not None for p in m.parameters()]

    # -- helpers --
    def normalize_obs(self, obs: Obs) -> Obs:
        return self.obs_norm(obs) if self.obs_norm is not None else obs

    def zero_state(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
        """Zeros ``[n, *state_shape]`` float32, or None for a feed-forward policy."""
        if self.state_shape is None:
            return None
        return torch.zeros(n, *self.state_shape, device=device)

    def _tower_step(self, core, post, feats: torch.Tensor, s: torch.Tensor | None):
        if core is None:
            return feats, None
        y, new = core(feats, s)
        return post(y), new

    # -- the policy worker's call --
    def act(self, obs: Obs, state: torch.Tensor | None = None, deterministic: bool = False) -> dict[str, torch.Tensor]:
        """Choose actions for ``N`` agent-slots.

        Args:
            obs: ``dict[str, Tensor [N, ...]]``, raw observations.
            state: float32 ``[N, *state_shape]`` (recurrent; None = zeros), ignored when
                feed-forward. The caller resets it to zeros at episode starts.
            deterministic: take each categorical's mode instead of sampling.

        Returns:
            ``{"action": [N, ...], "logp": float32 [N], "value": float32 [N] (real units),
            "state": float32 [N, *state_shape] (recurrent only: the new state)}``.
        """
        with torch.no_grad():
            obs = self.normalize_obs(obs)
            n = next(iter(obs.values())).shape[0]
            if self.state_shape is not None and state is None:
                state = self.zero_state(n, next(iter(obs.values())).device)
            k = self.k
            ya, sa = self._tower_step(self.actor_core, self.actor_post, self.actor_encoder(obs),
                                      None if state is None else state[:, :k])
            yc, sc = self._tower_step(self.critic_core, self.critic_post, self.critic_encoder(obs),
                                      None if state is None else state[:, k:])
            logits = self.actor_out(ya)
            mask = obs.get(ACTION_MASK_KEY)
            action = self.head.sample(logits, deterministic, mask)
            logp = self.head.log_prob(logits, action, mask)
            value = self.value_head.denormalize(self.value_head(yc))
            out = {"action": action, "logp": logp.float(), "value": value.float()}
            if self.state_shape is not None:
                out["state"] = torch.cat([sa, sc], dim=1).float()
        return out

    # -- the trainer's calls --
    def _sequence(self, encoder, core, post, flat: Obs, L: int, M: int, state0: torch.Tensor | None,
                  reset: torch.Tensor, active: torch.Tensor | None):
        """One tower over ``L x M`` normalised rows: ``(y [L * M, H], fed, after [L, M, k, H] or None)``."""
        f = encoder(flat)
        if core is None:
            return f, None, None
        assert state0 is not None, "a recurrent tower is fed its state0"
        y, fed, after = unroll(core, f.reshape(L, M, -1), state0, reset, active)
        return post(y.reshape(L * M, -1)), fed, after

    def evaluate(self, obs: Obs, action: torch.Tensor, state0: torch.Tensor | None, reset: torch.Tensor,
                 active: torch.Tensor | None = None) -> SequenceEvaluation:
        """Re-run ``M`` sequences of ``L`` steps (chunks) with gradients.

        Args:
            obs: ``dict[str, Tensor [L, M, ...]]`` raw observations.
            action: ``[L, M, ...]`` actions taken.
            state0: ``[M, *state_shape]`` stored state fed at each chunk's first step (None
                when feed-forward).
            reset: bool ``[L, M]``: the state is zeroed before step ``t`` (``on_reset``).
            active: bool ``[L, M]`` or None: where False the state is held (see :func:`unroll`).

        Returns:
            ``{"logp", "entropy", "value"}`` float32 ``[L, M]`` (``value`` in normalised
            units, what the value loss regresses) and ``"fed"``, ``"after"``
            ``[L, M, *state_shape]`` (the states fed / after each step; None when feed-forward).
        """
        L, M = reset.shape
        flat = self.normalize_obs({key: v.reshape(L * M, *v.shape[2:]) for key, v in obs.items()})
        k = self.k
        sa = sc = None
        if state0 is not None and self.state_shape is not None:
            sa, sc = state0[:, :k], state0[:, k:]
        ya, fed_a, after_a = self._sequence(self.actor_encoder, self.actor_core, self.actor_post, flat, L, M, sa,
                                            reset, active)
        yc, fed_c, after_c = self._sequence(self.critic_encoder, self.critic_core, self.critic_post, flat, L, M, sc,
                                            reset, active)
        logits = self.actor_out(ya)
        logp, entropy = self.head.log_prob_entropy(logits, action.reshape(L * M, *action.shape[2:]),
                                                   flat.get(ACTION_MASK_KEY))
        fed = after = None
        if fed_a is not None:
            fed, after = torch.cat([fed_a, fed_c], dim=2), torch.cat([after_a, after_c], dim=2)
        return {"logp": logp.reshape(L, M), "entropy": entropy.reshape(L, M),
                "value": self.value_head(yc).reshape(L, M), "fed": fed, "after": after}

    def critic_sequence(self, obs: Obs, state0: torch.Tensor | None, reset: torch.Tensor,
                        active: torch.Tensor | None = None) -> CriticSequence:
        """The critic alone over ``M`` chunks of ``L`` steps (arguments as :meth:`evaluate`).

        Returns:
            ``{"value": float32 [L, M] (normalised units), "fed", "after": [L, M, *state_shape]
            or None}``; the actor rows of the states are zeros (not computed).
        """
        L, M = reset.shape
        flat = self.normalize_obs({key: v.reshape(L * M, *v.shape[2:]) for key, v in obs.items()})
        sc = state0[:, self.k:] if state0 is not None and self.state_shape is not None else None
        yc, fed_c, after_c = self._sequence(self.critic_encoder, self.critic_core, self.critic_post, flat, L, M, sc,
                                            reset, active)
        fed = after = None
        if fed_c is not None:
            fed = torch.cat([torch.zeros_like(fed_c), fed_c], dim=2)
            after = torch.cat([torch.zeros_like(after_c), after_c], dim=2)
        return {"value": self.value_head(yc).reshape(L, M), "fed": fed, "after": after}

    def value(self, obs: Obs, state: torch.Tensor | None = None) -> torch.Tensor:
        """Critic value (normalised units) of ``obs [N, ...]`` fed with ``state [N, *state_shape]``
        (the state after the previous step; only its critic rows are read; None: zeros), float32 ``[N]``."""
        obs = self.normalize_obs(obs)
        n = next(iter(obs.values())).shape[0]
        s = None
        if self.state_shape is not None:
            if state is None:  # zeros, as zero_state
                state = torch.zeros(n, *self.state_shape, device=next(iter(obs.values())).device)
            s = state[:, self.k:]
        yc, _ = self._tower_step(self.critic_core, self.critic_post, self.critic_encoder(obs), s)
        return self.value_head(yc)

    def update_obs_stats(self, obs: Obs) -> None:
        """Update the observation statistics with rows ``obs [N, ...]`` (active agent steps)."""
        if self.obs_norm is not None:
            self.obs_norm.update(obs)


# ----------------------------------------------------------------------------- the MLP / GRU policy
def _mlp_torso(in_dim: int, hidden: int, layers: int) -> nn.Sequential:
    """``layers`` x (Linear, ReLU, LayerNorm), orthogonal init gain sqrt(2) (MAPPO's MLPBase)."""
    mods: list[nn.Module] = []
    d = in_dim
    for _ in range(layers):
        mods += [layer_init(nn.Linear(d, hidden)), nn.ReLU(), nn.LayerNorm(hidden)]
        d = hidden
    return nn.Sequential(*mods)


class _KeysEncoder(nn.Module):
    """``obs -> float32 [N, hidden]``: flatten ``keys`` (sorted) and apply the MLP torso."""

    def __init__(self, spaces: dict[str, Any], hidden: int, layers: int) -> None:
        super().__init__()
        self.flat = VectorEncoder(spaces, sorted(spaces))
        self.mlp = _mlp_torso(self.flat.out_dim, hidden, layers)

    def forward(self, obs: Obs) -> torch.Tensor:
        return self.mlp(self.flat(obs))


class MLPPolicy(ActorCriticBase):
    """MAPPO's MLP policy (module docstring); recurrent (GRU) when ``recurrent``.

    Raises:
        ValueError: an observation key is an image (uint8 of rank 3): not supported here.
    """

    def __init__(self, spec: EnvSpec, hidden: int = 64, layers: int = 2, recurrent: bool = False,
                 value_norm: ValueNormMode = "running", value_norm_beta: float = 0.99999,
                 obs_norm: bool = True) -> None:
        super().__init__()
        spaces = dict(spec.observation_space)
        for k, s in spaces.items():
            if len(s.shape) == 3 and np.dtype(s.dtype) == np.uint8:
                raise ValueError(f"observation key {k!r} is an image; MAPPO's MLP policy reads vectors only")
        actor_spaces = {k: spaces[k] for k in feature_keys(spaces)}
        state_keys = [k for k in spaces if k.startswith(STATE_KEY)]
        critic_spaces = {k: spaces[k] for k in state_keys} if state_keys else actor_spaces
        self.actor_keys, self.critic_keys = sorted(actor_spaces), sorted(critic_spaces)
        norm_keys = {**actor_spaces, **critic_spaces}
        self.obs_norm = ObsNormalizer({k: (tuple(s.shape), None) for k, s in norm_keys.items()}) if obs_norm else None
        self.actor_encoder = _KeysEncoder(actor_spaces, hidden, layers)
        self.critic_encoder = _KeysEncoder(critic_spaces, hidden, layers)
        self._finish(spec, hidden, "gru" if recurrent else None, hidden, value_norm, value_norm_beta)
