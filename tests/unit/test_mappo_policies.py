"""MAPPO's policies: the hide-and-seek entity policy (shapes, masking, finiteness) and the MLP/GRU policy."""
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.mappo.entity import EntityPolicy, is_entity_spec
from zoo.plugins.algorithms.mappo.mappo import MAPPO, MAPPOConfig, chunk_time
from zoo.plugins.algorithms.mappo.networks import MLPPolicy, ObsNormalizer

A, B_, R = 4, 2, 1  # quadrant: 2 hiders + 2 seekers, 2 boxes, 1 ramp


def hns_spec(agents=A, boxes=B_, ramps=R):
    """The observation layout of plugins/envs/hide_and_seek/observations.py (quadrant widths)."""
    inf = np.inf
    box = lambda *shape: spaces.Box(-inf, inf, shape, np.float32)  # noqa: E731
    mask = lambda *shape: spaces.Box(0.0, 1.0, shape, np.float32)  # noqa: E731
    obs = {
        "observation_self": box(10), "agent_qpos_qvel": box(agents - 1, 10), "box_obs": box(boxes, 12),
        "ramp_obs": box(ramps, 9), "lidar": spaces.Box(0.0, 6.0, (30,), np.float32),
        "mask_aa_obs": mask(agents - 1), "mask_ab_obs": mask(boxes), "mask_ar_obs": mask(ramps),
        "mask_aa_obs_spoof": mask(agents - 1), "mask_ab_obs_spoof": mask(boxes), "mask_ar_obs_spoof": mask(ramps),
    }
    names = tuple(f"hider_{i}" for i in range(agents // 2)) + tuple(f"seeker_{i}" for i in range(agents - agents // 2))
    return EnvSpec("hide-and-seek:quadrant", names, obs, spaces.MultiDiscrete([11, 11, 11, 2, 2]))


def hns_obs(spec, lead=(5,), seed=0, visible=0.5):
    """Random observations ``[*lead, ...]``: every entity exists, each visible with probability ``visible``."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, s in spec.observation_space.items():
        if k.endswith("_spoof"):
            out[k] = np.ones((*lead, *s.shape), np.float32)
        elif k.startswith("mask"):
            out[k] = (rng.random((*lead, *s.shape)) < visible).astype(np.float32)
        else:
            out[k] = rng.standard_normal((*lead, *s.shape)).astype(np.float32)
    return {k: torch.as_tensor(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return EntityPolicy(hns_spec())


def evaluate_one_step(policy, obs, action):
    """logp [N] and normalised value [N] of ``action`` from zero state, through ``evaluate``."""
    n = action.shape[0]
    ev = policy.evaluate({k: v[None] for k, v in obs.items()}, action[None], torch.zeros(n, *policy.state_shape),
                         torch.zeros(1, n, dtype=torch.bool))
    return ev["logp"][0], ev["value"][0]


# -- (d) the entity policy -------------------------------------------------------------------

def test_spec_detection_picks_the_entity_policy():
    spec = hns_spec()
    assert is_entity_spec(spec)
    assert isinstance(MAPPO.build_policy(MAPPOConfig(), spec), EntityPolicy)
    vec = EnvSpec("v", ("a",), {"obs": spaces.Box(-1, 1, (3,), np.float32)}, spaces.Discrete(2))
    assert not is_entity_spec(vec) and isinstance(MAPPO.build_policy(MAPPOConfig(), vec), MLPPolicy)
    with pytest.raises(ValueError, match="entity observation keys"):
        MAPPO.build_policy(MAPPOConfig(policy="entity"), vec)


def test_entity_policy_shapes(policy):
    obs = hns_obs(hns_spec(), (5,))
    out = policy.act(obs)
    assert policy.state_shape == (4, 256)  # actor h, c; critic h, c
    assert out["action"].shape == (5, 5) and out["action"].dtype == torch.int64
    nvec = torch.tensor([11, 11, 11, 2, 2])
    assert bool(((out["action"] >= 0) & (out["action"] < nvec)).all())
    assert out["logp"].shape == (5,) and out["logp"].dtype == torch.float32
    assert out["value"].shape == (5,) and out["state"].shape == (5, 4, 256) and out["state"].dtype == torch.float32
    seq = hns_obs(hns_spec(), (3, 5))
    ev = policy.evaluate(seq, torch.zeros(3, 5, 5, dtype=torch.int64), torch.zeros(5, 4, 256),
                         torch.zeros(3, 5, dtype=torch.bool))
    assert ev["logp"].shape == ev["entropy"].shape == ev["value"].shape == (3, 5)
    assert ev["fed"].shape == ev["after"].shape == (3, 5, 4, 256)
    # 5 independent categoricals: entropy at most 3 ln 11 + 2 ln 2
    assert bool((ev["entropy"] <= 3 * math.log(11) + 2 * math.log(2) + 1e-5).all())


def test_state_is_carried_by_act(policy):
    obs = hns_obs(hns_spec(), (2,))
    first = policy.act(obs, deterministic=True)
    again = policy.act(obs, first["state"], deterministic=True)
    assert not torch.equal(first["state"], again["state"])
    zero = policy.act(obs, torch.zeros(2, 4, 256), deterministic=True)
    assert torch.equal(zero["state"], first["state"])  # None = zeros


def test_masked_out_entity_changes_nothing_for_the_actor_but_the_critic_sees_it(policy):
    spec = hns_spec()
    obs = hns_obs(spec, (6,), seed=1)
    obs["mask_ab_obs"][:, 0] = 0.0       # box 0 not visible to anyone
    obs["mask_aa_obs"][:, 1] = 0.0       # nor other agent 1
    action = policy.act(obs)["action"]
    logp, value = evaluate_one_step(policy, obs, action)
    changed = dict(obs)
    changed["box_obs"] = obs["box_obs"].clone()
    changed["box_obs"][:, 0] = 123.0
    changed["agent_qpos_qvel"] = obs["agent_qpos_qvel"].clone()
    changed["agent_qpos_qvel"][:, 1] = -77.0
    logp2, value2 = evaluate_one_step(policy, changed, action)
    assert torch.equal(logp, logp2)
    assert not torch.equal(value, value2)  # the critic's existence masks include box 0
    gone = dict(changed)
    for key in ("mask_ab_obs_spoof", "mask_aa_obs_spoof"):
        gone[key] = obs[key].clone()
    gone["mask_ab_obs_spoof"][:, 0] = 0.0
    gone["mask_aa_obs_spoof"][:, 1] = 0.0
    base = dict(obs)
    base["mask_ab_obs_spoof"], base["mask_aa_obs_spoof"] = gone["mask_ab_obs_spoof"], gone["mask_aa_obs_spoof"]
    _, v_base = evaluate_one_step(policy, base, action)
    _, v_gone = evaluate_one_step(policy, gone, action)
    assert torch.equal(v_base, v_gone)   # not existing for the critic either: no influence


def test_everything_masked_gives_finite_outputs(policy):
    obs = hns_obs(hns_spec(), (4,), visible=0.0)
    for k in obs:
        if k.startswith("mask"):
            obs[k] = torch.zeros_like(obs[k])
    out = policy.act(obs)
    for k, v in out.items():
        assert bool(torch.isfinite(v.float()).all()), k
    logp, value = evaluate_one_step(policy, obs, out["action"])
    assert bool(torch.isfinite(logp).all() and torch.isfinite(value).all())
    seq = {k: v[None].expand(2, *v.shape) for k, v in obs.items()}
    ev = policy.evaluate(seq, out["action"][None].expand(2, 4, 5), torch.zeros(4, 4, 256),
                         torch.zeros(2, 4, dtype=torch.bool))
    (ev["logp"].sum() + ev["value"].sum() + ev["entropy"].sum()).backward()
    for name, p in policy.named_parameters():
        assert p.grad is None or bool(torch.isfinite(p.grad).all()), name
    policy.zero_grad()


def test_observation_statistics_count_existing_entities_only():
    norm = ObsNormalizer({"box_obs": ((2,), "exists")}, beta=0.0)
    obs = {"box_obs": torch.tensor([[[1.0, 2.0], [100.0, 100.0]], [[3.0, 4.0], [100.0, 100.0]]]),
           "exists": torch.tensor([[1.0, 0.0], [1.0, 0.0]])}
    norm.update(obs)
    mu, var = norm.stats["box_obs"].mean_var()
    assert mu.tolist() == [2.0, 3.0] and var.tolist() == [1.0, 1.0]
    assert norm(obs)["box_obs"][0, 0].tolist() == [-1.0, -1.0]
    assert norm(obs)["box_obs"][0, 1].tolist() == [10.0, 10.0]  # (100 - 2) / 1 clipped to 10


# -- (e) an update on a tiny hide-and-seek-shaped batch ----------------------------------------

def hns_batch(spec, T, B, seed=0):
    rng = np.random.default_rng(seed)
    lead = (T + 1, B)
    obs = {k: v.numpy() for k, v in hns_obs(spec, lead, seed).items()}
    active = np.ones((T, B), bool)
    active[:, B - 1] = False                         # a padded slot
    on_reset = np.zeros((T, B), bool)
    on_reset[0] = on_reset[7] = True                # an episode ends after step 6 (truncated)
    truncated = np.zeros((T, B), bool)
    truncated[6, : B - 1] = True
    final_index = np.array([[6, b] for b in range(B - 1)], np.int64)
    final_obs = {k: v[7, : B - 1] * 0.5 for k, v in obs.items()}
    return {
        "obs": obs, "action": rng.integers(0, 2, (T, B, 5)),
        "reward": rng.choice([-1.0, 1.0], (T, B)).astype(np.float32),
        "terminated": np.zeros((T, B), bool), "truncated": truncated, "active": active, "on_reset": on_reset,
        "policy_version": np.zeros((T, B), np.int64), "logp": np.full((T, B), -8.0, np.float32),
        "value": rng.standard_normal((T, B)).astype(np.float32),
        # stored states: zeros where an episode starts (the policy worker resets there)
        "rnn_state": np.where(on_reset[..., None, None], 0.0, rng.standard_normal((T, B, 4, 16))).astype(np.float32),
        "final_obs": final_obs, "final_index": final_index,
    }


def test_update_on_a_tiny_hide_and_seek_batch_is_finite():
    spec = hns_spec()
    cfg = MAPPOConfig(policy="entity", hidden=16,
                      chunk_length=4, max_reuse=2, epochs=1, minibatches=2, value_norm="popart", gamma=0.998)
    algo = MAPPO(cfg, spec, 0)
    before = {k: v.clone() for k, v in algo.policy.state_dict().items()}
    for seed in range(2):
        stats = algo.update(hns_batch(spec, T=10, B=4, seed=seed))  # 10 = 4 + 4 + 2: a padded chunk
        for k, v in stats.items():
            assert math.isfinite(v), (k, v)
    assert stats["kept_batches"] == 2.0 and stats["agent_steps"] == 30.0
    after = algo.policy.state_dict()
    for k, v in after.items():
        assert bool(torch.isfinite(v).all()), k
    assert any(not torch.equal(before[k], after[k]) for k in after if "linear" in k)
    assert algo.policy.obs_norm.stats["box_obs"].d.item() > 0  # observation statistics were updated


def test_hide_and_seek_presets_are_the_reference_values():
    p = MAPPO.presets(hns_spec())
    expected = {"algo.gamma": 0.998, "algo.gae_lambda": 0.95, "algo.clip_coef": 0.2, "algo.ent_coef": 0.01,
                "algo.lr": 3e-4, "algo.adam_eps": 1e-5, "algo.vf_coef": 0.5, "algo.max_grad_norm": 5.0,
                "algo.chunk_length": 10, "sample_length": 160, "algo.max_reuse": 4, "algo.epochs": 1,
                "algo.policy": "entity"}
    assert {k: p[k] for k in expected} == expected
    assert p["actors.count"] >= 1 and p["trainer.batch_samples"] >= 4 and p["trainer.max_policy_lag"] >= 1
    text = MAPPO.explain_presets(hns_spec())
    assert "CPU cores" in text and "0.998" in text


# -- the MLP policy ----------------------------------------------------------------------------

def test_mlp_policy_outputs_and_feed_forward_state():
    spec = EnvSpec("v", ("a", "b"), {"obs": spaces.Box(-1, 1, (3,), np.float32)}, spaces.Discrete(5))
    ff = MLPPolicy(spec)
    out = ff.act({"obs": torch.zeros(2, 3)})
    assert ff.state_shape is None and set(out) == {"action", "logp", "value"}
    gru = MLPPolicy(spec, recurrent=True)
    out = gru.act({"obs": torch.zeros(2, 3)})
    assert gru.state_shape == (2, 64) and out["state"].shape == (2, 2, 64)
    ev = gru.evaluate({"obs": chunk_time(torch.zeros(5, 2, 3), 2)}, chunk_time(torch.zeros(5, 2, dtype=torch.int64), 2),
                      torch.zeros(6, 2, 64), chunk_time(torch.zeros(5, 2, dtype=torch.bool), 2))
    assert ev["logp"].shape == (2, 6)


def test_the_real_hide_and_seek_env_gets_the_entity_policy():
    pytest.importorskip("mujoco")
    from zoo.plugins.envs.hide_and_seek.zoo_env import make

    env = make(None, None, 0)
    try:
        obs, info = env.reset(seed=0)
        spec = env.spec
    finally:
        env.close()
    assert is_entity_spec(spec)
    torch.manual_seed(0)
    policy = MAPPO.build_policy(MAPPOConfig(hidden=16), spec)
    assert isinstance(policy, EntityPolicy)
    out = policy.act({k: torch.as_tensor(v) for k, v in obs.items()})
    assert out["action"].shape == (spec.num_agents, 5)
    assert all(bool(torch.isfinite(v.float()).all()) for v in out.values())
