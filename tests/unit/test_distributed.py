"""Data-parallel trainers: K = 2 gloo ranks (spawned processes) against one trainer.

After one update of PPO, IMPALA and MAPPO on a tiny deterministic network, both ranks hold
identical weights (the same checksum), equal within 1e-6 to one trainer's update on the two
shares concatenated. The shares have different numbers of active steps (rank 0: 3 of its
24 inactive, rank 1: 9), so a plain average of the ranks' gradients, or advantage and
value statistics taken per rank, would not match. A non-finite loss on one rank makes both
skip the same update.
"""
from __future__ import annotations

import multiprocessing as mp
import uuid

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec

SPEC = EnvSpec("tiny", ("agent",), {"obs": spaces.Box(-1.0, 1.0, (4,), np.float32)}, spaces.Discrete(2))
T, B = 6, 4
ALGOS = ("ppo", "impala", "mappo")
SETTINGS = {  # two passes over one minibatch: the second pass sees the first update's weights
    "ppo": {"hidden": 8, "epochs": 2, "minibatches": 1, "norm_adv": True, "max_grad_norm": 0.5},
    "impala": {"hidden": 8, "max_grad_norm": 40.0, "optimizer": "rmsprop"},
    "mappo": {"hidden": 8, "epochs": 2, "minibatches": 1, "norm_adv": True, "value_norm": "running",
              "recurrent": False, "policy": "mlp"},
}


def share(rank: int) -> dict:
    """A deterministic batch ``[T, B]`` for rank ``rank`` (different data on each)."""
    rng = np.random.default_rng(100 + rank)
    active = np.ones((T, B), bool)
    active.reshape(-1)[rng.choice(T * B, 3 if rank == 0 else 9, replace=False)] = False
    return {
        "obs": {"obs": rng.uniform(-1, 1, (T + 1, B, 4)).astype(np.float32)},
        "action": rng.integers(0, 2, (T, B)).astype(np.int64),
        "reward": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": rng.random((T, B)) < 0.1,
        "truncated": np.zeros((T, B), bool),
        "active": active,
        "on_reset": np.zeros((T, B), bool),
        "policy_version": np.zeros((T, B), np.int64),
        "logp": np.full((T, B), np.log(0.5), np.float32) + rng.normal(0, 0.1, (T, B)).astype(np.float32),
        "value": rng.normal(size=(T, B)).astype(np.float32),
        "final_obs": {"obs": np.zeros((0, 4), np.float32)},
        "final_index": np.zeros((0, 2), np.int64),
    }


def make(name: str, device: str = "cpu"):
    from zoo.core.plugins import get_registry

    cls = get_registry().get("algorithm", name).load()
    config = cls.Config(**{k: v for k, v in SETTINGS[name].items() if hasattr(cls.Config, k)}, device=device)
    return cls(config, SPEC, seed=3)


def weights(algo) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in algo.policy.state_dict().items()}


def _rank_main(rank: int, world: int, run_id: str, run_dir: str, out: str, device: str = "cpu") -> None:
    from zoo.core.distributed import TrainerGroup
    from zoo.core.graph import worker_device

    torch.set_num_threads(1)
    devices = [worker_device(device, r) for r in range(world)]
    from zoo.plugins.resolvers.files.resolver import FilesResolver

    group = TrainerGroup.join(rank, world, devices[rank], devices, run_id, FilesResolver(run_dir), 30.0,
                              stop=lambda: False, heartbeat=lambda: None)
    try:
        result = {"backend": np.array(group.backend)}
        for name in ALGOS:
            algo = make(name, devices[rank])
            if rank == 1:  # different initial weights: the group must start from rank 0's
                with torch.no_grad():
                    for p in algo.policy.parameters():
                        p.add_(1.0)
            group.broadcast_module(algo.policy)
            stats = algo.update(share(rank))
            result.update({f"{name}/{k}": v for k, v in weights(algo).items()})
            result[f"{name}/agent_steps"] = np.array(stats["agent_steps"])
        # A NaN reward on rank 1 only: its loss is NaN; rank 0's loss is finite, but the combined
        # gradient is made NaN for both, so both skip the same update and keep their weights.
        from zoo.core.algorithm import NonFiniteUpdate

        algo = make("impala", devices[rank])
        group.broadcast_module(algo.policy)
        before = weights(algo)
        bad = share(rank)
        if rank == 1:
            bad["reward"][0, 0] = np.nan
        try:
            algo.update(bad)
            result["nonfinite"] = np.array("none")
        except NonFiniteUpdate as exc:
            result["nonfinite"] = np.array(exc.what)
        result["unchanged"] = np.array(all(np.array_equal(before[k], v) for k, v in weights(algo).items()))
        np.savez(out, **result)
    finally:
        group.close()


@pytest.mark.parametrize("device", [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU")),
])
def test_two_ranks_hold_identical_weights_equal_to_one_trainer_on_both_shares(tmp_path, device):
    from zoo.core.workers.trainer import collate

    run_id = f"dist-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    outs = [str(tmp_path / f"rank{r}.npz") for r in range(2)]
    procs = [ctx.Process(target=_rank_main, args=(r, 2, run_id, str(tmp_path), outs[r], device)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(240)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [dict(np.load(o)) for o in outs]
    # NCCL only when each rank has its own GPU; two ranks on one GPU or on the CPU use gloo
    assert str(ranks[0].pop("backend")) == ("nccl" if device == "cuda" and torch.cuda.device_count() >= 2 else "gloo")
    ranks[1].pop("backend")
    assert [str(r.pop("nonfinite")) for r in ranks] == ["grad_norm", "loss"]
    assert [bool(r.pop("unchanged")) for r in ranks] == [True, True]
    from zoo.plugins.resolvers.files.resolver import FilesResolver

    assert FilesResolver(str(tmp_path)).keys(run_id) == []  # rank 0 removed its address (trainers.store)
    both = collate([share(0), share(1)])
    for name in ALGOS:
        single = make(name, "cuda:0" if device == "cuda" else "cpu")
        single.update(both)
        expect = weights(single)
        for key, value in expect.items():
            r0, r1 = ranks[0][f"{name}/{key}"], ranks[1][f"{name}/{key}"]
            assert np.array_equal(r0, r1), f"{name} {key}: the ranks differ"
            np.testing.assert_allclose(r0, value, rtol=0, atol=1e-6, err_msg=f"{name} {key}")
        before = weights(make(name))
        assert any(not np.allclose(before[k], expect[k]) for k in expect), f"{name}: the update changed nothing"
        # agent steps count both ranks' active steps: (24 - 3) + (24 - 9) = 36
        assert ranks[0][f"{name}/agent_steps"] == ranks[1][f"{name}/agent_steps"] == 36
    checksum = [sum(float(np.abs(v).sum()) for k, v in r.items() if not k.endswith("agent_steps")) for r in ranks]
    assert checksum[0] == checksum[1]



def _leave_main(rank: int, run_id: str, run_dir: str) -> None:
    import os
    import time
    from pathlib import Path

    from zoo.core.distributed import TrainerGroup
    from zoo.plugins.resolvers.files.resolver import FilesResolver

    torch.set_num_threads(1)
    folder = Path(run_dir)
    group = TrainerGroup.join(rank, 2, "cpu", ["cpu", "cpu"], run_id, FilesResolver(run_dir), 30.0,
                              stop=lambda: False, heartbeat=lambda: None)
    t = torch.ones(2)
    group.all_reduce_cpu(t)
    if rank == 0:
        (folder / "closing").touch()
        group.close(leave_timeout_s=120.0)
        (folder / "closed").touch()
        return
    deadline = time.monotonic() + 60
    while not (folder / "closing").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    # rank 0 is in close(): give it 3 s to come out (it did at once before it waited for the others)
    deadline = time.monotonic() + 3
    while not (folder / "closed").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    (folder / "rank1").write_text(f"{t.tolist()} {(folder / 'closed').exists()}")
    group.close()
    os._exit(0)


def test_rank_0_which_hosts_the_store_leaves_only_after_every_rank_has_left(tmp_path):
    """Rank 0's store must outlive every rank's teardown: a rank still destroying its side of
    the group when rank 0 exited once died with SIGABRT ("terminate called without an active
    exception", CI) after its work was done. Rank 0 enters close() first; rank 1 sees it still
    there 3 s later, then closes, and only then does rank 0 come out."""
    run_id = f"leave-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_leave_main, args=(r, run_id, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(240)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    assert [p.exitcode for p in procs] == [0, 0]
    assert (tmp_path / "rank1").read_text() == "[2.0, 2.0] False"
    assert (tmp_path / "closed").exists()


# ----------------------------------------------------------------------------- statistics that must agree
NORM_SETTINGS = {  # observation and reward normalisation on; two passes over one minibatch
    "ppo": {"hidden": 8, "epochs": 2, "minibatches": 1, "norm_obs": True, "norm_reward": True},
    "impala": {"hidden": 8, "max_grad_norm": 40.0, "norm_obs": True, "norm_reward": True},
    "mappo": {"hidden": 8, "epochs": 2, "minibatches": 1, "obs_norm": True, "norm_reward": True,
              "value_norm": "running", "recurrent": False, "policy": "mlp"},
}
UPDATES = 3
# Each rank's own data order and data, not state shared by the group: the minibatch permutation
# generator (it draws permutations of this rank's share) and MAPPO's kept batches (this rank's share).
OWN = ("rng", "buffer", "config")


def norm_share(rank: int, update: int) -> dict:
    """Rank ``rank``'s share of update ``update``: :func:`share` with observations of a
    different scale per feature (so the statistics move far from their start), discounted
    returns for reward normalisation and one truncated step with its final observation."""
    batch = share(rank)
    rng = np.random.default_rng(1000 + 10 * update + rank)
    batch["obs"] = {"obs": (rng.normal(size=(T + 1, B, 4)) * [1.0, 3.0, 0.5, 10.0] + [0.0, 5.0, -2.0, 1.0])
                    .astype(np.float32)}
    batch["reward"] = rng.normal(size=(T, B)).astype(np.float32) * (1 + rank)
    batch["disc_return"] = rng.normal(size=(T, B)).astype(np.float32) * (3 + update)
    batch["terminated"][2, 1] = False
    batch["truncated"][2, 1] = True
    batch["final_obs"] = {"obs": rng.normal(size=(1, 4)).astype(np.float32)}
    batch["final_index"] = np.array([[2, 1]], np.int64)
    return batch


def make_norm(name: str):
    from zoo.core.plugins import get_registry

    cls = get_registry().get("algorithm", name).load()
    return cls(cls.Config(**{k: v for k, v in NORM_SETTINGS[name].items() if hasattr(cls.Config, k)}), SPEC, seed=3)


def flat_state(state, prefix: str = "") -> dict[str, np.ndarray]:
    """An algorithm's whole ``state_dict()`` (policy, optimiser, statistics, counters) as
    ``{"a/b/c": array}``, without the entries in :data:`OWN`."""
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


def _norm_rank_main(rank: int, world: int, run_id: str, run_dir: str, out: str) -> None:
    from zoo.core.distributed import TrainerGroup
    from zoo.plugins.resolvers.files.resolver import FilesResolver

    torch.set_num_threads(1)
    group = TrainerGroup.join(rank, world, "cpu", ["cpu"] * world, run_id, FilesResolver(run_dir), 30.0,
                              stop=lambda: False, heartbeat=lambda: None)
    try:
        result = {}
        for name in NORM_SETTINGS:
            algo = make_norm(name)
            group.broadcast_module(algo.policy)
            for u in range(UPDATES):
                algo.update(norm_share(rank, u))
            result.update({f"{name}|{k}": v for k, v in flat_state(algo.state_dict()).items()})
        np.savez(out, **result)
    finally:
        group.close()


def test_two_ranks_keep_the_statistics_of_one_trainer_on_the_concatenated_shares(tmp_path):
    """Observation and reward normalisation with K = 2 over 3 updates: each rank's whole state
    (weights, buffers, optimiser state, reward statistics, counters) is bitwise the other's, and
    equals one trainer's fed both shares concatenated: the data statistics (observation and
    reward mean, variance, count: float64 sums of the same numbers in another order) within
    1e-12 relative, weights, optimiser moments and MAPPO's value statistics (outputs of the
    network) within 1e-6 as in the test above (an all-reduced mean gradient is not bitwise a
    one-batch gradient, and the updates compound it). Before the statistics were pooled each
    rank kept the moments of its own share (rank 1's rewards have twice the scale)."""
    from zoo.core.workers.trainer import collate

    run_id = f"dist-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    outs = [str(tmp_path / f"rank{r}.npz") for r in range(2)]
    procs = [ctx.Process(target=_norm_rank_main, args=(r, 2, run_id, str(tmp_path), outs[r])) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(240)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [dict(np.load(o)) for o in outs]
    assert ranks[0].keys() == ranks[1].keys()
    for key in ranks[0]:
        assert np.array_equal(ranks[0][key], ranks[1][key]), f"{key}: the ranks differ"
    for name in NORM_SETTINGS:
        single = make_norm(name)
        for u in range(UPDATES):
            single.update(collate([norm_share(0, u), norm_share(1, u)]))
        expect = flat_state(single.state_dict())
        assert {f"{name}|{k}" for k in expect} == {k for k in ranks[0] if k.startswith(f"{name}|")}
        data_stats = [k for k in expect if "obs_norm" in k or k.startswith("reward_norm/")]
        assert any("obs_norm" in k for k in data_stats) and any(k.startswith("reward_norm/") for k in data_stats)
        for key, value in expect.items():
            got = ranks[0][f"{name}|{key}"]
            if key in data_stats:
                np.testing.assert_allclose(got, value, rtol=1e-12, atol=0, err_msg=f"{name} {key}")
            else:
                np.testing.assert_allclose(got, value, rtol=0, atol=1e-6, err_msg=f"{name} {key}")
        # the reward statistics saw the active steps of 3 updates, (24 - 3) + (24 - 9) = 36 each, after
        # the 1e-4 prior; so did the ranks
        assert float(expect["reward_norm/returns.count"]) == pytest.approx(1e-4 + UPDATES * 36, rel=1e-15)
        assert float(ranks[0][f"{name}|reward_norm/returns.count"]) == pytest.approx(1e-4 + UPDATES * 36, rel=1e-15)


def test_rank_0_republishes_its_weights_while_it_waits_for_its_peers():
    # A policy worker that subscribed after rank 0's last publish would wait for parameters
    # forever while rank 0 waits at a sync point for the peer those actors feed (a deadlock seen
    # in CI): the waits' heartbeat republishes every REPUBLISH_S once a first publish was made.
    from zoo.core.workers.trainer import REPUBLISH_S, Republisher

    calls: list[str] = []
    r = Republisher(lambda: calls.append("publish"), REPUBLISH_S)
    r.tick(lambda: calls.append("heartbeat"), now=100.0)  # nothing published yet: no republish
    r.published(100.0)
    r.tick(lambda: calls.append("heartbeat"), now=100.5)
    r.tick(lambda: calls.append("heartbeat"), now=101.0)
    r.tick(lambda: calls.append("heartbeat"), now=101.5)
    r.tick(lambda: calls.append("heartbeat"), now=102.0)
    assert REPUBLISH_S == 1.0
    assert calls == ["heartbeat", "heartbeat", "heartbeat", "publish", "heartbeat", "heartbeat", "publish"]
    other = Republisher(None, REPUBLISH_S)  # ranks > 0 publish nothing
    other.published(0.0)
    other.tick(lambda: calls.append("rank 1 heartbeat"), now=50.0)
    assert calls[-1] == "rank 1 heartbeat"
