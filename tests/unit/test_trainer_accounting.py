"""The trainer's accounting (:mod:`zoo.core.workers.accounting`): shares added to the run's
counters, episode stamps, updates, rates, the dropped fraction and what a checkpoint keeps;
every value worked out by hand."""
from __future__ import annotations

import numpy as np

from zoo.core.workers.accounting import RECENT_EPISODES, TrainerState, rate_limit_wait
from zoo.core.workers.receiver import fresh_share


def share(env_steps: int, episodes: list[dict], episode_at: list[int], dropped: int = 0,
          actor_dropped: int = 0) -> dict:
    return {"env_steps": env_steps, "episodes": episodes, "episode_at": episode_at, "dropped": dropped,
            "actor_dropped": actor_dropped}


def test_one_trainer_stamps_each_episode_with_the_env_steps_up_to_its_sample():
    st = TrainerState()
    st.env_steps = 100
    logged = st.absorb([share(30, [{"return": 1.0, "length": 5, "opponent_version": 3},
                                   {"return": 3.0, "length": 7, "win": 1.0, "opponent_version": 8}],
                              [10, 30], dropped=2, actor_dropped=1)], stamp_at_sample=True)
    # 100 + 10 and 100 + 30
    assert logged == [(110, {"return": 1.0, "length": 5, "opponent_version": 3}),
                      (130, {"return": 3.0, "length": 7, "win": 1.0, "opponent_version": 8})]
    assert (st.env_steps, st.episodes, st.dropped_samples, st.actor_dropped_samples) == (130, 2, 2, 1)
    assert st.return_mean() == 2.0  # (1 + 3) / 2
    # only the episode that reported it; return and length are not stats, a played version
    # is a label (its mean, 5.5, was shown as opponent_version=5.5)
    assert st.recent_means() == {"win": 1.0}


def test_data_parallel_ranks_stamp_every_episode_with_the_run_s_env_steps_after_the_sync_point():
    st = TrainerState()
    st.env_steps = 100
    logged = st.absorb([share(30, [{"return": 4.0, "length": 3}], [10], dropped=1),
                        share(20, [{"return": -2.0, "length": 9}], [20], dropped=5, actor_dropped=3)],
                       stamp_at_sample=False)
    # 100 + 30 + 20 = 150 for both, in rank order
    assert logged == [(150, {"return": 4.0, "length": 3}), (150, {"return": -2.0, "length": 9})]
    assert (st.env_steps, st.episodes, st.dropped_samples, st.actor_dropped_samples) == (150, 2, 6, 3)
    assert st.return_mean() == 1.0  # (4 - 2) / 2


def test_an_empty_share_changes_nothing():
    st = TrainerState()
    assert st.absorb([fresh_share()], stamp_at_sample=True) == []
    assert (st.env_steps, st.episodes, st.return_mean(), st.recent_means()) == (0, 0, None, {})


def test_the_recent_returns_are_the_last_twenty_episodes():
    st = TrainerState()
    st.absorb([share(25, [{"return": float(i), "length": 1} for i in range(25)], list(range(1, 26)))], True)
    assert RECENT_EPISODES == 20
    assert list(st.recent) == [float(i) for i in range(5, 25)]
    assert st.return_mean() == 14.5  # mean of 5..24
    assert st.episodes == 25


def test_an_update_counts_a_version_the_trained_samples_and_ends_the_nonfinite_streak():
    st = TrainerState()
    st.env_steps, st.nonfinite_streak, st.nonfinite_updates = 100, 2, 2
    st.updated(50, 8, now=10.0)
    assert (st.version, st.updates, st.trained_env_steps, st.trained_samples) == (1, 1, 50, 8)
    assert (st.nonfinite_streak, st.nonfinite_updates) == (0, 2)  # the total stays
    assert st.rate_ref == (10.0, 100, 50, 1)  # the segment's first update
    assert st.rates(10.0) == {}  # not yet: at the first update
    st.env_steps = 300
    st.updated(50, 8, now=12.0)
    assert st.rate_ref == (10.0, 100, 50, 1)  # kept from the first update
    # (300 - 100) / (14 - 10) = 50; (100 - 50) / 4 = 12.5
    assert st.rates(14.0) == {"mean_env_steps_per_s": 50.0, "mean_trained_env_steps_per_s": 12.5}


def test_counters_flow_and_dropped_fraction():
    st = TrainerState()
    assert st.dropped_fraction() == 0.0
    st.version, st.updates, st.env_steps, st.episodes, st.trained_env_steps = 3, 3, 40, 2, 24
    st.dropped_samples, st.actor_dropped_samples, st.trained_samples = 3, 1, 12
    assert st.counters(frame_skip=4) == {"policy_version": 3, "updates": 3, "env_steps": 40, "frames": 160,
                                         "episodes": 2, "trained_env_steps": 24}
    assert st.dropped_fraction() == 0.25  # (3 + 1) / (3 + 1 + 12)
    assert st.flow(now=1.0) == {"dropped_samples": 3, "actor_dropped_samples": 1, "trained_samples": 12,
                                "dropped_fraction": 0.25}  # no rates before an update in this segment


def test_a_checkpoint_s_counters_load_back_with_a_fresh_nonfinite_streak():
    st = TrainerState()
    st.absorb([share(12, [{"return": 2.0, "length": 4, "win": 0.0}], [4], dropped=1, actor_dropped=2)], True)
    st.updated(8, 2, now=1.0)
    st.nonfinite_updates, st.nonfinite_streak, st.resumes = 3, 1, 1
    st.pending, st.origins, st.pending_slots = [{"reward": np.zeros((2, 3), np.float32)}], [(0, 0, 1, 3)], 3
    st.pending_share = share(6, [], [])
    saved = st.to_dict(time_s=7.5, metrics_bytes=321)
    assert {k: v for k, v in saved.items() if k not in ("pending", "rng")} == {
        "dropped_samples": 1, "actor_dropped_samples": 2, "trained_samples": 2, "pending_share": share(6, [], []),
        "nonfinite_updates": 3, "nonfinite_streak": 1, "time_s": 7.5, "metrics_bytes": 321, "recent": [2.0],
        "recent_stats": {"win": [0.0]}, "origins": [(0, 0, 1, 3)], "pending_slots": 3,
        "rate_limit_waits": 0, "rate_limit_wait_s": 0.0, "rate_limit_held_s": 0.0}
    assert set(saved["rng"]) >= {"torch", "numpy", "python"}
    ckpt = {**st.counters(1), "resumes": 1, "trainer": saved}
    back = TrainerState()
    back.load(ckpt)
    assert back.counters(1) == st.counters(1) == {"policy_version": 1, "updates": 1, "env_steps": 12, "frames": 12,
                                                   "episodes": 1, "trained_env_steps": 8}
    assert (back.dropped_samples, back.actor_dropped_samples, back.trained_samples) == (1, 2, 2)
    assert (back.nonfinite_updates, back.nonfinite_streak, back.resumes, back.time_before) == (3, 0, 1, 7.5)
    assert (list(back.recent), back.recent_means(), back.pending_slots) == ([2.0], {"win": 0.0}, 3)
    assert back.pending_share == share(6, [], []) and back.origins == [(0, 0, 1, 3)]
    assert back.rng_note is None
    back.drop_pending()
    assert (back.pending, back.origins, back.pending_slots, back.pending_share) == ([], [], 0, fresh_share())


# ----------------------------------------------------------------------------- the rate limiter's waits
def test_rate_limit_wait_splits_each_batch_into_learner_and_batch_waits():
    # asked at 10.0, complete at 12.5, taken at once: the learner waited 2.5 s for inserted data
    assert rate_limit_wait(10.0, 12.5, 12.5) == (2.5, 0.0)
    # complete at 7.0 while the learner was still training, asked and taken at 10.0: it waited 3.0 s for the learner
    assert rate_limit_wait(10.0, 7.0, 10.0) == (0.0, 3.0)
    # complete at 11.0 after the ask at 10.0, handed over at 11.25: 1.0 s each way is not double-counted
    assert rate_limit_wait(10.0, 11.0, 11.25) == (1.0, 0.25)


def test_batch_taken_accumulates_the_waits_and_the_checkpoint_keeps_them():
    st = TrainerState()
    assert st.rate_limit() == {"rate_limit_waits": 0, "rate_limit_wait_s": 0.0, "rate_limit_held_s": 0.0}
    st.batch_taken(10.0, 12.5, 12.5)  # the learner waited 2.5 s
    st.batch_taken(20.0, 17.0, 20.0)  # the batch waited 3.0 s: the actors were held back
    st.batch_taken(30.0, 30.5, 30.75)  # the learner waited 0.5 s, the hand-over took 0.25 s
    assert st.rate_limit() == {"rate_limit_waits": 2, "rate_limit_wait_s": 3.0, "rate_limit_held_s": 3.25}
    again = TrainerState()
    again.load({"policy_version": 3, "updates": 3, "env_steps": 96, "episodes": 0,
                "trainer": st.to_dict(40.0, 0)})
    assert again.rate_limit() == {"rate_limit_waits": 2, "rate_limit_wait_s": 3.0, "rate_limit_held_s": 3.25}
    # a checkpoint from before the waits were counted starts them at zero
    old = TrainerState()
    old.load({"policy_version": 0, "updates": 0, "env_steps": 0, "episodes": 0, "trainer": {}})
    assert old.rate_limit() == {"rate_limit_waits": 0, "rate_limit_wait_s": 0.0, "rate_limit_held_s": 0.0}
