"""MAPPO: masks, chunking of recurrent samples, value normalisation, reuse, presets; values by hand."""
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.mappo.mappo import (
    MAPPO,
    MAPPOConfig,
    chunk_starts,
    chunk_time,
    clipped_surrogate_loss,
    huber,
    masked_mean,
    masked_normalize,
    unchunk_time,
    value_loss,
)
from zoo.plugins.algorithms.mappo.networks import MLPPolicy, unroll
from zoo.plugins.algorithms.mappo.valuenorm import RunningMeanStd, ValueHead

NAN = float("nan")


def vec_spec(agents=2, dim=3, state=False):
    obs = {"obs": spaces.Box(-np.inf, np.inf, (dim,), np.float32)}
    if state:
        obs["zoo:global_state"] = spaces.Box(-np.inf, np.inf, (agents * dim,), np.float32)
    return EnvSpec("Toy-v0", tuple(f"agent_{i}" for i in range(agents)), obs, spaces.Discrete(2))


def vec_batch(T, B, dim=3, seed=0, active=None, value=None, reward=None):
    rng = np.random.default_rng(seed)
    return {
        "obs": {"obs": rng.standard_normal((T + 1, B, dim)).astype(np.float32)},
        "action": rng.integers(0, 2, (T, B)),
        "reward": rng.standard_normal((T, B)).astype(np.float32) if reward is None else np.asarray(reward, np.float32),
        "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool),
        "active": np.ones((T, B), bool) if active is None else np.asarray(active, bool),
        "on_reset": np.zeros((T, B), bool),
        "policy_version": np.zeros((T, B), np.int64),
        "logp": np.full((T, B), -math.log(2), np.float32),
        "value": np.zeros((T, B), np.float32) if value is None else np.asarray(value, np.float32),
        "final_obs": {"obs": np.zeros((0, dim), np.float32)},
        "final_index": np.zeros((0, 2), np.int64),
    }


# -- plugin -------------------------------------------------------------------------------

def test_plugin_import_does_not_import_torch():
    code = "import sys, zoo.plugins.algorithms.mappo.plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_registered_through_the_plugin_host():
    from zoo.core.plugins import PluginHost

    component = PluginHost(entry_points=False).registry.get("algorithm", "mappo")
    assert component.load() is MAPPO
    assert component.option("config") is MAPPOConfig


@pytest.mark.parametrize("field,value", [("chunk_length", 0), ("max_reuse", 0), ("epochs", 0), ("gamma", 1.5),
                                         ("value_norm_beta", 1.0), ("huber_delta", -1.0)])
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^algo\.{field} must be .*, got {value!r}$"):
        MAPPOConfig(**{field: value})


# -- (a) masks: 2 agents, 4 steps, agent 1 inactive after step 2 ---------------------------

ADV = torch.tensor([[1.0, 5.0], [2.0, 6.0], [3.0, 100.0], [4.0, 100.0]], dtype=torch.float64)  # [T=4, B=2]
ACTIVE = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 0]], dtype=torch.bool)


def test_advantage_normalisation_uses_active_entries_only():
    out = masked_normalize(ADV, ACTIVE)
    # active advantages 1..6: mean 3.5, population variance 17.5 / 6 = 35 / 12
    std = math.sqrt(35 / 12)
    assert float(masked_mean(ADV, ACTIVE)) == 3.5
    expected = [[(a - 3.5) / (std + 1e-5) for a in row] for row in ([1, 5], [2, 6], [3, 0], [4, 0])]
    expected[2][1] = expected[3][1] = 0.0  # masked entries are 0
    assert sum(out.tolist(), []) == pytest.approx(sum(expected, []), abs=1e-12)
    # the masked entries' values (100, or even nan) change nothing
    assert torch.equal(masked_normalize(torch.where(ACTIVE, ADV, torch.tensor(NAN, dtype=torch.float64)), ACTIVE), out)


def test_masked_entries_add_nothing_to_policy_loss_or_entropy_mean():
    ratio = torch.tensor([[1.5, 0.5], [1.0, 1.0], [1.0, 100.0], [1.0, 100.0]], dtype=torch.float64)
    # min(r A, clip(r, 0.8, 1.2) A): 1.2*1, 0.5*5, 2, 6, 3, 4 -> sum 18.7 over 6 active entries
    loss = clipped_surrogate_loss(ratio, ADV, ACTIVE, 0.2)
    assert float(loss) == pytest.approx(-18.7 / 6, abs=1e-12)
    poisoned_ratio = torch.where(ACTIVE, ratio, torch.tensor(NAN, dtype=torch.float64))
    poisoned_adv = torch.where(ACTIVE, ADV, torch.tensor(-1e9, dtype=torch.float64))
    assert float(clipped_surrogate_loss(poisoned_ratio, poisoned_adv, ACTIVE, 0.2)) == float(loss)
    entropy = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 100.0], [6.0, NAN]], dtype=torch.float64)
    assert float(masked_mean(entropy, ACTIVE)) == 3.5  # (1 + 2 + 3 + 4 + 5 + 6) / 6


def test_masked_mean_gradient_is_zero_at_masked_entries():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], dtype=torch.float64, requires_grad=True)
    masked_mean(x, ACTIVE).backward()
    assert x.grad.tolist() == [[1 / 6, 1 / 6], [1 / 6, 1 / 6], [1 / 6, 0.0], [1 / 6, 0.0]]


def test_value_loss_huber_and_clipping_by_hand():
    assert huber(torch.tensor([0.5, -3.0]), 1.0).tolist() == [0.125, 2.5]  # e^2/2; 1 * (3 - 0.5)
    assert huber(torch.tensor([3.0]), 0.0).tolist() == [4.5]
    v, target, old = torch.tensor([[1.0], [0.0]]), torch.tensor([[2.0], [5.0]]), torch.tensor([[0.0], [0.0]])
    mask = torch.tensor([[True], [False]])
    # step 0: unclipped (2 - 1)^2 / 2 = 0.5; clipped V = 0 + clip(1, -0.2, 0.2) = 0.2: 1.8^2 / 2 = 1.62 -> max 1.62
    assert float(value_loss(v, target, old, mask, 0.2, 0.0)) == pytest.approx(1.62)
    assert float(value_loss(v, target, old, mask, 0.2, 0.0, clip_vloss=False)) == pytest.approx(0.5)


def test_masked_steps_change_nothing_in_a_whole_update():
    """Two batches that differ only at agent 1's inactive steps give identical updates."""
    spec = vec_spec(agents=2)
    active = np.array([[1, 1], [1, 1], [1, 0], [1, 0]], bool)
    a = vec_batch(4, 2, active=active, seed=1)
    b = {k: (dict(v) if isinstance(v, dict) else v.copy()) for k, v in a.items()}
    b["obs"]["obs"][2:4, 1] = 1e6
    b["reward"][2:4, 1] = 100.0
    b["value"][2:4, 1] = -50.0
    b["logp"][2:4, 1] = -30.0
    b["action"][2:4, 1] = 1 - b["action"][2:4, 1]
    cfg = MAPPOConfig(epochs=2, minibatches=1)
    algo_a, algo_b = MAPPO(cfg, spec, 0), MAPPO(cfg, spec, 0)
    stats_a, stats_b = algo_a.update(a), algo_b.update(b)
    assert stats_a == stats_b
    assert stats_a["agent_steps"] == 6.0
    for (name, pa), pb in zip(algo_a.policy.state_dict().items(), algo_b.policy.state_dict().values()):
        assert torch.equal(pa, pb), name


# -- GAE wiring: truncation bootstraps from final_obs --------------------------------------

def test_truncated_step_bootstraps_from_the_final_observation():
    spec = vec_spec(agents=1)
    algo = MAPPO(MAPPOConfig(gamma=0.5, gae_lambda=1.0, value_norm="none", norm_adv=False, obs_norm=False), spec, 0)
    critic_out = algo.policy.value_head.linear
    with torch.no_grad():
        critic_out.weight.zero_()
        critic_out.bias.fill_(2.0)  # the current critic says V = 2 everywhere
    batch = vec_batch(2, 1, reward=[[1.0], [1.0]], value=[[0.0], [0.0]])
    batch["truncated"][1, 0] = True
    batch["final_obs"] = {"obs": np.ones((1, 3), np.float32)}
    batch["final_index"] = np.array([[1, 0]], np.int64)
    prepared = algo.prepare(batch)
    # every value is the current critic's (V = 2; the recorded 0s are not used):
    # A_1 = 1 + 0.5 * V(final) - V(s_1) = 0 (-1 if the final observation were not bootstrapped);
    # A_0 = (1 + 0.5 * V(s_1) - V(s_0)) + 0.5 * 1 * A_1 = 0; G = A + V = 2
    assert prepared["adv_raw"][:, 0].tolist() == [0.0, 0.0]
    assert prepared["ret_raw"][:, 0].tolist() == [2.0, 2.0]


def test_every_gae_value_comes_from_the_current_critic_not_the_recorded_one():
    """The acting critic recorded V = 1 everywhere; the trainer's says 5. 3 steps, rewards 1, 0,
    2, truncated at t = 1 (final observation), gamma = lambda = 0.5, all values 5:
    A_2 = 2 + 0.5 * 5 - 5 = -0.5; A_1 = 0 + 0.5 * V(final) 5 - 5 = -2.5 (episode cut);
    A_0 = (1 + 0.5 * 5 - 5) + 0.25 * A_1 = -2.125; G = A + 5. Mixing the recorded rows with the
    trainer's bootstrap and final values would give A = 0.875, 1.5, 3.5."""
    algo = MAPPO(MAPPOConfig(gamma=0.5, gae_lambda=0.5, value_norm="none", norm_adv=False, obs_norm=False),
                 vec_spec(agents=1), 0)
    with torch.no_grad():
        algo.policy.value_head.linear.weight.zero_()
        algo.policy.value_head.linear.bias.fill_(5.0)
    batch = vec_batch(3, 1, reward=[[1.0], [0.0], [2.0]], value=[[1.0], [1.0], [1.0]])
    batch["truncated"][1, 0] = True
    batch["final_obs"] = {"obs": np.ones((1, 3), np.float32)}
    batch["final_index"] = np.array([[1, 0]], np.int64)
    prepared = algo.prepare(batch)
    assert prepared["adv_raw"][:, 0].tolist() == [-2.125, -2.5, -0.5]
    assert prepared["ret_raw"][:, 0].tolist() == [2.875, 2.5, 4.5]
    assert prepared["value"].reshape(-1).tolist() == [5.0, 5.0, 5.0]  # V~old of the clipped value loss


# -- (b) chunking of recurrent samples -----------------------------------------------------

STORED = torch.tensor([0.0, 1.0, 2.0, 0.0, 1.0, 2.0]).reshape(6, 1, 1)  # rnn_state fed: [T=6, B=1, S=1]
ON_RESET = torch.tensor([1, 0, 0, 1, 0, 0], dtype=torch.bool).reshape(6, 1)


def count(x, s):
    """The counting recurrence h_t = h_{t-1} + 1: output the state fed, return it plus one."""
    return s, s + 1


def test_chunk_layout_and_padding():
    x = torch.arange(6.0).reshape(6, 1)
    assert chunk_time(x, 4).tolist() == [[0.0, 4.0], [1.0, 5.0], [2.0, 0.0], [3.0, 0.0]]
    assert chunk_time(torch.ones(6, 1, dtype=torch.bool), 4).tolist() == [[True, True], [True, True],
                                                                          [True, False], [True, False]]
    assert unchunk_time(chunk_time(x, 4), 6, 1).tolist() == x.tolist()
    two = torch.arange(12.0).reshape(6, 2)  # column c * B + b
    assert chunk_time(two, 3)[:, 1].tolist() == [1.0, 3.0, 5.0]
    assert chunk_time(two, 3)[:, 2].tolist() == [6.0, 8.0, 10.0]


def test_chunks_start_from_stored_state_and_reset_inside():
    starts = chunk_starts(STORED, 4)
    assert starts.tolist() == [[0.0], [1.0]]  # the chunk starting at step 4 starts from the stored state 1
    _, fed, after = unroll(count, chunk_time(torch.zeros(6, 1, 1), 4), starts, chunk_time(ON_RESET, 4))
    assert unchunk_time(fed, 6, 1).flatten().tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
    assert unchunk_time(after, 6, 1).flatten().tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    # without the reset at step 3 the first chunk would run on: 0, 1, 2, 3
    _, fed, _ = unroll(count, chunk_time(torch.zeros(6, 1, 1), 4), starts, torch.zeros(4, 2, dtype=torch.bool))
    assert unchunk_time(fed, 6, 1).flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 1.0, 2.0]


def test_inactive_step_holds_the_state():
    active = torch.tensor([1, 0, 1], dtype=torch.bool).reshape(3, 1)
    _, fed, _ = unroll(count, torch.zeros(3, 1, 1), torch.zeros(1, 1), torch.zeros(3, 1, dtype=torch.bool), active)
    assert fed.flatten().tolist() == [0.0, 1.0, 1.0]


class CountingPolicy(nn.Module):
    """A recurrent test policy whose state counts steps; records the states MAPPO feeds it."""

    state_shape = (1,)

    def __init__(self):
        super().__init__()
        self.value_head = ValueHead(1, "none")
        self.w = nn.Parameter(torch.zeros(()))
        self.fed = []

    def evaluate(self, obs, action, state0, reset, active=None):
        L, M = reset.shape
        _, fed, after = unroll(count, torch.zeros(L, M, 1), state0, reset, active)
        self.fed.append(fed)
        zero = torch.zeros(L, M) * self.w
        return {"logp": zero, "entropy": zero, "value": zero, "fed": fed, "after": after}

    def critic_sequence(self, obs, state0, reset, active=None):
        out = self.evaluate(obs, None, state0, reset, active)
        return {k: out[k] for k in ("value", "fed", "after")}

    def value(self, obs, state=None):
        return torch.zeros(next(iter(obs.values())).shape[0])

    def actor_parameters(self):
        return [self.w]

    def critic_parameters(self):
        return []

    def update_obs_stats(self, obs):
        pass


def test_mappo_training_recomputes_the_fed_states():
    spec = vec_spec(agents=1)
    algo = MAPPO(MAPPOConfig(chunk_length=4, epochs=1, minibatches=1), spec, 0)
    algo.policy = CountingPolicy()
    batch = vec_batch(6, 1)
    batch["on_reset"] = ON_RESET.numpy()
    batch["terminated"][2, 0] = True  # the episode ends after step 2; step 3 observes the reset
    batch["rnn_state"] = STORED.numpy()
    prepared = algo.prepare(batch)
    assert prepared["state0"].tolist() == [[0.0], [1.0]]
    assert prepared["mask"].tolist() == [[True, True], [True, True], [True, False], [True, False]]
    assert unchunk_time(algo.policy.fed[-1], 6, 1).flatten().tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
    algo.policy.fed.clear()
    algo.update(batch)  # targets, then training: both recompute the same fed states
    assert len(algo.policy.fed) == 2
    for fed in algo.policy.fed:
        assert unchunk_time(fed, 6, 1).flatten().tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]


def test_recurrent_policy_without_rnn_state_is_rejected():
    algo = MAPPO(MAPPOConfig(recurrent=True), vec_spec(), 0)
    with pytest.raises(KeyError, match="rnn_state"):
        algo.update(vec_batch(4, 2))


def test_gru_training_reproduces_rollout_log_probs_and_values():
    """Acting step by step (state reset at on_reset) and re-evaluating in chunks from the stored
    states give the same log-probabilities and values."""
    torch.manual_seed(0)
    spec = vec_spec(agents=2)
    policy = MLPPolicy(spec, hidden=8, recurrent=True)
    T, B = 7, 2
    batch = vec_batch(T, B, seed=3)
    batch["on_reset"][[0, 4], :] = True
    batch["on_reset"][2, 1] = True
    obs = torch.as_tensor(batch["obs"]["obs"])
    state = torch.zeros(B, *policy.state_shape)
    fed, logps, values, actions = [], [], [], []
    for t in range(T):
        state = torch.where(torch.as_tensor(batch["on_reset"][t])[:, None, None], torch.zeros_like(state), state)
        fed.append(state)
        out = policy.act({"obs": obs[t]}, state)
        state = out["state"]
        logps.append(out["logp"])
        values.append(out["value"])
        actions.append(out["action"])
    rnn_state, action = torch.stack(fed), torch.stack(actions)
    L = 3  # 7 = 3 + 3 + 1: a padded last chunk
    ev = policy.evaluate({"obs": chunk_time(obs[:T], L)}, chunk_time(action, L), chunk_starts(rnn_state, L),
                         chunk_time(torch.as_tensor(batch["on_reset"]), L))
    assert torch.allclose(unchunk_time(ev["logp"], T, B), torch.stack(logps), atol=1e-5)
    value = policy.value_head.denormalize(unchunk_time(ev["value"], T, B))
    assert torch.allclose(value, torch.stack(values), atol=1e-5)
    assert torch.allclose(unchunk_time(ev["fed"], T, B), rnn_state, atol=1e-6)


# -- (c) value normalisation -----------------------------------------------------------------

def test_running_mean_std_exact():
    rms = RunningMeanStd((), beta=0.5)
    mu, var = rms.mean_var()
    assert (float(mu), float(var)) == (0.0, 1.0)  # identity before any update
    rms.update(torch.tensor([1.0, 2.0, 3.0]))
    # m = 0.5 * 2 = 1, s = 0.5 * 14/3, d = 0.5 -> mu = 2, var = 14/3 - 4 = 2/3
    mu, var = rms.mean_var()
    assert float(mu) == pytest.approx(2.0, abs=1e-12) and float(var) == pytest.approx(2 / 3, abs=1e-12)
    rms.update(torch.tensor([5.0]))
    # m = 0.5 + 2.5 = 3, s = 7/6 + 12.5 = 41/3, d = 0.75 -> mu = 4, var = 164/9 - 16 = 20/9
    mu, var = rms.mean_var()
    assert float(mu) == pytest.approx(4.0, abs=1e-12) and float(var) == pytest.approx(20 / 9, abs=1e-12)
    z = rms.normalize(torch.tensor([5.0], dtype=torch.float64))
    assert float(z) == pytest.approx(3 / math.sqrt(20), abs=1e-12)
    assert float(rms.denormalize(z)) == pytest.approx(5.0, abs=1e-12)


def test_variance_floor():
    rms = RunningMeanStd((), beta=0.0, var_min=1e-2)
    rms.update(torch.tensor([7.0, 7.0]))
    assert float(rms.normalize(torch.tensor([7.5], dtype=torch.float64))) == pytest.approx(5.0)  # sigma 0.1


def _head(mode):
    head = ValueHead(1, mode, beta=0.0)
    with torch.no_grad():
        head.linear.weight.fill_(2.0)
        head.linear.bias.fill_(1.0)
    return head


def test_popart_preserves_outputs_exactly():
    head = _head("popart")
    x = torch.ones(1, 1)
    with torch.no_grad():
        assert float(head.denormalize(head(x))) == 3.0
    head.update(torch.tensor([0.0, 4.0]))  # mu 2, var 4
    # w' = 2 * 1 / 2 = 1, b' = (1 * 1 + 0 - 2) / 2 = -0.5; real output 0.5 * 2 + 2 = 3
    assert head.linear.weight.item() == 1.0 and head.linear.bias.item() == -0.5
    with torch.no_grad():
        assert float(head.denormalize(head(x))) == 3.0


def test_running_value_norm_leaves_the_layer_alone():
    head = _head("running")
    head.update(torch.tensor([0.0, 4.0]))
    assert head.linear.weight.item() == 2.0 and head.linear.bias.item() == 1.0
    with torch.no_grad():
        assert float(head.denormalize(head(torch.ones(1, 1)))) == 8.0  # 3 * 2 + 2
    assert float(head.normalize(torch.tensor([6.0]))) == 2.0  # (6 - 2) / 2
    none = _head("none")
    none.update(torch.tensor([0.0, 4.0]))
    with torch.no_grad():
        assert float(none.denormalize(none(torch.ones(1, 1)))) == 3.0


def test_update_trains_the_critic_on_normalised_targets():
    spec = vec_spec(agents=2)
    algo = MAPPO(MAPPOConfig(value_norm_beta=0.0, epochs=1), spec, 0)
    batch = vec_batch(4, 2, reward=np.full((4, 2), 10.0))
    ret = algo.prepare(batch)["ret_raw"]  # the targets the update will compute (before it changes the critic)
    stats = algo.update(batch)
    assert stats["return_target_mean"] == pytest.approx(float(ret.mean()), rel=1e-6)
    assert stats["value_mean"] == pytest.approx(float(ret.mean()), rel=1e-6)
    assert stats["value_std"] == pytest.approx(max(float(ret.double().var(unbiased=False)), 1e-2) ** 0.5, rel=1e-5)


# -- sample reuse --------------------------------------------------------------------------

def test_each_batch_is_used_in_max_reuse_updates():
    spec = vec_spec(agents=2)
    algo = MAPPO(MAPPOConfig(max_reuse=3, epochs=1), spec, 0)
    kept = [algo.update(vec_batch(4, 2, seed=i))["kept_batches"] for i in range(5)]
    assert kept == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert [e["uses"] for e in algo.buffer] == [2, 1]  # batches 3 and 4 (oldest first); batch 2 left after 3 uses
    once = MAPPO(MAPPOConfig(max_reuse=1), spec, 0)
    assert [once.update(vec_batch(4, 2, seed=i))["kept_batches"] for i in range(2)] == [1.0, 1.0]
    assert once.buffer == []


# -- presets -------------------------------------------------------------------------------

def test_vector_presets_use_state_for_the_critic_and_mappo_settings():
    spec = vec_spec(agents=3, state=True)
    presets = MAPPO.presets(spec)
    assert presets["algo.lr"] == 7e-4 and presets["algo.epochs"] == 10 and presets["algo.huber_delta"] == 10.0
    assert presets["trainer.batch_samples"] == 2 * 8 * 3
    text = MAPPO.explain_presets(spec)
    assert "global state" in text and "chosen:" in text
    policy = MAPPO.build_policy(MAPPOConfig(), spec)
    assert policy.critic_keys == ["zoo:global_state"] and policy.actor_keys == ["obs"]
    assert MAPPO.build_policy(MAPPOConfig(), vec_spec()).critic_keys == ["obs"]


def test_an_env_key_named_state_is_the_envs_own_not_the_global_state():
    # issue 15: an env observation entry "state" is an actor input; the critic's global state is
    # "zoo:global_state", and without one the critic reads the actor's keys.
    obs = {"state": spaces.Box(-1, 1, (2,), np.float32), "pos": spaces.Box(-1, 1, (1,), np.float32)}
    policy = MAPPO.build_policy(MAPPOConfig(), EnvSpec("Toy-v0", ("a", "b"), obs, spaces.Discrete(2)))
    assert policy.actor_keys == ["pos", "state"] and policy.critic_keys == ["pos", "state"]
    assert "global state" not in MAPPO.explain_presets(EnvSpec("Toy-v0", ("a", "b"), obs, spaces.Discrete(2)))


def test_presets_resolve_through_the_config():
    from zoo.core.config import build_config
    from zoo.core.plugins import PluginHost

    pytest.importorskip("mpe2")
    registry = PluginHost(entry_points=False).registry
    cfg = build_config(registry, "mappo", "pettingzoo:mpe2.simple_spread_v3",
                       overrides=["env.kwargs=N=3,max_cycles=25"], steps=1000)
    assert cfg.sample_length == 25 and cfg.algo.lr == 7e-4 and cfg.trainer.batch_samples == 48


def test_data_parallel_empty_minibatches_do_not_dilute_the_logged_losses(monkeypatch):
    # A data-parallel rank whose minibatch part is empty while another rank's is not still steps
    # (weight 0). Its logged means are over the steps on its own data: exactly one trainer's with
    # the same non-empty parts (the permutation cut into singletons; the empty parts come last).
    # Before: divided by every step, empty ones included (4 real of 6 -> two thirds of the value).
    from zoo.plugins.algorithms.mappo import mappo as mappo_module

    spec, batch = vec_spec(agents=1), vec_batch(4, 4)
    settings = {"epochs": 1, "recurrent": False, "policy": "mlp", "norm_adv": False}
    probe = MAPPO(MAPPOConfig(**settings, minibatches=1), spec, 0)
    columns = mappo_module._concat_columns([probe.prepare(batch)])["mask"].shape[1]
    ref = MAPPO(MAPPOConfig(**settings, minibatches=columns), spec, 0).update(batch)
    monkeypatch.setattr(mappo_module.zdist, "world_size", lambda: 2)
    monkeypatch.setattr(mappo_module.zdist, "global_any", lambda flag: True)  # the other rank has data
    stats = MAPPO(MAPPOConfig(**settings, minibatches=columns + 2), spec, 0).update(batch)
    keys = ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm_actor", "grad_norm_critic")
    assert {k: stats[k] for k in keys} == {k: ref[k] for k in keys}
    assert ref["entropy"] > 0.5  # two actions, near-uniform: not diluted towards 0
