"""IMPALA plugin and the asynchronous-training helpers of the core, with hand-computed values.

The update is checked on a one-parameter-per-output "table" policy whose outputs are
known in closed form: logits ``l`` shared by every observation, value ``V(x) = v + x``
(``x`` the observation's single feature). Replacing the optimiser with plain SGD (lr 1,
no clipping) makes the parameter change equal to minus the gradient, worked out by hand.
"""
from __future__ import annotations

import io
import math
import subprocess
import sys
from contextlib import redirect_stderr

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical

from zoo.core.controller import WARNING_REPEAT_S, show_warning
from zoo.core.env import EnvSpec
from zoo.core.workers.policy import StallWatch
from zoo.core.workers.trainer import policy_lag, too_stale
from zoo.plugins.algorithms.impala.impala import IMPALA, IMPALAConfig

LN2 = math.log(2.0)


class TablePolicy(nn.Module):
    """Discrete(2) policy with logits ``l`` (2 parameters) for every state and ``V(x) = v + x``."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(2))
        self.v = nn.Parameter(torch.zeros(()))

    def value(self, obs):
        return self.v + obs["obs"][:, 0].float()

    def evaluate(self, obs, action):
        n = obs["obs"].shape[0]
        dist = Categorical(logits=self.logits.expand(n, 2))
        return dist.log_prob(action.long()), dist.entropy(), self.value(obs)

    def act(self, obs, deterministic=False):
        raise NotImplementedError


class TableIMPALA(IMPALA):
    @classmethod
    def build_policy(cls, config, spec):
        return TablePolicy()


def table_algo(**config) -> TableIMPALA:
    cfg = IMPALAConfig(**{"gamma": 0.5, "max_grad_norm": 0.0, "vf_coef": 0.5, "ent_coef": 0.01, "lr": 1.0, **config})
    algo = TableIMPALA(cfg, spec=None, seed=0)
    algo.optimizer = torch.optim.SGD(algo.policy.parameters(), lr=cfg.lr)  # new params = old - gradient
    return algo


def batch(reward, logp, action, obs_x, terminated=None, truncated=None, active=None, final_x=(), final_index=()):
    """A [T, 1] batch; ``obs_x`` has T + 1 rows (the observation feature of every row)."""
    T = len(reward)
    col = lambda x, dt: np.asarray(x, dt).reshape(T, 1)  # noqa: E731
    return {
        "obs": {"obs": np.asarray(obs_x, np.float32).reshape(T + 1, 1, 1)},
        "action": col(action, np.int64),
        "reward": col(reward, np.float32),
        "terminated": col(terminated or [False] * T, bool),
        "truncated": col(truncated or [False] * T, bool),
        "active": col(active or [True] * T, bool),
        "policy_version": np.zeros((T, 1), np.int64),
        "logp": col(logp, np.float32),
        "value": np.zeros((T, 1), np.float32),
        "final_obs": {"obs": np.asarray(final_x, np.float32).reshape(-1, 1)},
        "final_index": np.asarray(final_index, np.int64).reshape(-1, 2),
    }


def params(algo) -> tuple[list[float], float]:
    return [float(x) for x in algo.policy.logits.detach()], float(algo.policy.v.detach())


def test_update_on_policy_gradient_by_hand():
    # pi = [0.5, 0.5] (logits 0), V = 0 everywhere, behaviour = target (logp = ln 0.5), gamma 0.5.
    # rewards [1, 1]: v_1 = 1, v_0 = 1 + 0.5 * 1 = 1.5; A_1 = 1, A_0 = 1 + 0.5 * 1 = 1.5.
    algo = table_algo()
    stats = algo.update(batch([1.0, 1.0], [-LN2, -LN2], [0, 1], [0.0, 0.0, 0.0]))
    # d(-A log pi(a))/dl = A (pi - onehot(a)): 1.5 ([.5, .5] - [1, 0]) + 1 ([.5, .5] - [0, 1]) = [-0.25, 0.25]
    # The entropy gradient is 0 at the uniform policy. New logits = -gradient.
    # d(vf_coef * 0.5 * sum (v_s - V)^2)/dv = -0.5 * (1.5 + 1) = -1.25 -> new v = 1.25.
    logits, v = params(algo)
    assert logits == pytest.approx([0.25, -0.25], abs=1e-6)
    assert v == pytest.approx(1.25, abs=1e-6)
    # Logged per active step: pg_loss = -(1.5 + 1) ln 0.5 / 2; v_loss = 0.5 (1.5^2 + 1^2) / 2 = 0.8125
    assert stats["pg_loss"] == pytest.approx(2.5 * LN2 / 2, abs=1e-6)
    assert stats["v_loss"] == pytest.approx(0.8125, abs=1e-6)
    assert stats["entropy"] == pytest.approx(LN2, abs=1e-6)
    assert stats["rho_mean"] == pytest.approx(1.0) and stats["rho_clipfrac"] == 0.0
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert stats["agent_steps"] == 2.0


def test_update_off_policy_clips_rho_with_behaviour_logp_from_the_sample():
    # Behaviour mu(a_0) = 0.25, mu(a_1) = 1.0; target pi = 0.5: ratios 2 and 0.5.
    # rho = c = [min(1, 2), 0.5] = [1, 0.5]. V = 0, gamma 0.5, rewards [1, 1]:
    # delta_1 = 0.5 * 1 = 0.5, v_1 = 0.5; delta_0 = 1, v_0 = 1 + 0.5 * 1 * 0.5 = 1.25
    # A_1 = 0.5 * (1 + 0) = 0.5; A_0 = 1 * (1 + 0.5 * 0.5) = 1.25
    algo = table_algo()
    stats = algo.update(batch([1.0, 1.0], [math.log(0.25), 0.0], [0, 1], [0.0, 0.0, 0.0]))
    # logits gradient: 1.25 ([.5, .5] - [1, 0]) + 0.5 ([.5, .5] - [0, 1]) = [-0.375, 0.375]
    # v gradient: -0.5 * (1.25 + 0.5) = -0.875
    logits, v = params(algo)
    assert logits == pytest.approx([0.375, -0.375], abs=1e-6)
    assert v == pytest.approx(0.875, abs=1e-6)
    assert stats["rho_mean"] == pytest.approx(0.75, abs=1e-6)
    assert stats["rho_clipfrac"] == pytest.approx(0.5)
    # ((2 - 1) - ln 2 + (0.5 - 1) - ln 0.5) / 2 = 0.25
    assert stats["approx_kl"] == pytest.approx(0.25, abs=1e-6)
    assert stats["v_loss"] == pytest.approx(0.5 * (1.25 ** 2 + 0.5 ** 2) / 2, abs=1e-6)


def test_update_truncated_step_bootstraps_from_its_final_observation():
    # T = 2: step 0 truncated, final obs feature 10 (V = 10); row 1 is the reset obs with
    # feature 100 (V = 100); row 2 (bootstrap) feature 4. gamma 0.5, on-policy, rewards 1.
    # v_0 = 1 + 0.5 * 10 = 6 (not 1 + 0.5 * 100); v_1 = 1 + 0.5 * 4 = 3.
    # V(x_0) = 0, V(x_1) = 100: v_loss = 0.5 * ((6 - 0)^2 + (3 - 100)^2) / 2
    algo = table_algo()
    stats = algo.update(batch([1.0, 1.0], [-LN2, -LN2], [0, 0], [0.0, 100.0, 4.0],
                              truncated=[True, False], final_x=[10.0], final_index=[[0, 0]]))
    assert stats["v_loss"] == pytest.approx(0.5 * (36 + 97 ** 2) / 2, abs=1e-4)
    # v gradient: -0.5 * ((6 - 0) + (3 - 100)) = 45.5 -> new v = -45.5
    assert params(algo)[1] == pytest.approx(-45.5, abs=1e-4)


def test_update_terminated_step_and_inactive_step():
    # T = 3, gamma 0.5, on-policy, V(x) = x. Step 0 terminated (reward 2): v_0 = 2, row 1's
    # value (50) is not used. Step 1 inactive: ignored. Step 2: v_2 = 1 + 0.5 * 8 = 5.
    algo = table_algo()
    stats = algo.update(batch([2.0, 9.0, 1.0], [-LN2] * 3, [0, 0, 0], [1.0, 50.0, 3.0, 8.0],
                              terminated=[True, False, False], active=[True, False, True]))
    assert stats["agent_steps"] == 2.0
    # v_loss = 0.5 * ((2 - 1)^2 + (5 - 3)^2) / 2 = 1.25
    assert stats["v_loss"] == pytest.approx(1.25, abs=1e-6)
    # v gradient: -0.5 * ((2 - 1) + (5 - 3)) = -1.5
    assert params(algo)[1] == pytest.approx(1.5, abs=1e-6)


def test_batch_without_active_steps_takes_no_step():
    algo = table_algo()
    stats = algo.update(batch([1.0], [0.0], [0], [0.0, 0.0], active=[False]))
    assert stats["agent_steps"] == 0.0 and stats["pg_loss"] == 0.0
    assert params(algo) == ([0.0, 0.0], 0.0)


# ------------------------------------------------------------------------- real networks
def vector_spec():
    return EnvSpec("Toy-v0", ("agent_0",), {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)},
                   spaces.Discrete(2))


def image_spec():
    return EnvSpec("ToyAtari-v0", ("agent_0",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)},
                   spaces.Discrete(6))


def rollout(policy, obs: np.ndarray, T: int, B: int) -> dict:
    """A [T, B] batch whose actions and logp come from ``policy.act`` (as the policy worker does)."""
    out = policy.act({"obs": torch.as_tensor(obs[:T].reshape(T * B, *obs.shape[2:]))})
    return {
        "obs": {"obs": obs}, "action": out["action"].numpy().reshape(T, B),
        "reward": np.ones((T, B), np.float32), "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool), "active": np.ones((T, B), bool),
        "policy_version": np.zeros((T, B), np.int64), "logp": out["logp"].numpy().reshape(T, B),
        "value": out["value"].numpy().reshape(T, B),
        "final_obs": {"obs": np.zeros((0, *obs.shape[2:]), obs.dtype)}, "final_index": np.zeros((0, 2), np.int64),
    }


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_mlp_update_changes_weights_and_reports_finite_stats(optimizer):
    algo = IMPALA(IMPALAConfig(optimizer=optimizer), vector_spec(), seed=0)
    obs = np.random.default_rng(0).standard_normal((9, 3, 4)).astype(np.float32)
    b = rollout(algo.policy, obs, 8, 3)
    before = [p.detach().clone() for p in algo.policy.parameters()]
    stats = algo.update(b)
    assert all(np.isfinite(v) for k, v in stats.items() if k != "explained_variance")
    assert stats["rho_mean"] == pytest.approx(1.0, abs=1e-5)  # on-policy: pi/mu = 1
    assert any(not torch.equal(a, p) for a, p in zip(before, algo.policy.parameters()))
    assert isinstance(algo.optimizer, torch.optim.RMSprop if optimizer == "rmsprop" else torch.optim.Adam)


def test_nature_cnn_update_and_checkpoint_round_trip():
    algo = IMPALA(IMPALAConfig(), image_spec(), seed=0)
    obs = np.random.default_rng(0).integers(0, 256, (5, 2, 4, 84, 84), dtype=np.uint8)
    stats = algo.update(rollout(algo.policy, obs, 4, 2))
    assert np.isfinite(stats["pg_loss"]) and stats["agent_steps"] == 8.0
    state = algo.state_dict()
    other = IMPALA(IMPALAConfig(), image_spec(), seed=1)
    other.load_state_dict(state)
    assert other.updates == 1 and other.agent_steps == 8
    for a, b in zip(algo.policy.state_dict().values(), other.policy.state_dict().values()):
        assert torch.equal(a, b)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="algo.rho_bar"):
        IMPALAConfig(rho_bar=0.0)
    with pytest.raises(ValueError, match="algo.vtrace_lambda"):
        IMPALAConfig(vtrace_lambda=1.5)
    with pytest.raises(ValueError, match="algo.optimizer"):
        IMPALAConfig(optimizer="sgd")
    with pytest.raises(ValueError, match="algo.anneal_lr_steps"):
        IMPALAConfig(anneal_lr=True, anneal_lr_steps=-1)


def test_learning_rate_annealing():
    algo = IMPALA(IMPALAConfig(lr=1e-3, anneal_lr=True), vector_spec(), seed=0)
    algo.progress = 0.25  # set by the trainer: a quarter of the run's budget done
    assert algo.current_lr() == pytest.approx(7.5e-4)
    algo = IMPALA(IMPALAConfig(lr=1e-3, anneal_lr=True, anneal_lr_steps=100), vector_spec(), seed=0)
    algo.agent_steps = 50
    assert algo.current_lr() == pytest.approx(5e-4)
    algo.agent_steps = 150
    assert algo.current_lr() == 0.0
    assert IMPALA(IMPALAConfig(lr=1e-3), vector_spec(), seed=0).current_lr() == 1e-3


def test_presets_are_asynchronous_with_bounded_lag():
    for spec, T, batch_samples in ((vector_spec(), 16, 8), (image_spec(), 20, 32)):
        p = IMPALA.presets(spec)
        assert p["sample_length"] == T and p["trainer.batch_samples"] == batch_samples
        assert 10 <= p["trainer.max_policy_lag"] <= 20
        assert p["actors.drop_when_full"] is True  # actors never wait for the trainer
    assert IMPALA.presets(image_spec())["algo.optimizer"] == "rmsprop"


def test_build_config_applies_presets_and_overrides():
    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry

    cfg = build_config(get_registry(), "impala", "CartPole-v1", overrides=["algo.rho_bar=2", "algo.optimizer=rmsprop"])
    assert cfg.algo.rho_bar == 2.0 and cfg.algo.optimizer == "rmsprop" and cfg.trainer.max_policy_lag == 16


def test_plugin_registration_does_not_import_torch():
    code = ("import sys; from zoo.core.plugins import get_registry; r = get_registry(); "
            "assert 'impala' in r.names('algorithm'); import zoo.plugins.algorithms.vtrace; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------- core: lag, stalls, warnings
def sample(versions, active=None):
    versions = np.asarray(versions, np.int64)
    active = np.ones(versions.shape, bool) if active is None else np.asarray(active)
    return {"policy_version": versions, "active": active}


def test_policy_lag_and_staleness_filter():
    s = sample([[3, 5], [4, 6]], active=[[True, True], [True, False]])
    # trainer version 7: lags of the active steps 7-3, 7-5, 7-4 (the inactive 6 has none)
    assert sorted(policy_lag(7, s).tolist()) == [2, 3, 4]
    assert too_stale(7, s, max_policy_lag=3)       # 4 > 3: dropped
    assert not too_stale(7, s, max_policy_lag=4)   # 4 <= 4: kept
    assert not too_stale(7, sample([[0]], active=[[False]]), max_policy_lag=0)  # no active step: no lag


def test_stall_watch_is_quiet_until_the_trainers_first_update():
    # A slow run: the initial weights arrive at 100 s and are served, and sampling the first
    # batch takes 300 s. Before: "no new parameters for 30 s ... Is the trainer stalled?" at 130 s.
    w = StallWatch(30.0, now=0.0)
    w.new_version(now=100.0)         # the trainer's initial (or resumed) weights
    w.served()
    assert not w.due(130.0) and not w.due(400.0)


def test_stall_watch_warns_once_per_stall():
    w = StallWatch(30.0, now=0.0)
    w.new_version(now=50.0)          # the initial weights
    w.new_version(now=100.0)         # the first update
    assert not w.due(200.0)          # nothing served yet: the actors are not waiting on these weights
    w.served()
    assert not w.due(129.9)
    assert w.due(130.0)
    w.warned()
    assert not w.due(500.0)          # once per stall
    w.new_version(now=500.0)         # a new version re-arms it
    w.served()
    assert not w.due(529.0) and w.due(530.0)


def test_controller_prints_warnings_rate_limited():
    shown: dict = {}
    meta = {"type": "warning", "role": "policy", "index": 0, "key": "parameter-stall", "message": "no new parameters"}
    err = io.StringIO()
    with redirect_stderr(err):
        assert show_warning(meta, shown, now=10.0)
        assert not show_warning({**meta, "message": "still none"}, shown, now=10.0 + WARNING_REPEAT_S - 1)
        assert show_warning({**meta, "index": 1}, shown, now=11.0)  # another worker
        assert show_warning(meta, shown, now=10.0 + WARNING_REPEAT_S)
    assert err.getvalue().splitlines() == [
        "zoo: warning from policy worker 0: no new parameters",
        "zoo: warning from policy worker 1: no new parameters",
        "zoo: warning from policy worker 0: no new parameters",
    ]


def test_out_of_range_hyperparameters_name_the_field_and_the_range():
    with pytest.raises(ValueError) as info:
        IMPALAConfig(rmsprop_alpha=1.0)
    assert str(info.value) == "algo.rmsprop_alpha must be in [0, 1), got 1.0"
