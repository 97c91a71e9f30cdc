"""Grab and lock (docs/hide-and-seek.md, "Grab and lock") with scripted placements.

Hider 0 stands at (2.55, 3) looking along +x at a cube centred at (3, 3): the cube's face
is at x = 2.75, 0.20 m from the hider's centre. Seeker 0 stands at (3, 3.45) looking down
at it (0.20 m from the top face at y = 3.25).
"""
import math

import numpy as np
import pytest

from hs_helpers import NEG, POS, game, layout, noop, skip_prep
from zoo.plugins.envs.hide_and_seek.config import resolve
from zoo.plugins.envs.hide_and_seek.game import Game

HIDER = (2.55, 3.0, 0.0)
SEEKER = (3.0, 3.45, -math.pi / 2)
FAR = dict(hider=(1.0, 1.0, -math.pi / 2), seeker=(5.0, 1.0, -math.pi / 2))


def lock_scene(**kw):
    return game(hiders=[HIDER, FAR["hider"]], seekers=[SEEKER, FAR["seeker"]],
                boxes=[(3.0, 3.0, 0.0), (5.0, 5.0, 0.0)], **kw)


def test_lock_sets_flags_and_only_the_locking_team_unlocks():
    g, obs = lock_scene()
    assert obs["mask_ab_obs"][[0, 2], 0].tolist() == [1.0, 1.0]
    a = noop(g)
    a[0, 4] = 1
    obs, _, _, _ = g.step(a)
    assert g.grablock.lock_team.tolist() == [0, -1]
    # flags (you-locked, team-locked, locked) of box 0 for slots hider_0, hider_1, seeker_0, seeker_1
    assert obs["box_obs"][:, 0, -3:].tolist() == [[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 1]]
    assert obs["box_obs"][:, 1, -3:].tolist() == [[0, 0, 0]] * 4
    start = g.world.qpos4[4].copy()
    while g.t < g.p.prep_steps:
        g.step(a)  # hider keeps pressing: stays locked
    # the seeker, eligible, pushes, tries to grab, presses and releases lock: the box neither moves nor unlocks
    for t in range(30):
        s = noop(g)
        s[0, 4] = 1
        s[2, 1] = NEG
        s[2, 3] = t % 2
        s[2, 4] = (t // 2) % 2
        g.step(s)
        assert g.grablock.lock_team[0] == 0
    assert np.abs(g.world.qpos4[4] - start).max() < 1e-4
    assert g.grablock.held[2] == -1  # a locked object cannot be grabbed
    # the hider, eligible and not pressing lock, unlocks it; the seeker then pushes it
    s = noop(g)
    s[2, 1] = NEG
    g.step(s)
    assert g.grablock.lock_team[0] == -1
    for _ in range(5):
        g.step(s)
    assert g.world.qpos4[4, 1] < start[1] - 0.1


@pytest.mark.parametrize("seed", [0, 1])
def test_locked_box_does_not_move_under_random_actions(seed):
    g, _ = lock_scene()
    a = noop(g)
    a[0, 4] = 1
    g.step(a)
    start = g.world.qpos4[4].copy()
    rng = np.random.default_rng(seed)
    moved = 0.0
    while g.t < g.p.horizon:
        act = rng.integers(0, [11, 11, 11, 2, 2], size=(4, 5))
        act[:2, 4] = 1  # hiders never release, so only opponents act on the box
        g.step(act)
        moved = max(moved, np.abs(g.world.qpos4[4] - start).max())
    assert g.grablock.lock_team[0] == 0
    assert moved < 1e-4


def test_seekers_lock_belongs_to_seekers():
    g, _ = lock_scene()
    skip_prep(g)
    a = noop(g)
    a[[0, 2], 4] = 1  # both eligible agents press: the hiders (tried first) lock it
    g.step(a)
    assert g.grablock.lock_team[0] == 0
    a[0, 4] = 0  # the hider releases: unlocked
    g.step(a)
    assert g.grablock.lock_team[0] == -1
    obs, _, _, _ = g.step(a)  # the seeker alone presses; the releasing hider cannot stop it
    assert g.grablock.lock_team[0] == 1
    assert obs["box_obs"][:, 0, -3:].tolist() == [[0, 0, 1], [0, 0, 1], [1, 1, 1], [0, 1, 1]]
    g.step(a)  # ... nor unlock it
    assert g.grablock.lock_team[0] == 1


@pytest.mark.parametrize("x, yaw, ok", [
    (2.55, 0.0, True),         # 0.20 m, in view
    (2.51, 0.0, True),         # 0.24 m
    (2.49, 0.0, False),        # 0.26 m: too far
    (2.55, math.pi, False),    # 0.20 m but behind the agent: not in view
])
def test_grab_and_lock_need_range_and_view(x, yaw, ok):
    for action in (3, 4):
        g, _ = game(hiders=[(x, 3.0, yaw)], seekers=[FAR["seeker"]], boxes=[(3.0, 3.0, 0.0)])
        a = noop(g)
        a[0, action] = 1
        g.step(a)
        done = g.grablock.held[0] == 0 if action == 3 else g.grablock.lock_team[0] == 0
        assert done == ok


def relative_pose(q_agent, q_obj):
    """(x, y, z, yaw) of the object in the agent's frame."""
    c, s = math.cos(q_agent[3]), math.sin(q_agent[3])
    d = q_obj[:3] - q_agent[:3]
    return np.array([c * d[0] + s * d[1], -s * d[0] + c * d[1], d[2], q_obj[3] - q_agent[3]])


def test_grab_takes_nearest_keeps_pose_and_releases_next_step():
    # box 0's surface is 0.224 m from the hider's centre, box 1's 0.17 m: box 1 is grabbed
    g, _ = game(hiders=[(3.0, 3.0, 0.0)], seekers=[FAR["seeker"]],
                boxes=[(3.45, 3.35, 0.0), (3.42, 2.75, 0.0)])
    a = noop(g)
    a[0, 3] = 1
    g.step(a)
    assert g.grablock.held[0] == 1
    w = g.world  # rows: 0 hider, 1 seeker, 2 box 0, 3 box 1
    rel0 = relative_pose(w.qpos4[0], w.qpos4[3])
    a[0, 0] = NEG  # pull the box back along -x while holding
    for _ in range(6):
        g.step(a)
        np.testing.assert_allclose(relative_pose(w.qpos4[0], w.qpos4[3]), rel0, atol=0.02)
    assert w.qpos4[3, 0] < 3.42 - 1.0  # the box came along
    np.testing.assert_allclose(w.qpos4[2, :2], [3.45, 3.35], atol=1e-3)  # the other did not
    a[0, 3] = 0
    a[0, 0] = POS  # release and walk the other way
    g.step(a)
    assert g.grablock.held[0] == -1 and not w.data.eq_active.any()


def test_several_agents_can_hold_one_object():
    g, _ = lock_scene()
    a = noop(g)
    a[0, 3] = 1
    g.step(a)
    while g.t < g.p.prep_steps:
        g.step(a)
    a[2, 3] = 1
    g.step(a)
    assert g.grablock.held.tolist()[:3] == [0, -1, 0]
    assert g.world.data.eq_active.sum() == 2


@pytest.mark.parametrize("scenario, lockable", [("quadrant", False), ("full", True)])
def test_ramp_locking_only_in_full_game(scenario, lockable):
    # ramp rising towards -x: its vertical face is at x = 2.75, 0.20 m in front of the hider
    g, obs = game(scenario, hiders=[HIDER], seekers=[FAR["seeker"]], ramps=[(3.0, 3.0, math.pi)])
    assert obs["mask_ar_obs"][0].tolist() == [1.0] + [0.0] * (g.p.ramps - 1)
    a = noop(g)
    a[0, 4] = 1
    obs, _, _, _ = g.step(a)
    assert (g.grablock.lock_team[g.world.n_boxes] == 0) == lockable
    if lockable:
        assert obs["ramp_obs"][0, 0, -3:].tolist() == [1.0, 1.0, 1.0]
    else:
        assert obs["ramp_obs"].shape[-1] == 9
    a = noop(g)
    a[0, 3] = 1
    g.step(a)
    assert g.grablock.held[0] == 0  # ramps can be grabbed in both games


def test_locking_a_held_object_releases_it():
    g, _ = lock_scene()
    a = noop(g)
    a[0, 3] = 1
    g.step(a)
    assert g.grablock.held[0] == 0
    a[0, 4] = 1  # keep holding and lock it: the hold ends, the lock holds
    g.step(a)
    assert g.grablock.lock_team[0] == 0 and g.grablock.held[0] == -1 and not g.world.data.eq_active.any()


def test_box_surfing_an_agent_on_a_box_it_holds_rides_it():
    p = resolve(None, "quadrant")
    lay = layout(p, hiders=[(1.9, 3.0, 0.0)], seekers=[FAR["seeker"]], boxes=[(2.0, 3.0, 0.0)])
    lay.agent_z = np.array([0.65, 0.15])  # the hider stands on the cube (top at 0.5 m), 0.1 m behind its centre
    g = Game(p)
    obs = g.reset(np.random.default_rng(0), lay)
    assert obs["mask_ab_obs"][0, 0] == 1.0  # it sees the cube below it
    a = noop(g)
    a[0, 3] = 1
    g.step(a)
    assert g.grablock.held[0] == 0
    a[0, 0] = POS
    for _ in range(6):
        g.step(a)
    hider, box = g.world.qpos4[0], g.world.qpos4[2]
    assert box[0] > 3.0  # the cube travelled more than a metre...
    assert hider[2] > 0.6 and abs(hider[0] - box[0] + 0.1) < 0.05  # ...with the hider still on top of it
