"""Lidar and sight (docs/hide-and-seek.md, "Vision and lidar"): values worked out from the placements by hand."""
import math

import numpy as np
import pytest

from hs_helpers import game

# Outer walls are 0.1 m thick on x, y in {0, 6}: their inner faces are at 0.05 and 5.95.


def lidar_of(obs, slot=0):
    return obs["lidar"][slot].astype(np.float64)


def test_lidar_against_outer_walls():
    _, obs = game(hiders=[(1.0, 1.0, 0.7)], seekers=[(4.0, 4.0, 0.0)])
    lid = lidar_of(obs)
    assert lid[0] == pytest.approx(4.95, abs=1e-5)     # 0 deg: wall face at x = 5.95
    assert lid[15] == pytest.approx(0.95, abs=1e-5)    # 180 deg: wall face at x = 0.05
    assert lid[7] == pytest.approx(4.95 / math.sin(math.radians(84)), abs=1e-5)  # 84 deg: top wall
    assert lid[20] == pytest.approx(0.95 / math.sin(math.radians(60)), abs=1e-5)  # 240 deg: bottom wall


def test_lidar_misses_return_exactly_six_and_values_lie_in_range():
    # no walls at all; the only other body is the seeker sphere 2 m away along +x, which
    # ray 0 hits at 2 - 0.15 m and ray 1 (12 deg) passes 2 sin(12 deg) = 0.42 m from
    _, obs = game("full", hiders=[(3.0, 3.0, 0.0)], seekers=[(5.0, 3.0, 0.0)], outer=False)
    lid = lidar_of(obs)
    assert lid[0] == pytest.approx(1.85, abs=1e-5)
    assert lid[1:].tolist() == [6.0] * 29
    assert (lid > 0).all() and (lid <= 6).all()


@pytest.mark.parametrize("kind, expected", [
    ("wall", 0.95),          # inner wall on x = 2: face at 1.95
    ("box", 0.75),           # cube centred at x = 2: face at 1.75
    ("ramp_low", 0.90),      # ramp rising towards +x from x = 1.75: slope at height 0.15 at x = 1.9
    ("ramp_high", 0.75),     # ramp rising towards -x: vertical face at x = 1.75
])
def test_walls_boxes_ramps_block_lidar(kind, expected):
    kw = {"wall": dict(walls=[(2.0, 0.0, 2.0, 2.0, 0.5)]), "box": dict(boxes=[(2.0, 1.0, 0.0)]),
          "ramp_low": dict(ramps=[(2.0, 1.0, 0.0)]), "ramp_high": dict(ramps=[(2.0, 1.0, math.pi)])}[kind]
    _, obs = game(hiders=[(1.0, 1.0, 0.0)], seekers=[(4.0, 4.0, 0.0)], **kw)
    assert lidar_of(obs)[0] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("kw, seen", [
    ({}, True),
    ({"walls": [(2.0, 2.0, 2.0, 4.0, 0.5)]}, False),
    ({"boxes": [(2.0, 3.0, 0.0)]}, False),
    ({"ramps": [(2.0, 3.0, 0.0)]}, False),
])
def test_walls_boxes_ramps_block_sight(kw, seen):
    # hider 0 at (1, 3) looks along +x at seeker 0 at (3, 3)
    _, obs = game(hiders=[(1.0, 3.0, 0.0)], seekers=[(3.0, 3.0, math.pi)], **kw)
    # hider slot 0: others are (hider_1 [absent], seeker_0, seeker_1 [absent])
    assert obs["mask_aa_obs"][0].tolist() == [0.0, float(seen), 0.0]
    assert obs["mask_aa_obs"][2].tolist() == [float(seen), 0.0, 0.0]
    assert obs["mask_aa_obs_spoof"][0].tolist() == [0.0, 1.0, 0.0]


def test_boxes_and_ramps_are_seen_through_the_cone_and_hide_each_other():
    # box 0 straight ahead, box 1 behind box 0, ramp 0 outside the cone (90 degrees)
    _, obs = game(hiders=[(1.0, 3.0, 0.0)], seekers=[(5.0, 1.0, 0.0)],
                  boxes=[(2.0, 3.0, 0.0), (3.0, 3.0, 0.0)], ramps=[(1.0, 4.5, 0.0)])
    assert obs["mask_ab_obs"][0].tolist() == [1.0, 0.0]
    assert obs["mask_ar_obs"][0].tolist() == [0.0]
    assert obs["mask_ab_obs_spoof"][0].tolist() == [1.0, 1.0]
    assert obs["mask_ar_obs_spoof"][0].tolist() == [1.0]


def test_observation_features_of_a_scripted_placement():
    g, obs = game(hiders=[(1.0, 3.0, 0.5)], seekers=[(5.0, 1.0, -1.0)], boxes=[(2.0, 3.0, 0.25)],
                  ramps=[(4.0, 4.0, 0.0)])
    np.testing.assert_allclose(obs["observation_self"][0], [1.0, 3.0, 0.15, 0.5, 0, 0, 0, 0, 1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(obs["observation_self"][2], [5.0, 1.0, 0.15, -1.0, 0, 0, 0, 0, 0.0, 0.0], atol=1e-6)
    assert (obs["observation_self"][[1, 3]] == 0).all()
    np.testing.assert_array_equal(obs["agent_qpos_qvel"][0], obs["observation_self"][[1, 2, 3]])
    box = obs["box_obs"][0, 0]
    np.testing.assert_allclose(box, [2.0, 3.0, 0.25, math.cos(0.25), math.sin(0.25), 0, 0, 0, 0, 0, 0, 0], atol=1e-6)
    # ramp: centroid is 0.5/6 m towards +x of the bounding-box centre, 0.5/3 m up
    np.testing.assert_allclose(obs["ramp_obs"][0, 0], [4.0 + 0.5 / 6, 4.0, 0.5 / 3, 1, 0, 0, 0, 0, 0], atol=1e-6)
