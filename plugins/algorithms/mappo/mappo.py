"""MAPPO: PPO on multi-agent samples with a centralised critic.

Yu, Velu, Vinitsky, Gao, Wang, Bayen and Wu, "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games", NeurIPS 2022 Datasets and Benchmarks, arXiv 2103.01955.
Every agent-slot of a batch is one trajectory of the *shared* policy (parameter sharing,
section 3). Written term by term (CleanRL names), over the *active* steps only::

    r_t      = exp(log pi(a_t|o_t) - log mu(a_t|o_t))                 importance ratio
    pg_loss  = -mean_active min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)   (PPO, arXiv 1707.06347 eq. 7)
    v_loss   = mean_active max(f(G~_t - V~_t), f(G~_t - V~clip_t))         (MAPPO eq. 2 / section 4)
    entropy  = mean_active H(pi(.|o_t))
    loss     = pg_loss - ent_coef * entropy + vf_coef * v_loss           (arXiv 1707.06347 eq. 9)

- ``A_t``: GAE (arXiv 1506.02438 eq. 16, :func:`zoo.plugins.algorithms.returns.gae`, with
  its active-mask and truncation rules: a truncated step bootstraps from the critic's
  value of ``final_obs``), standardised over the active steps of the batch
  (:func:`masked_normalize`; MAPPO's code does it over the whole buffer, masked).
- ``G~_t``, ``V~_t``: value target ``G_t = A_t + V(s_t)`` and critic output in
  *normalised* units (:mod:`.valuenorm`: running mean/std "ValueNorm", MAPPO section 4,
  or PopArt); ``V~clip_t = V~old_t + clip(V~_t - V~old_t, -eps, eps)`` (MAPPO's value
  clipping, ``clip_vloss``); ``f`` is the Huber loss with ``huber_delta`` (MAPPO's
  default 10) or ``e^2 / 2`` when ``huber_delta = 0``.
- Gradients: Adam (``lr``, ``adam_eps``); the global gradient norm is clipped to
  ``max_grad_norm`` separately for the actor's and the critic's parameters (MAPPO's code
  has one optimiser and one clipping per network).
- Centralised critic: the critic is a separate network over the critic observation
  (hide-and-seek: the same entities masked by existence; otherwise the ``"zoo:global_state"`` key
  when the env provides one, else the agent's own observation); see :mod:`.networks`,
  :mod:`.entity`.

**Masks.** An inactive step (``active`` False: the agent finished, or the slot is
padding) and a padding step of a short last chunk contribute nothing to ``pg_loss``,
``v_loss``, ``entropy``, the advantage statistics, the value-normalisation statistics or
the observation statistics; masked entries are *selected out* (``torch.where``), never
multiplied by 0, so even a non-finite masked entry changes nothing.

**Values.** GAE's values of the rows, of the bootstrap row ``obs[T]`` and of ``final_obs``
all come from one critic: the trainer's, with its value statistics, when the batch
arrives (:meth:`MAPPO.prepare`); the ``"value"`` the acting policy recorded is not used.
Samples may be up to ``trainer.max_policy_lag`` versions old, and recorded values cannot
cover the bootstrap (``obs[T]`` is acted on only in the next sample, ``final_obs``
never), so a TD error would otherwise mix two critics. Recomputing the values with the
current networks follows Andrychowicz et al., "What Matters in On-Policy Reinforcement
Learning?", ICLR 2021 (arXiv 2006.05990), who recommend recomputing advantages; without
lag it is the behaviour critic, as in MAPPO's own code. The clipped value loss's
``V~old`` is this value.

**Recurrent training** (policies with ``state_shape``; the policy worker stores the
state *fed* at each step as the extra ``rnn_state [T, B, *state_shape]``): each sample
is cut into chunks of ``L = chunk_length`` steps (:func:`chunk_time`); chunk ``c``
starts from the stored ``rnn_state[c * L]`` (:func:`chunk_starts`); inside a chunk the
state is reset to zeros before a step where ``on_reset`` is True and held where the agent
is inactive (:func:`zoo.plugins.algorithms.mappo.networks.unroll`), as at rollout. When
``L`` does not divide ``T`` the last chunk is padded and its padding masked out. The
bootstrap value of ``obs[T]`` and the values of ``final_obs`` are computed with the
critic state reached after the previous step. Feed-forward policies use ``L = 1``.

**Sample reuse** (``max_reuse = N``): the algorithm keeps the last ``N`` batches it was
given. Each :meth:`MAPPO.update` appends the new batch (with its advantages and value
targets computed once, at arrival, with the critic and statistics of that moment), then
runs ``epochs`` passes of ``minibatches`` minibatches over the union of all kept
batches, then drops every batch that has now been trained on in ``N`` updates. With a
steady stream each sample is therefore used in exactly ``N`` consecutive updates
(``N x epochs`` passes) and an update costs ``N`` times the gradient work of one batch.
A reused batch is up to ``N - 1`` policy versions older than the trainer's staleness
filter saw it (``trainer.max_policy_lag``); the ratio ``r_t`` uses its stored behaviour
log-probabilities. The kept batches are part of :meth:`MAPPO.state_dict` (so of every
checkpoint): a resumed run trains on them exactly as the uninterrupted run would have.

**Data-parallel trainers** (``trainer.count`` = K > 1, :mod:`zoo.core.distributed`): each
rank prepares its own batch; advantage standardisation, the value-normalisation and
observation statistics use the moments of all ranks' active steps together (so they are
identical on every rank, as one trainer's on the concatenated batch); each gradient is the
active-step-weighted mean of the ranks' gradients, taken before clipping; every rank takes
the same number of minibatch steps (a rank with no active step in a minibatch contributes
no gradient). Losses and statistics in the returned dict are rank 0's share.

**Precision** (``algo.precision``, :mod:`zoo.plugins.algorithms.precision`): under ``bfloat16``
the critic's values at arrival and each minibatch's ``evaluate`` run under ``torch.autocast``;
their outputs and recurrent states are cast to float32 before GAE, the value statistics and
the loss.

**Staleness**: the trainer drops samples whose policy lag exceeds
``trainer.max_policy_lag`` and counts them (``dropped_samples``); the presets set it:
hide-and-seek 4, other envs :data:`~zoo.core.workers.receiver.ON_POLICY_MAX_LAG`, a limit the
backpressured pipeline stays within, so no sample is made to be dropped (docs/flow.md).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from zoo.core import distributed as zdist
from zoo.core.algorithm import Batch, NonFiniteUpdate
from zoo.core.devices import training_precision_field
from zoo.core.env import EnvSpec
from zoo.core.options import bounded, check_bounds
from zoo.core.workers.receiver import ON_POLICY_MAX_LAG
from zoo.plugins.algorithms.mappo.entity import EntityPolicy, is_entity_spec
from zoo.plugins.algorithms.mappo.networks import ActorCriticBase, MLPPolicy
from zoo.plugins.algorithms.normalization import RewardNorm, scaled_rewards
from zoo.plugins.algorithms.precision import TrainingPrecision, explain
from zoo.plugins.algorithms.returns import gae
from zoo.plugins.algorithms.tensors import UpdateGuard, explained_variance, huber, to_tensor

REQUIRED_KEYS = ("obs", "action", "reward", "terminated", "truncated", "logp")
STATS = ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm_actor", "grad_norm_critic")


# ----------------------------------------------------------------------------- config
@dataclass
class MAPPOConfig:
    """MAPPO hyperparameters (every field settable with ``--set algo.FIELD=VALUE``).

    Defaults follow the MAPPO paper's code defaults (arXiv 2103.01955, appendix);
    :meth:`MAPPO.presets` sets the per-environment values.
    """

    policy: Literal["auto", "mlp", "entity"] = "auto"
    """Network: ``entity`` (hide-and-seek reference policy), ``mlp`` (MLP / GRU), ``auto``
    (``entity`` when the env has hide-and-seek's observation keys, else ``mlp``)."""
    recurrent: bool = False
    """MLP policy only: add a GRU after the MLP (rMAPPO). The entity policy is always recurrent (LSTM)."""
    hidden: int = field(default=0, metadata=bounded(ge=0, hint="0 = automatic"))
    """Hidden width: MLP layers and GRU (0: 64), entity dense layer and LSTM (0: 256)."""
    layers: int = field(default=2, metadata=bounded(ge=1))
    """MLP policy: hidden layers."""
    value_norm: Literal["none", "running", "popart"] = "running"
    """Value normalisation: MAPPO's running mean/std ``running``, ``popart`` (van Hasselt et al. 2016) or ``none``."""
    value_norm_beta: float = field(default=0.99999, metadata=bounded(ge=0, lt=1))
    """Weight of the past in the value statistics' EMA (MAPPO's 0.99999)."""
    obs_norm: bool = True
    """Running mean/std normalisation of observations (statistics updated by each batch)."""
    norm_reward: bool = False
    """Scale rewards by the running std of the discounted return, clipped to [-10, 10] (SB3 VecNormalize;
    :mod:`zoo.plugins.algorithms.normalization`); statistics merged over all actors, in checkpoints."""
    lr: float = field(default=5e-4, metadata=bounded(gt=0))
    """Adam learning rate."""
    adam_eps: float = field(default=1e-5, metadata=bounded(gt=0))
    """Adam epsilon."""
    gamma: float = field(default=0.99, metadata=bounded(ge=0, le=1))
    """Discount factor."""
    gae_lambda: float = field(default=0.95, metadata=bounded(ge=0, le=1))
    """GAE lambda (arXiv 1506.02438 eq. 16)."""
    clip_coef: float = field(default=0.2, metadata=bounded(gt=0))
    """Surrogate clipping epsilon (arXiv 1707.06347 eq. 7); also the value-clipping range (normalised units)."""
    clip_vloss: bool = True
    """Clip the value prediction around the behaviour value (MAPPO's default)."""
    vf_coef: float = field(default=1.0, metadata=bounded(ge=0))
    """Value-loss weight (MAPPO's code: 1)."""
    ent_coef: float = field(default=0.01, metadata=bounded(ge=0))
    """Entropy-bonus weight."""
    huber_delta: float = field(default=10.0, metadata=bounded(ge=0, hint="0 = squared error"))
    """Huber-loss delta of the value loss (MAPPO: 10); 0: squared error / 2."""
    max_grad_norm: float = field(default=10.0, metadata=bounded(ge=0, hint="0 = no clipping"))
    """Gradient-norm clipping, per network (actor, critic); 0 disables."""
    epochs: int = field(default=5, metadata=bounded(ge=1))
    """Passes over the kept batches per update."""
    minibatches: int = field(default=1, metadata=bounded(ge=1))
    """Minibatches per pass (split over chunks; feed-forward: over steps)."""
    norm_adv: bool = True
    """Standardise advantages over each batch's active steps (:func:`masked_normalize`)."""
    chunk_length: int = field(default=10, metadata=bounded(ge=1))
    """Recurrent policies: BPTT chunk length L (should divide sample_length; a short last chunk is padded)."""
    max_reuse: int = field(default=1, metadata=bounded(ge=1, hint="1 = each batch is used in one update"))
    """Each batch is trained on in up to this many consecutive updates (see the module docstring)."""
    device: str = "cpu"
    """Torch device of the trainer's network."""
    precision: Literal["auto", "float32", "bfloat16"] = training_precision_field()

    def __post_init__(self) -> None:
        check_bounds(self, "algo.")


# ----------------------------------------------------------------------------- masked statistics and losses
def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` (bool, same shape) is True; 0 when none.

    Masked-out entries are selected away (``torch.where``), so their values — even
    non-finite ones — change neither the result nor its gradient.
    """
    total = torch.where(mask, x, torch.zeros_like(x)).sum()
    return total / mask.sum().clamp(min=1).to(x.dtype)


def masked_normalize(adv: torch.Tensor, mask: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """``(adv - mean) / (std + eps)`` with mean and *population* std over the active entries;
    0 at masked entries (MAPPO's code: ``nanmean`` / ``nanstd`` over the buffer, eps 1e-5).

    Example: active advantages 1, 2, 3, 4, 5, 6 -> mean 3.5, std sqrt(35/12).

    With data-parallel trainers (``trainer.count`` > 1) the mean and std are those of every
    trainer's active entries together (:func:`zoo.core.distributed.global_moments`), as one
    trainer would compute them on the concatenated batch.
    """
    if zdist.world_size() > 1:
        n, m1, m2 = zdist.global_moments(adv, mask)
        mu, var = m1.to(adv.dtype), (m2 - m1 * m1).clamp(min=0).to(adv.dtype)
        out = (adv - mu) / (var.sqrt() + eps)
        return torch.where(mask, out, torch.zeros_like(out))
    mu = masked_mean(adv, mask)
    var = masked_mean((adv - mu) ** 2, mask)
    out = (adv - mu) / (var.sqrt() + eps)
    return torch.where(mask, out, torch.zeros_like(out))


def clipped_surrogate_loss(ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: float) -> torch.Tensor:
    """``-mean_active min(r A, clip(r, 1 - clip, 1 + clip) A)`` (arXiv 1707.06347 eq. 7, negated)."""
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    return -masked_mean(surrogate, mask)


def value_loss(value: torch.Tensor, target: torch.Tensor, old_value: torch.Tensor, mask: torch.Tensor,
               clip: float, huber_delta: float, clip_vloss: bool = True) -> torch.Tensor:
    """MAPPO's value loss in normalised units, ``mean_active max(f(G - V), f(G - V_clip))``
    with ``V_clip = V_old + clip(V - V_old, -clip, clip)`` and ``f`` = :func:`huber`
    (arXiv 2103.01955 section 4 and its code); without ``clip_vloss``: ``mean_active f(G - V)``."""
    loss = huber(target - value, huber_delta)
    if clip_vloss:
        clipped = old_value + torch.clamp(value - old_value, -clip, clip)
        loss = torch.max(loss, huber(target - clipped, huber_delta))
    return masked_mean(loss, mask)


# ----------------------------------------------------------------------------- chunking
def num_chunks(T: int, L: int) -> int:
    """``ceil(T / L)``."""
    return -(-T // L)


def chunk_time(x: torch.Tensor, L: int) -> torch.Tensor:
    """``[T, B, ...] -> [L, C * B, ...]`` with ``C = ceil(T / L)``; column ``c * B + b`` holds
    steps ``c * L .. c * L + L - 1`` of slot ``b``; steps past ``T`` are zero padding."""
    T, B = x.shape[:2]
    C = num_chunks(T, L)
    if C * L != T:
        x = torch.cat([x, torch.zeros(C * L - T, *x.shape[1:], dtype=x.dtype, device=x.device)])
    return x.reshape(C, L, *x.shape[1:]).transpose(0, 1).reshape(L, C * B, *x.shape[2:])


def unchunk_time(y: torch.Tensor, T: int, B: int) -> torch.Tensor:
    """Inverse of :func:`chunk_time`: ``[L, C * B, ...] -> [T, B, ...]`` (padding dropped)."""
    L = y.shape[0]
    C = y.shape[1] // B
    return y.reshape(L, C, B, *y.shape[2:]).transpose(0, 1).reshape(C * L, B, *y.shape[2:])[:T]


def chunk_starts(rnn_state: torch.Tensor, L: int) -> torch.Tensor:
    """The stored state fed at each chunk's first step: ``rnn_state [T, B, *S] -> [C * B, *S]``
    (row ``c * B + b`` = ``rnn_state[c * L, b]``, the column order of :func:`chunk_time`)."""
    starts = rnn_state[::L]
    return starts.reshape(starts.shape[0] * starts.shape[1], *starts.shape[2:])


# ----------------------------------------------------------------------------- presets
HNS_REFERENCE: dict[str, Any] = {
    "gamma": 0.998, "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.01, "lr": 3e-4, "adam_eps": 1e-5,
    "vf_coef": 0.5, "max_grad_norm": 5.0, "chunk_length": 10, "max_reuse": 4, "epochs": 1,
    "huber_delta": 0.0, "value_norm": "popart", "policy": "entity",
}
"""The reference hyperparameters of Baker et al. 2019 (docs/hide-and-seek.md, "The reference policy and
hyperparameters")."""
HNS_SAMPLE_LENGTH = 160
MPE_REFERENCE = {
    "lr": 7e-4, "adam_eps": 1e-5, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2, "ent_coef": 0.01,
    "vf_coef": 1.0, "huber_delta": 10.0, "max_grad_norm": 10.0, "epochs": 10, "minibatches": 1,
    "max_reuse": 1, "value_norm": "running", "policy": "mlp", "hidden": 64, "layers": 2,
}
"""The MAPPO paper's MPE settings (arXiv 2103.01955, appendix: Adam 7e-4, eps 1e-5, 10 epochs
of 1 minibatch, clip 0.2, entropy 0.01, Huber delta 10, grad-norm 10, 64 hidden units). The
paper's BPTT chunk of 10 does not divide MPE's 25-step episodes; the presets train the GRU on
whole 25-step samples (one episode each) instead, and on chunks of 16 of 64-step samples elsewhere."""


def _machine() -> tuple[int, float]:
    """``(cpu count, physical memory in GiB)`` of this machine."""
    cpus = os.cpu_count() or 1
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem = 4.0
    return cpus, float(mem)


def _hns_layout(spec: EnvSpec, cpus: int, mem_gib: float) -> dict[str, Any]:
    """Worker counts and batch size for hide-and-seek on ``cpus`` cores and ``mem_gib`` GiB."""
    actors = max(1, cpus - 1)                # one core left for the policy worker and the trainer
    envs_per_actor = 8                      # two ring groups of 4 envs
    agents = spec.num_agents
    # one sample per agent-slot of every env (one sampling round), but at least 32 samples
    batch_samples = max(32, actors * envs_per_actor * agents)
    # memory: a kept sample is ~ T x (obs + extras) floats; the reuse buffer holds max_reuse batches
    per_step = sum(int(np.prod(s.shape)) for s in spec.observation_space.values()) + 16
    sample_bytes = 4 * (HNS_SAMPLE_LENGTH + 1) * per_step * 3   # x3: collate copy + tensors
    cap = int(0.1 * mem_gib * 2**30 / (HNS_REFERENCE["max_reuse"] * sample_bytes))
    batch_samples = max(agents, min(batch_samples, cap))
    return {"actors.count": actors, "actors.envs_per_actor": envs_per_actor, "actors.ring_size": 2,
            "trainer.batch_samples": batch_samples, "trainer.max_policy_lag": 4,
            "policy.max_batch": actors * envs_per_actor * agents}


# ----------------------------------------------------------------------------- the algorithm
class MAPPO:
    """The ``mappo`` algorithm (interface in :mod:`zoo.core.algorithm`; method in the module docstring)."""

    Config = MAPPOConfig

    # -- construction --
    @classmethod
    def build_policy(cls, config: MAPPOConfig, spec: EnvSpec) -> ActorCriticBase:
        """The policy for ``spec``: :class:`~.entity.EntityPolicy` when ``config.policy`` is
        ``entity`` (or ``auto`` and the env has hide-and-seek's keys), else :class:`~.networks.MLPPolicy`.

        Raises:
            ValueError: ``policy=entity`` on an env without the entity keys; image observations.
            TypeError: an action space other than Discrete, MultiDiscrete or Box.
        """
        kind = config.policy
        if kind == "auto":
            kind = "entity" if is_entity_spec(spec) else "mlp"
        if kind == "entity":
            return EntityPolicy(spec, hidden=config.hidden or 256, value_norm=config.value_norm,
                                value_norm_beta=config.value_norm_beta, obs_norm=config.obs_norm)
        return MLPPolicy(spec, hidden=config.hidden or 64, layers=config.layers, recurrent=config.recurrent,
                         value_norm=config.value_norm, value_norm_beta=config.value_norm_beta,
                         obs_norm=config.obs_norm)

    @classmethod
    def explain_precision(cls, config: MAPPOConfig, spec: EnvSpec) -> str:
        """``algo.precision`` resolved on this machine, and why (``zoo train`` prints it)."""
        return explain(config.precision, config.device, cls.build_policy(config, spec))

    @classmethod
    def _preset_choice(cls, spec: EnvSpec) -> tuple[dict[str, Any], list[str]]:
        cpus, mem = _machine()
        if is_entity_spec(spec):
            layout = _hns_layout(spec, cpus, mem)
            algo = dict(HNS_REFERENCE)
            algo["minibatches"] = algo["max_reuse"]  # one gradient step per kept batch's worth of data
            why = [
                f"hide-and-seek ({spec.env_id}): the reference policy (entity attention + LSTM 256) and the "
                "reference hyperparameters of Baker et al. 2019: gamma 0.998, lambda 0.95, clip 0.2, entropy 0.01, "
                "Adam lr 3e-4 (eps 1e-5), value weight 0.5, grad-norm 5, PopArt, samples of 160 steps in BPTT "
                "chunks of 10, 1 epoch, each batch reused in up to 4 updates (4 minibatches per update).",
                f"machine: {cpus} CPU cores, {mem:.0f} GiB memory -> {layout['actors.count']} actor worker(s) "
                f"(cores - 1, leaving one for the policy worker and trainer) x {layout['actors.envs_per_actor']} envs "
                f"in a ring of 2; batch of {layout['trainer.batch_samples']} agent-slot samples "
                f"({layout['trainer.batch_samples'] * HNS_SAMPLE_LENGTH} agent steps; OpenAI used 64,000 chunks of 10 "
                "= 640,000 per batch on hundreds of machines), scaled to what these cores sample in a few seconds "
                "and capped at 10% of memory for the reuse buffer.",
                "staleness: samples lagging the trainer by more than 4 policy versions are dropped and counted.",
            ]
            return {"sample_length": HNS_SAMPLE_LENGTH, **layout, **{f"algo.{k}": v for k, v in algo.items()}}, why
        mpe = spec.env_id.startswith(("mpe2.", "mpe.", "pettingzoo.mpe"))
        T = 25 if mpe else 64
        actors, envs = (2, 8)
        layout = {"actors.count": actors, "actors.envs_per_actor": envs, "actors.ring_size": 2,
                  "trainer.batch_samples": actors * envs * spec.num_agents,
                  "trainer.max_policy_lag": ON_POLICY_MAX_LAG}
        algo = dict(MPE_REFERENCE)
        algo["chunk_length"] = T if mpe else 16  # divides T; MPE: a 25-step sample is one whole episode
        critic = "the env's global state (obs key 'zoo:global_state')" if any(
            k.startswith("zoo:global_state") for k in spec.observation_space) else \
            "each agent's own observation (the env provides no 'state')"
        why = [
            f"{spec.env_id}: MAPPO with an MLP 2x64 (feed-forward; algo.recurrent=true adds a GRU, trained in "
            f"chunks of {algo['chunk_length']} steps) and the MAPPO paper's MPE hyperparameters: Adam lr 7e-4 "
            "(eps 1e-5), gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, 10 epochs of 1 minibatch, Huber value "
            "loss (delta 10), grad-norm 10, running value normalisation.",
            f"critic input: {critic}.",
            f"scaled down from the paper's 128 rollout threads to {actors} actors x {envs} envs; samples of {T} steps"
            + (" (one MPE episode of 25 steps)" if mpe else "") + f"; a batch holds one sample per agent-slot "
            f"({layout['trainer.batch_samples']} samples); actors are held back by the sample stream, so every "
            f"sample is trained on (samples lagging by more than {ON_POLICY_MAX_LAG} versions would be dropped).",
        ]
        return {"sample_length": T, **layout, **{f"algo.{k}": v for k, v in algo.items()}}, why

    @classmethod
    def presets(cls, spec: EnvSpec) -> dict[str, Any]:
        """Experiment-config overrides for ``spec`` (what and why: :meth:`explain_presets`).

        Hide-and-seek (the entity keys present): the reference hyperparameters (gamma
        0.998, lambda 0.95, clip 0.2, entropy 0.01, lr 3e-4 eps 1e-5, value weight 0.5,
        grad clip 5, chunk 10, sample length 160, up to 4 reuses, 1 epoch, PopArt) with
        ``actors.count = cores - 1`` (at least 1) x 8 envs and a batch of at least 32
        agent-slot samples, scaled with the cores and capped by memory.
        Other envs: the MAPPO paper's MPE settings (:data:`MPE_REFERENCE`), 2 actors x 8
        envs, samples of 25 steps for MPE (64 otherwise; GRU chunks of 25 and 16), one sample
        per agent-slot per batch.
        """
        return cls._preset_choice(spec)[0]

    @classmethod
    def explain_presets(cls, spec: EnvSpec) -> str:
        """Human-readable account of :meth:`presets` for ``spec``: what was chosen and why.

        Plain text without a heading (``zoo train`` prints it after ``mappo presets: ``).
        """
        values, why = cls._preset_choice(spec)
        chosen = ", ".join(f"{k}={v}" for k, v in values.items())
        return "\n".join([why[0], *("  " + w for w in why[1:]), "  chosen: " + chosen])

    def __init__(self, config: MAPPOConfig, spec: EnvSpec, seed: int) -> None:
        self.config, self.spec = config, spec
        self.device = torch.device(config.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = self.build_policy(config, spec).to(self.device)
        self.precision = TrainingPrecision(config.precision, self.device, self.policy)  # algo.precision resolved
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr, eps=config.adam_eps)
        self.rng = np.random.default_rng(seed)
        self.buffer: list[dict[str, Any]] = []  # kept batches (sample reuse), oldest first
        self.agent_steps = 0
        self.updates = 0
        self.reward_norm = RewardNorm().to(self.device) if config.norm_reward else None

    @property
    def recurrent(self) -> bool:
        return self.policy.state_shape is not None

    # -- preparing a batch --
    def _obs(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {k: to_tensor(v, self.device) for k, v in obs.items()}

    def prepare(self, batch: Batch) -> dict[str, Any]:
        """Targets and chunks of one batch, computed once (no gradients).

        Returns a dict of tensors, columns = chunks (``M = ceil(T / L) * B``):
        ``obs`` ``{k: [L, M, ...]}``, ``action`` ``[L, M, ...]``, ``logp`` ``[L, M]``
        (behaviour), ``value`` and ``ret`` ``[L, M]`` (the critic's value now, module docstring
        "Values", and the GAE target, real units), ``adv`` ``[L, M]`` (standardised when
        ``norm_adv``), ``mask`` bool ``[L, M]`` (active and not padding), ``reset`` bool
        ``[L, M]``, ``state0`` ``[M, *S]`` or None, ``uses`` 0; plus ``T``, ``B``, ``n`` (active
        steps), ``adv_raw``, ``ret_raw`` (``[T, B]``) and ``explained_variance``.

        Raises:
            KeyError: a required key is missing, or ``rnn_state`` for a recurrent policy.
            ValueError: shapes disagree (from :func:`~zoo.plugins.algorithms.returns.gae`).
        """
        missing = [k for k in REQUIRED_KEYS if k not in batch]
        if missing:
            raise KeyError(f"MAPPO batch is missing {', '.join(map(repr, missing))}; the policy's act() extras "
                           "'logp' and 'value' must be stored in every sample (see zoo.core.algorithm)")
        c, dev, pol = self.config, self.device, self.policy
        obs = self._obs(batch["obs"])
        reward = to_tensor(batch["reward"], dev, torch.float32)
        T, B = reward.shape
        ones, zeros = torch.ones(T, B, dtype=torch.bool, device=dev), torch.zeros(T, B, dtype=torch.bool, device=dev)
        active = to_tensor(batch["active"], dev, torch.bool) if "active" in batch else ones
        on_reset = to_tensor(batch["on_reset"], dev, torch.bool) if "on_reset" in batch else zeros
        reward = scaled_rewards(self.reward_norm, batch, reward, active)
        action = to_tensor(batch["action"], dev)
        L = c.chunk_length if self.recurrent else 1
        state0 = None
        if self.recurrent:
            if "rnn_state" not in batch:
                raise KeyError("MAPPO: the policy is recurrent but the batch has no 'rnn_state' (the state fed at "
                               "each step, stored by the policy worker); use a policy worker with recurrent "
                               "support or set algo.recurrent=false")
            rnn_state = to_tensor(batch["rnn_state"], dev, torch.float32)
            assert pol.state_shape is not None, "a recurrent policy has a state_shape"
            expect = (T, B, *pol.state_shape)
            if tuple(rnn_state.shape) != expect:
                raise ValueError(f"MAPPO: 'rnn_state' has shape {tuple(rnn_state.shape)}, expected {expect}")
            state0 = chunk_starts(rnn_state, L)
        ch: dict[str, Any] = {
            "obs": {k: chunk_time(v[:T], L) for k, v in obs.items()},
            "action": chunk_time(action, L),
            "logp": chunk_time(to_tensor(batch["logp"], dev, torch.float32), L),
            "mask": chunk_time(active, L),
            "reset": chunk_time(on_reset, L),
            "state0": state0,
        }
        final_index = to_tensor(batch.get("final_index", np.zeros((0, 2), np.int64)), dev, torch.int64)
        vh, forward = pol.value_head, self.precision.forward  # algo.precision: outputs (and states) float32
        with torch.no_grad():
            boot_state = final_state = None
            # one critic for every value (module docstring, "Values"): the rows' recorded "value" is not used
            ev = forward(pol.critic_sequence, ch["obs"], state0, ch["reset"], ch["mask"])
            values = vh.denormalize(unchunk_time(ev["value"], T, B))
            if self.recurrent:
                assert ev["after"] is not None, "a recurrent critic returns its states"
                after = unchunk_time(ev["after"], T, B)          # [T, B, *S]
                boot_state = after[T - 1]
                final_state = after[final_index[:, 0], final_index[:, 1]]
            bootstrap = vh.denormalize(forward(pol.value, {k: v[T] for k, v in obs.items()}, boot_state))
            if final_index.shape[0] > 0:
                final_values = vh.denormalize(forward(pol.value, self._obs(batch["final_obs"]), final_state))
            else:
                final_values = torch.zeros(0, device=dev)
            adv, ret = gae(reward, torch.cat([values, bootstrap[None]]),
                           to_tensor(batch["terminated"], dev, torch.bool),
                           to_tensor(batch["truncated"], dev, torch.bool),
                           gamma=c.gamma, gae_lambda=c.gae_lambda, final_index=final_index,
                           final_values=final_values, active=active)
        n = int(active.sum())
        norm = masked_normalize(adv, active) if c.norm_adv else adv
        ch.update(value=chunk_time(values, L), ret=chunk_time(ret, L), adv=chunk_time(norm, L), uses=0)
        ev_stat = explained_variance(values[active], ret[active]) if n else float("nan")
        return {**ch, "T": T, "B": B, "n": n, "adv_raw": adv, "ret_raw": ret, "explained_variance": ev_stat,
                "obs_rows": {k: v[:T][active] for k, v in obs.items()}}

    # -- the update --
    def update(self, batch: Batch) -> dict[str, float]:
        """One MAPPO update (module docstring): prepare ``batch``, update the value statistics
        with its targets, train on the kept batches, drop exhausted ones, update the
        observation statistics.

        Returns:
            Means over the gradient steps of ``pg_loss``, ``v_loss`` (normalised units),
            ``entropy`` (nats), ``approx_kl``, ``clipfrac``, ``grad_norm_actor`` and
            ``grad_norm_critic`` (before clipping); ``explained_variance`` (behaviour
            values vs targets of the new batch); ``value_mean`` / ``value_std`` (the value
            statistics); ``return_target_mean``; ``kept_batches`` (batches trained on);
            ``agent_steps`` (active steps of the new batch, summed over the trainers); ``lr``.

        Raises:
            KeyError, ValueError: see :meth:`prepare`.
            NonFiniteUpdate: a gradient step's loss or gradient norms, or the final weights,
                were not finite: no step was taken with them, and the weights, value and
                observation statistics, optimiser state, minibatch RNG and kept batches are
                back to what they were before this update
                (:class:`~zoo.plugins.algorithms.tensors.UpdateGuard`).
        """
        c = self.config
        guard = UpdateGuard(self.policy, self.optimizer, self.rng)
        prepared = self.prepare(batch)
        vh = self.policy.value_head
        active_ret = prepared["ret_raw"][_active_tb(prepared)]
        vh.update(active_ret)
        self.buffer.append(prepared)
        stats = {k: 0.0 for k in STATS}
        try:
            steps, taken = self._train(stats, guard)
            guard.check_weights(steps)
        except NonFiniteUpdate:
            self.buffer.pop()
            raise
        for entry in self.buffer:
            entry["uses"] += 1
        kept = len(self.buffer)
        self.buffer = [e for e in self.buffer if e["uses"] < c.max_reuse]
        self.policy.update_obs_stats(prepared.pop("obs_rows"))
        n_all = zdist.global_count(prepared["n"])  # every trainer's active steps
        self.agent_steps += n_all
        self.updates += 1
        mu, var = vh.stats.mean_var()
        out = {k: v / max(1, taken) for k, v in stats.items()}  # over the steps on this rank's data
        out.update(explained_variance=prepared["explained_variance"], value_mean=float(mu),
                   value_std=float(var.sqrt()), kept_batches=float(kept), agent_steps=float(n_all),
                   return_target_mean=float(active_ret.mean()) if active_ret.numel() else 0.0, lr=c.lr)
        return out

    def _train(self, stats: dict[str, float], guard: UpdateGuard) -> tuple[int, int]:
        """``epochs`` passes of ``minibatches`` over the kept batches; sums statistics into ``stats``.

        Returns ``(steps, taken)``: every optimiser step, and those on this rank's own data
        (a data-parallel rank with no active step in a minibatch still steps, adding nothing).

        ``guard`` checks each step's loss and gradient norms before the optimiser step."""
        c, pol, vh = self.config, self.policy, self.policy.value_head
        data = _concat_columns(self.buffer)
        M = data["mask"].shape[1]
        steps = taken = 0
        actor_params, critic_params = pol.actor_parameters(), pol.critic_parameters()
        max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
        ret_n, old_n = vh.normalize(data["ret"]), vh.normalize(data["value"])
        params = list(pol.parameters())
        data_parallel = zdist.world_size() > 1
        for _ in range(c.epochs):
            order = np.arange(M) if c.minibatches == 1 else self.rng.permutation(M)  # one minibatch: all, in order
            # data-parallel trainers keep empty parts too: every rank takes the same number of steps
            for mb_np in [p for p in np.array_split(order, c.minibatches) if len(p) or data_parallel]:
                mb = torch.as_tensor(mb_np, device=self.device, dtype=torch.int64)
                mask = data["mask"][:, mb]
                if not (zdist.global_any(bool(mask.any())) if data_parallel else bool(mask.any())):
                    continue
                if not bool(mask.any()):  # data parallel: no step of this rank here; the others' gradients count
                    self.optimizer.zero_grad()
                    zdist.reduce_gradients(params, weight=0)
                    guard.check(steps, grad_norm_actor=nn.utils.clip_grad_norm_(actor_params, max_norm),
                                grad_norm_critic=nn.utils.clip_grad_norm_(critic_params, max_norm))
                    self.optimizer.step()
                    steps += 1
                    continue
                # algo.precision: the forward pass (and so its backward) under autocast; outputs float32
                ev = self.precision.forward(
                    pol.evaluate, {k: v[:, mb] for k, v in data["obs"].items()}, data["action"][:, mb],
                    None if data["state0"] is None else data["state0"][mb], data["reset"][:, mb], mask)
                logratio = ev["logp"] - data["logp"][:, mb]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = masked_mean((ratio - 1) - logratio, mask)
                    clipfrac = masked_mean(((ratio - 1).abs() > c.clip_coef).float(), mask)
                pg_loss = clipped_surrogate_loss(ratio, data["adv"][:, mb], mask, c.clip_coef)
                v_loss = value_loss(ev["value"], ret_n[:, mb], old_n[:, mb], mask, c.clip_coef, c.huber_delta,
                                    c.clip_vloss)
                entropy = masked_mean(ev["entropy"], mask)
                loss = pg_loss - c.ent_coef * entropy + c.vf_coef * v_loss
                self.optimizer.zero_grad()
                loss.backward()
                # means over the active steps: weight each rank's gradient by its count of them
                zdist.reduce_gradients(params, weight=float(mask.sum()), loss=loss)
                gn_a = nn.utils.clip_grad_norm_(actor_params, max_norm)
                gn_c = nn.utils.clip_grad_norm_(critic_params, max_norm)
                guard.check(steps, loss=loss, grad_norm_actor=gn_a, grad_norm_critic=gn_c)
                self.optimizer.step()
                for k, v in (("pg_loss", pg_loss), ("v_loss", v_loss), ("entropy", entropy), ("approx_kl", approx_kl),
                             ("clipfrac", clipfrac), ("grad_norm_actor", gn_a), ("grad_norm_critic", gn_c)):
                    stats[k] += float(v.detach())
                steps += 1
                taken += 1
        return steps, taken

    # -- checkpoints --
    def state_dict(self) -> dict[str, Any]:
        """Policy (with its value and observation statistics) and optimiser state, counters,
        minibatch RNG, the kept batches of sample reuse (``buffer``: prepared tensors and their
        use counts, oldest first) and the config."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "agent_steps": self.agent_steps, "updates": self.updates,
                "rng": self.rng.bit_generator.state, "buffer": list(self.buffer), "config": asdict(self.config),
                "reward_norm": None if self.reward_norm is None else self.reward_norm.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the stored config is informational); the
        kept batches are moved to this algorithm's device (a checkpoint without ``buffer``
        starts with none)."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.agent_steps = int(state.get("agent_steps", 0))
        self.updates = int(state.get("updates", 0))
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
        if self.reward_norm is not None and state.get("reward_norm") is not None:
            self.reward_norm.load_state_dict(state["reward_norm"])
        self.buffer = [_to_device(entry, self.device) for entry in state.get("buffer", [])]


def _to_device(value: Any, device: torch.device) -> Any:
    """``value`` (tensors in nested dicts and lists) with every tensor on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_device(v, device) for v in value]
    return value


def _active_tb(prepared: dict[str, Any]) -> torch.Tensor:
    """The ``[T, B]`` active mask of a prepared batch (un-chunked, padding dropped)."""
    return unchunk_time(prepared["mask"], prepared["T"], prepared["B"])


def _concat_columns(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Join prepared batches along the chunk (column) axis."""
    if len(entries) == 1:
        return entries[0]
    cat = lambda key: torch.cat([e[key] for e in entries], dim=1)  # noqa: E731
    out: dict[str, Any] = {k: cat(k) for k in ("action", "logp", "mask", "reset", "value", "ret", "adv")}
    out["obs"] = {k: torch.cat([e["obs"][k] for e in entries], dim=1) for k in entries[0]["obs"]}
    out["state0"] = None if entries[0]["state0"] is None else torch.cat([e["state0"] for e in entries])
    return out
