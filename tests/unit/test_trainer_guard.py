"""The trainer's non-finite guard (:mod:`zoo.core.workers.guard`): which batches it refuses,
how it counts skipped updates, and the messages and error it gives; values worked out by hand."""
from __future__ import annotations

import numpy as np
import pytest

from zoo.core.algorithm import NonFiniteUpdate
from zoo.core.workers.accounting import TrainerState
from zoo.core.workers.guard import NonFiniteGuard, NonFiniteRunError, Skip, sample_origin


def batch(nan_at: tuple[int, int] | None = None) -> dict:
    """A [T=3, B=4] batch, finite unless ``nan_at`` = (t, column) holds a NaN reward."""
    out = {"reward": np.ones((3, 4), np.float32), "obs": {"obs": np.zeros((4, 4, 2), np.float32)},
           "action": np.zeros((3, 4), np.int64), "final_obs": {"obs": np.empty((0, 2), np.float32)},
           "final_index": np.empty((0, 2), np.int64)}
    if nan_at is not None:
        out["reward"][nan_at] = np.nan
    return out


# actor 2, envs 4.. with 1 agent, 2 columns; actor 5, env_offset 0, 2 agents, 2 columns
ORIGINS = [(2, 4, 1, 2), (5, 0, 2, 2)]


def test_check_names_the_actor_env_and_agent_of_a_nonfinite_column():
    guard = NonFiniteGuard(TrainerState(), limit=3)
    assert guard.check(batch(), ORIGINS) == []
    # column 1: actor 2's second column -> env 4 + 1 = 5, agent 0
    assert guard.check(batch((1, 1)), ORIGINS) == [{"actor": 2, "env": 5, "agent": 0, "keys": ["reward"]}]
    # column 3: actor 5's second column -> env 0 + 1 // 2 = 0, agent 1 % 2 = 1
    assert guard.check(batch((0, 3)), ORIGINS) == [{"actor": 5, "env": 0, "agent": 1, "keys": ["reward"]}]
    assert guard.check(None, []) == []  # no batch (a data-parallel rank asked to stop)
    assert NonFiniteGuard(TrainerState(), limit=3, learn=False).check(batch((1, 1)), ORIGINS) == []  # not trained on


def test_sample_origin_reads_the_message_meta():
    sample = {"reward": np.zeros((5, 6), np.float32)}
    assert sample_origin({"actor": 3, "env_offset": 8, "agents": 2}, sample, agents=1) == (3, 8, 2, 6)
    assert sample_origin({}, sample, agents=4) == (-1, 0, 4, 6)


def test_skips_count_a_streak_up_to_the_limit_and_an_update_ends_it():
    st = TrainerState()
    guard = NonFiniteGuard(st, limit=3)
    sources = [{"actor": 2, "env": 5, "agent": 0, "keys": ["reward"]}]
    first = guard.skip_batch(sources)
    detail = ("the batch holds NaN/inf from actor 2 env 5 agent 0: reward: check that environment "
              "(its rewards and observations) or the policy's outputs")
    assert first == Skip("batch values", sources, detail, streak=1, total=1, last=False)
    assert first.row() == {"what": "batch values", "sources": sources, "streak": 1, "nonfinite_updates": 1}
    assert first.warning() == f"update skipped (non-finite batch values; {detail}); 1 in a row, 1 in all"
    assert guard.skip_batch(sources).last is False  # streak 2
    st.updated(10, 2, now=0.0)  # a finite update in between
    assert (st.nonfinite_streak, st.nonfinite_updates) == (0, 2)
    assert [guard.skip_batch(sources).streak for _ in range(2)] == [1, 2]
    third = guard.skip_batch(sources)
    assert (third.streak, third.total, third.last) == (3, 5, True)
    assert (st.nonfinite_streak, st.nonfinite_updates, st.version) == (3, 5, 1)  # skips make no version


def test_a_nonfinite_update_is_described_by_the_batch_s_samples_and_the_error_names_the_checkpoint():
    st = TrainerState()
    st.version = 7
    guard = NonFiniteGuard(st, limit=1)
    skip = guard.skip_update(NonFiniteUpdate("grad_norm", step=2, value=float("inf")), ORIGINS)
    assert skip.what == "grad_norm" and skip.last is True
    assert skip.sources == [{"actor": 2, "env_offset": 4, "columns": 2}, {"actor": 5, "env_offset": 0, "columns": 2}]
    assert skip.detail == ("non-finite grad_norm (inf) at gradient step 2 of the update; update skipped; the batch "
                           "itself was finite, so the update diverged: lower the learning rate (algo.lr) or the "
                           "gradient-norm clip (algo.max_grad_norm)")
    error = guard.error(skip, "/runs/r/checkpoints/latest.pt")
    assert isinstance(error, NonFiniteRunError)
    assert str(error) == ("1 consecutive updates were skipped because of non-finite values "
                          f"(trainer.max_nonfinite_updates=1); the last one: non-finite grad_norm; {skip.detail}. "
                          "The checkpoint /runs/r/checkpoints/latest.pt holds the last finite weights "
                          "(policy version 7).")


@pytest.mark.parametrize("limit", [0, None])
def test_an_unset_limit_stops_at_the_first_skip(limit):
    assert NonFiniteGuard(TrainerState(), limit=limit).skip("loss", [], "x").last is True
