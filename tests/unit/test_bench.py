"""``zoo bench`` and the side-by-side benchmark: parsing, ratios and the bottleneck sentence,
each with hand-worked values (no process is started here)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tests.unit.fakes import round_trip_counts
from zoo.bench import report
from zoo.bench.measure import parse_title
from zoo.bench.workloads import WORKLOADS, UnknownWorkload, get_workload
from zoo.commands.bench import parse_phases

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers"))
import peers  # noqa: E402
import side_by_side  # noqa: E402

runner = CliRunner()


# ----------------------------------------------------------------------------- report arithmetic
def test_rate_is_growth_over_seconds():
    # (40,960 - 10,240) / 100 s = 307.2 env steps/s
    assert report.rate({"env_steps": 10_240}, {"env_steps": 40_960}, "env_steps", 100.0) == pytest.approx(307.2)


def test_trained_steps_prefers_the_trainer_counter():
    # before the counter: 7 updates x 1,024 env steps = 7,168; with it: its value, whatever the updates
    assert report.trained_steps({"updates": 7}, 1024) == 7168
    assert report.trained_steps({"updates": 7, "trained_env_steps": 5000}, 1024) == 5000
    assert report.trained_steps({"updates": 7, "trained_env_steps": None}, 1024) == 7168


def test_dropped_fraction_counts_trainer_and_actor_drops():
    # dropped: (130 - 10) + (25 - 5) = 140; used: 30,720 / 128 x 1 = 240 -> 140 / 380
    start = {"dropped_samples": 10, "actor_dropped_samples": 5}
    end = {"dropped_samples": 130, "actor_dropped_samples": 25}
    assert report.dropped_fraction(start, end, 30_720, 128) == pytest.approx(140 / 380)
    # 2 agents: used = 30,720 / 128 x 2 = 480 -> 140 / 620
    assert report.dropped_fraction(start, end, 30_720, 128, agents=2) == pytest.approx(140 / 620)
    assert report.dropped_fraction({}, {}, 0, 128) is None


def test_cpu_work_bound():
    # 2 cores / (2.0 ms + 0.5 ms) = 800 env steps/s
    assert report.cpu_work_bound(2, 0.002, 0.0005) == pytest.approx(800.0)


def test_cpu_shares_by_role_other_and_idle():
    cpu = {("actor", 0): 12.0, ("actor", 1): 10.0, ("policy", 0): 20.0, ("trainer", 0): 60.0,
           ("controller", 0): 2.0, ("machine", 0): 98.0, ("machine-total", 0): 100.0}
    shares = report.cpu_shares(cpu, 50.0, 2)
    # capacity 2 x 50 = 100 core-s: actor 22/100, policy 20/100, trainer 60/100, controller 2/100;
    # the machine was busy 98 of 100 s and Zoo used 104 (ticks of different clocks): other 0, idle 0
    assert shares == pytest.approx({"actor": 0.22, "policy": 0.2, "trainer": 0.6, "controller": 0.02,
                                    "other": 0.0, "idle": 0.0})
    # other processes used 30 core-s: busy 80 of 100, Zoo 50 -> other 0.3, idle 0.2
    cpu2 = {("actor", 0): 10.0, ("policy", 0): 10.0, ("trainer", 0): 30.0, ("machine", 0): 80.0,
            ("machine-total", 0): 100.0}
    assert report.cpu_shares(cpu2, 50.0, 2) == pytest.approx(
        {"actor": 0.1, "policy": 0.1, "trainer": 0.3, "controller": 0.0, "other": 0.3, "idle": 0.2})
    # without the machine's figures: idle = 1 - Zoo's 0.5
    assert report.cpu_shares({("trainer", 0): 50.0}, 50.0, 2)["idle"] == pytest.approx(0.5)


def test_bottleneck_words_idle_shared_and_cpu_bound():
    idle = {"actor": 0.2, "policy": 0.1, "trainer": 0.4, "controller": 0.01, "other": 0.0, "idle": 0.29}
    assert report.bottleneck_words(idle, "trainer-bound: actors wait 60% of the time", 2) == (
        "Zoo leaves 29% of the 2 cores idle, so its pipeline waits rather than the CPU running out "
        "(core use: actor 20%, policy 10%, trainer 40%, controller 1%); "
        "live display: trainer-bound: actors wait 60% of the time")
    shared = {"actor": 0.1, "policy": 0.15, "trainer": 0.05, "controller": 0.0, "other": 0.65, "idle": 0.05}
    assert report.bottleneck_words(shared, None, 2) == (
        "the cores were shared: other processes used 65% of them, Zoo got the rest "
        "(actor 10%, policy 15%, trainer 5%, controller 0%); the policy took the most")
    busy = {"actor": 0.23, "policy": 0.2, "trainer": 0.55, "controller": 0.01, "other": 0.0, "idle": 0.01}
    assert report.bottleneck_words(busy, None, 2) == (
        "CPU-bound: the 2 cores are busy (99%), most of it in the trainer (55%; "
        "actor 23%, policy 20%, trainer 55%, controller 1%)")


def test_phase_figures_from_a_window():
    # 100 s window: env steps 10,000 -> 40,000 (300/s); updates 10 -> 35 at 1,024 each = 25,600
    # trained (256/s); frame-skip 4 -> 1,200 frames/s; ceiling 600 -> 0.5, bound 400 -> 0.75;
    # dropped 50 of 50 + 25,600 / 128 = 200 used -> 0.2
    run = SimpleNamespace(
        t0=5.0, t1=105.0,
        start={"env_steps": 10_000, "updates": 10, "dropped_samples": 0},
        end={"env_steps": 40_000, "updates": 35, "dropped_samples": 50},
        cpu_s={("actor", 0): 40.0, ("actor", 1): 40.0, ("policy", 0): 30.0, ("trainer", 0): 80.0,
               ("controller", 0): 4.0, ("machine", 0): 194.0, ("machine-total", 0): 200.0},
        live={"bottleneck": {"text": "env-bound: actors step envs 70% of the time"},
              "workers": [{"role": "policy", "batch_rows": 6.0}, {"role": "actor"}]})
    got = report.phase_figures(run, 1024, 128, 1, 4, 2, 600.0, 400.0)
    assert got["env_steps_per_s"] == pytest.approx(300.0)
    assert got["trained_env_steps_per_s"] == pytest.approx(256.0)
    assert got["frames_per_s"] == pytest.approx(1200.0)
    assert got["of_ceiling"] == pytest.approx(0.5) and got["of_bound"] == pytest.approx(0.75)
    assert got["dropped_fraction"] == pytest.approx(0.2)
    assert got["policy_batch_rows"] == 6.0
    # shares: actor 80/200 = 0.4, policy 0.15, trainer 0.4, controller 0.02; idle 0.03
    assert got["cpu_shares"]["actor"] == pytest.approx(0.4) and got["cpu_shares"]["idle"] == pytest.approx(0.03)
    assert got["bottleneck"].startswith("CPU-bound: the 2 cores are busy (97%), most of it in the actor (40%")


def test_replay_figures_from_a_window():
    # 50 s: gradient steps 100 -> 600 (10/s), updates 10 -> 50 (0.8/s); replayed 64,000 over 5,120 env steps and
    # 5,120 inserted -> 12.5 each; 2 waits of 2.5 s in all (0.05 of the window); 30 s held (0.6)
    start = {"env_steps": 1_280, "updates": 10, "gradient_steps_total": 100, "replayed": 12_800, "inserted": 1_280,
             "rate_limit_waits": 3, "rate_limit_wait_s": 1.5, "rate_limit_held_s": 10.0}
    end = {"env_steps": 6_400, "updates": 50, "gradient_steps_total": 600, "replayed": 76_800, "inserted": 6_400,
           "rate_limit_waits": 5, "rate_limit_wait_s": 4.0, "rate_limit_held_s": 40.0}
    assert report.replay_figures(start, end, 50.0) == pytest.approx({
        "gradient_steps_per_s": 10.0, "updates_per_s": 0.8, "replayed_per_env_step": 12.5,
        "replayed_per_inserted": 12.5, "rate_limit_waits": 2, "rate_limit_wait_s": 2.5, "rate_limit_held_s": 30.0,
        "wait_fraction": 0.05, "held_fraction": 0.6})
    # nothing inserted or stepped in the window: no ratio; an on-policy trainer's status: no figures
    flat = report.replay_figures(start, start, 50.0)
    assert flat["replayed_per_env_step"] is None and flat["replayed_per_inserted"] is None
    assert flat["gradient_steps_per_s"] == 0.0 and flat["rate_limit_waits"] == 0
    assert report.replay_figures({"env_steps": 0, "updates": 0}, {"env_steps": 10, "updates": 1}, 5.0) is None


def test_format_table_replay_lines():
    replay = {"gradient_steps_per_s": 10.0, "updates_per_s": 0.8, "replayed_per_env_step": 12.5,
              "replayed_per_inserted": 12.5, "rate_limit_waits": 2, "rate_limit_wait_s": 2.5,
              "rate_limit_held_s": 30.0, "wait_fraction": 0.05, "held_fraction": 0.6}
    result = {"workload": "dqn-cartpole", "summary": "s", "machine": "m", "frame_skip": 1,
              "replay_config": {"samples_per_insert": 12.8, "batch_size": 128},
              "train": {"env_steps_per_s": 102.4, "trained_env_steps_per_s": 102.4, "frames_per_s": 102.4,
                        "of_ceiling": None, "of_bound": None, "dropped_fraction": None, "window_s": 50.0,
                        "cpu_shares": {"trainer": 0.5}, "bottleneck": "b", "replay": replay}}
    lines = report.format_table(result).splitlines()
    assert lines[4] == ("replay, end to end: 10.0 gradient steps/s of 128 samples (0.80 updates/s), 12.50 replayed "
                        "samples per env step, 12.50 per inserted (configured 12.8)")
    assert lines[5] == ("rate limiter, end to end: the learner waited for inserted data before 2 batches (2.5 s, 5% of "
                        "the window); complete batches waited 30.0 s for the learner (60%: the actors held back)")


def test_phase_figures_carry_the_replay_figures():
    run = SimpleNamespace(t0=0.0, t1=10.0, start={"env_steps": 0, "updates": 0, "gradient_steps_total": 0,
                                                  "replayed": 0, "inserted": 0},
                          end={"env_steps": 1_280, "updates": 10, "gradient_steps_total": 128, "replayed": 16_384,
                               "inserted": 1_280}, cpu_s={}, live=None)
    got = report.phase_figures(run, 128, 16, 1, 1, 2, None, None)["replay"]
    # 128 steps / 10 s; 16,384 replayed / 1,280 env steps = 12.8
    assert got["gradient_steps_per_s"] == 12.8 and got["replayed_per_env_step"] == 12.8
    run.start, run.end = {"env_steps": 0, "updates": 0}, {"env_steps": 1_280, "updates": 10}
    assert report.phase_figures(run, 128, 16, 1, 1, 2, None, None)["replay"] is None


def test_cpu_work_bound_with_training():
    # 2 cores / (0.5 + 0.5 + 4.0 core-ms) = 400 trained env steps/s
    assert report.cpu_work_bound(2, 0.5e-3, 0.5e-3, 4.0e-3) == pytest.approx(400.0)


def test_format_table_training_rows():
    result = {"workload": "pong", "summary": "s", "machine": "m", "frame_skip": 4,
              "ceiling": {"env_steps_per_s": 600.0, "processes": 2},
              "bound": {"env_steps_per_s": 400.0, "env_ms_per_step": 3.0, "inference_ms_per_step": 2.0, "batch": 4,
                        "train_ms_per_step": 5.0, "train_threads": 1, "trained_env_steps_per_s": 200.0},
              "sampling": None,
              "train": {"env_steps_per_s": 300.0, "trained_env_steps_per_s": 150.0, "frames_per_s": 1200.0,
                        "of_ceiling": 0.5, "of_bound": 0.75, "dropped_fraction": 0.0, "window_s": 100.0,
                        "cpu_shares": {"trainer": 0.5}, "bottleneck": "b"}}
    lines = report.format_table(result).splitlines()
    assert lines[5].split() == ["CPU-work", "bound", "(+", "training)", "200"]
    assert lines[7] == ("CPU work per env step: env 3.000 core-ms, inference 2.000 core-ms (policy batch 4 rows, "
                        "1 thread), training 5.000 core-ms (1 trainer thread)")
    assert lines[8] == "trained env steps/s end to end: 75% of the CPU-work bound with training"


def test_synthetic_batch_has_the_run_shape(tmp_path):
    """T x B = sample_length x batch_samples; actions and extras from the policy; no episode ends."""
    import numpy as np
    import torch

    from zoo.bench.measure import bench_config, synthetic_batch
    from zoo.plugins.algorithms.ppo.ppo import PPO

    w = WORKLOADS["cartpole"]
    cfg = bench_config(w.algo, w.env, list(w.overrides), learn=True, runs_dir=str(tmp_path), name="t")
    torch.manual_seed(0)
    policy = PPO.build_policy(cfg.algo, cfg.spec)
    obs = {"obs": np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)}
    batch = synthetic_batch(cfg, policy, obs)
    assert batch["obs"]["obs"].shape == (129, 4, 4) and (batch["obs"]["obs"] == obs["obs"][0]).all()
    assert batch["action"].shape == batch["logp"].shape == batch["value"].shape == (128, 4)
    assert not batch["terminated"].any() and batch["active"].all() and batch["final_index"].shape == (0, 2)
    # the value extra is the policy's value of the (repeated) observation
    with torch.no_grad():
        v = policy.value({"obs": torch.as_tensor(obs["obs"])})
    assert batch["value"][0, 0] == pytest.approx(float(v[0]), abs=1e-6)


def test_format_table_rows():
    result = {"workload": "pong", "summary": "s", "machine": "m", "frame_skip": 4,
              "ceiling": {"env_steps_per_s": 600.0, "processes": 2},
              "bound": {"env_steps_per_s": 400.0, "env_ms_per_step": 3.0, "inference_ms_per_step": 2.0, "batch": 4},
              "sampling": None,
              "train": {"env_steps_per_s": 300.0, "trained_env_steps_per_s": 256.0, "frames_per_s": 1200.0,
                        "of_ceiling": 0.5, "of_bound": 0.75, "dropped_fraction": 0.2, "window_s": 100.0,
                        "cpu_shares": {"actor": 0.4, "idle": 0.03}, "bottleneck": "b"}}
    lines = report.format_table(result).splitlines()
    assert lines[3].split() == ["env", "ceiling", "(raw,", "2", "processes)", "600", "2,400", "100%"]
    assert lines[4].split() == ["CPU-work", "bound", "(env", "+", "inference)", "400", "1,600", "100%"]
    assert lines[5].split() == ["zoo", "end", "to", "end", "(training)", "300", "256", "1,200", "50%", "75%", "20%"]
    assert lines[-2] == "CPU share, end to end (100 s window): actor 40%, idle 3%"


def test_round_trip_figures_over_the_window():
    # live snapshots before and at the end of the window: the actors' summed histograms grew by
    # 4 in [512, 1024) us (bucket 6) and 1 in [1.024, 2.048) ms (bucket 7)
    start = {"totals": {"round_trip_counts": round_trip_counts(b6=10, b7=2)}}
    end = {"totals": {"round_trip_counts": round_trip_counts(b6=14, b7=3)}}
    got = report.round_trip_figures(start, end)
    assert got is not None
    assert got["counts"] == round_trip_counts(b6=4, b7=1) and got["requests"] == 5
    assert got["edges_s"][0] == 16e-6 and got["edges_s"][-1] == 1.048576 and len(got["edges_s"]) == 17
    # p50: rank 2.5 of 5 in bucket 6: 0.512 + 0.512 x 2.5/4 = 0.832 ms; p90: rank 4.5, 0.5 of bucket 7's 1:
    # 1.024 + 1.024 x 0.5 = 1.536 ms; p99: rank 4.95 -> 1.024 + 1.024 x 0.95 = 1.9968 ms
    assert (got["p50_ms"], got["p90_ms"], got["p99_ms"]) == pytest.approx((0.832, 1.536, 1.9968), abs=1e-12)
    # no counts yet at the start: every round trip counts; none at the end or no snapshot: not measured
    assert report.round_trip_figures({"totals": {"round_trip_counts": None}}, end)["requests"] == 17
    assert report.round_trip_figures(None, end) is None and report.round_trip_figures(start, {"totals": {}}) is None
    # none in the window: no percentiles
    idle = report.round_trip_figures(end, end)
    assert idle["requests"] == 0 and idle["p50_ms"] is None


def test_the_window_keeps_the_live_snapshot_from_before_its_start():
    from zoo.bench.measure import _Window

    window = _Window("no-such-run", warmup=0.0, seconds=1e9, limit_s=1e9)
    window.show_live({"totals": {"round_trip_counts": round_trip_counts(b6=1)}})
    window({"env_steps": 0})  # the first status, no warm-up: the window starts
    window.show_live({"totals": {"round_trip_counts": round_trip_counts(b6=5)}})
    assert window.start is not None and window.live_start == {"totals": {"round_trip_counts": round_trip_counts(b6=1)}}
    assert window.live == {"totals": {"round_trip_counts": round_trip_counts(b6=5)}}


def test_phase_figures_and_the_table_carry_the_round_trips():
    run = SimpleNamespace(
        t0=0.0, t1=10.0, start={"env_steps": 0, "updates": 0}, end={"env_steps": 1000, "updates": 0},
        cpu_s={("actor", 0): 5.0}, live_start={"totals": {"round_trip_counts": round_trip_counts(b6=1000)}},
        live={"totals": {"round_trip_counts": round_trip_counts(b6=1000 + 12_000, b10=300, b17=45)}})
    fig = report.phase_figures(run, 1024, 128, 1, 1, 2, None, None)
    got = fig["round_trip"]
    assert got["counts"] == round_trip_counts(b6=12_000, b10=300, b17=45) and got["requests"] == 12_345
    # p50: rank 6,172.5 in bucket 6: 0.512 + 0.512 x 6,172.5/12,000 = 0.775360 ms; p90: rank 11,110.5 too:
    # 0.512 + 0.512 x 11,110.5/12,000 = 0.986048 ms; p99: rank 12,221.55, 221.55 of bucket 10's 300
    # ([8.192, 16.384) ms): 8.192 + 8.192 x 221.55/300 = 14.241792 ms
    assert (got["p50_ms"], got["p90_ms"], got["p99_ms"]) == pytest.approx((0.77536, 0.986048, 14.241792), abs=1e-9)
    assert json.loads(json.dumps(fig, default=str))["round_trip"]["counts"] == got["counts"]  # as --json writes it
    result = {"workload": "pong", "summary": "s", "machine": "m", "frame_skip": 1, "ceiling": None, "bound": None,
              "sampling": {**fig, "cpu_shares": {"actor": 0.25}, "bottleneck": "b"}, "train": None}
    lines = report.format_table(result).splitlines()
    assert lines[-3:] == ["CPU share, sampling (10 s window): actor 25%", "bottleneck, sampling: b",
                          "inference round trip, sampling: p50 0.775 ms, p90 0.986 ms, p99 14.2 ms (12,345 requests)"]
    # the open bucket prints as a lower bound; a window without a request prints dashes
    assert report.round_trip_line("end to end", {"p50_ms": 120.0, "p90_ms": 1048.576, "p99_ms": 1048.576,
                                                 "requests": 1}) == (
        "inference round trip, end to end: p50 120 ms, p90 >= 1,049 ms, p99 >= 1,049 ms (1 request)")
    assert report.round_trip_line("sampling", {"p50_ms": None, "p90_ms": None, "p99_ms": None, "requests": 0}) == (
        "inference round trip, sampling: p50 -, p90 -, p99 - (0 requests)")


# ----------------------------------------------------------------------------- titles, phases, workloads
def test_parse_title():
    assert parse_title(b"zoo: actor 1 bench-pong-train\x00\x00", "bench-pong-train") == ("actor", 1)
    assert parse_title(b"zoo: trainer 0 bench-pong-train   ", "bench-pong-train") == ("trainer", 0)
    assert parse_title(b"zoo: actor 1 other-run", "bench-pong-train") is None
    assert parse_title(b"python\x00-m\x00zoo\x00bench", "bench") is None


def test_parse_phases():
    assert parse_phases("train,ceiling") == ("ceiling", "train")
    with pytest.raises(ValueError, match="unknown trian; give a comma-separated subset of ceiling,sampling,train"):
        parse_phases("ceiling,trian")
    with pytest.raises(ValueError, match="empty"):
        parse_phases(",")


def test_workloads_shapes():
    pong, cartpole = WORKLOADS["pong"], WORKLOADS["cartpole"]
    assert (pong.batch_env_steps, pong.minibatch_size) == (8 * 128, 1024 // 4)
    assert (cartpole.batch_env_steps, cartpole.minibatch_size) == (4 * 128, 512 // 4)
    with pytest.raises(UnknownWorkload, match="'pongg' is not a known workload; choose one of: pong, pong-defaults"):
        get_workload("pongg")


def test_replay_workloads():
    dqn, sac = WORKLOADS["dqn-cartpole"], WORKLOADS["sac-halfcheetah"]
    # CleanRL dqn.py: a gradient step of 128 every 10 env steps; sac_continuous_action.py: one of 256 per env step
    assert (dqn.replay, dqn.samples_per_insert, dqn.replay_batch) == (True, 12.8, 128)
    assert dqn.gradient_steps_per_env_step == pytest.approx(0.1)
    # dqn.py's target network every 500 env steps = 50 gradient steps at 0.1 per env step; its loss is the
    # squared TD error (F.mse_loss), unclipped
    sets = dict(o.split("=", 1) for o in dqn.overrides)
    assert int(sets["algo.target_period"]) / dqn.gradient_steps_per_env_step == pytest.approx(500)
    assert (sets["algo.huber_delta"], sets["algo.max_grad_norm"]) == ("0", "0")
    assert (sac.replay, sac.gradient_steps_per_env_step, sac.batch_env_steps, sac.minibatch_size) == (True, 1.0, 16, 0)
    assert not WORKLOADS["pong"].replay and WORKLOADS["pong"].gradient_steps_per_env_step == 0.0
    # CleanRL dqn_atari.py: a gradient step of 32 every 4 env steps
    apex = WORKLOADS["apex-pong"]
    assert (apex.replay, apex.samples_per_insert, apex.replay_batch, apex.batch_env_steps) == (True, 8.0, 32, 256)
    assert apex.gradient_steps_per_env_step == 0.25 and peers.replay_learning_starts(apex) == 2000
    # CleanRL's dqn_atari.py: unchanged, endless, epsilon at its end after 10,000 env steps, learning after the
    # workload's 2,000, a replay of the workload's 100,000
    argv = peers.SYSTEMS["cleanrl"].command(apex, "/tmp/x")
    assert argv[4].endswith("cleanrl_compat.py") and argv[6].endswith("cleanrl/dqn_atari.py")
    assert argv[5:6] + argv[7:] == ["--same-step-autoreset", "--env-id", "PongNoFrameskip-v4", "--total-timesteps",
                                    "1000000000", "--exploration-fraction", "1e-5", "--learning-starts", "2000",
                                    "--buffer-size", "100000", "--no-cuda", "--seed", "1"]
    # the peers' PPO runs have no replay counterpart: no command
    assert peers.SYSTEMS["rllib"].command(dqn, "/tmp/x") is None
    assert peers.SYSTEMS["sample-factory"].command(sac, "/tmp/x") is None
    assert peers.SYSTEMS["cleanrl"].command(sac, "/tmp/x") is None
    # CleanRL's dqn.py: unchanged, its episode ends as on gymnasium 0.29, epsilon at 0.05 after 10,000 env
    # steps of an endless run, learning after 1,000 as the Zoo workload
    argv = peers.SYSTEMS["cleanrl"].command(dqn, "/tmp/x")
    assert argv[4].endswith("cleanrl_compat.py") and argv[6].endswith("cleanrl/dqn.py")
    assert argv[5:6] + argv[7:] == ["--same-step-autoreset", "--env-id", "CartPole-v1", "--total-timesteps",
                                    "1000000000", "--exploration-fraction", "1e-5", "--learning-starts", "1000",
                                    "--no-cuda", "--seed", "1"]


def test_the_json_names_the_set_options_after_the_workloads(tmp_path):
    """``zoo bench --json``'s ``overrides``: the workload's options, then ``--set``'s (they were left
    out: a run with ``--set algo.double_q=false`` read as the workload's own), then the resolved graph."""
    from zoo.bench.measure import bench_config
    from zoo.commands.bench import cfg_overrides

    w = WORKLOADS["dqn-cartpole"]
    mine = ["algo.double_q=false", "actors.count=1"]
    cfg = bench_config(w.algo, w.env, [*w.overrides, *mine], learn=True, runs_dir=str(tmp_path), name="t")
    got = cfg_overrides(w, {True: cfg}, mine)
    assert got[:-1] == [*w.overrides, "algo.double_q=false", "actors.count=1"]
    assert cfg.algo.double_q is False and got[-1].startswith("(resolved: actors.count=1 actors.envs_per_actor=")


@pytest.mark.parametrize("name", ["dqn-cartpole", "sac-halfcheetah", "apex-pong"])
def test_zoo_config_matches_the_replay_workload(name, tmp_path):
    """Zoo at a replay workload inserts num_envs x rollout_steps transitions per update and replays
    samples_per_insert per inserted one in gradient steps of replay_batch."""
    from zoo.bench.measure import bench_config
    from zoo.core.config import steps_per_update

    w = WORKLOADS[name]
    cfg = bench_config(w.algo, w.env, list(w.overrides), learn=True, runs_dir=str(tmp_path), name="t")
    assert steps_per_update(cfg, cfg.spec)[0] == w.batch_env_steps
    assert cfg.actors.count * cfg.actors.envs_per_actor == w.num_envs and cfg.sample_length == w.rollout_steps
    assert (cfg.algo.samples_per_insert, cfg.algo.batch_size) == (w.samples_per_insert, w.replay_batch)


def test_training_cost_of_a_rate_limited_algorithm_is_its_steady_state(tmp_path, monkeypatch):
    """dqn-cartpole: the timed updates come after two warm-up ones (the first fills the empty replay, no
    step) with learning_starts 0, and take 13, 13, 13, 12, 13 gradient steps (credit 12.8 x 128 per update
    of 128 transitions, steps of 128): 64 / 5 = 12.8 steps per update. Timed here in gradient steps
    instead of milliseconds, so the cost per env step is 12.8 / 1e3 / 128 env steps = 1e-4."""
    from zoo.bench import measure

    steps = []

    def count_steps(fn, repeats, warmup=3, device="cpu"):
        for _ in range(warmup):
            fn()
        steps.extend(fn()["gradient_steps"] for _ in range(repeats))
        return sum(steps) / repeats

    monkeypatch.setattr(measure, "device_ms", count_steps)
    w = WORKLOADS["dqn-cartpole"]
    cfg = measure.bench_config(w.algo, w.env, list(w.overrides), learn=True, runs_dir=str(tmp_path), name="t")
    assert measure.training_cost(cfg, 1) == pytest.approx(1e-4)
    assert steps == [13.0, 13.0, 13.0, 12.0, 13.0]


@pytest.mark.parametrize("name", ["pong", "cartpole"])
def test_zoo_config_matches_the_workload_shape(name, tmp_path):
    """Zoo at the workload trains on exactly num_envs x rollout_steps env steps per update, from
    actors.count x actors.envs_per_actor envs, with the same epochs and minibatches."""
    from zoo.bench.measure import bench_config
    from zoo.core.config import steps_per_update

    w = WORKLOADS[name]
    cfg = bench_config(w.algo, w.env, list(w.overrides), learn=True, runs_dir=str(tmp_path), name="t")
    assert steps_per_update(cfg, cfg.spec)[0] == w.batch_env_steps
    assert cfg.actors.count * cfg.actors.envs_per_actor == w.num_envs
    assert (cfg.sample_length, cfg.algo.epochs, cfg.algo.minibatches) == (w.rollout_steps, w.epochs, w.minibatches)


def test_cli_bad_input_exits_2_before_anything_starts(tmp_path):
    from zoo.cli import build_app
    from zoo.core.plugins import get_host

    app = build_app(get_host())  # with the plugin commands, `zoo bench` among them
    got = runner.invoke(app, ["bench", "--workload", "pongg"])
    assert got.exit_code == 2 and "not a known workload" in got.output
    got = runner.invoke(app, ["bench", "--phases", "warp"])
    assert got.exit_code == 2 and "unknown warp" in got.output
    got = runner.invoke(app, ["bench", "--workload", "cartpole", "--set", "actors.count=0"])
    assert got.exit_code == 2 and "actors.count" in got.output
    got = runner.invoke(app, ["bench", "--json", str(tmp_path / "missing" / "x.json")])
    assert got.exit_code == 2 and "does not exist" in got.output


# ----------------------------------------------------------------------------- peers' output
def test_parse_cleanrl_dqn_atari_counts_its_sps_lines():
    st = {}
    # learning after 2,000: SPS lines at global_step 2,100, 2,200, 2,300 (N + 1 env steps done at each)
    assert peers.parse_cleanrl_dqn_sps("global_step=1999, episodic_return=[-21.]", st, 2000) is None
    assert peers.parse_cleanrl_dqn_sps("SPS: 180", st, 2000) == (2101, 101)
    assert peers.parse_cleanrl_dqn_sps("SPS: 181\n", st, 2000) == (2201, 201)
    assert peers.parse_cleanrl_dqn_sps("SPS: 181", st, 2000) == (2301, 301)
    # learning after 2,050: the first multiple of 100 past it is 2,100
    assert peers.parse_cleanrl_dqn_sps("SPS: 1", {}, 2050) == (2101, 51)


def test_parse_cleanrl_dqn_counts_env_steps_at_episode_ends():
    st: dict = {}
    assert peers.parse_cleanrl_dqn("global_step=499, episodic_return=500.0", st, 1000) == (500, 0)
    assert peers.parse_cleanrl_dqn("global_step=2999, episodic_return=[500.]\n", st, 1000) == (3000, 2000)
    assert peers.parse_cleanrl_dqn("SPS: 412", st, 1000) is None
    w = WORKLOADS["dqn-cartpole"]  # through the system's parser: dqn.py's lines, learning after 1,000
    assert peers.SYSTEMS["cleanrl"].parse("global_step=1499, episodic_return=12.0", {}, w) == (1500, 500)


def test_parse_cleanrl_counts_iterations():
    st = {}
    assert peers.parse_cleanrl("global_step=1000, episodic_return=[-21.]", st, 1024) is None
    assert peers.parse_cleanrl("SPS: 210\n", st, 1024) == (1024, 1024)
    assert peers.parse_cleanrl("SPS: 215", st, 1024) == (2048, 2048)


def test_parse_sample_factory_line():
    line = ("\x1b[36m[2026-12-02 00:34:19,655][31860] Fps is (10 sec: 812.0, 60 sec: 790.1, 300 sec: nan). "
            "Total num frames: 8192. Throughput: 0: 203.0. Samples: 2560. Policy #0 lag: (min: 0.0)\x1b[0m")
    # sampled: Samples = 2,560 env steps; trained: 8,192 frames / frame-skip 4 = 2,048 env steps
    assert peers.parse_sample_factory(line, {}, 4) == (2560, 2048)
    assert peers.parse_sample_factory("Collected {0: 0}", {}, 4) is None


def test_parse_json_progress():
    assert peers.parse_json_progress('{"env_steps": 4096, "trained_env_steps": 3072}\n', {}) == (4096, 3072)
    assert peers.parse_json_progress("(PPO pid=1) {not json", {}) is None
    assert peers.parse_json_progress('{"other": 1}', {}) is None


def test_window_rates():
    points = [(0.0, 0, 0), (10.0, 1024, 1024), (20.0, 3072, 2048), (30.0, 5120, 4096), (50.0, 9216, 8192)]
    # warm-up 5 s, 15 s: start at the 10 s point, end at the first point >= 25 s: the 30 s one
    # -> (5,120 - 1,024) / 20 = 204.8 env steps/s, (4,096 - 1,024) / 20 = 153.6 trained
    assert peers.window_bounds(points, 5.0, 15.0) == (1, 3)
    assert peers.window_rates(points, 5.0, 15.0) == pytest.approx((204.8, 153.6, 20.0))
    # 100 s never reached: up to the last point, (9,216 - 1,024) / 40 = 204.8
    assert peers.window_bounds(points, 5.0, 100.0) == (1, None)
    assert peers.window_rates(points, 5.0, 100.0) == pytest.approx((204.8, 7168 / 40, 40.0))
    assert peers.window_rates(points[:2], 5.0, 30.0) is None  # one point in the window
    assert peers.window_bounds(points[:1], 5.0, 30.0) is None
    assert peers.window_rates([], 0.0, 1.0) is None


def test_median():
    assert peers.median([3, 1, 2]) == 2
    assert peers.median([4, 1, 3, 2]) == 2.5
    with pytest.raises(ValueError):
        peers.median([])


def test_side_by_side_table():
    rows = [{"workload": "pong", "system": "zoo", "label": "Zoo", "env_steps_per_s": e, "trained_env_steps_per_s": t}
            for e, t in ((310, 300), (290, 280), (330, 320))]
    rows += [{"workload": "pong", "system": "cleanrl", "label": "CleanRL", "env_steps_per_s": v,
              "trained_env_steps_per_s": v} for v in (200, 220, 210)]
    rows.append({"workload": "pong", "system": "rllib", "label": "RLlib", "round": 2, "error": "boom"})
    text = side_by_side.format_side_by_side(rows)
    # Zoo median trained 300; CleanRL's 210 -> 300 / 210 = 1.43x
    assert "| Zoo | 310 (310, 290, 330) | 300 (300, 280, 320) | 1.00x |" in text
    assert "| CleanRL | 210 (200, 220, 210) | 210 (200, 220, 210) | 1.43x |" in text
    assert "- RLlib, round 2: boom" in text


def test_peer_commands_carry_the_workload():
    w = WORKLOADS["pong"]
    argv = peers.SYSTEMS["cleanrl"].command(w, "/tmp/x")
    assert argv[argv.index("--env-id") + 1] == "PongNoFrameskip-v4"
    assert [argv[argv.index(k) + 1] for k in ("--num-envs", "--num-steps", "--num-minibatches", "--update-epochs")] \
        == ["8", "128", "4", "4"]
    sf = peers.SYSTEMS["sample-factory"].command(w, "/tmp/x")
    assert {"--env=atari_pong", "--num_workers=2", "--num_envs_per_worker=4", "--rollout=128", "--num_epochs=4",
            "--num_batches_per_epoch=4", "--batch_size=256"} <= set(sf)
    assert peers.SYSTEMS["zoo-defaults"].command(WORKLOADS["cartpole"], "/tmp/x")[5] == "cartpole-defaults"
    bf16 = peers.SYSTEMS["zoo-bf16"].command(w, "/tmp/x")
    assert (bf16[5], bf16[-2:]) == ("pong", ["--set", "algo.precision=bfloat16"])
    f32 = peers.SYSTEMS["zoo-f32"].command(w, "/tmp/x")
    assert (f32[5], f32[-2:]) == ("pong", ["--set", "algo.precision=float32"])
    dp = peers.SYSTEMS["zoo-dp-bf16"].command(w, "/tmp/x")
    # 2 trainers of half the workload's batch each (8 samples per update -> 4 each): the same update batch
    assert dp[-8:] == ["--set", "algo.precision=bfloat16", "--set", "trainer.threads=1", "--set", "trainer.count=2",
                       "--set", "trainer.batch_samples=4"]
    assert peers.SYSTEMS["zoo-dp-bf16"].command(WORKLOADS["cartpole"], "/tmp/x")[-1] == "trainer.batch_samples=2"
    assert peers.SYSTEMS["zoo-dp-bf16"].command(WORKLOADS["pong-defaults"], "/tmp/x") is None  # no batch to split
    inline = peers.SYSTEMS["zoo-inline-bf16"].command(w, "/tmp/x")
    assert inline[-6:] == ["--set", "algo.precision=bfloat16", "--set", "policy.inline=true", "--set",
                           "policy.precision=bfloat16"]
    assert peers.SYSTEMS["cleanrl"].command(WORKLOADS["pong-defaults"], "/tmp/x") is None


def test_run_counters_of_named_policies():
    """A merged status of named policies: trained env steps the largest over the trainable
    policies' entries, updates and drops summed, a frozen policy left out; the implicit policy's
    status is taken as it is."""
    from zoo.bench.report import run_counters
    merged = {"env_steps": 4608, "policies": {
        "a": {"trained_env_steps": 4096, "updates": 8, "dropped_samples": 3},
        "b": {"trained_env_steps": 3584, "updates": 7, "dropped_samples": 2, "actor_dropped_samples": 1},
        "f": {"frozen": True, "trained_env_steps": 9999, "updates": 99}}}
    out = run_counters(merged)
    assert (out["env_steps"], out["trained_env_steps"], out["updates"]) == (4608, 4096, 15)
    assert (out["dropped_samples"], out["actor_dropped_samples"]) == (5, 1)
    assert report.trained_steps(out, per_update=512) == 4096
    plain = {"env_steps": 10, "trained_env_steps": 8}
    assert run_counters(plain) is plain
    assert "trained_env_steps" not in run_counters({"env_steps": 0, "policies": {"a": {}}})
