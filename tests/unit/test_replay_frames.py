"""Frame stacks stored once per frame in the transition replay (apex-dqn, sac): sampled stacks
equal the inserted ones exactly (episode starts, truncations with final observations, ring wraps,
n-step bootstraps), hand-worked plane numbers, and the memory arithmetic."""
import io

import numpy as np
import pytest
import torch

from tests.unit.replay_fakes import Actors
from zoo.plugins.algorithms.replay import (
    Replay,
    batch_transitions,
    frame_capacity_for,
    is_frame_stack,
    make_replay,
    planes_per_step,
    replay_bytes,
)


def insert(replay: Replay, b: dict, n: int = 3) -> dict:
    tr = batch_transitions(b, gamma=0.9, n=n, who="test")
    m = tr["s_idx"].shape[0]
    replay.insert(tr["obs"], tr["s_idx"], tr["boot_idx"], tr["action"], tr["ret"], tr["disc"],
                  np.arange(1, m + 1, dtype=np.float64), tr["prev_row"])
    return tr


def assert_same_as_rows(frames: Replay, rows: Replay) -> None:
    """Every live transition of ``frames`` rebuilds exactly the observations the row replay (fed
    the same blocks) holds, and sampling returns them."""
    assert frames.obs_written == rows.obs_written and frames.trans_written == rows.trans_written
    live = np.flatnonzero(frames.valid)
    assert live.size and not (frames.valid & ~rows.valid).any()
    for ref in (frames.s_ref[live], frames.boot_ref[live]):
        assert np.array_equal(frames.rows(ref)["obs"], rows.rows(ref)["obs"])
    s = frames.sample(64, 0.4, np.random.default_rng(0))
    assert frames.valid[s["index"]].all()
    assert np.array_equal(s["obs"]["obs"], rows.rows(frames.s_ref[s["index"]])["obs"])
    assert np.array_equal(s["boot_obs"]["obs"], rows.rows(frames.boot_ref[s["index"]])["obs"])


def test_hand_worked_stack_of_three_2x2_frames():
    """One column, T = 3, planes a..g: rows [a b c], [b c d], then step 1 is truncated (final
    observation [c d e]) and the next episode starts with the reset stack [f f f], then [f f g]."""
    a, b, c, d, e, f, g = (np.full((2, 2), v, np.uint8) for v in (1, 2, 3, 4, 5, 6, 7))
    obs = np.stack([np.stack(s) for s in ([a, b, c], [b, c, d], [f, f, f], [f, f, g])])[:, None]
    batch = {"obs": {"obs": obs}, "action": np.zeros((3, 1), np.int64), "reward": np.ones((3, 1), np.float32),
             "terminated": np.zeros((3, 1), bool), "truncated": np.array([[False], [True], [False]]),
             "final_obs": {"obs": np.stack([c, d, e])[None]}, "final_index": np.array([[1, 0]])}
    r = Replay(capacity=3, obs_capacity=5, frame_capacity={"obs": 7})
    tr = insert(r, batch, n=2)
    assert tr["prev_row"].tolist() == [-1, 0, 1, 2, 1]  # the final observation follows row 1
    # planes stored in row order: a b c (row 0), d (row 1), f once (row 2), g (row 3), e (final row)
    assert r.frames_written == {"obs": 7}
    assert r.frames["obs"][:, 0, 0].tolist() == [1, 2, 3, 4, 6, 7, 5]
    assert r.frame_ref["obs"].tolist() == [[0, 1, 2], [1, 2, 3], [4, 4, 4], [4, 4, 5], [2, 3, 6]]
    # transitions: t=0 bootstraps (n=2) from the final observation of the truncated step 1, t=1 too,
    # t=2 from row 3; the rebuilt stacks are the inserted ones
    assert r.s_ref[:3].tolist() == [0, 1, 2] and r.boot_ref[:3].tolist() == [4, 4, 3]
    got = r.rows(np.arange(5))["obs"]
    assert np.array_equal(got[:4], obs[:, 0]) and np.array_equal(got[4], np.stack([c, d, e]))
    # a row that continues none and repeats nothing costs all its planes; zero padding once
    zero = np.zeros((2, 2), np.uint8)
    r2 = Replay(capacity=2, obs_capacity=3, frame_capacity={"obs": 6})
    r2.insert({"obs": np.stack([np.stack(s) for s in ([zero, zero, a], [zero, a, b], [c, d, e])])},
              np.array([0, 1]), np.array([1, 2]), np.zeros(2, np.int64), np.zeros(2, np.float32),
              np.ones(2, np.float32), np.ones(2), np.array([-1, 0, 1]))
    assert r2.frame_ref["obs"].tolist() == [[0, 0, 1], [0, 1, 2], [3, 4, 5]]  # [c d e] continues nothing


def rgb(b: dict) -> dict:
    """Each 2x2 frame as 3 colour planes, channels first (the atari env's RGB layout):
    ``[.., 4, 2, 2]`` -> ``[.., 12, 2, 2]``, a step adds 3 planes."""
    def planes(x):
        y = np.repeat(x, 3, axis=-3)
        y[..., 1::3, :, :] ^= 0x55
        y[..., 2::3, :, :] ^= 0xAA
        return y
    return {**b, "obs": {"obs": planes(b["obs"]["obs"])}, "final_obs": {"obs": planes(b["final_obs"]["obs"])}}


@pytest.mark.parametrize("layout", ["reset", "zero", "rgb"])
def test_sampled_stacks_equal_the_inserted_ones_across_episodes_truncations_and_wraps(layout):
    """Random episode ends (terminated, truncated with a final observation) under gymnasium's
    frame stack (padded with the reset frame, or with zeros; grey or RGB planes), n = 3, rings
    that wrap many times; a row replay fed the same blocks is the oracle."""
    actors = Actors(B=3, stack=4, seed=5, padding="zero" if layout == "zero" else "reset")
    T, cap, rows = 8, 60, 102
    per_step = 3 if layout == "rgb" else 1
    frames = Replay(cap, rows, {"obs": 150 * per_step})  # about 3 x 9 planes per step per insert
    oracle = Replay(cap, rows)
    n_final = 0
    for _ in range(30):
        b = actors.batch(T)
        if layout == "rgb":
            b = rgb(b)
        n_final += b["final_index"].shape[0]
        insert(frames, b)
        insert(oracle, b)
        assert_same_as_rows(frames, oracle)
    assert n_final > 10 and frames.frames_written["obs"] > 3 * frames.frame_capacity["obs"]  # the rings wrapped
    assert oracle.obs_written > 3 * rows and oracle.trans_written > 3 * cap
    if layout != "zero":
        # every frame once: the first reset stacks (their frame once), one per step of each column,
        # one per final observation; later samples start from the stored bootstrap rows
        assert frames.frames_written["obs"] == per_step * (3 + 30 * T * 3 + n_final)
    else:  # a zero-padded reset stack stores its zero plane again
        assert frames.frames_written["obs"] < 1.3 * (3 + 30 * T * 3 + n_final)


def test_a_sample_starts_from_the_stored_bootstrap_row_of_its_env():
    """Two samples of one env: in two blocks (the second's first row is the first's bootstrap row),
    and in one block as two columns; hand-worked plane numbers."""
    a, b, c, d, e = (np.full((2, 2), v, np.uint8) for v in (1, 2, 3, 4, 5))
    first = np.stack([np.stack(s) for s in ([a, a, a], [a, a, b], [a, b, c])])[:, None]  # T = 2, from a reset
    second = np.stack([np.stack(s) for s in ([a, b, c], [b, c, d], [c, d, e])])[:, None]

    def sample(obs):
        return {"obs": {"obs": obs}, "action": np.zeros((2, obs.shape[1]), np.int64),
                "reward": np.ones((2, obs.shape[1]), np.float32), "terminated": np.zeros((2, obs.shape[1]), bool),
                "truncated": np.zeros((2, obs.shape[1]), bool), "final_obs": {"obs": np.zeros((0, 3, 2, 2), np.uint8)},
                "final_index": np.zeros((0, 2), np.int64)}

    r = Replay(capacity=8, obs_capacity=12, frame_capacity={"obs": 12})
    insert(r, sample(first), n=1)
    insert(r, sample(second), n=1)
    # a (reset stack, once), b, c; then d, e: row 3 (the second sample's first row) is row 2's planes
    assert r.frames_written == {"obs": 5} and r.frames["obs"][:5, 0, 0].tolist() == [1, 2, 3, 4, 5]
    assert r.frame_ref["obs"][:6].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert [blk[4] for blk in r.blocks] == [(0,), (0,)]  # the second block needs the first block's planes
    # both samples in one block, columns 0 and 1: rows t * 2 + b; column 1 starts from row 4 (t = 2, b = 0)
    one = Replay(capacity=8, obs_capacity=12, frame_capacity={"obs": 12})
    tr = insert(one, sample(np.concatenate([first, second], axis=1)), n=1)
    assert tr["prev_row"].tolist() == [-1, -1, 0, 1, 2, 3]
    # planes in row order: a (row 0), b (row 2), d (row 3), c (row 4), e (row 5); row 1 copies row 4
    assert one.frames_written == {"obs": 5} and one.frames["obs"][:5, 0, 0].tolist() == [1, 2, 4, 3, 5]
    assert one.frame_ref["obs"][:6].tolist() == [[0, 0, 0], [0, 1, 3], [0, 0, 1], [1, 3, 2], [0, 1, 3], [3, 2, 4]]
    assert np.array_equal(one.rows(np.arange(6))["obs"], np.concatenate([first, second], axis=1).reshape(6, 3, 2, 2))



def test_a_transition_whose_planes_are_overwritten_is_never_sampled():
    """A frame ring smaller than the rows need: transitions are evicted by it (not by the row or
    transition rings) and none of them is ever returned."""
    actors = Actors(B=2, stack=4, seed=9)
    T = 6
    frames = Replay(capacity=200, obs_capacity=400, frame_capacity={"obs": 40})
    oracle = Replay(capacity=200, obs_capacity=400)
    for _ in range(12):
        b = actors.batch(T)
        insert(frames, b)
        insert(oracle, b)
        assert_same_as_rows(frames, oracle)
        # every live transition's planes are in the ring; the ones evicted had some overwritten
        written, F = frames.frames_written["obs"], frames.frame_capacity["obs"]
        oldest = frames._oldest_frame("obs", np.arange(frames.capacity))
        live = frames.valid
        assert (oldest[live] >= written - F).all()
        lost = oracle.valid & ~frames.valid
        assert (oldest[lost] < written - F).all()
    assert len(frames) < len(oracle)  # the frame ring did evict


def column(b: dict, c: int) -> dict:
    """Column ``c`` of batch ``b`` alone, as a one-column batch."""
    keep = b["final_index"][:, 1] == c
    return {"obs": {"obs": b["obs"]["obs"][:, c:c + 1]}, "action": b["action"][:, c:c + 1],
            "reward": b["reward"][:, c:c + 1], "terminated": b["terminated"][:, c:c + 1],
            "truncated": b["truncated"][:, c:c + 1], "final_obs": {"obs": b["final_obs"]["obs"][keep]},
            "final_index": np.stack([b["final_index"][keep, 0], np.zeros(int(keep.sum()), np.int64)], axis=1)}


def test_eviction_reaches_blocks_that_start_from_an_older_block():
    """Three envs whose samples arrive one per block, in turn: each block starts from the planes
    of the block three back. When those planes are overwritten, that block's transitions go, although
    the blocks between them are untouched."""
    actors = Actors(B=3, stack=4, seed=21)
    frames = Replay(capacity=300, obs_capacity=600, frame_capacity={"obs": 60})
    oracle = Replay(capacity=300, obs_capacity=600)
    for _ in range(8):
        b = actors.batch(5)
        for c in range(3):
            insert(frames, column(b, c))
            insert(oracle, column(b, c))
            assert_same_as_rows(frames, oracle)
            written, F = frames.frames_written["obs"], frames.frame_capacity["obs"]
            oldest = frames._oldest_frame("obs", np.arange(frames.capacity))
            assert (oldest[frames.valid] >= written - F).all()
    assert frames.frames_written["obs"] < 1.3 * 8 * 3 * 5  # the samples did start from stored rows


def test_state_dict_resume_is_exact_and_continues_identically():
    actors = Actors(B=2, stack=4, seed=3)
    batches = [actors.batch(5) for _ in range(14)]
    a = Replay(40, 60, {"obs": 70})
    for b in batches[:7]:
        insert(a, b)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)  # as a checkpoint does
    buf.seek(0)
    restored = Replay.from_state_dict(torch.load(buf, weights_only=False))
    for b in batches[7:]:  # every ring wraps after the resume
        insert(a, b)
        insert(restored, b)
    sa, sb = a.state_dict(), restored.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        if isinstance(sa[k], dict):
            assert sa[k].keys() == sb[k].keys(), k
            for kk in sa[k]:
                assert np.array_equal(sa[k][kk], sb[k][kk]), (k, kk)
        elif isinstance(sa[k], np.ndarray):
            assert np.array_equal(sa[k], sb[k]), k
        else:
            assert sa[k] == sb[k], k
    assert np.array_equal(a.tree.tree, restored.tree.tree)
    x, y = a.sample(16, 0.5, np.random.default_rng(1)), restored.sample(16, 0.5, np.random.default_rng(1))
    assert np.array_equal(x["obs"]["obs"], y["obs"]["obs"]) and np.array_equal(x["index"], y["index"])


def test_detection_and_planes_per_step():
    assert is_frame_stack((4, 84, 84), np.uint8) and is_frame_stack((4, 84, 84, 3), np.uint8)
    assert is_frame_stack((12, 84, 84), np.uint8)  # RGB: 3 colour planes per frame
    assert not is_frame_stack((84, 84, 3), np.uint8) and not is_frame_stack((4, 84, 84), np.float32)
    assert not is_frame_stack((84, 84), np.uint8) and is_frame_stack((3, 2, 2), np.uint8)
    b = Actors(B=2, stack=4, seed=1).batch(6)
    grey = b["obs"]["obs"]
    assert planes_per_step(grey) == planes_per_step(grey, b["terminated"] | b["truncated"]) == 1
    # RGB planes channels-first, 3 per frame, as the atari env lays them out
    rgb = np.repeat(grey, 3, axis=2)
    rgb[:, :, 1::3] += 100
    rgb[:, :, 2::3] += 200
    assert planes_per_step(rgb) == 3
    noise = np.random.default_rng(0).integers(0, 256, (7, 2, 4, 8, 8), dtype=np.uint8)
    assert planes_per_step(noise) == 0
    # episode starts (reset stacks) do not count against a stack: two resets, then one continuing row
    cont = np.stack([np.stack([np.full((2, 2), v, np.uint8) for v in s])
                     for s in ((1, 1, 1), (5, 5, 5), (6, 6, 6), (6, 6, 7))])[:, None]
    assert planes_per_step(cont) == 0  # 1 of 3 rows continues
    assert planes_per_step(cont, np.array([[True], [True], [False]])) == 1


def test_memory_per_transition_formula_equals_the_arrays():
    """:func:`replay_bytes` is exactly what the allocated arrays take, and the 1M Atari figure."""
    actors = Actors(B=3, stack=4, seed=2)
    b = actors.batch(8)
    replay, need = make_replay(50, 8, b["obs"], 8, frame_stack="auto", avail=None)
    assert replay.frame_capacity == {"obs": frame_capacity_for(50, 8, 3, 4)} == need.frames
    insert(replay, b)
    assert replay.nbytes == need.total
    # by hand: rows 2 x 17 x 3 = 102 of 4 int64 plane numbers; planes 50 + 1 + 2 x 17 x 3 x 4 = 459 of 4 B;
    # 50 x (8 + 8 + 8 + 4 + 4 + 1) B of fields; a sum-tree of 2 x 64 float64
    assert need.rows == 102 and need.frames == {"obs": 459}
    assert replay.nbytes == 102 * 32 + 459 * 4 + 50 * 33 + 2 * 64 * 8
    off, need_off = make_replay(50, 8, b["obs"], 8, frame_stack="off", avail=None)
    insert(off, b)
    assert off.frame_capacity == {} and off.nbytes == need_off.total == 102 * 16 + 50 * 33 + 2 * 64 * 8
    # 1M Atari transitions of uint8 [4, 84, 84], T = 32, 8 columns
    atari = replay_bytes(1_000_000, 32, 8, {"obs": ((4, 84, 84), np.uint8)}, 8, {"obs": 1})
    # 1,041,250 rows x 32 B + (1,010,000 + 2 x 65 x 8 x 4) planes x 7,056 B + 33 B x 1M + 2 x 2^20 x 8 B
    assert atari.total == 1_041_250 * 32 + 1_014_160 * 7_056 + 33_000_000 + 2 * 2**20 * 8 == 7_239_010_176
    assert 84 * 84 < atari.per_transition < 1.03 * 84 * 84  # 7,239 B
    before = replay_bytes(1_000_000, 32, 8, {"obs": ((4, 84, 84), np.uint8)}, 8)
    assert before.total == 1_041_250 * 28_224 + 33_000_000 + 2 * 2**20 * 8


def test_apex_dqn_on_frame_stacks_resumes_exactly():
    """apex-dqn stores the frame stacks once (``algo.frame_stack=auto``) and a restored algorithm
    continues like the uninterrupted one: weights, priorities, the replay and its frame ring."""
    from gymnasium import spaces

    from zoo.core.env import EnvSpec
    from zoo.plugins.algorithms.apex.apex import ApeX, ApeXConfig

    spec = EnvSpec("Frames-v0", ("agent_0",), {"obs": spaces.Box(0, 255, (4, 36, 36), np.uint8)}, spaces.Discrete(2))
    actors = Actors(B=2, stack=4, seed=11, size=36)
    batches = []
    for _ in range(10):
        b = actors.batch(4)
        b["active"] = np.ones((4, 2), bool)
        b["policy_version"] = np.zeros((4, 2), np.int64)
        batches.append(b)
    cfg = ApeXConfig(batch_size=8, samples_per_insert=2.0, learning_starts=8, capacity=24, target_period=5)
    a = ApeX(cfg, spec, seed=3)
    for b in batches[:5]:
        a.update(b)
    assert a.replay is not None and set(a.replay.frames) == {"obs"} and a.replay.obs == {}
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    restored = ApeX(cfg, spec, seed=99)
    restored.load_state_dict(torch.load(buf, weights_only=False))
    for b in batches[5:]:  # the 24-transition ring wraps after the resume
        for algo in (a, restored):
            algo.update(b)
    assert a.gradient_steps > 5
    for k, v in a.policy.state_dict().items():
        assert torch.equal(v, restored.policy.state_dict()[k]), k
    ra, rb = a.replay, restored.replay
    assert np.array_equal(ra.tree.tree, rb.tree.tree) and np.array_equal(ra.frames["obs"], rb.frames["obs"])
    assert np.array_equal(ra.frame_ref["obs"], rb.frame_ref["obs"]) and ra.frames_written == rb.frames_written
    assert list(ra.blocks) == list(rb.blocks) and list(ra.tail_log["obs"]) == list(rb.tail_log["obs"])


@pytest.mark.parametrize("backend", ["python", "vector"])
def test_pong_samples_from_the_actor_groups_come_back_exactly_with_each_frame_once(backend):
    """Real Pong frame stacks as the actors record them (both backends): 100-frame games (25 env
    steps, truncated with a final observation, then reset), samples of T = 16 one after another,
    one block per sample. Sampled stacks equal a row replay's; each frame is stored once."""
    from zoo.core.workers.actor import EnvGroup, SampleBuffer, VectorEnvGroup
    from zoo.plugins.envs.atari.env import AtariConfig, make, make_vector

    cfg = AtariConfig(noop_max=0, max_episode_frames=100, backend=backend)
    seeds = [1, 4]
    group = (VectorEnvGroup(make_vector("Pong", cfg, 2), seeds) if backend == "vector"
             else EnvGroup([make("Pong", cfg, s) for s in seeds], seeds))
    T = 16
    actions = np.random.default_rng(3).integers(0, 6, (5, T, 2))
    frames, oracle, n_final, episodes = None, Replay(400, 200), 0, []
    try:
        for k in range(5):
            buf = SampleBuffer(T, group.obs)
            for a in actions[k]:
                buf.record_policy({"action": a}, version=0, active=group.active, on_reset=group.on_reset)
                group.step(a, buf, episodes)
            b = buf.bundle()
            if frames is None:
                assert b["obs"]["obs"].shape == (T + 1, 2, 4, 84, 84) and b["obs"]["obs"].dtype == np.uint8
                frames, need = make_replay(400, T, b["obs"], 8, frame_stack="auto", avail=None,
                                           done=b["terminated"] | b["truncated"])
                assert frames.frame_capacity == {"obs": frame_capacity_for(400, T, 2, 4)}
            n_final += b["final_index"].shape[0]
            insert(frames, b)
            insert(oracle, b)
            assert_same_as_rows(frames, oracle)
    finally:
        for env in group.envs:
            env.close()
    assert n_final == 2 * 3  # truncated at t = 24, 49, 74 in both envs
    # the first reset stacks (one frame each), one frame per step, one per final observation
    assert frames.frames_written == {"obs": 2 + 5 * T * 2 + n_final}
    assert frames.nbytes == need.total
