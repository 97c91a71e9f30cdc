"""PPO plugin: lazy registration, networks, presets and the update, with hand-computed values."""
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.ppo import ppo as ppo_module
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig, minibatch_indices, normalize_advantages

LN2 = math.log(2.0)


def vector_spec(action_space=None):
    obs = {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)}
    return EnvSpec("Toy-v0", ("agent_0",), obs, action_space or spaces.Discrete(2))


def image_spec():
    return EnvSpec("ToyAtari-v0", ("agent_0",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)}, spaces.Discrete(6))


def make_batch(T, B, reward, value, terminated, logp, obs=None, active=None):
    rng = np.random.default_rng(0)
    return {
        "obs": {"obs": rng.standard_normal((T + 1, B, 4)).astype(np.float32) if obs is None else obs},
        "action": np.zeros((T, B), np.int64),
        "reward": np.asarray(reward, np.float32).reshape(T, B),
        "terminated": np.asarray(terminated, bool).reshape(T, B),
        "truncated": np.zeros((T, B), bool),
        "active": np.ones((T, B), bool) if active is None else np.asarray(active, bool).reshape(T, B),
        "policy_version": np.zeros((T, B), np.int64),
        "logp": np.asarray(logp, np.float32).reshape(T, B),
        "value": np.asarray(value, np.float32).reshape(T, B),
        "final_obs": {"obs": np.zeros((0, 4), np.float32)},
        "final_index": np.zeros((0, 2), np.int64),
    }


def flat_policy(algo, value_bias):
    """Zero the actor and critic output layers: logits 0 (uniform, logp = -ln 2), V = value_bias."""
    with torch.no_grad():
        for head in (algo.policy.actor[-1], algo.policy.critic[-1]):
            head.weight.zero_()
            head.bias.zero_()
        algo.policy.critic[-1].bias.fill_(value_bias)


# -- plugin ----------------------------------------------------------------------------

def test_plugin_import_does_not_import_torch():
    code = "import sys, zoo.plugins.algorithms.ppo.plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_registered_through_the_plugin_host():
    from zoo.core.plugins import PluginHost

    component = PluginHost(entry_points=False).registry.get("algorithm", "ppo")
    assert component.load() is PPO
    assert component.option("config") is PPOConfig


# -- helpers ---------------------------------------------------------------------------

def test_minibatch_sizes_for_five_samples_in_three_parts():
    parts = minibatch_indices(5, 3, np.random.default_rng(0))
    assert [len(p) for p in parts] == [2, 2, 1]
    assert sorted(np.concatenate(parts).tolist()) == [0, 1, 2, 3, 4]


def test_normalize_advantages_exact():
    assert normalize_advantages(torch.tensor([3.0])).tolist() == [0.0]
    # mean 2, unbiased std sqrt(2): (1 - 2) / sqrt(2) = -0.70710678
    assert normalize_advantages(torch.tensor([1.0, 3.0], dtype=torch.float64)).tolist() == pytest.approx(
        [-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-7)
    assert normalize_advantages(torch.tensor([3.0, 3.0])).tolist() == [0.0, 0.0]


def test_config_rejects_bad_values_naming_the_field():
    with pytest.raises(ValueError, match=r"^algo.minibatches must be >= 1, got 0$"):
        PPOConfig(minibatches=0)
    with pytest.raises(ValueError, match="algo.anneal_lr_steps"):
        PPOConfig(anneal_lr=True, anneal_lr_steps=-1)


# -- networks --------------------------------------------------------------------------

@pytest.mark.parametrize("space, shape, dtype", [
    (spaces.Discrete(3, start=1), (5,), torch.int64),
    (spaces.MultiDiscrete([3, 2, 4]), (5, 3), torch.int64),
    (spaces.Box(-1, 1, (2,), np.float32), (5, 2), torch.float32),
])
def test_act_and_evaluate_agree(space, shape, dtype):
    policy = PPO.build_policy(PPOConfig(), vector_spec(space))
    obs = {"obs": torch.randn(5, 4)}
    out = policy.act(obs)
    assert out["action"].shape == shape and out["action"].dtype == dtype
    assert out["logp"].shape == (5,) and out["logp"].dtype == torch.float32
    assert out["value"].shape == (5,) and out["value"].dtype == torch.float32
    logp, entropy, value = policy.evaluate(obs, out["action"])
    torch.testing.assert_close(logp, out["logp"])
    torch.testing.assert_close(value, out["value"])
    assert entropy.shape == (5,)
    if isinstance(space, spaces.Discrete):
        assert out["action"].min() >= 1  # start offset applied
        assert policy.act(obs, deterministic=True)["action"].tolist() == (policy._forward(obs)[0].argmax(-1) + 1).tolist()


def test_nature_cnn_on_uint8_frames():
    policy = PPO.build_policy(PPOConfig(), image_spec())
    assert policy.encoder.fc[0].in_features == 64 * 7 * 7
    out = policy.act({"obs": torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)})
    assert out["action"].shape == (2,) and out["value"].shape == (2,)


# -- presets ---------------------------------------------------------------------------

def test_presets():
    vec = PPO.presets(vector_spec())
    assert vec["sample_length"] == 32 and vec["trainer.batch_samples"] == 8
    assert (vec["algo.gamma"], vec["algo.gae_lambda"], vec["algo.epochs"], vec["algo.minibatches"]) == (0.98, 0.8, 20, 1)
    assert (vec["algo.lr"], vec["algo.anneal_lr"], vec["algo.anneal_lr_steps"]) == (1e-3, True, 0)
    assert vec["actors.count"] * vec["actors.envs_per_actor"] == 8
    img = PPO.presets(image_spec())
    assert img["sample_length"] == 128 and img["trainer.batch_samples"] == 8
    assert (img["algo.lr"], img["algo.clip_coef"], img["algo.ent_coef"], img["algo.minibatches"]) == (2.5e-4, 0.1, 0.01, 4)
    PPOConfig(**{k[5:]: v for k, v in {**vec, **img}.items() if k.startswith("algo.")})  # valid fields


# -- the update ------------------------------------------------------------------------

def two_step_batch(B=1):
    # A -> B terminated after B, rewards 0 and 1, recorded (behaviour) values 0.3, 0.8 (not used:
    # every value is the current network's, 0.76 below), logp -ln 2.
    # gamma 0.95, lambda 0: targets 0 + 0.95 * 0.76 = 0.722 and 1.0; advantages -0.038, 0.24.
    def cols(*xs):
        return np.repeat(np.array(xs).reshape(2, 1), B, axis=1)

    return make_batch(2, B, cols(0.0, 1.0), cols(0.3, 0.8), cols(False, True), cols(-LN2, -LN2))


def two_step_algo(**kw):
    cfg = PPOConfig(**{"lr": 0.1, "gamma": 0.95, "gae_lambda": 0.0, "epochs": 1, "minibatches": 1, "clip_coef": 0.2,
                       **kw})
    algo = PPO(cfg, vector_spec(), seed=0)
    flat_policy(algo, value_bias=0.76)
    return algo


def test_update_stats_by_hand_clipped_value_loss():
    stats = two_step_algo(clip_vloss=True).update(two_step_batch())
    # ratio = 1 (behaviour logp = current logp = -ln 2): KL 0, nothing clipped, and the
    # normalised advantages (+-0.7071) average to 0.
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    assert stats["clipfrac"] == 0.0
    assert stats["pg_loss"] == pytest.approx(0.0, abs=1e-6)
    assert stats["entropy"] == pytest.approx(LN2, rel=1e-6)
    # V = 0.76 for both, and the clipping is around the values before the update (0.76, not the
    # recorded 0.3, 0.8, which would give clipped V = (0.5, 0.76) and v_loss 0.5 * (0.0676 + 0.0576) / 2):
    # v_loss = 0.5 * ((0.76 - 0.722)^2 + (0.76 - 1)^2) / 2 = 0.5 * (0.001444 + 0.0576) / 2 = 0.014761
    assert stats["v_loss"] == pytest.approx(0.014761, rel=1e-5)
    # targets (0.722, 1.0) vs values (0.76, 0.76): the residuals vary exactly as the targets do: 0
    assert stats["explained_variance"] == pytest.approx(0.0, abs=1e-5)
    assert stats["agent_steps"] == 2.0 and stats["lr"] == 0.1


def test_update_value_bias_step_by_hand():
    algo = two_step_algo(clip_vloss=False, max_grad_norm=0.0)
    stats = algo.update(two_step_batch())
    # v_loss = 0.5 * ((0.76 - 0.722)^2 + (0.76 - 1)^2) / 2 = 0.014761
    assert stats["v_loss"] == pytest.approx(0.014761, rel=1e-5)
    # d(vf_coef * v_loss)/d(bias) = 0.5 * mean(V - target) = 0.5 * (0.038 - 0.24) / 2 = -0.0505;
    # Adam's first step moves by lr * g / (|g| + eps) against the gradient:
    # 0.76 + 0.1 * 0.0505 / (0.0505 + 1e-5)
    expected = 0.76 + 0.1 * 0.0505 / (0.0505 + 1e-5)
    assert algo.policy.critic[-1].bias.item() == pytest.approx(expected, rel=1e-6)


def test_inactive_steps_change_nothing():
    ref = two_step_algo(clip_vloss=True)
    ref_stats = ref.update(two_step_batch())
    # Same active column plus a fully inactive column of garbage (nan everywhere).
    batch = two_step_batch(B=2)
    batch["obs"]["obs"][:, 0] = two_step_batch()["obs"]["obs"][:, 0]
    for key in ("reward", "value", "logp"):
        batch[key][:, 1] = np.nan
    batch["obs"]["obs"][:, 1] = np.nan
    batch["terminated"][:, 1] = False
    batch["active"][:, 1] = False
    algo = two_step_algo(clip_vloss=True)
    stats = algo.update(batch)
    assert stats == pytest.approx(ref_stats, rel=1e-6, abs=1e-9)
    for p, q in zip(algo.policy.parameters(), ref.policy.parameters()):
        torch.testing.assert_close(p, q)


def test_data_parallel_empty_minibatches_do_not_dilute_the_logged_losses(monkeypatch):
    # A data-parallel rank (trainer.count > 1) with 2 active steps and minibatches=4 takes
    # 4 optimiser steps per epoch, 2 of them on empty parts (the other ranks' gradients).
    # Its logged means are over the 2 steps on its own data: exactly the stats of one trainer
    # with minibatches=2 (the same permutation cut into [a], [b]; empty parts come last).
    ref = two_step_algo(clip_vloss=False, norm_adv=False, minibatches=2).update(two_step_batch())
    monkeypatch.setattr(ppo_module.zdist, "world_size", lambda: 2)  # no peers: reduce_gradients is a no-op
    stats = two_step_algo(clip_vloss=False, norm_adv=False, minibatches=4).update(two_step_batch())
    keys = ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")
    assert {k: stats[k] for k in keys} == {k: ref[k] for k in keys}
    assert stats["clipfrac"] == 0.5  # one of the two steps clipped (1/4 when divided by all 4 steps)


def test_missing_logp_is_named():
    batch = two_step_batch()
    del batch["logp"]
    with pytest.raises(KeyError, match="missing 'logp'"):
        two_step_algo().update(batch)


def test_single_sample_minibatch_stays_finite(monkeypatch):
    # 5 samples (T=1, B=5), every step terminated with reward 3 and value 0 (the network's):
    # every advantage is exactly 3.0. 3 minibatches of 5 -> sizes 2, 2, 1; the last holds
    # one sample with advantage 3.0, normalised (centred only) to 0.
    seen = []

    def recording(adv):
        out = normalize_advantages(adv)
        seen.append((adv.tolist(), out.tolist()))
        return out

    monkeypatch.setattr(ppo_module, "normalize_advantages", recording)
    algo = PPO(PPOConfig(epochs=1, minibatches=3), vector_spec(), seed=0)
    flat_policy(algo, value_bias=0.0)
    logp = algo.policy.act({"obs": torch.zeros(5, 4)})["logp"].numpy()
    batch = make_batch(1, 5, [3.0] * 5, [0.0] * 5, [True] * 5, logp)
    stats = algo.update(batch)
    assert [len(a) for a, _ in seen] == [2, 2, 1]
    assert seen[-1] == ([3.0], [0.0])
    assert all(out == [0.0] * len(out) for _, out in seen)  # equal advantages normalise to 0
    assert stats["pg_loss"] == 0.0
    assert all(math.isfinite(stats[k]) for k in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm"))
    assert all(torch.isfinite(p).all() for p in algo.policy.parameters())


def test_tiny_random_batch_finite_stats_and_checkpoint_roundtrip():
    spec = vector_spec(spaces.Box(-1, 1, (2,), np.float32))
    algo = PPO(PPOConfig(epochs=2, minibatches=2, anneal_lr=True, anneal_lr_steps=100), spec, seed=3)
    T, B = 4, 3
    obs = np.random.default_rng(1).standard_normal((T + 1, B, 4)).astype(np.float32)
    out = algo.policy.act({"obs": torch.as_tensor(obs[:T].reshape(T * B, 4))})
    batch = make_batch(T, B, np.arange(T * B) % 3, out["value"].numpy(), np.zeros(T * B), out["logp"].numpy(), obs=obs)
    batch["action"] = out["action"].numpy().reshape(T, B, 2)
    batch["truncated"][1, 2] = True
    batch["final_obs"] = {"obs": np.ones((1, 4), np.float32)}
    batch["final_index"] = np.array([[1, 2]])
    stats = algo.update(batch)
    assert set(ppo_module.STATS) <= set(stats)
    assert all(math.isfinite(v) for v in stats.values())
    assert stats["lr"] == algo.config.lr  # first update: nothing trained on yet
    assert algo.current_lr() == pytest.approx(algo.config.lr * (1 - 12 / 100))

    other = PPO(algo.config, spec, seed=99)
    other.load_state_dict(algo.state_dict())
    for p, q in zip(other.policy.parameters(), algo.policy.parameters()):
        torch.testing.assert_close(p, q)
    assert other.agent_steps == 12 and other.updates == 1


def test_lr_anneals_over_the_budget_fraction_set_by_the_trainer():
    spec = EnvSpec("t", ("a",), {"obs": spaces.Box(-1, 1, (3,), np.float32)}, spaces.Discrete(2))
    algo = PPO(PPOConfig(lr=1e-3, anneal_lr=True, anneal_lr_steps=0), spec, seed=0)
    assert algo.current_lr() == pytest.approx(1e-3)
    algo.progress = 0.25
    assert algo.current_lr() == pytest.approx(7.5e-4)
    algo.progress = 1.0
    assert algo.current_lr() == 0.0


def test_out_of_range_hyperparameters_name_the_field_and_the_range():
    with pytest.raises(ValueError) as info:
        PPOConfig(gamma=1.5)
    assert str(info.value) == "algo.gamma must be in [0, 1], got 1.5"
    with pytest.raises(ValueError) as info:
        PPOConfig(lr=-1.0)
    assert str(info.value) == "algo.lr must be finite and > 0, got -1.0"
    for lr in (float("inf"), float("nan")):  # > 0 alone would let inf through (and nan compares False)
        with pytest.raises(ValueError) as info:
            PPOConfig(lr=lr)
        assert str(info.value) == f"algo.lr must be finite and > 0, got {lr!r}"


def test_every_gae_value_comes_from_the_current_network_not_the_recorded_one():
    """The acting network recorded V = 1 everywhere; the trainer's network says 5. 3 steps,
    rewards 1, 0, 2, truncated at t = 1 (final observation), gamma = lambda = 0.5, all values 5:
    A_2 = 2 + 0.5 * 5 - 5 = -0.5; A_1 = 0 + 0.5 * V(final) 5 - 5 = -2.5 (episode cut);
    A_0 = (1 + 0.5 * 5 - 5) + 0.25 * A_1 = -2.125; G = A + 5. Mixing the recorded rows with the
    trainer's bootstrap and final values would give A = 0.875, 1.5, 3.5."""
    spec = EnvSpec("t", ("a",), {"obs": spaces.Box(-1, 1, (4,), np.float32)}, spaces.Discrete(2))
    algo = PPO(PPOConfig(gamma=0.5, gae_lambda=0.5), spec, seed=0)
    flat_policy(algo, 5.0)
    batch = make_batch(3, 1, [1.0, 0.0, 2.0], [1.0, 1.0, 1.0], [False] * 3, [math.log(0.5)] * 3)
    batch["truncated"][1, 0] = True
    batch["final_obs"] = {"obs": np.ones((1, 4), np.float32)}
    batch["final_index"] = np.array([[1, 0]], np.int64)
    values, adv, ret, trained = algo._targets(batch, algo._obs(batch["obs"]))
    assert trained[:, 0].tolist() == [True, True, True]
    assert values[:, 0].tolist() == [5.0, 5.0, 5.0]
    assert adv[:, 0].tolist() == [-2.125, -2.5, -0.5]
    assert ret[:, 0].tolist() == [2.875, 2.5, 4.5]


# -- algo.skip_forced -------------------------------------------------------------------

def masked_spec():
    obs = {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32),
           "zoo:action_mask": spaces.Box(0, 1, (2,), bool)}
    return EnvSpec("ToyTurns-v0", ("agent_0",), obs, spaces.Discrete(2))


def test_skip_forced_trains_the_decision_on_the_forced_rows_reward():
    # row 0: a decision (both actions legal); row 1: forced (action 0 only), where the opponent's
    # move ends the game with reward 1 to this agent. gamma 0.95, lambda 0, V = 0.76 everywhere.
    batch = two_step_batch()
    batch["obs"]["zoo:action_mask"] = np.array([[[True, True]], [[True, False]], [[True, True]]])
    batch["logp"][:] = -LN2
    batch["logp"][1] = 0.0  # one legal action: probability 1
    cfg = dict(lr=0.1, gamma=0.95, gae_lambda=0.0, epochs=1, minibatches=1, clip_coef=0.2, clip_vloss=False)

    def run(skip):
        algo = PPO(PPOConfig(**cfg, skip_forced=skip), masked_spec(), seed=0)
        flat_policy(algo, value_bias=0.76)
        return algo.update(batch)

    # the decision's target: 0 + 0.95 * 1 (the forced row's reward, one step later) = 0.95;
    # v_loss = 0.5 * (0.76 - 0.95)^2 = 0.01805, one agent step
    stats = run(True)
    assert stats["agent_steps"] == 1.0
    assert stats["v_loss"] == pytest.approx(0.5 * 0.19 ** 2, rel=1e-5)
    # without it both rows train: targets 0.95 * 0.76 = 0.722 and 1.0 (test_update_stats_by_hand...)
    stats = run(False)
    assert stats["agent_steps"] == 2.0
    assert stats["v_loss"] == pytest.approx(0.014761, rel=1e-5)


def test_skip_forced_is_refused_before_the_run_without_action_masks():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match=r"^algo.skip_forced=true needs action masks, and Toy-v0's observations "
                                         r"have no 'zoo:action_mask' entry \(keys: obs\); leave it out$"):
        PPOConfig(skip_forced=True).check_experiment(SimpleNamespace(spec=vector_spec()))
    PPOConfig(skip_forced=True).check_experiment(SimpleNamespace(spec=masked_spec()))  # accepted
    PPOConfig().check_experiment(SimpleNamespace(spec=vector_spec()))
