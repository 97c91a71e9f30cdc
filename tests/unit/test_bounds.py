"""Values that cannot work are refused before any process starts (issue 14, item 5).

The mechanism: ``bounded(...)`` metadata on every numeric option, checked for a whole config
tree by ``bound_problems`` (floats must also be finite), plus the cross-field rule that the
budget covers at least one update. The CLI exits 2 with the field, the bad value and what
is allowed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import pytest
from gymnasium import spaces
from typer.testing import CliRunner

import zoo.cli as cli
from zoo.core.config import ExperimentConfig, steps_per_update
from zoo.core.env import EnvSpec
from zoo.core.options import Bound, ConfigError, bound_problems, bounded, check_bounds, list_options

runner = CliRunner()


@dataclass
class Inner:
    count: int = field(default=1, metadata=bounded(ge=1))
    rate: float = field(default=0.5, metadata=bounded(ge=0, lt=1))


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    lr: float = field(default=1e-3, metadata=bounded(gt=0))
    scale: float = 1.0  # no bound declared: still must be finite
    loose: float = field(default=0.0, metadata=bounded(finite=False))
    sizes: tuple[int, ...] = field(default=(64, 64), metadata=bounded(ge=1))
    mode: Literal["a", "b"] = "a"
    lag: int = field(default=0, metadata=bounded(ge=0, hint="0 = only the current version"))


def test_bound_descriptions():
    assert Bound(ge=1).describe(is_float=False) == ">= 1"
    assert Bound(gt=0).describe() == "finite and > 0"
    assert Bound(ge=0, lt=1).describe() == "in [0, 1)"
    assert Bound(gt=0, le=360).describe() == "in (0, 360]"
    assert Bound().describe() == "finite"
    assert Bound(ge=0, lt=2**32).describe(is_float=False) == "in [0, 4294967296)"
    with pytest.raises(ValueError):
        bounded(ge=0, gt=0)


def test_nan_and_inf_are_refused_unless_the_option_says_otherwise():
    assert not Bound(gt=0).allows(math.inf) and not Bound(gt=0).allows(math.nan)
    assert not Bound().allows(math.nan) and Bound().allows(-1e300)
    assert Bound(finite=False).allows(math.inf) and Bound(finite=False).allows(math.nan)
    assert not Bound(ge=0, finite=False).allows(math.nan)  # nan is in no range
    assert Bound(ge=0, finite=False).allows(math.inf)


def test_bound_problems_walk_the_whole_tree_and_report_everything():
    cfg = Outer()
    assert bound_problems(cfg) == []
    cfg.inner.count, cfg.inner.rate = 0, 1.0
    cfg.lr, cfg.scale, cfg.loose = math.inf, math.nan, math.inf
    cfg.sizes, cfg.mode, cfg.lag = (64, 0), "c", -1
    assert bound_problems(cfg, "algo.") == [
        ("algo.inner.count", "algo.inner.count must be >= 1, got 0"),
        ("algo.inner.rate", "algo.inner.rate must be in [0, 1), got 1.0"),
        ("algo.lr", "algo.lr must be finite and > 0, got inf"),
        ("algo.scale", "algo.scale must be finite, got nan"),
        ("algo.sizes", "algo.sizes must be each item >= 1, got (64, 0)"),
        ("algo.mode", "algo.mode must be one of 'a', 'b', got 'c'"),
        ("algo.lag", "algo.lag must be >= 0 (0 = only the current version), got -1"),
    ]
    with pytest.raises(ConfigError) as info:
        check_bounds(cfg, "algo.")
    assert info.value.field == "algo.inner.count" and len(info.value.problems) == 7


def test_help_lists_what_is_allowed():
    allowed = {o.path: o.allowed for o in list_options(Outer)}
    assert allowed["lr"] == "finite and > 0" and allowed["inner.count"] == ">= 1"
    assert allowed["scale"] == "finite" and allowed["mode"] == ""
    assert allowed["lag"] == ">= 0 (0 = only the current version)"


def _ppo_cartpole(*args: str):
    return runner.invoke(cli.app, ["train", "ppo", "--env", "CartPole-v1", "--name", "bounds", *args])


@pytest.mark.parametrize("args, message", [
    (["--set", "algo.lr=inf"], "algo.lr must be finite and > 0, got inf"),
    (["--set", "algo.lr=nan"], "algo.lr must be finite and > 0, got nan"),
    (["--set", "algo.lr=0"], "algo.lr must be finite and > 0, got 0.0"),
    (["--set", "algo.gamma=-0.1"], "algo.gamma must be in [0, 1], got -0.1"),
    (["--set", "actors.count=-1"], "actors.count must be >= 1, got -1"),
    (["--set", "sample_length=0"], "sample_length must be >= 1, got 0"),
    (["--set", "trainer.max_policy_lag=-2"],
     "trainer.max_policy_lag must be >= 0 (0 accepts only the current version), got -2"),
    (["--set", "policy.max_wait_ms=inf"], "policy.max_wait_ms must be finite and >= 0, got inf"),
    (["--set", "log.interval_s=0"], "log.interval_s must be finite and > 0, got 0.0"),
    (["--set", "env.max_episode_steps=-5"], "env.max_episode_steps must be >= 0 (0 = the id's own limit), got -5"),
    (["--seed", "4294967296"], "seed must be in [0, 4294967296), got 4294967296"),
])
def test_zoo_train_refuses_values_that_cannot_work_with_exit_2(args, message, tmp_path):
    result = _ppo_cartpole("--set", f"runs_dir={tmp_path}", *args)
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()) == f"error: {message}"
    assert not (tmp_path / "bounds").exists()  # nothing was started or written


def test_a_budget_smaller_than_one_update_is_refused(tmp_path):
    # ppo's CartPole presets: 4 envs per actor in 2 ring groups (2 envs each), T = 32, 8 samples per
    # update. One sample = 2 envs x 1 agent = 2 agent-slots, so 8 / 2 = 4 samples of 2 envs x 32 steps
    # = 256 env steps before the first update; 255 would end the run with 0 updates (and exit 0).
    result = _ppo_cartpole("--set", f"runs_dir={tmp_path}", "--steps", "255")
    assert result.exit_code == 2
    assert " ".join(result.output.split()) == (
        "error: the budget env_steps=255 is smaller than one update, so the run would end without training: one "
        "update takes trainer.batch_samples=8 agent-slot samples: 4 sample(s) of 2 env(s) x 1 agent(s) "
        "(actors.envs_per_actor=4 / actors.ring_size=2) x sample_length=32 steps = 256 env steps; give a budget "
        "of at least that (--steps 256) or lower trainer.batch_samples or sample_length")


def test_more_minibatches_than_the_batch_has_agent_steps_is_refused(tmp_path):
    # ppo's CartPole presets: one trainer's batch is 4 samples x 2 agent-slots x 32 steps = 256 agent
    # steps; 257 minibatches would leave one empty (before: silently 256 minibatches, the logged
    # losses divided by a count that included the empty ones on data-parallel trainers).
    result = _ppo_cartpole("--set", f"runs_dir={tmp_path}", "--set", "algo.minibatches=257")
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()) == (
        "error: algo.minibatches=257 is more than the 256 agent steps of one trainer's batch (4 sample(s) x "
        "2 agent-slot(s) x sample_length=32 = 256 agent steps (trainer.batch_samples=8)), so 1 minibatch(es) "
        "would be empty; set --set algo.minibatches=256 or fewer, or raise trainer.batch_samples or sample_length")
    assert not (tmp_path / "bounds").exists()


def test_as_many_minibatches_as_agent_steps_is_accepted():
    from zoo.core.config import batch_agent_steps, validate

    spec = EnvSpec("t", ("a0",), {"obs": spaces.Box(0, 1, (2,))}, spaces.Discrete(2))
    cfg = ExperimentConfig(algo_name="ppo", env_name="x", env_steps=10_000, spec=spec, name="x")
    from zoo.plugins.algorithms.ppo.ppo import PPOConfig

    cfg.sample_length, cfg.trainer.batch_samples = 4, 2  # 8 envs in 2 groups: 1 whole sample x 4 slots x 4 = 16
    assert batch_agent_steps(cfg, spec)[0] == 16
    cfg.algo = PPOConfig(minibatches=16)
    validate(cfg)
    cfg.algo = PPOConfig(minibatches=17)
    with pytest.raises(ConfigError, match=r"^algo.minibatches=17 is more than the 16 agent steps") as info:
        validate(cfg)
    assert info.value.field == "algo.minibatches"


def test_steps_per_update_arithmetic():
    def spec(agents: int, frame_skip: int = 1) -> EnvSpec:
        return EnvSpec("t", tuple(f"a{i}" for i in range(agents)), {"obs": spaces.Box(0, 1, (2,))},
                       spaces.Discrete(2), frame_skip=frame_skip)

    cfg = ExperimentConfig(algo_name="ppo", env_name="x")  # 8 envs in 2 groups, T = 128, 16 samples
    # 4 envs x 1 agent = 4 slots per sample: ceil(16 / 4) = 4 samples x 4 envs x 128 = 2,048 env steps
    assert steps_per_update(cfg, spec(1))[0] == 2048
    # hide-and-seek-like: 4 agents -> 16 slots per sample: 1 sample x 4 envs x 128 = 512
    assert steps_per_update(cfg, spec(4))[0] == 512
    # 3 agents -> 12 slots: ceil(16 / 12) = 2 samples (whole samples only) x 4 x 128 = 1,024
    assert steps_per_update(cfg, spec(3))[0] == 1024
    cfg.actors.ring_size, cfg.trainer.batch_samples, cfg.sample_length = 1, 100, 10
    # 8 envs x 1 agent per sample: ceil(100 / 8) = 13 samples x 8 envs x 10 steps = 1,040
    assert steps_per_update(cfg, spec(1))[0] == 1040
    cfg.trainer.count = 2  # each of 2 trainers fills its own batch: 2 x 1,040
    steps, text = steps_per_update(cfg, spec(1))
    assert steps == 2080
    assert text == ("one update takes trainer.batch_samples=100 agent-slot samples per trainer, for each of "
                    "trainer.count=2: 13 sample(s) of 8 env(s) x 1 agent(s) (actors.envs_per_actor=8 / "
                    "actors.ring_size=1) x sample_length=10 steps x 2 trainers = 2,080 env steps")


def test_a_frames_budget_smaller_than_one_update_names_frames():
    from zoo.core.config import _one_update_fits

    cfg = ExperimentConfig(algo_name="ppo", env_name="x", frames=8000)
    spec = EnvSpec("t", ("a",), {"obs": spaces.Box(0, 1, (2,))}, spaces.Discrete(2), frame_skip=4)
    ok, path, message = _one_update_fits(cfg, spec)
    # 2,048 env steps per update (see above) x 4 = 8,192 frames; 8,000 frames = 2,000 env steps
    assert (ok, path) == (False, "frames")
    assert "frames=8,000 (2,000 env steps at frame-skip 4)" in message and "(--frames 8192)" in message
    cfg.frames = 8192
    assert _one_update_fits(cfg, spec)[0]
