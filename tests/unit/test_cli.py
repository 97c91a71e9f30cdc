"""The ``zoo`` CLI (typer.testing.CliRunner, subprocesses where imports matter) and the display."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import typer
from gymnasium import spaces
from rich.console import Console
from typer.testing import CliRunner

import zoo.cli as cli
from zoo.core import config as zconfig
from zoo.core.env import EnvSpec
from zoo.core.plugins import PluginInfo, PluginLoadError
from zoo.core.registry import Component, Registry
from zoo.display import Display, final_status, format_status_line, format_summary

runner = CliRunner()


@dataclass
class FakeAlgoConfig:
    lr: float = 0.1
    """Learning rate."""


class FakeAlgo:
    Config = FakeAlgoConfig

    @classmethod
    def presets(cls, spec):
        return {"sample_length": 64}


@dataclass
class ToyConfig:
    frame_skip: int = 4


class ToyEnv:
    """Stands in for atari: frame-skip 4, records every instance built."""

    instances: list = []

    def __init__(self, arg, config, seed):
        self.spec = EnvSpec(f"toy:{arg}", ("agent_0",), {"obs": spaces.Box(0, 1, (2,))}, spaces.Discrete(2),
                            frame_skip=config.frame_skip)
        ToyEnv.instances.append(self)

    def close(self):
        pass

    def reset(self, seed=None):  # zoo train checks one reset and one step before any worker starts
        return {"obs": np.zeros((1, 2), np.float32)}, {}

    def step(self, action):
        return {"obs": np.zeros((1, 2), np.float32)}, np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool), {}


def make_registry() -> Registry:
    reg = Registry()
    reg.add(Component("algorithm", "fake", FakeAlgo, "a fake algorithm", "test", "0.1", {"config": FakeAlgoConfig}))
    reg.add(Component("env", "gym", "zoo.plugins.envs.gym.env:make", "Any Gymnasium id", "zoo.gym", "0.1", {
        "config": "zoo.plugins.envs.gym.env:GymConfig",
        "default_budget": "zoo.plugins.envs.gym.env:default_budget",
        "resolves": "zoo.plugins.envs.gym.env:resolves"}))
    reg.add(Component("env", "atari", ToyEnv, "toy stand-in for atari", "test", "0.1",
                      {"config": ToyConfig, "default_budget": ("frames", 10_000_000)}))
    for name in ("shm", "nng", "inline"):  # the real factories: validate builds each stream's transport
        reg.add(Component("transport", name, f"zoo.transports.{name}.transport:{name.capitalize()}Transport",
                          "", "test", "0.1"))
    reg.add(Component("launcher", "local", "zoo.plugins.launchers.local.launcher:LocalLauncher", "spawned processes",
                      "zoo.local", "0.1"))
    reg.add(Component("transport", "auto", "zoo.transports.auto.transport:auto_transport", "", "test", "0.1"))
    reg.add(Component("resolver", "files", "zoo.plugins.resolvers.files.resolver:FilesResolver", "", "test", "0.1"))
    return reg


@pytest.fixture
def host(monkeypatch):
    """A plugin host holding the fake registry of test_config, one healthy and one failed plugin."""
    ToyEnv.instances.clear()
    fake = SimpleNamespace(
        registry=make_registry(),
        plugins={
            "test": PluginInfo("test", "zoo-test", "0.1", False, ["register_algorithms", "register_envs"]),
            "broken": PluginInfo("broken", "broken-dist", "9.9", False, [], "ImportError: missing dep xyz"),
        },
        strict=False,
    )
    fake.failures = [p for p in fake.plugins.values() if p.error]
    monkeypatch.setattr(cli, "get_host", lambda: fake)
    return fake


@pytest.fixture
def controller(monkeypatch):
    """A stand-in for zoo.core.controller: records its calls, sends one status, returns ``code``."""
    mod = types.ModuleType("zoo.core.controller")
    mod.calls, mod.code, mod.prepare_error, mod.run_error = [], 0, None, None

    def prepare_run_dir(cfg):
        if mod.prepare_error is not None:
            raise mod.prepare_error
        return f"{cfg.runs_dir}/{cfg.name}"

    def run(cfg, spec, on_status, run_dir=None):
        assert run_dir == f"{cfg.runs_dir}/{cfg.name}"
        if mod.run_error is not None:
            raise mod.run_error
        mod.calls.append((cfg, spec))
        on_status({"env_steps": 12_800, "frames": 51_200, "budget_env_steps": 200_000, "env_steps_per_s": 2100.4,
                   "frames_per_s": 8401.6, "episode_return_mean": 23.44, "episodes": 12, "policy_version": 50,
                   "policy_lag_mean": 0.4, "policy_lag_max": 1, "dropped_samples": 0, "updates": 50,
                   "type": "status", "role": "trainer", "index": 0})
        return mod.code

    mod.run, mod.prepare_run_dir = run, prepare_run_dir
    monkeypatch.setitem(sys.modules, "zoo.core.controller", mod)
    return mod


# ----------------------------------------------------------------------------- list / plugins
def test_list_shows_components_and_failures(host):
    result = runner.invoke(cli.app, ["list"])
    assert result.exit_code == 0, result.output
    for name in ("fake", "gym", "atari", "nng", "inline", "a fake algorithm"):
        assert name in result.output
    assert "warning: plugin broken (broken-dist 9.9) failed to load: ImportError: missing dep xyz" in result.output


def test_list_one_kind(host):
    result = runner.invoke(cli.app, ["list", "transports"])
    assert result.exit_code == 0
    assert "nng" in result.output and "inline" in result.output
    assert "gym" not in result.output and "a fake algorithm" not in result.output


def test_list_launchers_shows_the_local_launcher_only(host):
    result = runner.invoke(cli.app, ["list", "launchers"])
    assert result.exit_code == 0, result.output
    assert "Zoo launchers" in result.output
    assert "local" in result.output and "spawned processes" in result.output and "launcher" in result.output
    assert "nng" not in result.output and "a fake algorithm" not in result.output


def test_list_launchers_with_the_real_plugins(monkeypatch):
    """Both built-in launchers; without Ray installed the ray one says how to install it."""
    import importlib.util

    from zoo.core.plugins import PluginHost, get_host

    assert get_host().registry.names("launcher") == ["local", "ray"]
    result = runner.invoke(cli.app, ["list", "launchers"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "every worker a spawned process on this host (the default)" in result.output
    assert "every worker a Ray actor placed by its resources on a Ray cluster" in result.output
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    summary = PluginHost().registry.get("launcher", "ray").summary
    assert summary.endswith('; Ray is not installed: pip install "zoo-rl[ray]"')


def test_list_bad_kind_is_usage_error(host):
    assert runner.invoke(cli.app, ["list", "algos"]).exit_code == 2


def test_plugins_shows_hooks_and_errors(host):
    result = runner.invoke(cli.app, ["plugins"])
    assert result.exit_code == 0
    assert "zoo-test" in result.output and "register_algorithms, register_envs" in result.output
    assert "failed" in result.output
    assert "ImportError: missing dep xyz" in result.output


# ----------------------------------------------------------------------------- train
def test_train_resolves_config_and_calls_controller(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--seed", "3", "--set", "actors.count=4",
                                     "--frames", "100000", "--name", "t1"])
    assert result.exit_code == 0, result.output
    (cfg, spec), = controller.calls
    assert (cfg.algo_name, cfg.env_name, cfg.seed, cfg.name) == ("fake", "atari:Pong", 3, "t1")
    assert (cfg.actors.count, cfg.frames, cfg.env_steps) == (4, 100_000, 0)
    assert spec is cfg.spec and spec.frame_skip == 4
    assert "budget 100,000 frames = 25,000 env steps (frame-skip 4)" in result.output
    assert ("env_steps=12,800/200,000 (6.4%) frames=51,200 env_steps/s=2,100 frames/s=8,402 return=23.4 "
            "episodes=12 version=50 lag=0.4/1 dropped=0 updates=50") in result.output


def test_the_run_header_counts_one_actor_and_one_env_in_the_singular(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--set", "actors.count=1", "--set",
                                     "actors.envs_per_actor=1", "--set", "actors.ring_size=1", "--steps", "1024",
                                     "--name", "t5"])
    assert result.exit_code == 0, result.output
    assert "budget 1,024 env steps, 1 actor x 1 env, 1 policy worker, 1 trainer, run dir runs/t5" in result.output


def test_a_finished_run_prints_a_summary_line(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--name", "t4"])
    assert result.exit_code == 0
    last = " ".join(result.output.split()).rsplit("done: ", 1)[1]
    assert last.startswith("12,800 env steps (51,200 frames) in 0s; return=23.4 episodes=12 version=50; "
                           "run dir runs/t4: metrics.jsonl, tensorboard/, checkpoints/latest.pt")


def test_summary_line():
    status = {**STATUS, "env_steps": 200_192, "frames": 200_192}
    assert format_summary(status, 192.0, "runs/r") == (  # 200,192 / 192 = 1,042.7
        "done: 200,192 env steps (200,192 frames) in 3m12s, 1,043 env steps/s; return=23.4 episodes=12 "
        "version=50; run dir runs/r: metrics.jsonl, tensorboard/, checkpoints/latest.pt")
    assert format_summary(None, 7.6, "runs/r") == (
        "done in 8s; run dir runs/r: metrics.jsonl, tensorboard/, checkpoints/latest.pt")


def test_the_summary_falls_back_to_the_metrics_when_the_last_status_was_lost(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"type": "update", "env_steps": 4096, "policy_version": 11, "episodes": 180},
            {"type": "episode", "env_steps": 5000, "return": 9.0},
            {"type": "update", "env_steps": 5000, "policy_version": 12, "episodes": 200, "episode_return_mean": -3.5},
            {"type": "episode", "env_steps": 5000, "return": 1.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shown = {"env_steps": 0, "policy_version": 0}
    assert final_status(shown, str(path)) == rows[2]
    assert final_status(None, str(path)) == rows[2]
    newer = {"env_steps": 5000, "policy_version": 12}
    assert final_status(newer, str(path)) is newer  # not older than the file: what was shown stays
    assert final_status(shown, str(tmp_path / "missing.jsonl")) is shown
    # Reading only the tail cuts the first line in two: it is skipped, the last update still found.
    assert final_status(shown, str(path), tail_bytes=len(path.read_bytes()) - 10) == rows[2]
    # The trainer's end row holds the final counters, past the last update (samples that came after it).
    end = {"type": "end", "env_steps": 5120, "policy_version": 12, "episodes": 204}
    path.write_text(path.read_text() + json.dumps(end) + "\n")
    assert final_status(shown, str(path)) == end


def test_train_exit_code_from_controller(host, controller):
    controller.code = 1
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024"])
    assert result.exit_code == 1


def test_a_run_directory_that_cannot_be_made_exits_2_naming_runs_dir(host, controller):
    controller.prepare_error = NotADirectoryError(20, "Not a directory", "/tmp/afile/t2")
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--name", "t2",
                                     "--set", "runs_dir=/tmp/afile"])
    assert result.exit_code == 2 and controller.calls == []  # nothing started
    assert ("runs_dir='/tmp/afile': cannot create the run directory '/tmp/afile/t2' (Not a directory); "
            "choose a writable folder with --set runs_dir=PATH") in " ".join(result.output.split())


def test_a_transport_refusing_its_settings_exits_2_with_its_message(host, controller):
    from zoo.core.transport import TransportError

    controller.run_error = TransportError("ZOO_SHM_SLOTS='many' is not an integer")
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--name", "t3"])
    assert result.exit_code == 2 and controller.calls == []
    assert "error: transport: ZOO_SHM_SLOTS='many' is not an integer" in result.output


def test_unknown_algorithm_exit_2_with_suggestion(host, controller):
    result = runner.invoke(cli.app, ["train", "fak", "--env", "atari:Pong"])
    assert result.exit_code == 2
    assert "unknown algorithm 'fak'. Did you mean: fake?" in result.output
    assert controller.calls == [] and ToyEnv.instances == []


def test_unknown_env_exit_2_with_suggestion(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "CartPle-v1"])
    assert result.exit_code == 2
    assert "unknown env 'CartPle-v1'. Did you mean: CartPole-v1" in result.output
    assert controller.calls == []


def test_bad_override_exit_2_names_field_and_value(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--set", "actors.count=abc"])
    assert result.exit_code == 2
    assert "error: --set actors.count=abc: actors.count expects an int, got 'abc'" in result.output
    assert controller.calls == []


def test_unknown_launcher_exit_2_listing_the_installed_ones_before_anything_starts(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--launcher", "locl"])
    assert result.exit_code == 2
    assert ("error: launcher='locl' is not a registered launcher (--launcher NAME); did you mean 'local'? "
            "installed: local (see `zoo list launchers`)") in " ".join(result.output.split())
    assert controller.calls == []


def test_the_launcher_option_reaches_the_config(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--launcher", "local"])
    assert result.exit_code == 0, result.output
    (cfg, _), = controller.calls
    assert cfg.launcher == "local"


def test_steps_and_frames_exclusive(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1", "--frames", "1"])
    assert result.exit_code == 2
    assert "mutually exclusive" in result.output


def test_train_help_shows_algorithm_and_env_options(host):
    result = runner.invoke(cli.app, ["train", "fake", "--help", "--env", "atari:Pong"])
    assert result.exit_code == 0
    assert "Algorithm options (fake)" in result.output and "algo.lr" in result.output
    assert "Learning rate." in result.output
    assert "Environment options (atari, for atari:Pong)" in result.output and "env.frame_skip" in result.output
    assert "actors.envs_per_actor" in result.output
    assert ToyEnv.instances == []  # help builds no env


def test_train_help_without_env_lists_every_env_briefly(host):
    result = runner.invoke(cli.app, ["train", "fake", "--help"])
    assert result.exit_code == 0
    assert "For an environment's option descriptions: zoo train fake --env ENV --help" in result.output
    assert "env.frame_skip=4" in result.output and "env.max_episode_steps=0" in result.output


def test_plugin_commands_are_added():
    def register_commands(app):
        @app.command("hello")
        def hello():
            print("hello from a plugin")

    impl = SimpleNamespace(function=register_commands, plugin_name="p")
    fake = SimpleNamespace(strict=False, pm=SimpleNamespace(hook=SimpleNamespace(
        register_commands=SimpleNamespace(get_hookimpls=lambda: [impl]))))
    result = runner.invoke(cli.build_app(fake), ["hello"])
    assert result.exit_code == 0 and "hello from a plugin" in result.output


def test_main_strict_failure_exits_1(monkeypatch, capsys):
    def boom():
        raise PluginLoadError("plugins failed to load: plugin 'broken' (broken-dist 9.9): ImportError: missing dep xyz")

    monkeypatch.setattr(cli, "get_host", boom)
    with pytest.raises(SystemExit) as info:
        cli.main(["list"])
    assert info.value.code == 1
    assert "missing dep xyz" in capsys.readouterr().err


# ----------------------------------------------------------------------------- subprocesses
def _zoo(args, env_extra=None, code="from zoo.cli import main; main()"):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def test_list_does_not_import_torch():
    code = textwrap.dedent("""
        import sys
        from zoo.cli import main
        try:
            main(["list"])
        except SystemExit as exc:
            assert not exc.code, exc.code
        print("TORCH_IMPORTED" if "torch" in sys.modules else "TORCH_NOT_IMPORTED")
    """)
    proc = _zoo([], code=code)
    assert proc.returncode == 0, proc.stderr
    assert "gym" in proc.stdout
    assert proc.stdout.strip().endswith("TORCH_NOT_IMPORTED")



def test_a_set_typo_is_refused_before_torch_is_imported(tmp_path):
    # Before: PPO's Config lived in the module that imports torch (15-24 s under load) before
    # the one-line error. The exit code, the message and the modules loaded are all checked.
    code = textwrap.dedent("""
        import sys
        from zoo.cli import main
        try:
            main(["train", "ppo", "--env", "CartPole-v1", "--set", "algo.lrr=1"])
        except SystemExit as exc:
            print("EXIT", exc.code)
        print("TORCH_IMPORTED" if "torch" in sys.modules else "TORCH_NOT_IMPORTED")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.stdout.split() == ["EXIT", "2", "TORCH_NOT_IMPORTED"], (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: --set algo.lrr=1: unknown field 'algo.lrr'; did you mean 'algo.lr'")
    assert os.listdir(tmp_path) == []

@pytest.fixture
def broken_plugin_path(tmp_path):
    """A third-party plugin distribution whose module raises ImportError('missing dep xyz')."""
    (tmp_path / "broken_zoo_plugin.py").write_text('raise ImportError("missing dep xyz")\n')
    info = tmp_path / "broken_zoo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-zoo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zoo.plugins]\nbroken = broken_zoo_plugin\n")
    return str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")


def test_failed_plugin_is_listed_and_others_work(broken_plugin_path):
    proc = _zoo(["list"], {"PYTHONPATH": broken_plugin_path, "ZOO_STRICT_PLUGINS": "0"})
    assert proc.returncode == 0, proc.stderr
    assert "gym" in proc.stdout
    assert "warning: plugin broken (broken-zoo-plugin 0.1) failed to load: ImportError: missing dep xyz" in proc.stdout


def test_strict_plugins_make_failure_fatal(broken_plugin_path):
    proc = _zoo(["list"], {"PYTHONPATH": broken_plugin_path, "ZOO_STRICT_PLUGINS": "1"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ")
    assert "'broken'" in proc.stderr and "ImportError: missing dep xyz" in proc.stderr
    assert proc.stdout == ""


# ----------------------------------------------------------------------------- display
STATUS = {"env_steps": 12_800, "frames": 12_800, "budget_env_steps": 200_000, "env_steps_per_s": 2100.4,
          "frames_per_s": 2100.4, "episode_return_mean": 23.44, "episodes": 12, "policy_version": 50,
          "policy_lag_mean": 0.43, "policy_lag_max": 1, "dropped_samples": 3, "updates": 50}


def test_status_line():
    assert format_status_line(STATUS) == (
        "env_steps=12,800/200,000 (6.4%) frames=12,800 env_steps/s=2,100 frames/s=2,100 return=23.4 episodes=12 "
        "version=50 lag=0.4/1 dropped=3 updates=50")


def test_status_line_extras_none_and_missing_budget():
    status = {**STATUS, "budget_env_steps": 0, "episode_return_mean": None, "hider_return": 1.25,
              "seeker_return": -1234.5, "entropy": 0.01234, "type": "status", "role": "trainer", "index": 0,
              "note": "text is not shown"}
    assert format_status_line(status) == (
        "env_steps=12,800 frames=12,800 env_steps/s=2,100 frames/s=2,100 return=n/a episodes=12 version=50 "
        "lag=0.4/1 dropped=3 updates=50 hider_return=1.2 seeker_return=-1,234 entropy=0.0123")


def test_display_plain_prints_one_line_per_status():
    out = io.StringIO()
    with Display(Console(file=out, width=80)) as display:
        display(STATUS)
        display({**STATUS, "env_steps": 25_600})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0] == format_status_line(STATUS)
    assert lines[1].startswith("env_steps=25,600/200,000 (12.8%) ")


def test_display_live_on_a_terminal():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with Display(console, title="run-1") as display:
        assert display.live
        display(STATUS)
    text = out.getvalue()
    assert "run-1" in text and "12,800/200,000 env steps" in text
    assert "2,100" in text and "23.4" in text and "0.4/1" in text


# ----------------------------------------------------------------------------- rough edges (issue 16, item 5)
def test_unknown_env_or_algorithm_names_the_plugin_that_failed_to_load(host, controller):
    note = ("A plugin failed to load (its components are missing; see `zoo plugins`): plugin 'broken' "
            "(broken-dist 9.9): ImportError: missing dep xyz.")
    for args in (["fake", "--env", "corridor"], ["corridor-algo", "--env", "atari:Pong"]):
        result = runner.invoke(cli.app, ["train", *args])
        assert result.exit_code == 2
        assert " ".join(result.output.split()).endswith(note), result.output
    host.failures = []  # nothing failed: nothing to add
    result = runner.invoke(cli.app, ["train", "fake", "--env", "corridor"])
    assert result.exit_code == 2 and "failed to load" not in result.output


def test_help_shows_no_type_placeholders_for_flags_and_no_braces():
    for args in (["--help"], ["list", "--help"], ["plugins", "--help"], ["train", "--help"]):
        result = runner.invoke(cli.app, args, env={"COLUMNS": "150"})
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output and "{" not in result.output.split("Usage:")[1].splitlines()[0]
        help_line = next(line for line in result.output.splitlines() if "Show this message and exit." in line)
        assert help_line.split("Show this")[0].split() == ["│", "--help", "-h"]  # no type column text
    result = runner.invoke(cli.app, ["train", "--help"], env={"COLUMNS": "150"})
    assert "Usage: zoo train [OPTIONS] [ALGO]" in result.output  # optional: --resume takes it from the run
    text = " ".join(result.output.split())
    assert "--seed N Random seed" in text and "--set -s KEY=VALUE Override" in text and "--steps N [x>=1]" in text


def test_no_commands_help_shows_a_bool_placeholder():
    """Every command's --help, the plugins' commands included: a flag takes no value, so none is
    shown with typer's ``<bool>`` (``zoo plot --pbt`` and ``zoo league --json`` once were)."""
    app = cli.build_app(cli.get_host())
    names = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert {"train", "plot", "league", "eval", "bench"} <= set(names)
    for name in names:
        result = runner.invoke(app, [name, "--help"], env={"COLUMNS": "150"})
        assert result.exit_code == 0, (name, result.output)
        assert "<bool>" not in result.output, name


def test_help_of_plugin_commands_shows_no_bool_placeholder():
    def register_commands(app):
        @app.command("hello")
        def hello(who: str = typer.Argument(...)):
            print(f"hello {who}")

    impl = SimpleNamespace(function=register_commands, plugin_name="p")
    fake = SimpleNamespace(strict=False, pm=SimpleNamespace(hook=SimpleNamespace(
        register_commands=SimpleNamespace(get_hookimpls=lambda: [impl]))))
    result = runner.invoke(cli.build_app(fake), ["hello", "--help"], env={"COLUMNS": "150"})
    assert result.exit_code == 0 and "<bool>" not in result.output
    assert "Usage: zoo hello [OPTIONS] WHO" in result.output


@pytest.mark.parametrize("bad", ["a/b", "..", ".hidden", "my run", "-x", "../up", "a" * 201])
def test_run_names_are_refused_with_the_rule_never_rewritten(host, controller, bad):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--name", bad])
    assert result.exit_code == 2 and controller.calls == []
    text = " ".join(result.output.split())
    assert text.startswith(f"error: name {bad!r} is not allowed: a run name is one folder name: 1 to 200 letters, "
                           "digits, '.', '_' and '-', not starting with '.' or '-' (so no '/', '..' or spaces)")


def test_run_names_in_a_config_file_are_refused_the_same_way(host, controller, tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text('name = "runs/one"\n')
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--config", str(conf)])
    assert result.exit_code == 2 and controller.calls == []
    assert " ".join(result.output.split()).endswith("(so no '/', '..' or spaces); e.g. --name runs-one")


def test_a_plain_run_name_is_kept_as_given(host, controller):
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--name", "a.b_c-1"])
    assert result.exit_code == 0, result.output
    assert controller.calls[0][0].name == "a.b_c-1"


def test_presets_explanation_is_printed_once_under_the_algorithm_name(host, controller):
    FakeAlgo.explain_presets = classmethod(lambda cls, spec: "T = 64 for this env")
    try:
        result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--name", "p"])
    finally:
        del FakeAlgo.explain_presets
    assert result.exit_code == 0, result.output
    assert "fake presets: T = 64 for this env" in result.output and result.output.count("presets:") == 1


def test_mappo_explanation_has_no_heading_of_its_own():
    from zoo.plugins.algorithms.mappo.mappo import MAPPO

    spec = EnvSpec("v", ("a", "b"), {"obs": spaces.Box(-1, 1, (3,), np.float32)}, spaces.Discrete(5))
    assert "presets:" not in MAPPO.explain_presets(spec)


def test_list_envs_shows_each_default_budget(host):
    result = runner.invoke(cli.app, ["list", "envs"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    rows = {line.split("│")[1].strip(): line.split("│")[5].strip()
            for line in result.output.splitlines() if line.startswith("│") and line.split("│")[1].strip()}
    # atari registers ("frames", 10_000_000); gym computes it from the id (1,000,000 without one)
    assert rows == {"atari": "10,000,000 frames", "gym": "1,000,000 env steps (varies with ARG)"}


def test_progress_never_shows_more_than_100_percent():
    status = {**STATUS, "env_steps": 200_192}  # the last sample carried the run 192 env steps past its budget
    assert format_status_line(status).startswith("env_steps=200,192/200,000 (100.0%) ")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with Display(console, title="run-1") as display:
        display(status)
    text = out.getvalue()
    assert "200,192/200,000 env steps" in text and "100%" in text and "101%" not in text


def test_an_env_without_the_agent_axis_is_refused_before_any_process_starts(host, controller, monkeypatch):
    def no_agent_axis(self, seed=None):
        return {"obs": np.zeros(2, np.float32)}, {}  # [2], not [A=1, 2]

    monkeypatch.setattr(ToyEnv, "reset", no_agent_axis)
    result = runner.invoke(cli.app, ["train", "fake", "--env", "atari:Pong", "--steps", "1024", "--name", "ax"])
    assert result.exit_code == 2 and controller.calls == []
    assert " ".join(result.output.split()) == (
        "error: --env atari:Pong: env plugin 'test' breaks Zoo's env contract (zoo.core.testing.check_env): env "
        "'toy:Pong': reset(seed=1): observation 'obs' has shape (2,), expected (1, 2) = [A=1, *space.shape=(2,)] "
        "(the leading axis is the agent axis)")


# ----------------------------------------------------------------------------- zoo resume / train --resume
@pytest.fixture
def stopped_run(host, tmp_path):
    """A run of the fake algorithm on atari:Pong (10,000 frames = 2,500 env steps) stopped at 1,200 env steps."""
    from zoo.core.checkpoint import FORMAT, latest_path, write_checkpoint

    cfg = zconfig.build_config(host.registry, "fake", "atari:Pong", name="old", frames=10_000,
                               overrides=[f"runs_dir={tmp_path}"])
    zconfig.save_config(cfg, tmp_path / "old")
    (tmp_path / "old" / "checkpoints").mkdir()
    write_checkpoint(latest_path(str(tmp_path / "old")), {"format": FORMAT, "algorithm": {}, "policy_version": 7,
                                                           "updates": 7, "env_steps": 1_200, "frames": 4_800,
                                                           "episodes": 3})
    return tmp_path / "old"


def test_train_without_an_algorithm_or_resume_exits_2(host, controller):
    result = runner.invoke(cli.app, ["train", "--env", "atari:Pong"])
    assert result.exit_code == 2 and "zoo train needs an algorithm and an environment" in result.output
    assert controller.calls == []


def test_train_resume_continues_the_run_in_its_directory(host, controller, stopped_run):
    result = runner.invoke(cli.app, ["train", "--resume", str(stopped_run), "--set", "log.interval_s=7"])
    assert result.exit_code == 0, result.output
    (cfg, _), = controller.calls
    assert (cfg.algo_name, cfg.env_name, cfg.name, cfg.frames, cfg.resume, cfg.log.interval_s) == \
        ("fake", "atari:Pong", "old", 10_000, 1, 7.0)
    text = " ".join(result.output.split())
    assert ("zoo resume old: fake on atari:Pong, seed 1, from its checkpoint at update 7 (policy version 7, 1,200 of "
            f"2,500 env steps), resume #1, run dir {stopped_run}") in text
    assert json.loads((stopped_run / "config.json").read_text())["log"]["interval_s"] == 7.0


def test_resume_refuses_a_changed_option_before_anything_starts(host, controller, stopped_run):
    result = runner.invoke(cli.app, ["resume", "old", "--runs-dir", str(stopped_run.parent), "--set", "algo.lr=0.5",
                                     "--set", "sample_length=8"])
    assert result.exit_code == 2 and controller.calls == []
    text = " ".join(result.output.split())
    assert "2 key(s) differ from its config.json: algo.lr: 0.1 -> 0.5; sample_length: 64 -> 8." in text
    result = runner.invoke(cli.app, ["train", "--resume", str(stopped_run), "--name", "other"])
    assert result.exit_code == 2 and "--name with --resume" in result.output


@pytest.mark.parametrize("refusal", ["transport", "launcher"])
def test_a_run_refused_before_it_starts_leaves_no_run_directory(refusal, tmp_path, monkeypatch):
    # The controller refuses while building the streams or placing the workers: before, the
    # claimed run folder stayed behind with config.json and graph.json (and no status.json).
    import zoo.core.controller as controller
    from zoo.core.launcher import LaunchError
    from zoo.core.transport import TransportError

    def refuse(self, *args, **kwargs):
        raise TransportError("refused for the test") if refusal == "transport" else LaunchError("too small")

    monkeypatch.setattr(controller.Controller, "__init__", refuse)
    result = runner.invoke(cli.app, ["train", "ppo", "--env", "CartPole-v1", "--steps", "256", "--name", "refused",
                                     "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == (2 if refusal == "transport" else 1), result.output
    expected = {"transport": "error: transport: refused for the test", "launcher": "error: launcher local: too small"}
    assert result.output.strip().splitlines()[-1] == expected[refusal]
    assert os.listdir(tmp_path) == []


def test_eval_summary_figures_have_two_decimals_for_every_env():
    # Before: repr(float), so a return summed from 0.1-sized rewards printed 21.700000000000003
    # while CartPole's printed 500.0.
    from zoo.commands.eval import _num

    assert [_num(x) for x in (0.1 * 217, 500.0, 9.5, -1234.5678, -0.001, 1e-9, np.float32(0.1))] == [
        "21.70", "500.00", "9.50", "-1234.57", "0.00", "0.00", "0.10"]


def test_the_last_frame_after_ctrl_c_shows_the_counters_the_run_ended_with(tmp_path):
    # The trainer's last status (version 4, 5,120 env steps) never reached the controller; its
    # end row is in metrics.jsonl. Before: the last frame stayed at version 3, 3,840 env steps.
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"type": "end", "env_steps": 5120, "policy_version": 4, "updates": 4,
                                   "pg_loss": 0.5, "time": 12.0}) + "\n")
    out = io.StringIO()
    display = Display(Console(file=out, width=300), live=False)
    display({"env_steps": 3840, "budget_env_steps": 10_000, "policy_version": 3, "updates": 3})
    display.catch_up(str(metrics))
    assert display.last == {"env_steps": 5120, "budget_env_steps": 10_000, "policy_version": 4, "updates": 4}
    assert out.getvalue().splitlines()[-1] == "env_steps=5,120/10,000 (51.2%) version=4 updates=4"
    display.catch_up(str(metrics))  # nothing newer: nothing printed again
    assert len(out.getvalue().splitlines()) == 2


@pytest.mark.parametrize("refusal", ["transport", "launcher", "ctrl-c"])
def test_a_resume_refused_before_it_starts_leaves_the_run_as_it_was(refusal, host, controller, stopped_run):
    # Before: config.json kept the refused segment's options (here the new budget and
    # log.interval_s) and graph.json its layout, although that segment never ran.
    from zoo.core.launcher import LaunchError
    from zoo.core.transport import TransportError

    (stopped_run / "status.json").write_text('{"status": "stopped", "exit_code": 130}')
    (stopped_run / "graph.json").write_text('{"old": 1}')
    before = {name: (stopped_run / name).read_bytes() for name in ("config.json", "graph.json", "status.json")}
    controller.run_error = {"transport": TransportError("refused for the test"), "launcher": LaunchError("too small"),
                            "ctrl-c": KeyboardInterrupt()}[refusal]
    result = runner.invoke(cli.app, ["resume", "old", "--runs-dir", str(stopped_run.parent), "--frames", "20000",
                                     "--set", "log.interval_s=7"])
    assert result.exit_code == {"transport": 2, "launcher": 1, "ctrl-c": 130}[refusal], result.output
    assert {name: (stopped_run / name).read_bytes() for name in before} == before
    assert sorted(os.listdir(stopped_run)) == ["checkpoints", "config.json", "graph.json", "status.json"]


def test_a_resume_interrupted_after_its_segment_started_keeps_what_the_segment_wrote(host, controller, stopped_run):
    # The controller wrote status.json (the segment started), then Ctrl-C came out of the display:
    # the files are the new segment's, not put back to the stopped run's.
    (stopped_run / "status.json").write_text('{"status": "stopped", "exit_code": 130}')

    def started_then_interrupted(cfg, spec, on_status, run_dir=None):
        (stopped_run / "status.json").write_text('{"status": "running"}')
        raise KeyboardInterrupt

    controller.run = started_then_interrupted
    result = runner.invoke(cli.app, ["resume", "old", "--runs-dir", str(stopped_run.parent), "--frames", "20000"])
    assert result.exit_code == 130, result.output
    assert (stopped_run / "status.json").read_text() == '{"status": "running"}'
    assert json.loads((stopped_run / "config.json").read_text())["frames"] == 20_000
