"""The actor's sample layout, checked value by value on a counting environment."""
import numpy as np

from tests.unit.fakes import Counter
from zoo.core.workers.actor import EnvGroup, SampleBuffer
from zoo.core.workers.trainer import collate


def run_group(T=4):
    group = EnvGroup([Counter(terminate=False), Counter(terminate=True)], [0, 1])
    buf = SampleBuffer(T, group.obs)
    episodes = []
    for step in range(T):
        reply = {"action": np.zeros(2, np.int64), "logp": np.full(2, -0.5, np.float32)}
        buf.record_policy(reply, version=step, active=group.active, on_reset=group.on_reset)
        group.step(reply["action"], buf, episodes)
    return buf.bundle(), episodes


def test_sample_rows_reset_and_bootstrap_observation():
    sample, episodes = run_group()
    # Both envs: obs 0,1,2 then (episode ends at step 3) reset obs 100, then 101 as bootstrap row.
    assert sample["obs"]["obs"][:, :, 0].T.tolist() == [[0, 1, 2, 100, 101], [0, 1, 2, 100, 101]]
    assert sample["reward"].T.tolist() == [[1, 2, 3, 1], [1, 2, 3, 1]]
    assert sample["truncated"].T.tolist() == [[False, False, True, False], [False] * 4]
    assert sample["terminated"].T.tolist() == [[False] * 4, [False, False, True, False]]
    # Only the truncated env records its real final observation (3), at (t=2, slot 0).
    assert sample["final_index"].tolist() == [[2, 0]]
    assert sample["final_obs"]["obs"][:, 0].tolist() == [3.0]
    assert sample["policy_version"].T.tolist() == [[0, 1, 2, 3]] * 2
    assert sample["on_reset"].T.tolist() == [[True, False, False, True]] * 2
    assert sample["logp"].shape == (4, 2) and sample["action"].shape == (4, 2)
    assert [(e["return"], e["length"]) for e in episodes] == [(6.0, 3), (6.0, 3)]


def test_collate_shifts_final_index_by_batch_offset():
    a, _ = run_group()
    b, _ = run_group()
    batch = collate([a, b])
    assert batch["reward"].shape == (4, 4)
    assert batch["obs"]["obs"].shape == (5, 4, 1)
    assert batch["final_index"].tolist() == [[2, 0], [2, 2]]
    assert batch["final_obs"]["obs"].shape == (2, 1)
