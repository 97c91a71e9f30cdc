"""benchmarks/gpu_check.py (issue 21) without a GPU: it imports and parses its arguments, its
dry run lists exactly the planned commands, each zoo command parses with the CLI and its
options build a valid config (CUDA stood in for by a one-GPU machine with native bfloat16),
one failing step never stops the others, and the stray-context judgement."""
from __future__ import annotations

import ast
import signal
import subprocess
import sys

import pytest

from tests.unit.fakes import load_benchmark
from tests.unit.gpu_harness import ROOT, build, parsed

load = load_benchmark


@pytest.fixture(scope="module")
def gc():
    return load("gpu_check")


NAMES = ["facts", "cuda-tests", "ppo-cuda", "ppo-cuda-resume", "reward-norm", "pong-bf16", "two-trainers",
         "gpu-pong", "contexts"]


def test_help_runs_without_a_gpu():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: gpu_check.py [-h] [--dry-run] [--out FILE] [--work DIR] [--keep]")


def test_dry_run_lists_exactly_the_planned_commands(gc, tmp_path, capsys):
    assert gc.main(["--dry-run", "--work", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    steps = gc.plan(str(tmp_path))
    assert [s.name for s in steps] == NAMES
    assert len(steps) <= 10
    assert sum(s.timeout_s for s in steps) == 710 <= gc.TOTAL_LIMIT_S == 720
    assert lines[:-1] == [s.line() for s in steps]
    assert lines[-1] == f"# 9 commands, timeouts summing to 710 s, from {ROOT}"
    assert lines[1] == "ZOO_REQUIRE_CUDA=1 python -m pytest -m cuda -q -p no:cacheprovider tests"
    assert lines[3] == f"python -m zoo resume ppo-cuda --runs-dir {tmp_path} --steps 20480"
    assert not list(tmp_path.iterdir())  # a dry run starts nothing and writes nothing


# -- every command is one its program accepts -------------------------------------------

def zoo_args(step):
    argv = list(step.argv)
    assert argv[:3] == ["python", "-m", "zoo"], step.name
    return argv[3], argv[4:]


def test_every_zoo_train_command_builds_a_valid_config_on_a_gpu(gc, tmp_path, one_gpu):
    steps = {s.name: s for s in gc.plan(str(tmp_path))}
    cfgs = {}
    for name in ("ppo-cuda", "reward-norm", "pong-bf16", "two-trainers"):
        sub, args = zoo_args(steps[name])
        assert sub == "train"
        params = parsed(sub, args)
        cfg = cfgs[name] = build(params)  # every --set key exists and every value is valid (ConfigError otherwise)
        assert (cfg.name, cfg.runs_dir, cfg.algo.device, cfg.policy.device) == (name, str(tmp_path), "cuda", "cuda")
    assert (cfgs["ppo-cuda"].env_name, cfgs["ppo-cuda"].env_steps, cfgs["ppo-cuda"].trainer.checkpoint_interval) == \
        ("CartPole-v1", 10240, 10)
    assert (cfgs["reward-norm"].env_name, cfgs["reward-norm"].algo.norm_reward, cfgs["reward-norm"].algo.norm_obs) == \
        ("Pendulum-v1", True, True)
    assert (cfgs["pong-bf16"].env_name, cfgs["pong-bf16"].frames, cfgs["pong-bf16"].policy.precision) == \
        ("atari:Pong", 40960, "bfloat16")
    assert cfgs["two-trainers"].trainer.count == 2


def test_the_contexts_run_builds_a_valid_config_on_a_gpu(gc, tmp_path, one_gpu):
    sub, args = zoo_args(type("S", (), {"argv": gc.contexts_command(str(tmp_path)), "name": "contexts"}))
    cfg = build(parsed(sub, args))
    assert (cfg.policy.count, cfg.trainer.count, cfg.actors.count) == (2, 2, 2)
    assert (cfg.policy.device, cfg.algo.device, cfg.name) == ("cuda", "cuda", gc.CONTEXTS_RUN)


def test_a_bad_set_key_would_be_caught(tmp_path, one_gpu):
    """The check above can fail: an option that does not exist is refused by build_config."""
    from zoo.core.config import ConfigError

    params = parsed("train", ["ppo", "--env", "CartPole-v1", "--steps", "10240", "--set", "algo.devcie=cuda"])
    with pytest.raises(ConfigError, match="devcie"):
        build(params)


def test_the_resume_command_continues_the_ppo_run_with_a_larger_budget(gc, tmp_path):
    steps = {s.name: s for s in gc.plan(str(tmp_path))}
    sub, args = zoo_args(steps["ppo-cuda-resume"])
    assert sub == "resume"
    params = parsed(sub, args)
    assert (params["run"], str(params["runs_dir"]), params["steps"]) == ("ppo-cuda", str(tmp_path), 20480)
    assert params["steps"] > parsed(*zoo_args(steps["ppo-cuda"]))["steps"]


def test_the_scripts_own_commands_parse(gc, tmp_path):
    steps = {s.name: s for s in gc.plan(str(tmp_path))}
    assert gc.build_parser().parse_args(list(steps["facts"].argv[2:])).probe == "facts"
    ctx = gc.build_parser().parse_args(list(steps["contexts"].argv[2:]))
    assert (ctx.probe, ctx.work, ctx.seconds) == ("contexts", str(tmp_path), 35.0)
    argv = steps["gpu-pong"].argv
    assert argv[1] == "benchmarks/gpu_pong.py"
    pong = load("gpu_pong").build_parser().parse_args(list(argv[2:]))
    assert (pong.seconds, pong.warmup, pong.limit, pong.json) == (15.0, 10.0, 60.0, str(tmp_path / "gpu_pong.json"))


def test_the_cuda_marker_is_registered_and_used(gc, tmp_path):
    from zoo.core.config import load_config_file

    markers = load_config_file(ROOT / "pyproject.toml")["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("cuda: ") for m in markers)
    step = gc.plan(str(tmp_path))[1]
    assert step.argv[1:5] == ("-m", "pytest", "-m", "cuda") and dict(step.env) == {"ZOO_REQUIRE_CUDA": "1"}
    assert module_marks(ROOT / "tests" / "unit" / "test_cuda.py") == ["pytest.mark.cuda"]


def module_marks(path) -> list[str]:
    """The right-hand sides of a test file's module-level ``pytestmark = ...`` assignments, read
    with ``ast`` (a test module never imports or runs another)."""
    tree = ast.parse(path.read_text())
    return [ast.unparse(node.value) for node in tree.body if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)]


# -- running: every step runs, the table, the exit code ----------------------------------

def test_one_failing_step_never_stops_the_others(gc, tmp_path):
    ran = []

    def fake(step, log):
        ran.append(step.name)
        log(f"    output of {step.name}")
        if step.name == "facts":
            raise RuntimeError("nvidia-smi vanished")
        return gc.Result(step.name, 3 if step.name == "ppo-cuda" else 0, 1.25, step.timeout_s)

    out = tmp_path / "log.txt"
    work = tmp_path / "work"
    assert gc.main(["--work", str(work), "--out", str(out)], runner=fake) == 1
    assert ran == NAMES
    text = out.read_text().splitlines()
    assert text[0] == f"gpu_check: 9 steps, at most 710 s, runs under {work}"
    assert "$ " + gc.plan(str(work), sys.executable)[2].line() in text
    assert "    output of two-trainers" in text
    assert "-> ppo-cuda: exit 3 in 1.2 s" in text
    assert [line for line in text if line.startswith("-> facts")][0].startswith("-> facts: exit 1 in ")
    assert text[-1] == "7 of 9 steps passed; failed: facts, ppo-cuda"
    table = text[-11:-1]
    assert table[0].split() == ["step", "status", "exit", "seconds", "timeout", "note"]
    assert table[3].split() == ["ppo-cuda", "FAILED", "3", "1.2", "75"]
    assert table[1].split()[:3] == ["facts", "FAILED", "1"]
    assert table[1].endswith("the check itself failed: RuntimeError: nvidia-smi vanished")
    assert work.is_dir()  # a --work folder is the caller's: kept


def test_all_steps_passing_exit_0(gc, tmp_path):
    fake = lambda step, log: gc.Result(step.name, 0, 0.5, step.timeout_s)  # noqa: E731
    assert gc.main(["--work", str(tmp_path)], runner=fake) == 0


def test_summary_table_exactly(gc):
    results = [gc.Result("facts", 0, 1.04, 20), gc.Result("gpu-pong", 124, 140.26, 140, "timed out after 140 s")]
    assert gc.summary(results) == (
        "step      status  exit  seconds  timeout  note\n"
        "facts     ok         0      1.0       20\n"
        "gpu-pong  FAILED   124    140.3      140  timed out after 140 s\n"
        "1 of 2 steps passed; failed: gpu-pong")
    assert gc.exit_code(results) == 1 and gc.exit_code(results[:1]) == 0


def test_run_step_reports_the_exit_status_and_output(gc):
    lines = []
    step = gc.Step("x", "a failing command", (sys.executable, "-c", "print('hello'); raise SystemExit(3)"), 30)
    result = gc.run_step(step, lines.append)
    assert (result.name, result.rc, result.note) == ("x", 3, "")
    assert lines == ["    hello"]


@pytest.mark.parametrize("parent_sigint", ["default", "ignored"])
def test_run_step_stops_a_command_at_its_timeout(gc, parent_sigint):
    """Stopped by Ctrl-C to its group at the timeout, as a Zoo run is, not killed STOP_GRACE_S later;
    also when gpu_check itself runs with SIGINT ignored (nohup, a background job: a CI run started
    so once saw the step outlive the Ctrl-C and be killed after 11.0 s)."""
    if parent_sigint == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test's conftest puts pytest's handler back
    lines = []
    # stdin is /dev/null for a step: a blocking read of a pipe nobody writes to never returns
    code = "import os, sys; print('started', flush=True); os.read(os.pipe()[0], 1)"
    result = gc.run_step(gc.Step("slow", "never ends", (sys.executable, "-c", code), 1), lines.append)
    assert (result.rc, result.note) == (124, "timed out after 1 s")
    assert result.seconds >= 1.0
    assert lines[0] == "    started"
    assert lines[-1] == "    KeyboardInterrupt"  # the Ctrl-C stopped it (SIGKILL leaves no such line)


# -- stray contexts ---------------------------------------------------------------------

A, B = "GPU-aaaa", "GPU-bbbb"


def test_visible_gpus_follow_cuda_visible_devices(gc):
    rows = [["0", A], ["1", B]]
    assert gc.visible_gpus(rows, None) == [(0, A), (1, B)]
    assert gc.visible_gpus(rows, "1") == [(1, B)]
    assert gc.visible_gpus(rows, "GPU-bb,0") == [(1, B), (0, A)]
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES entry '2' is no GPU nvidia-smi lists"):
        gc.visible_gpus(rows, "2")


def test_expected_gpus_spread_workers_over_the_gpus(gc):
    assert gc.expected_gpus([(0, A)]) == {("policy", 0): A, ("policy", 1): A, ("trainer", 0): A, ("trainer", 1): A}
    assert gc.expected_gpus([(0, A), (1, B)]) == {("policy", 0): A, ("policy", 1): B,
                                                  ("trainer", 0): A, ("trainer", 1): B}


WORKERS = {("policy", 0): 11, ("policy", 1): 12, ("trainer", 0): 21, ("trainer", 1): 22, ("actor", 0): 31}


def test_every_worker_on_its_own_gpu_passes(gc):
    expected = gc.expected_gpus([(0, A), (1, B)])
    samples = [[(11, A, 300), (21, A, 500)], [(11, A, 310), (12, B, 300), (21, A, 520), (22, B, 500), (99, A, 7)]]
    ok, lines = gc.judge(samples, WORKERS, 1, expected)
    assert ok
    assert lines == [f"policy 0 (pid 11) on {A}: 310 MiB", f"policy 1 (pid 12) on {B}: 300 MiB",
                     f"trainer 0 (pid 21) on {A}: 520 MiB", f"trainer 1 (pid 22) on {B}: 500 MiB"]


def test_stray_contexts_and_missing_workers_fail(gc):
    expected = gc.expected_gpus([(0, A), (1, B)])
    samples = [[(11, A, 300), (12, B, 300), (12, A, 250), (21, A, 500), (31, A, 100), (1, A, 90), (21, A, 1)]]
    ok, lines = gc.judge(samples, WORKERS, 1, expected)
    assert not ok
    assert lines == [
        f"controller (pid 1) on {A}: 90 MiB",
        f"policy 0 (pid 11) on {A}: 300 MiB",
        f"policy 1 (pid 12) on {A}: 250 MiB",
        f"policy 1 (pid 12) on {B}: 300 MiB",
        f"trainer 0 (pid 21) on {A}: 500 MiB",
        f"actor 0 (pid 31) on {A}: 100 MiB",
        f"trainer 0 (pid 21) holds 2 contexts on {A}",
        f"stray context: controller (pid 1, assigned no GPU) on {A}, 90 MiB",
        f"stray context: policy 1 (pid 12, assigned {B}) on {A}, 250 MiB",
        f"stray context: actor 0 (pid 31, assigned no GPU) on {A}, 100 MiB",
        f"trainer 1 (pid 22) was never seen on its GPU {B}",
    ]


def test_pids_of_another_namespace_cannot_pass(gc):
    expected = gc.expected_gpus([(0, A)])
    ok, lines = gc.judge([[(4001, A, 300), (4002, A, 300)]], WORKERS, 1, expected)
    assert not ok
    assert lines[-1] == ("nvidia-smi listed compute apps but none is a Zoo process: its pids may belong to another "
                         "PID namespace (a container); the check could not be made")
    assert f"policy 0 (pid 11) was never seen on its GPU {A}" in lines
