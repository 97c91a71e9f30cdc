"""Data-parallel replay trainers (apex-dqn, sac, r2d2 with ``trainer.count`` = 2).

The rate limiter's grant is global (:func:`~zoo.plugins.algorithms.replay.pooled_rate_limited_steps`:
hand-worked numbers); two gloo ranks (spawned processes), each with its own replay shard fed
different amounts of data, take the same gradient steps, and after every update hold the same
state (online and target networks, optimisers, SAC's temperature, counters, credit) bitwise;
a non-finite initial priority on one rank skips the update on both; a rank's own state (its
shard and RNG) is written beside ``latest.pt`` and read back.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import uuid

import numpy as np
import pytest
import torch

from zoo.plugins.algorithms.replay import pooled_rate_limited_steps, rate_limited_steps

UPDATES = 5
OWN = ("replay", "rng", "generator", "config")
"""state_dict entries that are a rank's own (its shard, its random streams) or not state."""


# -- the global grant ------------------------------------------------------------------------

def test_the_global_grant_hand_worked():
    kw = {"learning_starts": 1_000, "samples_per_insert": 16.0, "batch_size": 64}
    # 2 ranks: shards of 600 + 500, 128 new each: credit 100 + 256 x 16 = 4,196; a step takes
    # 2 x 64 = 128 samples: 32 steps, 4,196 - 4,096 = 100 carried
    assert pooled_rate_limited_steps(100.0, 1_100, 256, 0, 2, **kw) == (32, 100.0)
    # the same counts with one shard still empty: no step (that rank could not sample), the credit carries
    assert pooled_rate_limited_steps(100.0, 1_100, 256, 1, 2, **kw) == (0, 4_196.0)
    # below learning_starts together (600 + 200 + 2 x 64 = 928 < 1,000): no credit, though rank 0's
    # shard alone would be past it on its own rule only with 1,000
    assert pooled_rate_limited_steps(0.0, 800, 128, 0, 2, **kw) == (0, 0.0)
    # exactly learning_starts together (872 + 128): credit 128 x 16 = 2,048: 16 steps, nothing left
    assert pooled_rate_limited_steps(0.0, 872, 128, 0, 2, **kw) == (16, 0.0)
    # 3 ranks, batch 10, 1.5 per insert, credit 7: 7 + 41 x 1.5 = 68.5; 30 per step: 2 steps, 8.5 left
    assert pooled_rate_limited_steps(7.0, 90, 41, 0, 3, learning_starts=0, samples_per_insert=1.5,
                                     batch_size=10) == (2, 8.5)
    # one trainer: the single-shard rule, unchanged (credit 4,196 in steps of 64: 65, 36 left)
    assert rate_limited_steps(100.0, 1_100, 256, **kw) == pooled_rate_limited_steps(100.0, 1_100, 256, 0, 1, **kw)
    assert rate_limited_steps(100.0, 1_100, 256, **kw) == (65, 36.0)
    assert rate_limited_steps(0.0, 0, 256, learning_starts=0, samples_per_insert=1.0, batch_size=64) == (0, 256.0)


# -- two ranks -------------------------------------------------------------------------------

def _make(name: str):
    """The algorithm ``name`` with a small config, and its batch maker ``batch(rank, update)``."""
    if name == "apex-dqn":
        from tests.unit.replay_fakes import apex_batch as batch
        from tests.unit.replay_fakes import apex_spec as spec
        from zoo.plugins.algorithms.apex.apex import ApeX, ApeXConfig

        cfg = ApeXConfig(batch_size=8, samples_per_insert=4.0, learning_starts=40, capacity=1_000, target_period=3,
                         hidden=16, lr=1e-3)
        return ApeX(cfg, spec(), seed=3), lambda rank, u: batch(4, 4, 10 * u + rank)
    if name == "sac":
        from tests.unit.replay_fakes import sac_batch as batch
        from tests.unit.replay_fakes import sac_config as small
        from tests.unit.replay_fakes import sac_spec as spec
        from zoo.plugins.algorithms.sac.sac import SAC

        return SAC(small(learning_starts=40), spec(), seed=3), lambda rank, u: batch(4, 4, 10 * u + rank)
    from tests.unit.replay_fakes import r2d2_batch as batch
    from tests.unit.replay_fakes import r2d2_config as config
    from tests.unit.replay_fakes import r2d2_spec as spec
    from zoo.plugins.algorithms.r2d2.r2d2 import R2D2

    # T = 8, sequences of 4 every 2 steps: 3 per column; rank 0 has 2 columns (6 sequences), rank 1 one (3)
    return R2D2(config(), spec(), seed=3), lambda rank, u: batch(8, 2 - rank, 10 * u + rank)


def _share(name: str, make_batch, rank: int, u: int) -> dict:
    b = make_batch(rank, u)
    if name != "r2d2" and rank == 1:  # rank 1: its first batch all inactive (an empty shard), then 10 of 16
        active = np.ones_like(b["active"])
        active.reshape(-1)[: 16 if u == 0 else 6] = False
        b["active"] = active
    return b


def flat_state(state, prefix: str = "") -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    if isinstance(state, dict):
        for k, v in state.items():
            if not prefix and k in OWN:
                continue
            out.update(flat_state(v, f"{prefix}{k}/"))
    elif isinstance(state, (list, tuple)):
        for i, v in enumerate(state):
            out.update(flat_state(v, f"{prefix}{i}/"))
    elif isinstance(state, torch.Tensor):
        out[prefix[:-1]] = state.detach().cpu().numpy().copy()
    elif state is not None and not isinstance(state, str):
        out[prefix[:-1]] = np.array(state)
    return out


def _rank_main(rank: int, run_id: str, run_dir: str, out: str) -> None:
    from zoo.core.algorithm import NonFiniteUpdate
    from zoo.core.distributed import TrainerGroup
    from zoo.plugins.resolvers.files.resolver import FilesResolver

    torch.set_num_threads(1)
    group = TrainerGroup.join(rank, 2, "cpu", ["cpu"] * 2, run_id, FilesResolver(run_dir), 60.0,
                              stop=lambda: False, heartbeat=lambda: None)
    try:
        result = {}
        for name in ("apex-dqn", "sac", "r2d2"):
            algo, make_batch = _make(name)
            if rank == 1:  # different initial weights (targets too): the group must start from rank 0's
                with torch.no_grad():
                    for p in algo.replicated.parameters():
                        p.add_(1.0)
            group.broadcast_module(algo.replicated)
            start = flat_state(algo.state_dict())
            for u in range(UPDATES):
                stats = algo.update(_share(name, make_batch, rank, u))
                result[f"{name}|steps{u}"] = np.array(stats["gradient_steps"])
                result.update({f"{name}|u{u}|{k}": v for k, v in flat_state(algo.state_dict()).items()})
            result[f"{name}|changed"] = np.array(any(not np.array_equal(v, start[k])
                                                     for k, v in flat_state(algo.state_dict()).items()
                                                     if k.startswith(("policy/", "q/"))))
            result[f"{name}|shard"] = np.array(len(algo.replay))
        # a non-finite initial priority on rank 1 only (a NaN reward in its new batch): both skip
        algo, make_batch = _make("apex-dqn")
        group.broadcast_module(algo.replicated)
        for u in range(3):
            algo.update(_share("apex-dqn", make_batch, rank, u))
        before = flat_state(algo.state_dict())
        shard = len(algo.replay)
        bad = _share("apex-dqn", make_batch, rank, 3)
        if rank == 1:
            bad["reward"][3, 2] = np.nan  # an active step (rank 1's first 6, rows 0 and 1, are inactive)
        try:
            algo.update(bad)
            result["nonfinite"] = np.array("none")
        except NonFiniteUpdate as exc:
            result["nonfinite"] = np.array(exc.what)
        after = flat_state(algo.state_dict())
        result["unchanged"] = np.array(before.keys() == after.keys()
                                       and all(np.array_equal(before[k], after[k]) for k in before)
                                       and len(algo.replay) == shard)
        np.savez(out, **result)
    finally:
        group.close()


def test_two_ranks_take_the_same_steps_and_hold_the_same_state_after_every_update(tmp_path):
    run_id = f"dprep-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    outs = [str(tmp_path / f"rank{r}.npz") for r in range(2)]
    procs = [ctx.Process(target=_rank_main, args=(r, run_id, str(tmp_path), outs[r])) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(300)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [dict(np.load(o)) for o in outs]
    assert ranks[0].keys() == ranks[1].keys()
    # apex-dqn (batch 8, 4 per insert, learning after 40) and sac (batch 8, 8 per insert, after 40):
    # rank 0 inserts 16 transitions an update, rank 1 0 then 10; a step takes 2 x 8 = 16.
    #   update 1: 16 together < 40: no credit. update 2: 16 + 26 = 42 >= 40: credit 26 x spi, but
    #   rank 1's shard is empty: no step. update 3: credit 2 x 26 x spi: apex 208 / 16 = 13, sac
    #   416 / 16 = 26. Then 104 (+ 8 carried every other update) and 208 a update.
    # r2d2 (batch 4, 2 per insert, learning at once): 6 + 3 sequences an update, 18 credit, 8 a step:
    #   update 1 no step (empty shards), then 36 -> 4 (4 left), 22 -> 2 (6), 24 -> 3 (0), 18 -> 2 (2).
    expect = {"apex-dqn": [0, 0, 13, 6, 7], "sac": [0, 0, 26, 13, 13], "r2d2": [0, 4, 2, 3, 2]}
    for name, steps in expect.items():
        for r in ranks:
            assert [int(r[f"{name}|steps{u}"]) for u in range(UPDATES)] == steps, name
            assert bool(r[f"{name}|changed"]), f"{name}: the updates changed nothing"
        state_keys = [k for k in ranks[0] if k.startswith(f"{name}|u")]
        assert any("target" in k for k in state_keys) and any("optimizer" in k for k in state_keys)
        for key in state_keys:
            assert np.array_equal(ranks[0][key], ranks[1][key]), f"{key}: the ranks differ"
        last = f"{name}|u{UPDATES - 1}|"
        assert int(ranks[0][last + "gradient_steps"]) == sum(steps)
        per_step = 2 * (4 if name == "r2d2" else 8)
        assert int(ranks[0][last + "replayed"]) == sum(steps) * per_step
    # every rank's inserts count: apex and sac 5 x 16 + 4 x 10 = 120 transitions, r2d2 5 x 9 = 45 sequences
    assert [int(ranks[0][f"{n}|u{UPDATES - 1}|inserted"]) for n in expect] == [120, 120, 45]
    # each shard holds its own rank's data
    assert [(int(r["apex-dqn|shard"]), int(r["sac|shard"]), int(r["r2d2|shard"])) for r in ranks] == [
        (80, 80, 30), (40, 40, 15)]
    # sac's warmup (uniform actions) ended on both at update 2, when the shards together held 42 >= 40
    assert [float(r["sac|u1|policy/warmup"]) for r in ranks] == [0.0, 0.0]
    assert [float(r["sac|u0|policy/warmup"]) for r in ranks] == [1.0, 1.0]
    # rank 1's NaN: rank 1 names its value, rank 0 was told; both kept every piece of state
    assert [str(r["nonfinite"]) for r in ranks] == ["initial_priority", "initial_priority"]
    assert [bool(r["unchanged"]) for r in ranks] == [True, True]


# -- a rank's own state beside latest.pt -------------------------------------------------------

@pytest.mark.parametrize("name", ["apex-dqn", "sac", "r2d2"])
def test_a_ranks_own_state_is_written_beside_latest_and_read_back(tmp_path, name):
    from zoo.core.workers.checkpointing import load_rank_state, rank_state_path, write_rank_state

    algo, make_batch = _make(name)
    for u in range(3):
        algo.update(make_batch(1, u))
    for updates in (3, 4, 5):
        write_rank_state(str(tmp_path), 1, updates, algo)
    # the two newest are kept (the newest may be ahead of latest.pt while rank 0 writes it)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["replay-rank1-u00000004.pt", "replay-rank1-u00000005.pt"]
    assert rank_state_path(str(tmp_path), 1, 5) == str(tmp_path / "checkpoints" / "replay-rank1-u00000005.pt")
    fresh, _ = _make(name)
    assert load_rank_state(str(tmp_path), 1, 5, fresh) is None
    mine, theirs = algo.rank_state_dict(), fresh.rank_state_dict()
    assert flat_state(mine["replay"]).keys() == flat_state(theirs["replay"]).keys()
    for k, v in flat_state(mine["replay"]).items():
        assert np.array_equal(v, flat_state(theirs["replay"])[k]), k
    assert mine["rng"] == theirs["rng"]
    # the next draws are the same: an exact resume of this rank's sampling
    assert np.array_equal(algo.rng.integers(0, 1 << 30, 4), fresh.rng.integers(0, 1 << 30, 4))
    # no file of latest.pt's update: the shard starts empty, and the note says so
    note = load_rank_state(str(tmp_path), 1, 3, fresh)
    assert note == ("trainer rank 1: no replay-rank1-u00000003.pt beside latest.pt (update 3); its replay shard "
                    "starts empty and fills from its actors' next samples")
    assert fresh.replay is None


@pytest.mark.parametrize("name, unit", [("apex-dqn", "transitions"), ("sac", "transitions"), ("r2d2", "sequences")])
def test_a_replay_of_another_capacity_is_refused_naming_the_key(name, unit):
    """A checkpoint (or a rank's shard) whose replay holds another capacity than ``algo.capacity``
    is refused with the value to resume with; a shard state of None leaves an empty shard."""
    import dataclasses

    algo, make_batch = _make(name)
    algo.update(make_batch(0, 0))
    whole, shard = algo.state_dict(), algo.rank_state_dict()
    held = int(whole["replay"]["capacity"])
    other, _ = _make(name)
    other.config = dataclasses.replace(other.config, capacity=held + 1)
    expect = (f"the checkpoint's %s holds {held:,} {unit} but algo.capacity={held + 1:,}; "
              f"resume with --set algo.capacity={held}")
    with pytest.raises(ValueError, match="^" + expect % "replay" + "$"):
        other.load_state_dict(whole)
    with pytest.raises(ValueError, match="^" + expect % "replay shard" + "$"):
        other.load_rank_state_dict(shard)
    same, _ = _make(name)
    same.load_rank_state_dict(shard)
    assert same.replay is not None and len(same.replay) == len(algo.replay)
    same.load_rank_state_dict(None)
    assert same.replay is None


def test_a_batch_without_an_active_step_inserts_nothing():
    # A data-parallel rank whose actors' agent slots were all inactive (rank 1 above, first batch):
    # apex-dqn's initial priorities used to run the network on zero rows and raise.
    from tests.unit.replay_fakes import apex_batch as batch
    from tests.unit.replay_fakes import apex_spec as spec
    from zoo.plugins.algorithms.apex.apex import ApeX, ApeXConfig

    algo = ApeX(ApeXConfig(batch_size=8, samples_per_insert=4.0, learning_starts=0, capacity=1_000, hidden=16),
                spec(), seed=3)
    empty = batch(4, 4, 0)
    empty["active"][:] = False
    stats = algo.update(empty)
    assert (stats["replay_size"], stats["gradient_steps"], stats["agent_steps"], algo.credit) == (0.0, 0.0, 0.0, 0.0)
    # then 16 transitions into the empty replay: credit 64, no step from an empty replay; then 128 / 8 = 16 steps
    assert [algo.update(batch(4, 4, u))["gradient_steps"] for u in (1, 2)] == [0.0, 16.0]
    assert (len(algo.replay), algo.inserted, algo.replayed, algo.credit) == (32, 32, 128, 0.0)
