"""Preparation phase, rewards, out-of-area penalty, preparation fraction, horizon (docs/hide-and-seek.md,
"Phases, reward, horizon")."""
import numpy as np
import pytest

from hs_helpers import POS, game, noop, polar, skip_prep
from zoo.plugins.envs.hide_and_seek.config import HideAndSeekConfig
from zoo.plugins.envs.hide_and_seek.zoo_env import make

# Quadrant slots: 0, 1 hiders; 2, 3 seekers. A seeker at (1, 3) looking along +x.
SEEKER = (1.0, 3.0, 0.0)
AWAY_SEEKER = (5.0, 1.0, -np.pi / 2)  # far away, facing the bottom outer wall


def reward_after_prep(**kw):
    g, _ = game(**kw)
    prep = skip_prep(g)
    assert len(prep) == 32 and all(np.array_equal(r, np.zeros(4, np.float32)) for r in prep)
    return g.step(noop(g))[1]


def test_hider_in_open_view_gives_minus_one():
    r = reward_after_prep(hiders=[(3.0, 3.0, 0.0), (1.0, 1.0, 0.0)], seekers=[SEEKER, AWAY_SEEKER])
    assert r.tolist() == [-1.0, -1.0, 1.0, 1.0]


def test_hider_behind_wall_gives_plus_one():
    wall = (2.0, 2.0, 2.0, 4.0, 0.5)  # a 0.5 m inner wall at x = 2 between them
    r = reward_after_prep(hiders=[(3.0, 3.0, 0.0), (1.0, 1.0, 0.0)], seekers=[SEEKER, AWAY_SEEKER], walls=[wall])
    assert r.tolist() == [1.0, 1.0, -1.0, -1.0]


@pytest.mark.parametrize("blocker", ["box", "ramp"])
def test_hider_behind_box_or_ramp_gives_plus_one(blocker):
    obj = {"boxes": [(2.0, 3.0, 0.0)]} if blocker == "box" else {"ramps": [(2.0, 3.0, 0.0)]}
    r = reward_after_prep(hiders=[(3.0, 3.0, 0.0), (1.0, 1.0, 0.0)], seekers=[SEEKER, AWAY_SEEKER], **obj)
    assert r.tolist() == [1.0, 1.0, -1.0, -1.0]


@pytest.mark.parametrize("deg, expected", [(70.0, 1.0), (65.0, -1.0), (-70.0, 1.0), (-65.0, -1.0)])
def test_cone_edge_is_at_67_5_degrees(deg, expected):
    hider = (*polar(1.0, 3.0, 1.5, deg), 0.0)
    r = reward_after_prep(hiders=[hider, (1.0, 1.0, 0.0)], seekers=[SEEKER, AWAY_SEEKER])
    assert r.tolist() == [expected, expected, -expected, -expected]


def test_seekers_are_frozen_and_rewards_zero_during_preparation():
    # a hider outside the area would get -10 after preparation; during it every reward is 0
    g, _ = game(hiders=[(6.5, 3.0, 0.0), (1.0, 1.0, 0.0)], seekers=[(2.0, 4.0, 0.3), (4.0, 2.0, 1.0)])
    start = g.world.qpos4[2:4].copy()
    rng = np.random.default_rng(0)
    for _ in range(32):
        act = rng.integers(0, [11, 11, 11, 2, 2], size=(4, 5))
        act[2:, :3] = POS  # seekers push as hard as they can
        act[2:, 3:] = 1
        _, r, _, _ = g.step(act)
        assert r.tolist() == [0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(g.world.qpos4[2:4, [0, 1, 3]], start[:, [0, 1, 3]], atol=1e-9)
    assert (g.grablock.held[2:] == -1).all() and (g.grablock.lock_team == -1).all()
    act[2:, :3] = POS
    g.step(act)  # after preparation seekers move
    assert np.abs(g.world.qpos4[2:4, 0] - start[:, 0]).min() > 0.05


def test_agent_outside_area_gets_minus_ten():
    r = reward_after_prep(hiders=[(6.5, 3.0, 0.0), (1.0, 1.0, 0.0)], seekers=[AWAY_SEEKER, (5.0, 5.0, 0.0)])
    assert r.tolist() == [-10.0, 1.0, -1.0, -1.0]


def test_quadrant_object_outside_area_gives_everyone_minus_ten():
    r = reward_after_prep(hiders=[(1.0, 5.0, 0.0), (1.0, 1.0, 0.0)], seekers=[AWAY_SEEKER, (5.0, 5.0, 0.0)],
                          boxes=[(3.0, 3.0, 0.0), (6.6, 1.0, 0.0)])
    assert r.tolist() == [-10.0] * 4


def test_full_area_is_minus_six_to_twelve_and_objects_are_not_penalised():
    kw = dict(seekers=[(5.0, 1.0, -np.pi / 2)], boxes=[(-7.0, 1.0, 0.0)], outer=False)
    g, _ = game("full", hiders=[(12.5, 3.0, 0.0), (-5.5, 3.0, 0.0)], **kw)
    skip_prep(g)
    r = g.step(noop(g))[1]
    # slots: hiders 0-2, seekers 3-5; hider 0 outside [-6, 12], hider 1 inside; empty slots get 0
    assert g.p.prep_steps == 96
    assert r.tolist() == [-10.0, 1.0, 0.0, -1.0, 0.0, 0.0]


def test_preparation_fraction_and_horizon():
    env = make(None, HideAndSeekConfig(), seed=0)
    obs, info = env.reset(seed=0)
    assert (obs["observation_self"][:, 9] == 0.0).all()
    act = np.full((4, 5), 5, np.int64)
    act[:, 3:] = 0
    for t in range(1, 81):
        obs, r, term, trunc, info = env.step(act)
        np.testing.assert_array_equal(obs["observation_self"][:, 9], np.float32(min(1.0, t / 32)))
        assert not term.any()
        assert trunc.tolist() == [t == 80] * 4
        assert ("stats" in info) == (t == 80)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(act)


def test_full_horizon_is_240():
    env = make("full", HideAndSeekConfig(), seed=0)
    _, info = env.reset(seed=0)
    act = np.zeros((6, 5), np.int64)
    act[:, :3] = 5
    for t in range(1, 241):
        obs, r, term, trunc, info = env.step(act)
        assert not term.any() and trunc.all() == (t == 240) and trunc.any() == (t == 240)
        assert r[~info["active"]].tolist() == [0.0] * int((~info["active"]).sum())
        if t <= 96:
            assert (r == 0).all()
    assert obs["observation_self"][info["active"], 9].tolist() == [1.0] * int(info["active"].sum())


def test_h_rule_matches_the_seekers_policy_masks():
    env = make(None, HideAndSeekConfig(), seed=0)
    rng = np.random.default_rng(1)
    checked = 0
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        for t in range(1, 81):
            obs, r, _, _, _ = env.step(rng.integers(0, [11, 11, 11, 2, 2], size=(4, 5)))
            if t <= 32 or (r == -10).any():
                continue
            # seeker slots 2, 3: their "other agents" are (0, 1, other seeker); hiders come first
            h = -1.0 if obs["mask_aa_obs"][2:, :2].any() else 1.0
            assert r.tolist() == [h, h, -h, -h]
            checked += 1
    assert checked > 100
