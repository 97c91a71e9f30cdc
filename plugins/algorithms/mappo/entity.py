"""The reference hide-and-seek policy: entity embeddings, masked residual self-attention, LSTM.

Baker et al., "Emergent Tool Use From Multi-Agent Autocurricula", ICLR 2020, arXiv
1909.07528, figure 3 / appendix B.6 ("Policy architecture"), as summarised in
``docs/hide-and-seek.md`` ("The reference policy and hyperparameters"). Actor and critic are separate
copies of one :class:`EntityEncoder`; the actor masks entities by *visibility*
(``mask_aa_obs``, ``mask_ab_obs``, ``mask_ar_obs``), the critic by *existence* only (the
``*_spoof`` masks). Per agent, with ``d = 128``:

1. lidar ``[30]`` -> circular 1-D convolution (kernel 3, 9 channels, ReLU) -> ``[270]``,
   joined with ``observation_self [10]`` -> linear -> ReLU: the self embedding ``e_0``;
2. each entity type (other agents ``[A-1, 10]``, boxes ``[B, 12|15]``, ramps
   ``[R, 9|15]``), each entity concatenated with ``observation_self``, -> a per-type
   linear -> ReLU: entity embeddings ``e_1..e_E``;
3. one residual multi-head self-attention block (4 heads of 32; Vaswani et al. 2017,
   arXiv 1706.03762, eq. 1 and section 3.2.2) over the tokens ``[e_0, e_1..e_E]``:
   ``Y = X + W_o concat_h softmax(Q_h K_h^T / sqrt(32) + mask) V_h``, where keys of
   masked-out entities get ``-inf``. The self token is always a key, so every softmax
   has at least one finite entry: an agent that sees nothing gets finite outputs;
4. masked mean pooling of the entity outputs ``Y_1..Y_E`` (``sum_i m_i Y_i / max(1,
   sum_i m_i)``: zeros when nothing is visible) joined with the self embedding ``e_0``
   -> ``[256]``; LayerNorm, dense 256 + ReLU, LayerNorm;
5. then (in :class:`~.networks.ActorCriticBase`) LSTM 256, LayerNorm, and one
   categorical head per action dimension (MultiDiscrete ``[11, 11, 11, 2, 2]``) for the
   actor, a value head (PopArt or running normalisation, :mod:`.valuenorm`) for the critic.

A masked-out entity influences nothing: its token is no key of any query and is left out
of the pooling. Observations are normalised with running mean/std statistics
(:class:`~.networks.ObsNormalizer`; entity rows counted only where the entity exists).
One set of weights serves both teams (``observation_self`` carries the hider flag).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.mappo.networks import ActorCriticBase, Obs, ObsNormalizer
from zoo.plugins.algorithms.mappo.valuenorm import ValueNormMode
from zoo.plugins.algorithms.ppo.networks import layer_init

SELF_KEY = "observation_self"
LIDAR_KEY = "lidar"
ENTITY_TYPES = (("agent_qpos_qvel", "mask_aa_obs"), ("box_obs", "mask_ab_obs"), ("ramp_obs", "mask_ar_obs"))
"""(observation key ``[E, F]``, policy mask key ``[E]``); the critic's mask is ``<mask>_spoof``."""
CRITIC_SUFFIX = "_spoof"


def is_entity_spec(spec: EnvSpec) -> bool:
    """True when ``spec`` has hide-and-seek's keys: self features, lidar, and at least one
    entity type with both its policy and existence masks."""
    space = spec.observation_space
    return SELF_KEY in space and LIDAR_KEY in space and any(
        k in space and m in space and m + CRITIC_SUFFIX in space for k, m in ENTITY_TYPES)


def entity_types(spec: EnvSpec) -> list[tuple[str, str, int, int]]:
    """``(key, policy mask key, E, F)`` of every entity type present with ``E >= 1`` slots."""
    space = spec.observation_space
    out = []
    for k, m in ENTITY_TYPES:
        if k in space and m in space and m + CRITIC_SUFFIX in space:
            e, f = space[k].shape
            if e > 0:
                out.append((k, m, int(e), int(f)))
    return out


class MaskedSelfAttention(nn.Module):
    """Residual multi-head self-attention ``X [N, S, d] -> X + MHA(X) [N, S, d]`` over the
    keys where ``key_mask [N, S]`` is True (module docstring, step 3)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"attention width {d} is not divisible by {heads} heads")
        self.d, self.heads = d, heads
        self.qkv = layer_init(nn.Linear(d, 3 * d), std=1.0)
        self.out = layer_init(nn.Linear(d, d), std=1.0)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        n, s, d = x.shape
        h, dh = self.heads, d // self.heads
        q, k, v = self.qkv(x).reshape(n, s, 3, h, dh).permute(2, 0, 3, 1, 4)  # each [N, h, S, dh]
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)                        # [N, h, S, S]
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        v = torch.where(key_mask[:, None, :, None], v, torch.zeros_like(v))     # masked keys: exactly 0
        att = torch.softmax(scores, dim=-1) @ v                                 # [N, h, S, dh]
        return x + self.out(att.transpose(1, 2).reshape(n, s, d))


class EntityEncoder(nn.Module):
    """Steps 1-4 of the module docstring: raw (normalised) observations -> float32 ``[N, 256]``.

    ``mask_suffix``: ``""`` for the actor (visibility masks), ``"_spoof"`` for the critic
    (existence masks).
    """

    def __init__(self, spec: EnvSpec, mask_suffix: str, d: int = 128, heads: int = 4, dense: int = 256,
                 lidar_channels: int = 9) -> None:
        super().__init__()
        space = spec.observation_space
        self.suffix = mask_suffix
        self.self_dim = int(space[SELF_KEY].shape[0])
        rays = int(space[LIDAR_KEY].shape[0])
        self.lidar = nn.Conv1d(1, lidar_channels, 3, padding=1, padding_mode="circular")
        self.self_embed = layer_init(nn.Linear(self.self_dim + lidar_channels * rays, d))
        self.types = entity_types(spec)
        self.embed = nn.ModuleDict({k: layer_init(nn.Linear(f + self.self_dim, d)) for k, _, _, f in self.types})
        self.attention = MaskedSelfAttention(d, heads)
        self.post = nn.Sequential(nn.LayerNorm(2 * d), layer_init(nn.Linear(2 * d, dense)), nn.ReLU(),
                                  nn.LayerNorm(dense))
        self.out_dim = dense

    def forward(self, obs: Obs) -> torch.Tensor:
        me = obs[SELF_KEY].float()                                          # [N, 10]
        n = me.shape[0]
        lid = torch.relu(self.lidar(obs[LIDAR_KEY].float()[:, None, :])).reshape(n, -1)
        e0 = torch.relu(self.self_embed(torch.cat([me, lid], dim=1)))       # [N, d]
        tokens, masks = [e0[:, None]], [torch.ones(n, 1, dtype=torch.bool, device=me.device)]
        for key, mask_key, e, _ in self.types:
            ent = obs[key].float()                                          # [N, E, F]
            joined = torch.cat([ent, me[:, None].expand(n, e, self.self_dim)], dim=2)
            tokens.append(torch.relu(self.embed[key](joined)))
            masks.append(obs[mask_key + self.suffix].reshape(n, e) > 0.5)
        x = torch.cat(tokens, dim=1)                                        # [N, 1 + E, d]
        key_mask = torch.cat(masks, dim=1)                                  # [N, 1 + E]
        y = self.attention(x, key_mask)
        m = key_mask[:, 1:, None]                                           # entities only
        pooled = torch.where(m, y[:, 1:], torch.zeros_like(y[:, 1:])).sum(1) / m.sum(1).clamp(min=1)
        return self.post(torch.cat([pooled, e0], dim=1))


class EntityPolicy(ActorCriticBase):
    """The reference hide-and-seek actor-critic (module docstring); always recurrent (LSTM).

    ``state_shape = (4, hidden)``: actor ``h, c`` then critic ``h, c``.

    Raises:
        ValueError: the spec lacks hide-and-seek's observation keys (see :func:`is_entity_spec`).
    """

    def __init__(self, spec: EnvSpec, hidden: int = 256, d: int = 128, heads: int = 4,
                 value_norm: ValueNormMode = "popart", value_norm_beta: float = 0.99999,
                 obs_norm: bool = True) -> None:
        super().__init__()
        if not is_entity_spec(spec):
            raise ValueError(f"env {spec.env_id!r} lacks the entity observation keys "
                             f"({SELF_KEY}, {LIDAR_KEY}, entity arrays with their masks); use policy='mlp'")
        space = spec.observation_space
        keys: dict[str, tuple[tuple[int, ...], str | None]] = {
            SELF_KEY: (tuple(space[SELF_KEY].shape), None), LIDAR_KEY: (tuple(space[LIDAR_KEY].shape), None)}
        for key, mask_key, _, f in entity_types(spec):
            keys[key] = ((f,), mask_key + CRITIC_SUFFIX)
        self.obs_norm = ObsNormalizer(keys) if obs_norm else None
        self.actor_encoder = EntityEncoder(spec, "", d, heads, hidden)
        self.critic_encoder = EntityEncoder(spec, CRITIC_SUFFIX, d, heads, hidden)
        self._finish(spec, hidden, "lstm", hidden, value_norm, value_norm_beta)

