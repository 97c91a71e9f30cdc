"""The experiment config: layering, --set coercion and its errors, env resolution, budget."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pytest
from gymnasium import spaces

import zoo.core.config as zc
from zoo.core.config import (
    ConfigError,
    ExperimentConfig,
    UnknownEnvError,
    apply_override,
    budget,
    build_config,
    config_to_dict,
    list_options,
    resolve_env,
    validate,
)
from zoo.core.env import EnvSpec
from zoo.core.registry import Component, Registry, UnknownComponentError


# ----------------------------------------------------------------------------- fakes
@dataclass
class FakeAlgoConfig:
    """Hyperparameters of the fake algorithm."""

    lr: float = 0.1
    """Learning rate."""
    epochs: int = 3
    hidden: tuple[int, ...] = (64, 64)
    schedule: Literal["constant", "linear"] = "constant"
    target_kl: float | None = None
    use_gae: bool = True

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"algo.lr={self.lr!r} must be > 0")


class FakeAlgo:
    Config = FakeAlgoConfig
    seen_specs: list[EnvSpec] = []

    @classmethod
    def presets(cls, spec: EnvSpec) -> dict:
        cls.seen_specs.append(spec)
        return {"sample_length": 64, "algo.lr": 0.5, "algo.epochs": 7, "actors.count": 5}


@dataclass
class ToyConfig:
    frame_skip: int = 4


class ToyEnv:
    instances: list[ToyEnv] = []

    def __init__(self, arg, config: ToyConfig, seed: int) -> None:
        self.arg, self.seed, self.closed = arg, seed, False
        self.spec = EnvSpec(f"toy:{arg}", ("agent_0",), {"obs": spaces.Box(0, 1, (2,))}, spaces.Discrete(2),
                            frame_skip=config.frame_skip, resolved={"frame_skip": config.frame_skip, "game": arg})
        ToyEnv.instances.append(self)

    def close(self) -> None:
        self.closed = True

    def reset(self, seed=None):  # zoo train checks one reset and one step before any worker starts
        return {"obs": np.zeros((1, 2), np.float32)}, {}

    def step(self, action):
        return {"obs": np.zeros((1, 2), np.float32)}, np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool), {}


def make_registry() -> Registry:
    reg = Registry()
    reg.add(Component("algorithm", "fake", FakeAlgo, "a fake algorithm", "test", "0.1",
                      {"config": FakeAlgoConfig}))
    # The gym env exactly as the built-in plugin registers it.
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
def reg() -> Registry:
    ToyEnv.instances.clear()
    FakeAlgo.seen_specs.clear()
    return make_registry()


def fresh() -> ExperimentConfig:
    return ExperimentConfig(algo_name="fake", env_name="atari:Pong", algo=FakeAlgoConfig(), env=ToyConfig())


# ----------------------------------------------------------------------------- --set coercion
@pytest.mark.parametrize("override, path, expected", [
    ("actors.count=4", ("actors", "count"), 4),
    ("actors.count=1_000", ("actors", "count"), 1000),
    ("env_steps=1e6", ("env_steps",), 1_000_000),
    ("policy.max_wait_ms=2.5", ("policy", "max_wait_ms"), 2.5),
    ("policy.max_wait_ms=3", ("policy", "max_wait_ms"), 3.0),
    ("log.tensorboard=false", ("log", "tensorboard"), False),
    ("log.tensorboard=no", ("log", "tensorboard"), False),
    ("log.tensorboard=0", ("log", "tensorboard"), False),
    ("log.tensorboard=TRUE", ("log", "tensorboard"), True),
    ("log.tensorboard=yes", ("log", "tensorboard"), True),
    ("log.tensorboard=1", ("log", "tensorboard"), True),
    ("policy.device=cuda:1", ("policy", "device"), "cuda:1"),
    ("name=a=b", ("name",), "a=b"),
    ("algo.lr=0.003", ("algo", "lr"), 0.003),
    ("algo.hidden=32,16", ("algo", "hidden"), (32, 16)),
    ("algo.hidden=[8]", ("algo", "hidden"), (8,)),
    ("algo.schedule=linear", ("algo", "schedule"), "linear"),
    ("algo.target_kl=0.02", ("algo", "target_kl"), 0.02),
    ("algo.target_kl=none", ("algo", "target_kl"), None),
    ("env.frame_skip=2", ("env", "frame_skip"), 2),
])
def test_override_coerces_by_field_type(override, path, expected):
    cfg = fresh()
    apply_override(cfg, override)
    value = cfg
    for part in path:
        value = getattr(value, part)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("override, message", [
    ("actors.count=abc", "--set actors.count=abc: actors.count expects an int, got 'abc'"),
    ("actors.count=2.5", "--set actors.count=2.5: actors.count expects an int, got '2.5'"),
    ("policy.max_wait_ms=fast", "--set policy.max_wait_ms=fast: policy.max_wait_ms expects a float, got 'fast'"),
    ("log.tensorboard=maybe",
     "--set log.tensorboard=maybe: log.tensorboard expects a bool (true/false/1/0/yes/no), got 'maybe'"),
    ("algo.schedule=cosine",
     "--set algo.schedule=cosine: algo.schedule expects one of 'constant', 'linear', got 'cosine'"),
    ("algo.hidden=64,x",
     "--set algo.hidden=64,x: algo.hidden expects comma-separated values, each an int, got '64,x'"),
    ("algo.target_kl=big", "--set algo.target_kl=big: algo.target_kl expects a float, got 'big'"),
    ("actors.cont=3", "--set actors.cont=3: unknown field 'actors.cont'; did you mean 'actors.count'? "
                      "(actors has: count, envs_per_actor, ring_size, drop_when_full)"),
    ("actor.count=3", "--set actor.count=3: unknown field 'actor.count'; did you mean 'actors.count' or "
                      "'trainer.count' or 'policy.count'? "
                      "(the experiment config has: seed, name, runs_dir, env_steps, frames, stop_when, stop_over_episodes, "
                      "sample_length, actors, policy, trainer, streams, resolver, log, supervision, curriculum, workers, "
                      "launcher, launcher_options, pbt, algo, env)"),
    ("algo.lrr=1", "--set algo.lrr=1: unknown field 'algo.lrr'; did you mean 'algo.lr'? "
                   "(algo has: lr, epochs, hidden, schedule, target_kl, use_gae)"),
    ("actors=3", "--set actors=3: actors is a group of options; set one of actors.count, actors.envs_per_actor, "
                 "actors.ring_size, actors.drop_when_full"),
    ("env_name=CartPole-v1", "--set env_name=CartPole-v1: env_name is not an option: it is given on the command "
                             "line (zoo train ALGO --env ENV)"),
    ("actors.count", "--set actors.count: expected key=value, e.g. --set actors.count=4"),
])
def test_override_errors_name_field_value_and_allowed(override, message):
    with pytest.raises(ConfigError) as info:
        apply_override(fresh(), override)
    assert str(info.value) == message


def test_override_error_carries_the_field():
    with pytest.raises(ConfigError) as info:
        apply_override(fresh(), "actors.count=abc")
    assert info.value.field == "actors.count"


def test_set_value_checks_typed_values():
    cfg = fresh()
    zc.set_value(cfg, "policy.max_wait_ms", 2)  # int accepted for a float field
    assert cfg.policy.max_wait_ms == 2.0 and isinstance(cfg.policy.max_wait_ms, float)
    with pytest.raises(ConfigError, match=r"^src: actors.count expects an int, got True$"):
        zc.set_value(cfg, "actors.count", True, source="src")


# ----------------------------------------------------------------------------- env resolution
def test_resolve_gym_id(reg):
    component, arg = resolve_env(reg, "CartPole-v1")
    assert (component.name, arg) == ("gym", "CartPole-v1")


def test_resolve_name_colon_arg(reg):
    component, arg = resolve_env(reg, "atari:Pong")
    assert (component.name, arg) == ("atari", "Pong")
    assert resolve_env(reg, "gym:Acrobot-v1")[1] == "Acrobot-v1"


def test_resolve_bare_name(reg):
    component, arg = resolve_env(reg, "atari")
    assert (component.name, arg) == ("atari", None)
    assert resolve_env(reg, "atari:")[1] is None


def test_unknown_env_suggests_gym_ids(reg):
    with pytest.raises(UnknownEnvError) as info:
        resolve_env(reg, "CartPle-v1")
    assert isinstance(info.value, UnknownComponentError)
    assert info.value.suggestions[0] == "CartPole-v1"
    assert "Did you mean: CartPole-v1" in str(info.value)


def test_unknown_env_prefix_suggests_name_with_arg(reg):
    with pytest.raises(UnknownEnvError) as info:
        resolve_env(reg, "atri:Pong")
    assert info.value.suggestions[0] == "atari:Pong"


# ----------------------------------------------------------------------------- build_config
def test_layers_in_order(reg, tmp_path, monkeypatch):
    monkeypatch.setattr(zc, "_now", lambda: __import__("datetime").datetime(2024, 1, 2, 3, 4, 5))
    conf = tmp_path / "exp.toml"
    conf.write_text('frames = 5000\nalgo.lr = 0.25\n[actors]\ncount = 3\nenvs_per_actor = 4\n')
    cfg = build_config(reg, "fake", "atari:Pong", config_file=conf, overrides=["actors.count=4"], steps=1234)
    assert cfg.sample_length == 64          # preset
    assert cfg.algo.epochs == 7             # preset
    assert cfg.algo.lr == 0.25              # file beats preset
    assert cfg.actors.envs_per_actor == 4   # file
    assert cfg.actors.count == 4            # --set beats file and preset
    assert (cfg.env_steps, cfg.frames) == (1234, 0)  # --steps replaces the file's frames
    assert cfg.seed == 1
    assert cfg.name == "fake-atari-Pong-20240102-030405"
    assert cfg.spec.env_id == "toy:Pong" and cfg.spec.frame_skip == 4
    assert FakeAlgo.seen_specs == [cfg.spec]
    assert [e.closed for e in ToyEnv.instances] == [True]  # one env built, then closed


def test_default_budget_and_env_options_reach_the_spec(reg):
    cfg = build_config(reg, "fake", "atari:Pong", overrides=["env.frame_skip=2"], seed=7, name="my-run.1")
    assert (cfg.env_steps, cfg.frames) == (0, 10_000_000)
    assert cfg.spec.frame_skip == 2 and ToyEnv.instances[0].seed == 7
    assert cfg.seed == 7 and cfg.name == "my-run.1"
    assert budget(cfg) == ("env_steps", 5_000_000)


def test_gym_default_budget(reg):
    cfg = build_config(reg, "fake", "CartPole-v1", name="x")
    assert (cfg.env_steps, cfg.frames) == (200_000, 0)
    assert cfg.spec.env_id == "CartPole-v1"


def test_unknown_algorithm_builds_no_env(reg):
    with pytest.raises(UnknownComponentError) as info:
        build_config(reg, "fak", "atari:Pong")
    assert info.value.suggestions == ["fake"]
    assert ToyEnv.instances == []


def test_steps_and_frames_exclusive(reg):
    with pytest.raises(ConfigError, match="mutually exclusive"):
        build_config(reg, "fake", "atari:Pong", steps=10, frames=10)


def test_config_file_type_error(reg, tmp_path):
    conf = tmp_path / "bad.toml"
    conf.write_text('[actors]\ncount = "x"\n')
    with pytest.raises(ConfigError) as info:
        build_config(reg, "fake", "atari:Pong", config_file=conf)
    assert str(info.value) == f"--config {conf}: actors.count expects an int, got 'x'"
    assert ToyEnv.instances == []


def test_config_file_missing_and_invalid(reg, tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        build_config(reg, "fake", "atari:Pong", config_file=tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("actors = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        build_config(reg, "fake", "atari:Pong", config_file=bad)


def test_env_build_failure_is_a_config_error(reg):
    with pytest.raises(ConfigError, match=r"^--env gym:NoSuchEnv-v0: the env failed to build: ValueError: "):
        build_config(reg, "fake", "gym:NoSuchEnv-v0")


def test_an_env_error_naming_the_env_is_not_prefixed_twice():
    # Before: "--env CartPole-v1: the env failed to build: ValueError: --env CartPole-v1: gymnasium.make rejected ..."
    from zoo.core.plugins import get_registry

    with pytest.raises(ConfigError) as info:
        build_config(get_registry(), "ppo", "CartPole-v1", overrides=["env.kwargs=foo=1"], steps=1000)
    text = str(info.value)
    assert text.startswith("--env CartPole-v1: the env failed to build: ValueError: gymnasium.make rejected "
                           "env.kwargs='foo=1': ")
    assert text.count("--env") == 1


def test_algorithm_post_init_checks_run_on_final_values(reg):
    with pytest.raises(ConfigError) as info:
        build_config(reg, "fake", "atari:Pong", overrides=["algo.lr=-1"])
    assert str(info.value) == "algo.lr=-1.0 must be > 0"
    assert info.value.field == "algo"


def test_rules_the_presets_decide_are_judged_after_the_presets():
    # Before: the first pass (user layers on the dataclass defaults, to probe the spec) refused
    # `--set actors.envs_per_actor=1` for sac (default ring_size 2; sac's presets set 1) and r2d2's
    # `--set algo.sequence_length=30` (default burn_in 40; the vector presets set 4).
    from zoo.core.plugins import get_registry

    cfg = build_config(get_registry(), "sac", "Pendulum-v1", overrides=["actors.envs_per_actor=1"], steps=1000)
    assert (cfg.actors.envs_per_actor, cfg.actors.ring_size) == (1, 1)
    cfg = build_config(get_registry(), "r2d2", "CartPole-v1", overrides=["algo.sequence_length=30"], steps=1000)
    assert (cfg.algo.sequence_length, cfg.algo.burn_in) == (30, 4)
    # still refused after the presets, with the final values in the message
    with pytest.raises(ConfigError) as info:
        build_config(get_registry(), "r2d2", "CartPole-v1", overrides=["algo.sequence_length=3"], steps=1000)
    assert str(info.value) == ("algo.burn_in=4 leaves no trained step in a sequence of algo.sequence_length=3; "
                               "set --set algo.burn_in=1 or less")
    with pytest.raises(ConfigError) as info:
        build_config(get_registry(), "sac", "Pendulum-v1", overrides=["trainer.count=2"], steps=1000)
    assert info.value.field == "trainer.count"
    assert str(info.value).startswith("trainer.count=2 is more than actors.count=1: ")


# ----------------------------------------------------------------------------- validate
def test_validate_ring_divisibility(reg):
    cfg = fresh()
    cfg.env_steps, cfg.name = 10, "r"
    cfg.actors.envs_per_actor = 7
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.field == "actors.envs_per_actor"
    assert str(info.value) == (
        "actors.envs_per_actor=7 is not divisible by actors.ring_size=2; each ring group holds the same number "
        "of envs: use a multiple of 2 (e.g. 6) or change actors.ring_size")


@pytest.mark.parametrize("path,value,message", [
    ("trainer.checkpoint_interval_s", -1.0, "trainer.checkpoint_interval_s must be finite and >= 0 "
     "(0 = only every trainer.checkpoint_interval updates), got -1.0"),
    ("trainer.checkpoint_interval_s", float("nan"), "trainer.checkpoint_interval_s must be finite and >= 0 "
     "(0 = only every trainer.checkpoint_interval updates), got nan"),
    ("trainer.max_nonfinite_updates", 0, "trainer.max_nonfinite_updates must be >= 1, got 0"),
])
def test_validate_checkpoint_and_nonfinite_options(reg, path, value, message):
    cfg = fresh()
    cfg.env_steps, cfg.name = 10, "r"
    setattr(cfg.trainer, path.split(".")[1], value)
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert (info.value.field, str(info.value)) == (path, message)


def test_validate_reports_every_problem(reg):
    cfg = fresh()
    cfg.name = "r"
    cfg.actors.count = 0
    cfg.trainer.max_policy_lag = -1
    cfg.env_steps, cfg.frames = 10, 20
    cfg.streams.sample.transport = "ngn"
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.problems == [
        "actors.count must be >= 1, got 0",
        "trainer.max_policy_lag must be >= 0 (0 accepts only the current version), got -1",
        "both env_steps=10 and frames=20 are set; set only one budget (--steps N or --frames N)",
        "streams.sample.transport='ngn' is not a registered transport; did you mean 'nng'? installed: auto, inline, "
        "nng, shm",
    ]


def test_validate_refuses_devices_this_torch_cannot_use_before_any_process_starts(reg, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = fresh()
    cfg.env_steps, cfg.name = 10, "r"
    cfg.policy.device = "cuda"
    cfg.algo = FakeAlgoConfig()
    cfg.algo.device = "tpu"
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.problems == [
        f"policy.device='cuda': this torch build ({torch.__version__}) or machine has no CUDA; use cpu, or "
        "install a CUDA build of torch",
        "algo.device='tpu' is not a device; use cpu, cuda, cuda:N or mps",
    ]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    cfg.policy.device, cfg.algo.device = "cuda:1", "cuda:2"
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.problems == [
        "algo.device=cuda:2: this machine has 2 CUDA devices (cuda:0..cuda:1); use one of cuda:0..cuda:1"]


def test_validate_accepts_defaults(reg):
    cfg = fresh()
    cfg.env_steps, cfg.name = 10, "r"
    validate(cfg, reg)


# ----------------------------------------------------------------------------- budget, output
def test_budget_frames_to_env_steps():
    spec = EnvSpec("toy", ("agent_0",), {}, None, frame_skip=4)
    cfg = fresh()
    cfg.frames = 100_000
    assert budget(cfg, spec) == ("env_steps", 25_000)
    cfg.frames = 10
    assert budget(cfg, spec) == ("env_steps", 3)  # ceil: at least the frames asked for
    cfg.frames, cfg.env_steps = 0, 5_000
    assert budget(cfg, spec) == ("env_steps", 5_000)


def test_budget_default_from_registry(reg):
    cfg = fresh()
    spec = EnvSpec("toy", ("agent_0",), {}, None, frame_skip=4)
    assert budget(cfg, spec, reg) == ("env_steps", 2_500_000)


def test_config_to_dict_is_json(reg):
    cfg = build_config(reg, "fake", "atari:Pong", name="r")
    data = json.loads(json.dumps(config_to_dict(cfg)))
    assert "spec" not in data
    assert data["algo"] == {"lr": 0.5, "epochs": 7, "hidden": [64, 64], "schedule": "constant",
                            "target_kl": None, "use_gae": True}
    assert data["env"] == {"frame_skip": 4}
    assert data["actors"] == {"count": 5, "envs_per_actor": 8, "ring_size": 2, "drop_when_full": False}
    assert data["streams"]["sample"] == {"transport": "auto", "options": {}}
    assert data["env_spec"]["resolved"] == {"frame_skip": 4, "game": "Pong"}
    assert data["env_spec"]["frame_skip"] == 4 and data["env_spec"]["agents"] == ["agent_0"]
    assert (data["algo_name"], data["env_name"], data["frames"], data["name"]) == (
        "fake", "atari:Pong", 10_000_000, "r")


def test_save_config(reg, tmp_path):
    cfg = build_config(reg, "fake", "atari:Pong", name="r")
    path = zc.save_config(cfg, tmp_path / "runs" / "r")
    assert json.loads(path.read_text()) == json.loads(json.dumps(config_to_dict(cfg)))


def test_list_options_types_defaults_docs():
    opts = {o.path: o for o in list_options(FakeAlgoConfig, "algo.")}
    assert list(opts) == ["algo.lr", "algo.epochs", "algo.hidden", "algo.schedule", "algo.target_kl", "algo.use_gae"]
    assert (opts["algo.lr"].type, opts["algo.lr"].default, opts["algo.lr"].doc) == ("float", 0.1, "Learning rate.")
    assert opts["algo.hidden"].type == "tuple[int, ...]"
    assert opts["algo.schedule"].type == "'constant' | 'linear'"
    assert opts["algo.target_kl"].type == "float | None"
    actors = {o.path: o.doc for o in list_options(ExperimentConfig) if o.path.startswith("actors.")}
    assert actors["actors.count"] == "Number of actor worker processes."


@dataclass
class DocStyles:
    """Options.

    - ``alpha``: from the docstring,
      continued here.
    beta: plain style.
    """

    alpha: int = 1
    beta: int = 2
    gamma: int = 3  # from a comment
    delta: int = field(default=4, metadata={"help": "from metadata"})


def test_field_docs_sources():
    assert {o.path: o.doc for o in list_options(DocStyles)} == {
        "alpha": "from the docstring, continued here.", "beta": "plain style.",
        "gamma": "from a comment", "delta": "from metadata"}
