"""R2D2's sequence replay stores each observation row once (shared by overlapping sequences) and
frame stacks once per frame: sampled sequences equal the inserted ones byte for byte (episode
starts, truncations with final observations, ring wraps), hand-counted planes and rows, the
memory arithmetic equals the arrays, and r2d2 on frame stacks resumes exactly."""
import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tests.unit.replay_fakes import Actors
from zoo.plugins.algorithms.r2d2.replay import SequenceReplay, make_sequence_replay, sequence_replay_bytes
from zoo.plugins.algorithms.r2d2.sequences import cut_sequences
from zoo.plugins.algorithms.replay import frame_capacity_for, obs_capacity_for, observation_rows

H = 8  # LSTM units


def r2d2_batch(actors: Actors, T: int, seed: int, last_done: np.ndarray) -> dict:
    """One sample of ``actors`` with what r2d2 needs: ``on_reset`` (row ``t`` starts an episode)
    and an ``rnn_state`` that is zero at resets."""
    b = actors.batch(T)
    B = b["reward"].shape[1]
    done = b["terminated"] | b["truncated"]
    b["on_reset"] = np.concatenate([last_done[None], done[:-1]])
    rnn = np.random.default_rng(seed).standard_normal((T, B, 2, H)).astype(np.float32)
    rnn[b["on_reset"]] = 0.0
    b.update(rnn_state=rnn, active=np.ones((T, B), bool), policy_version=np.zeros((T, B), np.int64))
    last_done[:] = done[-1]
    return b


def run(replay: SequenceReplay, batches, m: int, period: int, inserted: dict | None = None):
    """Insert ``batches``; after each, every valid sequence rebuilds exactly as inserted. Returns
    the inserted sequences by ring position (the latest at each; ``inserted``: the earlier ones)."""
    inserted = {} if inserted is None else dict(inserted)
    for b in batches:
        seqs = cut_sequences(b, m, period, 1, 0.9, 2)
        pos = replay.insert(seqs, np.arange(1, seqs["action"].shape[0] + 1, dtype=np.float64),
                            *observation_rows(b))
        for i, p in enumerate(pos.tolist()):
            fk = seqs["final_pos"][:, 0] == i
            inserted[p] = {"obs": {k: v[i].copy() for k, v in seqs["obs"].items()},
                           "final": {k: v[fk].copy() for k, v in seqs["final_obs"].items()},
                           "steps": seqs["final_pos"][fk, 1].tolist(), "action": seqs["action"][i].copy()}
        check_all_valid(replay, inserted)
    return inserted


def check_all_valid(replay: SequenceReplay, inserted: dict) -> None:
    """Every valid sequence, sampled, equals what was inserted there, byte for byte."""
    valid = np.flatnonzero(replay.valid)
    assert valid.size == len(replay) > 0
    replay_tree = replay.tree
    priorities = replay_tree.leaves(np.arange(replay.capacity)).copy()
    # sample every valid position once: priority 1 each, a stratified draw of n_valid takes each once
    replay_tree.update(valid, np.ones(valid.size))
    s = replay.sample(valid.size, 0.0, np.random.default_rng(0))
    replay_tree.update(np.arange(replay.capacity), priorities)
    assert sorted(s["index"].tolist()) == valid.tolist()
    for j, p in enumerate(s["index"].tolist()):
        want = inserted[p]
        for k, v in want["obs"].items():
            got = s["obs"][k][j]
            assert got.dtype == v.dtype and got.tobytes() == v.tobytes(), (p, k)
        fk = s["final_pos"][:, 0] == j
        assert s["final_pos"][fk, 1].tolist() == want["steps"]
        for k, v in want["final"].items():
            assert s["final_obs"][k][fk].tobytes() == v.tobytes()
        assert np.array_equal(s["action"][j], want["action"])


@pytest.mark.parametrize("padding", ["reset", "zero"])
def test_sampled_sequences_equal_the_inserted_ones_across_episodes_truncations_and_wraps(padding):
    # 3 envs, samples of T = 8, sequences of 4 every 2 (3 per column, overlapping by half); a ring
    # of 20 sequences and the rows of a few samples: both rings wrap many times
    actors = Actors(B=3, stack=4, seed=5, padding=padding)
    last = np.zeros(3, bool)
    batches = [r2d2_batch(actors, 8, i, last) for i in range(14)]
    n_final = sum(b["final_index"].shape[0] for b in batches)
    assert n_final >= 5 and sum(int(b["terminated"].sum()) for b in batches) >= 5
    replay, need = make_sequence_replay(20, 8, 4, 2, batches[0]["obs"], 2 * H, 8, frame_stack="auto", avail=None,
                                        done=batches[0]["terminated"] | batches[0]["truncated"])
    assert replay.frame_capacity == {"obs": frame_capacity_for(56, 8, 3, 4)}  # 20 sequences: 7 columns x 8 steps
    assert replay.obs_capacity == obs_capacity_for(56, 8, 3) == 102  # at least two batches of 3 x 17 rows
    run(replay, batches, 4, 2)
    assert replay.store.obs_written == sum(27 + b["final_index"].shape[0] for b in batches)  # each row once
    assert replay.store.obs_written > 3 * replay.obs_capacity and replay.written == 14 * 9
    if padding == "reset":
        # the first reset stacks (one frame each), then one frame per step and per final observation: the rows
        # that start a sample share the planes of the previous sample's bootstrap row
        assert replay.store.frames_written == {"obs": 3 + 14 * 8 * 3 + n_final}
    assert replay.nbytes == need.total


def test_rows_without_a_frame_stack_are_stored_once_and_shared_by_overlapping_sequences():
    # a stack of one frame ([1, 2, 2]: not a frame stack) and frame_stack=off: whole rows, once per step
    for stack, mode in ((1, "auto"), (4, "off")):
        actors = Actors(B=2, stack=stack, seed=9)
        last = np.zeros(2, bool)
        batches = [r2d2_batch(actors, 6, i, last) for i in range(8)]
        replay, need = make_sequence_replay(12, 6, 4, 2, batches[0]["obs"], 2 * H, 8, frame_stack=mode, avail=None)
        assert replay.frame_capacity == {} and replay.oldest == {}
        run(replay, batches, 4, 2)
        assert replay.store.obs_written == sum(14 + b["final_index"].shape[0] for b in batches)
        assert replay.nbytes == need.total


def test_hand_worked_planes_and_rows_of_overlapping_sequences():
    # one env, stack of 3, T = 4, sequences of 2 every 1: 3 sequences sharing rows 1-3
    actors = Actors(B=1, stack=3, seed=0)
    actors.envs[0].unwrapped.rng = np.random.default_rng([45])  # no episode end in 12 steps
    last = np.zeros(1, bool)
    b1, b2 = (r2d2_batch(actors, 4, i, last) for i in range(2))
    assert not (b1["terminated"] | b1["truncated"] | b2["terminated"] | b2["truncated"]).any()
    replay = SequenceReplay(6, 10, {"obs": 20})
    for b in (b1, b2):
        replay.insert(cut_sequences(b, 2, 1, 0, 0.9, 1), np.ones(3), *observation_rows(b))
    # batch 1: rows 0-4; the reset stack [f1, f1, f1] stores f1 once (plane 0), each step one frame (1-4);
    # batch 2: its row 0 is batch 1's row 4 (absolute row 5 takes planes 2, 3, 4), steps add planes 5-8
    ref = replay.store.frame_ref["obs"]
    assert ref[:10].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4],
                                 [2, 3, 4], [3, 4, 5], [4, 5, 6], [5, 6, 7], [6, 7, 8]]
    assert replay.store.frames_written == {"obs": 9}
    assert replay.row0[:6].tolist() == [0, 1, 2, 5, 6, 7] and replay.stride[:6].tolist() == [1] * 6
    assert replay.oldest["obs"][:6].tolist() == [0, 0, 0, 2, 3, 4]
    # rows of the env's frames as stored: plane p is frame p + 1 of the env (frame counter in byte 1)
    assert replay.store.frames["obs"][:9, 0, 1].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_a_sequence_whose_planes_are_overwritten_is_evicted():
    actors = Actors(B=1, stack=3, seed=0)
    actors.envs[0].unwrapped.rng = np.random.default_rng([45])
    last = np.zeros(1, bool)
    batches = [r2d2_batch(actors, 4, i, last) for i in range(3)]
    # rows for 3 batches (15), planes for 12: batch 3's planes 9-12 overwrite plane 0, which the reset stack
    # [f1, f1, f1] and the next two rows of batch 1 use
    replay = SequenceReplay(9, 15, {"obs": 12})
    for b in batches:
        replay.insert(cut_sequences(b, 2, 1, 0, 0.9, 1), np.ones(3), *observation_rows(b))
    assert replay.store.frames_written == {"obs": 13} and replay.store.obs_written == 15
    assert replay.oldest["obs"].tolist() == [0, 0, 0, 2, 3, 4, 6, 7, 8]
    assert replay.valid.tolist() == [False] * 3 + [True] * 6 and len(replay) == 6
    # a ring of 9 planes cannot keep batch 1's last row while batch 2 writes up to 7 new planes: batch 2's
    # first row stores its own 3 planes instead of sharing (never a plane that could be overwritten)
    small = SequenceReplay(9, 15, {"obs": 9})
    for b in batches[:2]:
        small.insert(cut_sequences(b, 2, 1, 0, 0.9, 1), np.ones(3), *observation_rows(b))
    assert small.oldest["obs"][:6].tolist() == [0, 0, 0, 5, 6, 7] and small.store.frames_written == {"obs": 12}
    assert small.valid[:6].tolist() == [False] * 3 + [True] * 3  # planes 9-11 overwrote 0-2


def test_state_dict_resume_is_exact_and_continues_identically():
    actors = Actors(B=2, stack=4, seed=21)
    last = np.zeros(2, bool)
    batches = [r2d2_batch(actors, 8, i, last) for i in range(12)]
    a, _ = make_sequence_replay(16, 8, 4, 2, batches[0]["obs"], 2 * H, 8, frame_stack="auto", avail=None)
    first = run(a, batches[:6], 4, 2)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = SequenceReplay.from_state_dict(torch.load(buf, weights_only=False))
    ins_a = run(a, batches[6:], 4, 2, first)
    ins_b = run(b, batches[6:], 4, 2, first)
    assert ins_a.keys() == ins_b.keys()
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in ("row0", "stride", "final_ref", "valid", "priority"):
        assert np.array_equal(sa[k], sb[k]), k
    assert np.array_equal(a.store.frames["obs"], b.store.frames["obs"]) and a.store.tails == b.store.tails
    assert np.array_equal(a.store.frame_ref["obs"], b.store.frame_ref["obs"])
    ra, rb = a.sample(8, 0.4, np.random.default_rng(1)), b.sample(8, 0.4, np.random.default_rng(1))
    assert ra["obs"]["obs"].tobytes() == rb["obs"]["obs"].tobytes()
    with pytest.raises(ValueError, match=r"r2d2 replay: the checkpoint's replay stores whole observations per "
                                         r"sequence \(written before sequences shared their rows\); start a new run"):
        SequenceReplay.from_state_dict({"capacity": 16, "final_capacity": 16, "obs": {}})


def test_r2d2_on_frame_stacks_resumes_exactly():
    from zoo.core.env import EnvSpec
    from zoo.plugins.algorithms.r2d2.r2d2 import R2D2, R2D2Config

    spec = EnvSpec("Frames-v0", ("agent_0",), {"obs": spaces.Box(0, 255, (4, 36, 36), np.uint8)}, spaces.Discrete(2))
    actors = Actors(B=2, stack=4, seed=11, size=36)
    last = np.zeros(2, bool)
    batches = [r2d2_batch(actors, 6, i, last) for i in range(10)]
    for b in batches:
        b["rnn_state"] = np.zeros((6, 2, 2, H), np.float32)  # as the policy worker would feed it, zeros do
    cfg = R2D2Config(sequence_length=4, sequence_period=2, burn_in=1, n_step=2, gamma=0.9, lstm=H, batch_size=4,
                     samples_per_insert=2.0, learning_starts=4, capacity=12, target_period=3, lr=1e-3)
    a = R2D2(cfg, spec, seed=3)
    for b in batches[:5]:
        a.update(b)
    assert a.replay is not None and set(a.replay.frame_capacity) == {"obs"} and a.replay.store.obs == {}
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    restored = R2D2(cfg, spec, seed=99)
    restored.load_state_dict(torch.load(buf, weights_only=False))
    for b in batches[5:]:  # the 12-sequence ring wraps after the resume
        for algo in (a, restored):
            algo.update(b)
    assert a.gradient_steps > 5
    for k, v in a.policy.state_dict().items():
        assert torch.equal(v, restored.policy.state_dict()[k]), k
    ra, rb = a.replay, restored.replay
    assert np.array_equal(ra.tree.tree, rb.tree.tree) and np.array_equal(ra.store.frames["obs"], rb.store.frames["obs"])
    assert np.array_equal(ra.row0, rb.row0) and ra.store.frames_written == rb.store.frames_written


def test_atari_memory_per_step():
    # the r2d2 Atari presets: T = 80, sequences of 80 (one per column), 2 actors x 8 envs, 4 samples per
    # update (32 columns), LSTM 512; uint8 [4, 84, 84] stored once per frame
    atari = {"obs": ((4, 84, 84), np.uint8)}
    need = sequence_replay_bytes(1_000, 80, 80, 40, 32, atari, 1024, {"obs": 1})
    assert need.steps == 80_000 and need.rows == 81_800 and need.frames["obs"] == 80_800 + 2 * 161 * 32 * 4
    assert need.sequence_bytes == 80 * 35 + 81 + 4 * 1024 + 8 + 8 + 8 + 1
    assert round(need.per_step) == 10_882  # 830.3 MiB: the two-batch margin of planes is 1/3 of it at this size
    big = sequence_replay_bytes(12_500, 80, 80, 40, 32, atari, 1024, {"obs": 1})  # 1M env steps
    assert big.steps == 1_000_000 and round(big.per_step) == 7_538 and big.total < 7.1 * 2**30
    rows = sequence_replay_bytes(1_000, 80, 80, 40, 32, atari, 1024)  # algo.frame_stack=off
    assert rows.frames == {} and round(rows.per_step) == 28_947
    unstacked = sequence_replay_bytes(12_500, 80, 80, 40, 32, {"obs": ((1, 84, 84), np.uint8)}, 1024)
    assert round(unstacked.per_step) == 7_302  # env.frame_stack=1: one 7,056 B row per step


@pytest.mark.parametrize("backend", ["python", "vector"])
def test_pong_sequences_from_the_actor_groups_come_back_exactly_with_each_frame_once(backend):
    """Real Pong frame stacks as the actors record them (both backends): 100-frame games (25 env
    steps, truncated with a final observation, then reset), samples of T = 16 cut into sequences of
    8 every 4. Every sampled sequence and final observation equals the inserted one; each frame is
    stored once."""
    from zoo.core.workers.actor import EnvGroup, SampleBuffer, VectorEnvGroup
    from zoo.plugins.envs.atari.env import AtariConfig, make, make_vector

    cfg = AtariConfig(noop_max=0, max_episode_frames=100, backend=backend)
    seeds = [1, 4]
    group = (VectorEnvGroup(make_vector("Pong", cfg, 2), seeds) if backend == "vector"
             else EnvGroup([make("Pong", cfg, s) for s in seeds], seeds))
    T = 16
    actions = np.random.default_rng(3).integers(0, 6, (5, T, 2))
    replay, inserted, n_final, episodes = None, {}, 0, []
    try:
        for k in range(5):
            buf = SampleBuffer(T, group.obs)
            for a in actions[k]:
                buf.record_policy({"action": a}, version=0, active=group.active, on_reset=group.on_reset)
                group.step(a, buf, episodes)
            b = buf.bundle()
            b["rnn_state"] = np.zeros((T, 2, 2, H), np.float32)
            if replay is None:
                assert b["obs"]["obs"].shape == (T + 1, 2, 4, 84, 84) and b["obs"]["obs"].dtype == np.uint8
                replay, need = make_sequence_replay(30, T, 8, 4, b["obs"], 2 * H, 8, frame_stack="auto", avail=None,
                                                    done=b["terminated"] | b["truncated"])
                assert set(replay.frame_capacity) == {"obs"}
            n_final += b["final_index"].shape[0]
            inserted = run(replay, [b], 8, 4, inserted)
    finally:
        for env in group.envs:
            env.close()
    assert n_final == 2 * 3  # truncated at t = 24, 49, 74 in both envs
    # the first reset stacks (one frame each), one frame per step, one per final observation
    assert replay.store.frames_written == {"obs": 2 + 5 * T * 2 + n_final}
    assert replay.written == 5 * 3 * 2 and replay.nbytes == need.total
