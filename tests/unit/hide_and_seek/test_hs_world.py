"""Physics of the arena (docs/hide-and-seek.md, "World and timing", "Bodies"), spawns, masks and statistics."""
import numpy as np
import pytest

from hs_helpers import NONE, POS, game, noop
from zoo.plugins.envs.hide_and_seek.config import HideAndSeekConfig, resolve
from zoo.plugins.envs.hide_and_seek.scenarios import sample_layout
from zoo.plugins.envs.hide_and_seek.zoo_env import make

TOL = 0.01  # m above the agent radius tolerated for contact penetration/settling
WALL = (3.0, 0.0, 3.0, 6.0, 0.5)  # a 0.5 m inner wall across the arena at x = 3 (faces at 2.95, 3.05)


def run_towards_wall(ramps):
    g, _ = game(hiders=[(1.5, 3.0, 0.0)], seekers=[(1.0, 1.0, 0.0)], walls=[WALL], ramps=ramps)
    a = noop(g)
    a[0, 0] = POS
    z = []
    for _ in range(20):
        g.step(a)
        z.append(g.world.qpos4[0, 2])
    return g, max(z)


def test_agent_cannot_climb_or_cross_a_wall_without_a_ramp():
    g, top = run_towards_wall(ramps=[(0.5, 5.5, 0.0)])
    assert top <= 0.15 + TOL
    assert g.world.qpos4[0, 0] <= 2.95 - 0.15 + TOL  # pressed against the wall face


def test_agent_climbs_a_ramp_against_the_wall_and_crosses():
    # ramp rising towards +x with its high edge at x = 2.95, touching the wall
    g, top = run_towards_wall(ramps=[(2.7, 3.0, 0.0)])
    assert top > 0.5
    assert g.world.qpos4[0, 0] > 3.05 + 0.15


def test_random_play_stays_on_the_floor_without_objects():
    cfg = HideAndSeekConfig(quadrant_boxes=0, quadrant_ramps=0)
    env = make(None, cfg, seed=0)
    rng = np.random.default_rng(0)
    for episode in range(2):
        obs, _ = env.reset(seed=episode)
        for _ in range(80):
            obs, *_ = env.step(rng.integers(0, [11, 11, 11, 2, 2], size=(4, 5)))
            assert (obs["observation_self"][:, 2] <= 0.15 + TOL).all()
            xy = obs["observation_self"][:, :2]
            assert ((xy > 0.05) & (xy < 5.95)).all()


def test_quadrant_spawns():
    p = resolve(None, "quadrant")
    for seed in range(30):
        lay = sample_layout(p, np.random.default_rng(seed))
        assert (lay.n_hiders, lay.n_seekers, len(lay.box_xy), len(lay.ramp_xy)) == (2, 2, 2, 1)
        # both cubes (half side 0.25) inside the room [3, 6]^2, clear of its walls (faces at 3.05, 5.95)
        assert ((lay.box_xy - 0.25 >= 3.05) & (lay.box_xy + 0.25 <= 5.95)).all()
        # seekers (radius 0.15) wholly outside the room
        s = lay.agent_xy[2:]
        assert ((s[:, 0] + 0.15 <= 2.95) | (s[:, 1] + 0.15 <= 2.95)).all()
        assert len(lay.walls) in (4 + 3, 4 + 4)  # outer walls + one or two doors
        assert len(lay.doors) in (1, 2)


def test_full_spawns_counts_and_padded_slots():
    env = make("full", HideAndSeekConfig(), seed=0)
    seen_counts = set()
    for seed in range(25):
        obs, info = env.reset(seed=seed)
        g = env.env.game
        lay = g.layout
        nh, ns, nb = lay.n_hiders, lay.n_seekers, len(lay.box_xy)
        ne = int(lay.box_elongated.sum())
        seen_counts.add((nh, ns))
        assert 1 <= nh <= 3 and 1 <= ns <= 3 and 3 <= nb <= 9 and min(3, nb) <= ne <= nb
        assert len(lay.ramp_xy) == 2
        assert info["active"].tolist() == [i < nh for i in range(3)] + [i < ns for i in range(3)]
        for team in (lay.agent_xy[:nh], lay.agent_xy[nh:]):
            assert (np.sqrt(((team - team[0]) ** 2).sum(1)) <= 0.5 + 1e-9).all()
        inactive = ~info["active"]
        for key, value in obs.items():
            assert (value[inactive] == 0).all(), key
        assert (obs["mask_ab_obs_spoof"][info["active"]] == (np.arange(9) < nb)).all()
        assert (obs["mask_ab_obs"][:, nb:] == 0).all() and (obs["box_obs"][:, nb:] == 0).all()
        sizes = obs["box_obs"][info["active"]][:, :nb, 9:12]
        np.testing.assert_allclose(sizes[:, :ne], np.broadcast_to([1.65, 0.15, 0.5], (nh + ns, ne, 3)), rtol=1e-6)
        np.testing.assert_allclose(sizes[:, ne:], 0.5, rtol=1e-6)
        assert (obs["mask_aa_obs_spoof"][info["active"]].sum(1) == nh + ns - 1).all()
    assert len(seen_counts) > 3


@pytest.mark.parametrize("scenario", ["quadrant", "full"])
def test_policy_masks_are_subsets_and_statistics_are_consistent(scenario):
    env = make(scenario, HideAndSeekConfig(), seed=0)
    rng = np.random.default_rng(0)
    a = env.spec.num_agents
    for episode in range(2 if scenario == "quadrant" else 1):
        obs, _ = env.reset(seed=episode)
        info = {}
        while "stats" not in info:
            act = rng.integers(0, [11, 11, 11, 2, 2], size=(a, 5))
            act[:, 4] = 1  # lock a lot, so that lock counts are exercised
            obs, _, _, _, info = env.step(act)
            for m in ("aa", "ab", "ar"):
                assert (obs[f"mask_{m}_obs"] <= obs[f"mask_{m}_obs_spoof"]).all()
            lid = obs["lidar"][info["active"]]
            assert ((lid > 0) & (lid <= 6)).all()
        st = info["stats"]
        assert st["box_max_displacement_prep"] <= st["box_max_displacement"]
        assert st["ramp_max_displacement_prep"] <= st["ramp_max_displacement"]
        for kind, n in (("boxes", st["n_boxes"]), ("ramps", st["n_ramps"])):
            assert 0 <= st[f"{kind}_locked_prep"] <= n and 0 <= st[f"{kind}_locked"] <= n
        if scenario == "quadrant":
            assert st["ramps_locked"] == 0 and st["ramps_locked_prep"] == 0
        assert all(isinstance(v, float) for v in st.values())


def test_statistics_of_a_scripted_episode():
    # the hider pushes box 0 along +x during preparation only, then locks nothing: displacement
    # is recorded at the end of preparation and never shrinks afterwards
    g, _ = game(hiders=[(1.0, 1.0, 0.0)], seekers=[(5.0, 5.0, np.pi / 2)], boxes=[(1.45, 1.0, 0.0)])
    a = noop(g)
    a[0, 0] = POS
    for _ in range(4):
        g.step(a)
    a[0, 0] = NONE
    info = {}
    while not info:
        _, r, _, info = g.step(a)
    st = info["stats"]
    assert st["box_max_displacement_prep"] > 0.5
    assert st["box_max_displacement"] == st["box_max_displacement_prep"]
    assert st["hider_return"] == 48.0 and st["seeker_return"] == -48.0  # 80 - 32 steps unseen
    assert (st["n_hiders"], st["n_seekers"], st["n_boxes"], st["n_ramps"]) == (1.0, 1.0, 1.0, 0.0)


def test_lock_counts_at_end_of_preparation_and_at_end():
    # the hider holds lock on the cube through preparation, then releases next to it
    g, _ = game(hiders=[(2.55, 3.0, 0.0)], seekers=[(5.0, 1.0, -np.pi / 2)], boxes=[(3.0, 3.0, 0.0), (4.0, 5.0, 0.0)])
    a = noop(g)
    a[0, 4] = 1
    while g.t < g.p.prep_steps:
        g.step(a)
    a[0, 4] = 0
    info = {}
    while not info:
        _, _, _, info = g.step(a)
    st = info["stats"]
    counts = (st["boxes_locked_prep"], st["boxes_locked"], st["ramps_locked_prep"], st["ramps_locked"])
    assert counts == (1.0, 0.0, 0.0, 0.0)
    assert st["box_max_displacement_prep"] < 1e-3


def test_a_physics_divergence_is_undone_and_counted():
    g, _ = game(hiders=[(1.0, 1.0, 0.0)], seekers=[(5.0, 5.0, 0.0)])
    q = g.world.data.qpos.copy()
    g.world.data.qvel[0] = 1e12  # MuJoCo gives up on this and resets its data to the defaults
    g.step(noop(g))
    assert g.stats.physics_resets == 1
    np.testing.assert_allclose(g.world.data.qpos, q, atol=1e-3)  # back where it was, not at the origin
