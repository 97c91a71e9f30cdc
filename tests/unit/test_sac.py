"""SAC: the tanh-Gaussian log-probability correction, soft targets with terminated and truncated
steps, Polyak averaging, the temperature loss's sign, action scaling, warm-up, the rate limiter,
the non-finite guard, exact resume and the refusals, with hand-worked values; and gradient steps
against an independent reference written from the paper in CleanRL's order."""
import copy
import io
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.nn import functional as F

from tests.unit.fakes import assert_same_state
from tests.unit.replay_fakes import sac_batch as batch
from tests.unit.replay_fakes import sac_config as small
from tests.unit.replay_fakes import sac_spec as spec
from zoo.core.algorithm import NonFiniteUpdate
from zoo.plugins.algorithms.replay import batch_transitions
from zoo.plugins.algorithms.sac.networks import squashed_gaussian_log_prob
from zoo.plugins.algorithms.sac.sac import SAC, SACConfig, polyak_update, temperature_loss

# -- the tanh-squashed Gaussian ---------------------------------------------------------------

def test_log_prob_correction_hand_worked():
    """mean 0, std 1. u = 0: log N(0) = -log sqrt(2 pi) = -0.9189385, tanh'(0) = 1: no correction.
    u = 1: log N(1) = -1.4189385, log(1 - tanh(1)^2) = -2 log cosh(1) = -0.8675616, so
    log pi = -1.4189385 + 0.8675616 = -0.5513769. Two dimensions add."""
    u = torch.tensor([[0.0, 1.0]])
    zero = torch.zeros(1, 2)
    assert squashed_gaussian_log_prob(u, zero, zero).item() == pytest.approx(-0.9189385 - 0.5513769, abs=1e-6)
    assert squashed_gaussian_log_prob(u[:, 1:], zero[:, 1:], zero[:, 1:]).item() == pytest.approx(-0.5513769,
                                                                                                     abs=1e-6)
    # u = 20: 1 - tanh(u)^2 underflows to 0 in float32 (log = -inf); the stable form gives
    # 2 (log 2 - 20 - softplus(-40)) = -38.6137056 and log N(20; 20, 1) = -0.9189385
    far = squashed_gaussian_log_prob(torch.tensor([[20.0]]), torch.tensor([[20.0]]), torch.zeros(1, 1))
    assert far.item() == pytest.approx(-0.9189385 + 38.6137056, abs=1e-4)


def test_log_prob_correction_matches_the_direct_change_of_variables():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(64, 3, generator=g, dtype=torch.float64) * 1.5
    mean = torch.randn(64, 3, generator=g, dtype=torch.float64)
    log_std = torch.randn(64, 3, generator=g, dtype=torch.float64) * 0.5
    direct = (torch.distributions.Normal(mean, log_std.exp()).log_prob(u)
              - torch.log(1 - torch.tanh(u) ** 2)).sum(-1)
    assert torch.allclose(squashed_gaussian_log_prob(u, mean, log_std), direct, atol=1e-10)


def test_actions_are_scaled_to_the_bounds_and_back():
    space = spaces.Box(np.array([0.0, -2.0], np.float32), np.array([1.0, 6.0], np.float32))
    algo = SAC(small(), spec(space), seed=0)
    pol = algo.policy
    a = torch.tensor([[-1.0, -1.0], [0.0, 0.0], [1.0, 0.5]])
    env = pol.to_env(a)
    assert env.tolist() == [[0.0, -2.0], [0.5, 2.0], [1.0, 4.0]]
    assert pol.from_env(env).tolist() == a.tolist()
    obs = {"obs": torch.randn(500, 3)}
    mean, _ = pol.gaussian(obs)
    assert torch.equal(pol.act(obs, deterministic=True)["action"], pol.to_env(torch.tanh(mean)))
    for _ in range(2):  # warm-up (uniform), then the policy's samples: always within the bounds
        sampled = pol.act(obs)["action"]
        assert sampled.shape == (500, 2)
        assert bool((sampled[:, 0] >= 0).all() and (sampled[:, 0] <= 1).all())
        assert bool((sampled[:, 1] >= -2).all() and (sampled[:, 1] <= 6).all())
        pol.warmup.fill_(0.0)


# -- targets, Polyak, temperature -------------------------------------------------------------

class FakeTargetQ(torch.nn.Module):
    """Q'_1(s', a) = s'[0], Q'_2(s', a) = s'[0] + 1: the target's min is s'[0]."""

    def forward(self, obs, a):
        x = obs["obs"][:, 0]
        return x, x + 1


def test_soft_targets_respect_termination_and_truncation():
    """gamma 0.5, n 1, reward 1, alpha 0.5, log pi(a' | s') = -1: soft V(s') = s'[0] + 0.5 and
    y = 1 + 0.5 (s'[0] + 0.5) unless terminated (y = 1). obs[t, b] = 10 t + b. Column 1
    terminates at t = 1; column 2 is truncated at t = 1 with final observation 99, so it
    bootstraps from 99, not from the next episode's reset row obs[2, 2] = 22."""
    T, B = 3, 3
    obs = np.zeros((T + 1, B, 3), np.float32)
    obs[..., 0] = 10 * np.arange(T + 1)[:, None] + np.arange(B)[None, :]
    terminated = np.zeros((T, B), bool)
    terminated[1, 1] = True
    truncated = np.zeros((T, B), bool)
    truncated[1, 2] = True
    b = batch(T, B, 0, terminated=terminated, truncated=truncated, obs=obs, final=np.array([[99, 0, 0]], np.float32),
              reward=np.ones((T, B)))
    algo = SAC(small(gamma=0.5), spec(), seed=0)
    algo.nets.q_target = FakeTargetQ()
    with torch.no_grad():
        algo.nets.log_alpha.fill_(math.log(0.5))
    algo.policy.sample = lambda o, generator=None: (torch.zeros(o["obs"].shape[0], 1), -torch.ones(o["obs"].shape[0]))
    tr = batch_transitions(b, gamma=0.5, n=1, who="sac")
    boot = {"obs": torch.as_tensor(tr["obs"]["obs"][tr["boot_idx"]])}
    y = algo.targets(boot, torch.as_tensor(tr["ret"]), torch.as_tensor(tr["disc"]))
    expected = [[6.25, 6.75, 7.25],    # t = 0: s' = 10, 11, 12
                [11.25, 1.0, 50.75],   # t = 1: s' = 20; terminated; the final observation 99 (not 22: 12.25)
                [16.25, 16.75, 17.25]]  # t = 2: the bootstrap row 30, 31, 32
    assert y.reshape(T, B).tolist() == expected
    # terminated: y = ret whatever the bootstrap value (here a NaN)
    nan_boot = {"obs": torch.full((1, 3), float("nan"))}
    assert algo.targets(nan_boot, torch.tensor([1.0]), torch.tensor([0.0])).tolist() == [1.0]


def test_polyak_update():
    online, target = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    with torch.no_grad():
        online.weight.fill_(8.0)
        online.bias.fill_(0.0)
        target.weight.fill_(4.0)
        target.bias.fill_(8.0)
    polyak_update(target, online, 0.25)  # 0.25 x 8 + 0.75 x 4 = 5; 0.25 x 0 + 0.75 x 8 = 6
    assert (target.weight.item(), target.bias.item()) == (5.0, 6.0)
    assert (online.weight.item(), online.bias.item()) == (8.0, 0.0)
    polyak_update(target, online, 1.0)  # tau 1 copies
    assert (target.weight.item(), target.bias.item()) == (8.0, 0.0)


def test_temperature_loss_sign():
    """log pi = [-0.5, -1.5]: entropy estimate 1. Target -2 (entropy above it): loss -(-1 - 2) = 3,
    d/d log alpha = 3 > 0, so a gradient step lowers alpha. Target 2 (below): loss -1, gradient -1,
    alpha rises."""
    logp = torch.tensor([-0.5, -1.5], requires_grad=True)
    for target, loss_value, grad in ((-2.0, 3.0, 3.0), (2.0, -1.0, -1.0)):
        log_alpha = torch.zeros((), requires_grad=True)
        loss = temperature_loss(log_alpha, logp, target)
        loss.backward()
        assert (loss.item(), log_alpha.grad.item()) == (loss_value, grad)
        assert logp.grad is None  # log pi is detached
    # in the algorithm: a policy far more random than the target entropy lowers alpha
    algo = SAC(small(), spec(), seed=0)
    algo.target_entropy = -50.0
    algo.update(batch(4, 2, 0))
    algo.update(batch(4, 2, 1))
    assert algo.alpha < 1.0


# -- the update: rate limiter, warm-up, guard, resume -------------------------------------------

def test_rate_limiter_and_warmup():
    algo = SAC(small(learning_starts=20, samples_per_insert=4.0), spec(), seed=0)
    assert float(algo.policy.warmup) == 1.0
    stats = [algo.update(batch(4, 2, i)) for i in range(4)]
    # 8 transitions a batch; credit 32 (4 steps of 8) from the batch that brings the replay to 20 (the 3rd)
    assert [s["gradient_steps"] for s in stats] == [0.0, 0.0, 4.0, 4.0]
    assert [s["warmup"] for s in stats] == [1.0, 1.0, 0.0, 0.0]
    assert stats[-1]["replay_ratio"] == 64 / 32 and stats[-1]["replay_size"] == 32.0
    assert SAC(small(uniform_warmup=False), spec(), seed=0).policy.warmup.item() == 0.0


def test_nonfinite_loss_restores_everything():
    algo = SAC(small(), spec(), seed=0)
    algo.update(batch(4, 2, 0))
    algo.update(batch(4, 2, 1))
    algo.replay.ret[:16] = np.nan  # stored targets poison the Q loss when sampled
    before = copy.deepcopy(algo.state_dict())
    with pytest.raises(NonFiniteUpdate, match="non-finite q_loss"):
        algo.update(batch(4, 2, 2))
    after = copy.deepcopy(algo.state_dict())
    assert np.array_equal(before["replay"]["ret"], after["replay"]["ret"], equal_nan=True)
    before["replay"]["ret"] = after["replay"]["ret"] = None
    assert_same_state(before, after, "sac")


def test_resume_from_state_dict_is_exact():
    cfg = small(learning_starts=10, capacity=40, priority_alpha=0.6)
    batches = [batch(4, 3, i, truncated=(np.random.default_rng(i).random((4, 3)) < 0.2)) for i in range(12)]
    a = SAC(cfg, spec(), seed=3)
    for b in batches[:6]:
        a.update(b)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    restored = SAC(cfg, spec(), seed=99)
    restored.load_state_dict(torch.load(buf, weights_only=False))
    for b in batches[6:]:  # the capacity (40) wraps after the resume too
        for algo in (a, restored):
            algo.progress = 0.5
            algo.update(b)
    assert a.gradient_steps > 40
    assert_same_state(a.state_dict(), restored.state_dict(), "sac")
    assert np.array_equal(a.replay.tree.tree, restored.replay.tree.tree)


# -- refusals ---------------------------------------------------------------------------------

def test_discrete_and_unbounded_actions_are_refused_before_anything_starts(tmp_path):
    from zoo.core.config import ConfigError, build_config
    from zoo.core.plugins import PluginHost

    host = PluginHost()
    with pytest.raises(ConfigError, match=r"^sac needs a Box action space; env 'CartPole-v1' has Discrete\(2\) "
                                          r"\(use ppo or dqn for discrete actions\)$") as info:
        build_config(host.registry, "sac", "CartPole-v1", seed=1, name="run", steps=1000,
                     overrides=[f"runs_dir={tmp_path}"])
    assert info.value.field == "env"
    with pytest.raises(TypeError, match="unbounded actions"):
        SAC.build_policy(SACConfig(), spec(spaces.Box(-np.inf, np.inf, (2,), np.float32)))
    cfg = build_config(host.registry, "sac", "Pendulum-v1", seed=1, name="run", steps=1000,
                       overrides=[f"runs_dir={tmp_path}"])
    assert (cfg.algo.batch_size, cfg.algo.capacity, cfg.trainer.max_policy_lag) == (256, 1_000_000, 1 << 30)
    cfg = build_config(host.registry, "sac", "Pendulum-v1", seed=1, name="run", steps=1000,
                       overrides=[f"runs_dir={tmp_path}", "trainer.count=2", "actors.count=2"])
    assert cfg.trainer.count == 2  # data-parallel trainers, a replay shard each
    with pytest.raises(ValueError, match=r"algo.learning_starts=2,000 is more than algo.capacity=1,000"):
        SACConfig(capacity=1000, learning_starts=2000)


def _reference_steps(nets, samples, generator_state, cfg, target_entropy):
    """Gradient steps written from arXiv 1812.05905 in CleanRL's ``sac_continuous_action.py`` order
    (Q step, policy step, temperature step, Polyak averaging; ``policy_frequency`` 1), on copies of
    ``nets``, with the squashed Gaussian written out (``torch.distributions.Normal`` and
    ``log(1 - tanh(u)^2 + 1e-6)``, CleanRL's form): an independent oracle for :meth:`SAC.update`.
    The temperature uses the policy step's own log-probabilities (Zoo, as softlearning; CleanRL
    draws a fresh sample after the policy step)."""
    q, q_target, policy = copy.deepcopy(nets.q), copy.deepcopy(nets.q_target), copy.deepcopy(nets.policy)
    log_alpha = torch.nn.Parameter(nets.log_alpha.detach().clone())
    q_opt = torch.optim.Adam(q.parameters(), lr=cfg.q_lr, foreach=False)
    pi_opt = torch.optim.Adam(policy.parameters(), lr=cfg.policy_lr, foreach=False)
    a_opt = torch.optim.Adam([log_alpha], lr=cfg.alpha_lr, foreach=False)
    gen = torch.Generator()
    gen.set_state(generator_state)

    def sample(obs):
        x = policy.torso({"obs": obs})
        mean = policy.mean(x)
        log_std = cfg.log_std_min + 0.5 * (cfg.log_std_max - cfg.log_std_min) * (torch.tanh(policy.log_std(x)) + 1)
        std = log_std.exp()
        u = mean + std * torch.randn(mean.shape, generator=gen)  # rsample with the trainer's generator
        a = torch.tanh(u)
        logp = torch.distributions.Normal(mean, std).log_prob(u) - torch.log(1 - a.pow(2) + 1e-6)
        return a, logp.sum(1)

    def qs(net, obs, a):
        return [head(torch.cat([obs, a], 1)).view(-1) for head in net.heads]

    for s in samples:
        obs, boot = torch.as_tensor(s["obs"]["obs"]), torch.as_tensor(s["boot_obs"]["obs"])
        act = torch.as_tensor(s["action"]).reshape(len(obs), -1)  # bounds [-1, 1]: the env's scale is the policy's
        with torch.no_grad():
            a2, logp2 = sample(boot)
            q1t, q2t = qs(q_target, boot, a2)
            y = torch.as_tensor(s["ret"]) + torch.as_tensor(s["disc"]) * (
                torch.min(q1t, q2t) - log_alpha.exp() * logp2)
        q1, q2 = qs(q, obs, act)
        q_loss = F.mse_loss(q1, y) + F.mse_loss(q2, y)
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        pi, logp = sample(obs)
        q1p, q2p = qs(q, obs, pi)
        pi_loss = (log_alpha.detach().exp() * logp - torch.min(q1p, q2p)).mean()
        pi_opt.zero_grad()
        pi_loss.backward()
        pi_opt.step()
        a_loss = (-log_alpha.exp() * (logp.detach() + target_entropy)).mean()
        a_opt.zero_grad()
        a_loss.backward()
        a_opt.step()
        with torch.no_grad():
            for tp, p in zip(q_target.parameters(), q.parameters()):
                tp.copy_(cfg.tau * p + (1 - cfg.tau) * tp)
    return q, q_target, policy, log_alpha


def test_gradient_steps_match_an_independent_reference():
    cfg = small(learning_starts=16, samples_per_insert=8.0, batch_size=8, gamma=0.9, q_lr=3e-3, policy_lr=1e-3,
                alpha_lr=1e-2)
    algo = SAC(cfg, spec(spaces.Box(-1.0, 1.0, (2,), np.float32)), seed=3)

    def in_bounds(b, seed):
        b["action"] = np.random.default_rng(seed).uniform(-1, 1, (*b["reward"].shape, 2)).astype(np.float32)
        return b

    assert algo.update(in_bounds(batch(4, 4, 0), 0))["gradient_steps"] == 0.0  # the replay reaches learning_starts
    before = copy.deepcopy(algo.nets)
    state = algo.generator.get_state()
    samples, sample = [], algo.replay.sample
    algo.replay.sample = lambda *a: samples.append(sample(*a)) or samples[-1]
    # the credit of the first 16 transitions (granted once the replay held learning_starts) and of these 4
    assert algo.update(in_bounds(batch(2, 2, 1), 1))["gradient_steps"] == 20.0
    q, q_target, policy, log_alpha = _reference_steps(before, samples, state, cfg, algo.target_entropy)
    for mine, ref in ((algo.nets.q, q), (algo.nets.q_target, q_target), (algo.policy, policy)):
        for (name, a), b in zip(mine.named_parameters(), ref.parameters(), strict=True):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
    assert torch.allclose(algo.nets.log_alpha, log_alpha, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(algo.nets.log_alpha, before.log_alpha)  # 4 steps moved everything
    assert not torch.allclose(algo.policy.mean.weight, before.policy.mean.weight)
