"""Ape-X DQN: sum-tree, replay storage, n-step targets, per-env epsilons, the rate limiter, the
non-finite guard and exact resume, with hand-worked values."""
import copy
import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tests.unit.replay_fakes import apex_batch as batch
from tests.unit.replay_fakes import apex_spec as spec
from zoo.core.algorithm import NonFiniteUpdate
from zoo.core.env import EnvSpec
from zoo.core.workers.policy import EnvIndex, infer
from zoo.plugins.algorithms.apex.apex import ApeX, ApeXConfig, obs_capacity_for
from zoo.plugins.algorithms.apex.networks import apex_epsilons, linear_epsilon
from zoo.plugins.algorithms.nstep import nstep_targets
from zoo.plugins.algorithms.replay import Replay, SumTree
from zoo.plugins.algorithms.tensors import huber

# -- sum-tree ---------------------------------------------------------------------------

def test_sum_tree_sums_finds_and_last_write_wins():
    tree = SumTree(5)  # 8 leaves, 3 levels
    assert (tree.size, tree.depth) == (8, 3)
    tree.update(np.array([0, 1, 2, 3, 4]), np.array([1.0, 2.0, 0.0, 3.0, 4.0]))
    assert tree.total == 10.0
    # prefix sums: [0,1) -> 0, [1,3) -> 1, leaf 2 empty, [3,6) -> 3, [6,10) -> 4
    assert tree.find(np.array([0.0, 0.999, 1.0, 2.999, 3.0, 5.999, 6.0, 9.999])).tolist() == [0, 0, 1, 1, 3, 3, 4, 4]
    tree.update(np.array([4, 4, 1]), np.array([7.0, 0.5, 2.0]))  # index 4 twice: the last (0.5) wins
    assert tree.total == 6.5
    assert tree.leaves(np.array([4])).tolist() == [0.5]
    tree.update(np.array([0, 1, 3, 4]), np.zeros(4))
    tree.update(np.array([2]), np.array([2.0]))
    assert tree.find(np.array([0.0, 1.0, 1.9999])).tolist() == [2, 2, 2]  # only the non-empty leaf
    with pytest.raises(ValueError, match="outside"):
        tree.update(np.array([5]), np.array([1.0]))
    with pytest.raises(ValueError, match="finite"):
        tree.update(np.array([0]), np.array([np.nan]))


def test_sum_tree_parents_are_exact_sums_after_updates_sharing_parents():
    # leaves 0..5 of 8 (3 levels); updates whose indices share parents and repeat
    tree = SumTree(6)
    tree.update(np.array([0, 1, 1, 5, 4]), np.array([1.0, 9.0, 2.0, 8.0, 4.0]))  # 1: the last (2.0) wins
    tree.update(np.array([5, 3]), np.array([0.25, 16.0]))
    # leaves [1, 2, 0, 16, 4, 0.25, 0, 0]; level 2: [3, 16, 4.25, 0]; level 1: [19, 4.25]; root 23.25
    assert tree.tree[1:].tolist() == [23.25, 19.0, 4.25, 3.0, 16.0, 4.25, 0.0,
                                      1.0, 2.0, 0.0, 16.0, 4.0, 0.25, 0.0, 0.0]
    assert tree.find(np.float64(22.0)).tolist() == 4 and tree.find(np.array([[3.0, 23.0]])).tolist() == [[3, 5]]


def test_sum_tree_capacity_one():
    tree = SumTree(1)
    tree.update(np.array([0]), np.array([3.0]))
    assert tree.total == 3.0 and tree.find(np.array([0.0, 2.9])).tolist() == [0, 0]


def test_prioritised_sampling_follows_priorities():
    r = Replay(4, 8)
    r.insert({"obs": np.arange(8, dtype=np.float32).reshape(8, 1)}, np.arange(4), np.arange(4) + 4,
             np.zeros(4, np.int64), np.zeros(4, np.float32), np.ones(4, np.float32), np.array([1.0, 1.0, 2.0, 4.0]))
    counts = np.bincount(r.sample(80_000, 0.0, np.random.default_rng(0))["index"], minlength=4)
    # stratified sampling over mass 8: exactly 1/8, 1/8, 2/8, 4/8 of the points
    assert counts.tolist() == [10_000, 10_000, 20_000, 40_000]
    s = r.sample(8, 1.0, np.random.default_rng(0))
    # w = (N P)^-1 normalised by the batch max: P = [1/8, 1/8, 2/8, 4/8] -> w = [1, 1, 1/2, 1/4]
    assert s["weight"].tolist() == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25]
    assert s["obs"]["obs"][:, 0].tolist() == [0, 1, 2, 2, 3, 3, 3, 3]
    assert s["boot_obs"]["obs"][:, 0].tolist() == [4, 5, 6, 6, 7, 7, 7, 7]


def test_replay_evicts_by_transition_ring_and_by_observation_ring():
    def block(first):  # 3 rows, 2 transitions (row 0 -> boot row 1, row 1 -> boot row 2)
        return ({"obs": np.arange(first, first + 3, dtype=np.float32).reshape(3, 1)}, np.array([0, 1]),
                np.array([1, 2]), np.zeros(2, np.int64), np.zeros(2, np.float32), np.ones(2, np.float32),
                np.ones(2))

    r = Replay(capacity=5, obs_capacity=7)
    r.insert(*block(0))
    r.insert(*block(10))
    assert len(r) == 4
    # the third block needs rows 6..8: rows 0, 1 (first block) are overwritten -> its transitions go
    r.insert(*block(20))
    assert len(r) == 4
    # block 3 went to ring positions 4, 0; block 1's position 1 is empty (its rows are gone)
    assert r.valid.tolist() == [True, False, True, True, True]
    s = r.sample(4, 0.0, np.random.default_rng(1))
    assert sorted(s["obs"]["obs"][:, 0].tolist()) == [10, 11, 20, 21]
    assert sorted(s["boot_obs"]["obs"][:, 0].tolist()) == [11, 12, 21, 22]
    # the state dict restores an identical replay
    r2 = Replay(5, 7)
    r2.load_state_dict(copy.deepcopy(r.state_dict()))
    for name in ("s_ref", "boot_ref", "action", "ret", "disc", "valid"):
        assert np.array_equal(getattr(r, name), getattr(r2, name)), name
    assert np.array_equal(r.tree.tree, r2.tree.tree) and np.array_equal(r.obs["obs"], r2.obs["obs"])
    assert (r.n_valid, r.obs_written, r.trans_written, list(r.blocks)) == (
        r2.n_valid, r2.obs_written, r2.trans_written, list(r2.blocks))


# -- n-step targets --------------------------------------------------------------------

def test_nstep_targets_hand_worked():
    """gamma 0.5, n 3. Column 0: no boundary; column 1: terminated at t=1; column 2: truncated at
    t=1, and both flags at t=3 (termination wins)."""
    reward = np.array([[1, 1, 1], [2, 1, 2], [3, 1, 4], [4, 1, 8]], np.float32)
    terminated = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]], bool)
    truncated = np.array([[0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 1]], bool)
    ret, disc, last, from_final = nstep_targets(reward, terminated, truncated, gamma=0.5, n=3)
    assert ret.T.tolist() == [[2.75, 4.5, 5.0, 4.0], [1.5, 1.0, 1.5, 1.0], [2.0, 2.0, 8.0, 8.0]]
    assert disc.T.tolist() == [[0.125, 0.125, 0.25, 0.5], [0.0, 0.0, 0.25, 0.5], [0.25, 0.5, 0.0, 0.0]]
    assert last.T.tolist() == [[2, 3, 3, 3], [1, 1, 3, 3], [1, 1, 3, 3]]
    assert from_final.T.tolist() == [[False] * 4, [False] * 4, [True, True, False, False]]
    ret1, disc1, last1, _ = nstep_targets(reward, terminated, truncated, gamma=0.5, n=1)
    assert np.array_equal(ret1, reward) and last1.T.tolist()[0] == [0, 1, 2, 3]
    assert disc1.T.tolist() == [[0.5] * 4, [0.5, 0.0, 0.5, 0.5], [0.5, 0.5, 0.5, 0.0]]
    with pytest.raises(ValueError, match="n=0"):
        nstep_targets(reward, terminated, truncated, gamma=0.5, n=0)


def test_insert_stores_rows_once_and_bootstraps_like_gae():
    """Observations encode (t, b); final observations 100 + t. Transitions must point at the
    right rows: obs[last + 1], or the final observation of a truncated step."""
    T, B = 4, 3
    obs = np.zeros((T + 1, B, 4), np.float32)
    obs[..., 0] = np.arange(T + 1)[:, None]
    obs[..., 1] = np.arange(B)[None, :]
    truncated = np.array([[0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]], bool)
    terminated = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]], bool)
    final = np.array([[101, 2, 0, 0]], np.float32)
    algo = ApeX(ApeXConfig(n_step=3, gamma=0.5, learning_starts=100, capacity=100), spec(), seed=0)
    algo.update(batch(T, B, 0, reward=np.ones((T, B)), terminated=terminated, truncated=truncated, obs=obs,
                      final=final))
    r = algo.replay
    assert r is not None and len(r) == 12 and r.obs_written == (T + 1) * B + 1  # 15 rows + 1 final row, once
    rows = r.obs["obs"]
    s = rows[r.s_ref[:12]][:, :2].tolist()
    boot = rows[r.boot_ref[:12]][:, :2].tolist()
    assert s == [[t, b] for t in range(T) for b in range(B)]
    expected_boot = {(0, 0): [3, 0], (1, 0): [4, 0], (2, 0): [4, 0], (3, 0): [4, 0],
                     (2, 1): [4, 1], (3, 1): [4, 1],  # (0, 1), (1, 1): terminated, disc 0
                     (0, 2): [101, 2], (1, 2): [101, 2], (2, 2): [4, 2], (3, 2): [4, 2]}
    for i, (t, b) in enumerate((t, b) for t in range(T) for b in range(B)):
        if (t, b) in expected_boot:
            assert boot[i] == expected_boot[(t, b)], (t, b)
        else:
            assert r.disc[i] == 0.0, (t, b)


# -- exploration: per-env epsilons and the env index -----------------------------------------

def test_apex_epsilons():
    eps = apex_epsilons(torch.arange(8), 8).tolist()
    assert eps[0] == pytest.approx(0.4) and eps[1] == pytest.approx(0.16) and eps[7] == pytest.approx(0.4 ** 8)
    assert apex_epsilons(torch.tensor([0]), 1).tolist() == [pytest.approx(0.4)]


class EnvIndexPolicy(torch.nn.Module):
    wants_env_index = True

    def act(self, obs, env_index=None, num_envs=None):
        return {"action": env_index * 100 + num_envs}


class PlainPolicy(torch.nn.Module):
    def act(self, obs):
        return {"action": torch.zeros(obs["obs"].shape[0], dtype=torch.int64)}


def test_env_index_reaches_act():
    # 3 actors x 4 envs in 2 ring groups of 2, 1 agent: actor 1's group 1 holds envs 6, 7
    index = EnvIndex(envs_per_actor=4, ring_size=2, agents=1, num_envs=12)
    assert index.of(1, 1, np.array([0, 1])).tolist() == [6, 7]
    assert EnvIndex(4, 2, agents=2, num_envs=12).of(2, 1, np.array([0, 1, 3])).tolist() == [10, 10, 11]
    obs = {"obs": np.zeros((2, 4), np.float32)}
    reqs = [(1, {"obs": obs, "slot": np.array([0, 1]), "on_reset": np.zeros(2, bool)}, {"rows": 2, "group": 1}),
            (2, {"obs": {"obs": obs["obs"][:1]}, "slot": np.array([1]), "on_reset": np.zeros(1, bool)},
             {"rows": 1, "group": 0})]
    out = infer(EnvIndexPolicy(), reqs, "cpu", env_index=index)
    assert [o["action"].tolist() for o in out] == [[612, 712], [912]]
    assert [o["action"].tolist() for o in infer(PlainPolicy(), reqs, "cpu")] == [[0, 0], [0]]


def test_act_uses_the_env_epsilon():
    algo = ApeX(ApeXConfig(epsilon_base=1.0, eval_epsilon=0.0), spec(), seed=0)  # eps_i = 1 for every env
    obs = {"obs": torch.zeros(400, 4)}
    greedy = algo.policy.act(obs, deterministic=True)["action"]
    assert greedy.unique().numel() == 1
    torch.manual_seed(0)
    explored = algo.policy.act(obs, env_index=torch.arange(400), num_envs=400)["action"]
    assert explored.unique().numel() == 2  # uniformly random
    assert torch.equal(algo.policy.act(obs)["action"], greedy)  # no env index: eval_epsilon 0


def test_linear_epsilon_hand_worked():
    # CleanRL dqn.py's schedule: 1.0 -> 0.05 over the first half of the budget, then held
    assert [linear_epsilon(p) for p in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0)] == \
        [1.0, pytest.approx(0.81), pytest.approx(0.525), pytest.approx(0.05), pytest.approx(0.05), pytest.approx(0.05)]
    assert linear_epsilon(0.0, 0.5, 0.1, 0.0) == 0.1  # fraction 0: the end value from the start
    assert linear_epsilon(torch.tensor(0.2), 0.4, 0.2, 0.4) == pytest.approx(0.3)


def test_linear_exploration_follows_the_trainers_progress():
    """``algo.exploration = "linear"``: every training row acts with the epsilon of the ``progress``
    buffer, which the trainer sets when a gradient step changed the weights (so it is published
    with them); warm-up updates leave it; ``per-env`` networks hold no such buffer."""
    cfg = ApeXConfig(exploration="linear", start_epsilon=1.0, end_epsilon=0.0, exploration_fraction=0.5,
                     batch_size=4, samples_per_insert=2.0, learning_starts=10, capacity=1000)
    algo = ApeX(cfg, spec(), seed=0)
    obs = {"obs": torch.randn(64, 4, generator=torch.Generator().manual_seed(1))}
    greedy = algo.policy.act(obs, deterministic=True)["action"]
    torch.manual_seed(7)  # progress 0: epsilon 1, every row the uniform draw that act makes after its rand
    acted = algo.policy.act(obs, env_index=torch.arange(64), num_envs=64)["action"]
    torch.manual_seed(7)
    torch.rand(64)
    assert torch.equal(acted, torch.randint(2, (64,)))
    algo.progress = 0.3
    algo.update(batch(2, 3, 0))  # 6 transitions < learning_starts: no gradient step
    assert float(algo.policy.progress) == 0.0 and not algo.policy_changed
    algo.progress = 0.6
    assert algo.update(batch(2, 3, 1))["gradient_steps"] == 3.0
    assert float(algo.policy.progress) == pytest.approx(0.6) and "progress" in algo.policy.state_dict()
    greedy = algo.policy.act(obs, deterministic=True)["action"]  # past the fraction: epsilon 0, greedy
    assert torch.equal(algo.policy.act(obs, env_index=torch.arange(64), num_envs=64)["action"], greedy)
    assert "progress" not in ApeX(ApeXConfig(), spec(), seed=0).policy.state_dict()
    with pytest.raises(ValueError, match=r"^algo.exploration='anneal' is not one of 'per-env', 'linear'; set --set "
                                         r"algo.exploration=per-env \(Ape-X's fixed per-env epsilons\) or linear"):
        ApeXConfig(exploration="anneal")


def test_refuses_box_actions_and_action_masks_and_trains_several_agents():
    """Several agents share the Q-network as independent learners (each agent-slot a column of
    the batch, as PPO trains them); an inactive agent's step is no transition. Action masks are
    refused: a greedy or epsilon-random action could be illegal."""
    with pytest.raises(TypeError, match=r"apex-dqn needs a Discrete action space; env 'Toy-v0' has Box"):
        ApeX.build_policy(ApeXConfig(), spec(spaces.Box(-1, 1, (2,), np.float32)))
    masked = EnvSpec("Masked-v0", ("a", "b"), {**spec().observation_space,
                                               "zoo:action_mask": spaces.Box(0, 1, (2,), np.int8)}, spaces.Discrete(2))
    with pytest.raises(TypeError, match="apex-dqn does not apply action masks; env 'Masked-v0' has 'zoo:action_mask'"):
        ApeX(ApeXConfig(), masked, seed=0)
    two = EnvSpec("Two-v0", ("a", "b"), spec().observation_space, spaces.Discrete(2))
    algo = ApeX(ApeXConfig(), two, seed=0)
    # one env, two agents: columns (env 0, a) and (env 0, b); b is inactive at step 2 (it left)
    b = batch(3, 2, seed=1, terminated=np.zeros((3, 2), bool))
    b["active"][2, 1] = False
    algo.update(b)
    assert algo.inserted == 5


# -- the rate limiter ---------------------------------------------------------------------

def test_rate_limiter_replays_samples_per_insert():
    cfg = ApeXConfig(batch_size=4, samples_per_insert=2.0, learning_starts=10, capacity=1000, target_period=1000)
    algo = ApeX(cfg, spec(), seed=0)
    steps = [algo.update(batch(2, 3, i))["gradient_steps"] for i in range(5)]
    # 6 transitions a batch: credit 12 once the replay (with this batch) holds 10 -> 3 steps of 4
    assert steps == [0.0, 3.0, 3.0, 3.0, 3.0]
    cfg = ApeXConfig(batch_size=4, samples_per_insert=1.5, learning_starts=0, capacity=1000)
    algo = ApeX(cfg, spec(), seed=0)
    # credit 9 per batch; the first has an empty replay to sample from: 9, then 18 -> 4 (2 left), 11 -> 2 (3), 12 -> 3
    stats = [algo.update(batch(2, 3, i)) for i in range(4)]
    assert [s["gradient_steps"] for s in stats] == [0.0, 4.0, 2.0, 3.0]
    assert algo.credit == 0.0 and stats[-1]["replay_ratio"] == 36 / 24


def test_target_network_period():
    algo = ApeX(ApeXConfig(batch_size=4, samples_per_insert=2.0, learning_starts=0, target_period=3), spec(), 0)
    algo.update(batch(2, 3, 0))
    before = copy.deepcopy(algo.target.state_dict())
    algo.update(batch(2, 3, 1))  # credit 24 -> 6 steps: copies after steps 3 and 6
    assert algo.gradient_steps == 6
    for k, v in algo.target.state_dict().items():
        assert torch.equal(v, algo.policy.state_dict()[k]) and not torch.equal(v, before[k])


class LinearQ(torch.nn.Module):
    """``q(obs) = obs[:, :2] @ weight`` (two actions), recording each call's rows and whether it
    built a graph."""

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(weight))
        self.calls = []

    def q(self, obs):
        self.calls.append((obs["obs"].shape[0], torch.is_grad_enabled()))
        return obs["obs"][:, :2] @ self.weight


@pytest.mark.parametrize("double_q", [True, False])
def test_td_errors_hand_worked_and_the_bootstrap_forward_builds_no_graph(double_q):
    algo = ApeX(ApeXConfig(double_q=double_q), spec(), 0)
    algo.policy = LinearQ([[1.0, 0.0], [0.0, 1.0]])  # Q(s) = s[:2]
    algo.target = LinearQ([[0.0, 1.0], [1.0, 0.0]])  # Q_target(s) = (s[1], s[0])
    obs = {"obs": torch.tensor([[1.0, 2.0, 0, 0], [3.0, 0.0, 0, 0]])}
    boot = {"obs": torch.tensor([[0.5, 4.0, 0, 0], [2.0, 1.0, 0, 0]])}
    td, q_sa = algo._td(obs, boot, torch.tensor([0, 1]), torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.25]))
    # Q(s, a) = [1, 0]; Q_target(s') = [[4, 0.5], [1, 2]]; the online argmax at s' = [1, 0]
    # double Q: y = ret + disc * Q_target(s', argmax) = [1 + 0.5 * 0.5, 2 + 0.25 * 1] = [1.25, 2.25]
    # max: y = ret + disc * max Q_target(s') = [1 + 0.5 * 4, 2 + 0.25 * 2] = [3.0, 2.5]
    assert q_sa.tolist() == [1.0, 0.0]
    assert td.tolist() == ([0.25, 2.25] if double_q else [2.0, 2.5])
    # Q(s, a) = s[0] W[0, a] + s[1] W[1, a], so d td / d W[:, a] = -s[:2] of the row with action a:
    # row 0 (action 0, s = 1, 2) fills column 0, row 1 (action 1, s = 3, 0) column 1
    td.sum().backward()
    assert algo.policy.weight.grad.tolist() == [[-1.0, -3.0], [-2.0, 0.0]]
    # the gradient's forward pass covers the 2 replayed rows only; the online bootstrap values come
    # from a forward pass without a graph (one pass over all 4 rows would back-propagate through 4)
    assert algo.policy.calls == ([(2, True), (2, False)] if double_q else [(2, True)])
    assert algo.target.calls == [(2, False)]


def test_huber_hand_worked():
    e = torch.tensor([-3.0, -0.5, 0.0, 2.0])
    # |e| <= 1: e^2 / 2; else 1 * (|e| - 1/2)
    assert huber(e, 1.0).tolist() == [2.5, 0.125, 0.0, 1.5]
    # delta 0: e^2 / 2 everywhere
    assert huber(e, 0.0).tolist() == [4.5, 0.125, 0.0, 2.0]


@pytest.mark.parametrize("delta", [1.0, 0.0])
def test_loss_is_the_huber_or_the_squared_td_error(monkeypatch, delta):
    # uniform sampling (alpha 0): every importance weight is 1, so the loss is the batch mean of huber(td)
    cfg = ApeXConfig(batch_size=4, samples_per_insert=1 / 3, learning_starts=0, priority_alpha=0.0, huber_delta=delta)
    algo = ApeX(cfg, spec(), 0)
    tds = []
    td_fn = algo._td

    def recording(*args):
        td, q_sa = td_fn(*args)
        tds.append(td.detach().clone())
        return td, q_sa

    monkeypatch.setattr(algo, "_td", recording)
    algo.update(batch(2, 3, 0))
    algo.replay.ret[:6] = 25.0  # TD errors far above 1, where Huber and the squared error differ
    stats = algo.update(batch(2, 3, 1))  # 6 transitions a batch: credit 2 + 2 -> one gradient step of 4
    # _td ran for batch 0's initial priorities, the gradient step, then batch 1's initial priorities
    assert stats["gradient_steps"] == 1.0 and len(tds) == 3 and tds[1].abs().min() > 1
    td = tds[1]
    want = (0.5 * td * td).mean() if delta == 0 else (td.abs() - 0.5).mean()
    assert stats["loss"] == pytest.approx(float(want), rel=1e-6)


def test_vector_presets_use_the_squared_error_and_atari_presets_huber():
    presets = ApeX.presets(spec())
    assert (presets["algo.huber_delta"], presets["algo.target_period"], presets["trainer.threads"]) == (0.0, 100, 1)
    image = EnvSpec("Pong", ("agent_0",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)}, spaces.Discrete(6))
    assert "algo.huber_delta" not in ApeX.presets(image) and ApeXConfig().huber_delta == 1.0
    assert "trainer.threads" not in ApeX.presets(image)  # a convolutional learner shares every core


# -- guarded updates and exact resume ------------------------------------------------------

def snapshot(algo):
    return (copy.deepcopy(algo.state_dict()), algo.replay.tree.tree.copy())


def assert_same(a, b):
    assert a.keys() == b.keys() if isinstance(a, dict) else True
    if isinstance(a, dict):
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    else:
        assert a == b or (a != a and b != b)


def test_nonfinite_loss_restores_everything():
    algo = ApeX(ApeXConfig(batch_size=4, samples_per_insert=2.0, learning_starts=0, target_period=2), spec(), 0)
    algo.update(batch(2, 3, 0))
    algo.update(batch(2, 3, 1))
    algo.replay.ret[:12] = np.nan  # stored targets poison the loss when they are sampled
    before, tree = snapshot(algo)
    with pytest.raises(NonFiniteUpdate, match="non-finite loss"):
        algo.update(batch(2, 3, 2))
    after, tree_after = snapshot(algo)
    assert_same(before, after)
    assert np.array_equal(tree, tree_after)


def test_nonfinite_initial_priority_inserts_nothing():
    algo = ApeX(ApeXConfig(batch_size=4, samples_per_insert=2.0, learning_starts=0), spec(), 0)
    algo.update(batch(2, 3, 0))
    algo.update(batch(2, 3, 1))
    before, tree = snapshot(algo)
    bad = batch(2, 3, 2)
    bad["reward"][1, 2] = np.inf
    with pytest.raises(NonFiniteUpdate, match="initial_priority"):
        algo.update(bad)
    after, tree_after = snapshot(algo)
    assert_same(before, after)
    assert np.array_equal(tree, tree_after)


def test_resume_from_state_dict_is_exact():
    cfg = ApeXConfig(batch_size=8, samples_per_insert=3.0, learning_starts=10, capacity=40, target_period=5)
    batches = [batch(4, 3, i, truncated=(np.random.default_rng(i).random((4, 3)) < 0.2)) for i in range(12)]
    a = ApeX(cfg, spec(), seed=3)
    for b in batches[:6]:
        a.progress = 0.1
        a.update(b)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)  # as a checkpoint does
    buf.seek(0)
    restored = ApeX(cfg, spec(), seed=99)
    restored.load_state_dict(torch.load(buf, weights_only=False))
    for b in batches[6:]:  # the capacity (40) wraps: evictions happen after the resume too
        for algo in (a, restored):
            algo.progress = 0.5
            algo.update(b)
    assert a.gradient_steps > 20
    for k, v in a.policy.state_dict().items():
        assert torch.equal(v, restored.policy.state_dict()[k]), k
    assert np.array_equal(a.replay.tree.tree, restored.replay.tree.tree)
    assert_same(a.state_dict(), restored.state_dict())


def test_obs_capacity_and_bytes_per_transition():
    assert obs_capacity_for(1_000_000, 32) == 1_000_000 + 31_250 + 10_000
    r = Replay(10, 11)
    r.insert({"obs": np.zeros((11, 4, 84, 84), np.uint8)}, np.arange(10), np.arange(10) + 1, np.zeros(10, np.int64),
             np.zeros(10, np.float32), np.zeros(10, np.float32), np.ones(10))
    # rows kept whole (no frame ring): 11 rows of 28,224 B; 8+8+8+4+4+1 B of fields; 2 x 16 float64 tree nodes
    assert r.nbytes == 11 * 28_224 + 10 * 33 + 2 * 16 * 8
    assert r.bytes_per_transition == r.nbytes / 10


def test_presets_refuse_the_env_before_anything_starts():
    from zoo.core.options import ConfigError

    with pytest.raises(ConfigError, match=r"env 'Toy-v0' has Box") as info:
        ApeX.presets(spec(spaces.Box(-1, 1, (2,), np.float32)))
    assert info.value.field == "env"
    assert ApeX.presets(spec())["trainer.max_policy_lag"] == 1 << 30


def test_config_refuses_learning_starts_above_capacity():
    with pytest.raises(ValueError, match=r"algo.learning_starts=2,000 is more than algo.capacity=1,000"):
        ApeXConfig(capacity=1000, learning_starts=2000)
    with pytest.raises(ValueError, match="algo.initial_priority='mean'"):
        ApeXConfig(initial_priority="mean")


def test_replay_that_cannot_fit_in_memory_is_refused_with_the_arithmetic(monkeypatch):
    from zoo.plugins.algorithms.apex import apex as apex_module

    monkeypatch.setattr(apex_module, "available_memory", lambda: 2**30)
    image = EnvSpec("ToyAtari-v0", ("agent_0",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)},
                    spaces.Discrete(6))
    algo = ApeX(ApeXConfig(capacity=1_000_000, learning_starts=0), image, seed=0)
    b = batch(2, 1, 0)
    b["obs"] = {"obs": np.zeros((3, 1, 4, 84, 84), np.uint8)}
    b["final_obs"] = {"obs": np.zeros((0, 4, 84, 84), np.uint8)}
    # T = 2: 1,000,000 + 500,000 + 10,000 rows of 4 int64 plane numbers; 1 plane per step and per final
    # observation (1,010,000) + two batches of lone rows (2 x 5 x 1 x 4) of 7,056 B; 33 B of fields; 2 x 2^20 x 8 B
    with pytest.raises(MemoryError, match=r"algo.capacity=1,000,000 transitions need 1,510,000 observation rows "
                                          r"x 32 B \+ 1,010,040 frames of 'obs' x 7,056 B \+ 1,000,000 x 33 B of "
                                          r"fields \+ 16.0 MiB of sum-tree = 6.73 GiB \(7,225 B per transition\), "
                                          r"more than the 1.00 GiB available; lower --set algo.capacity"):
        algo.update(b)
    # algo.frame_stack=off: whole rows, as before frames were stored once
    algo = ApeX(ApeXConfig(capacity=1_000_000, learning_starts=0, frame_stack="off"), image, seed=0)
    with pytest.raises(MemoryError, match=r"need 1,510,000 observation rows x 28,224 B \+ 1,000,000 x 33 B of "
                                          r"fields \+ 16.0 MiB of sum-tree = 39.74 GiB \(42,668 B per transition\)"):
        algo.update(b)


def test_observation_ring_evicts_only_the_transitions_whose_rows_are_overwritten():
    def block(first):  # 4 rows, 3 transitions: row i -> bootstrap row i + 1
        return ({"obs": np.arange(first, first + 4, dtype=np.float32).reshape(4, 1)}, np.arange(3), np.arange(1, 4),
                np.zeros(3, np.int64), np.zeros(3, np.float32), np.ones(3, np.float32), np.ones(3))

    r = Replay(capacity=10, obs_capacity=7)
    r.insert(*block(0))
    r.insert(*block(10))  # rows 4..7: row 0 is overwritten (position 0), rows 1..3 stay
    assert r.valid[:6].tolist() == [False, True, True, True, True, True] and len(r) == 5
    assert sorted(r.sample(5, 0.0, np.random.default_rng(0))["obs"]["obs"][:, 0].tolist()) == [1, 2, 10, 11, 12]
    assert len(r.blocks) == 2  # the first block still holds live transitions
    r.insert(*block(20))  # rows 8..11 -> rows 1..4 overwritten: the first block is gone, the second loses row 4 (10)
    assert r.valid[:9].tolist() == [False, False, False, False, True, True, True, True, True] and len(r) == 5
    assert [b[0] for b in r.blocks] == [4, 8]


def test_config_refuses_a_batch_larger_than_the_replay():
    ApeXConfig(capacity=128, learning_starts=0).check_batch(128, "text")
    with pytest.raises(ValueError, match=r"algo.capacity=100 is smaller than one trainer's batch of 128 transitions "
                                         r"\(text\): one insert would not fit; set --set algo.capacity=128 or more"):
        ApeXConfig(capacity=100, learning_starts=0).check_batch(128, "text")
    # rows: at least two batches whose every step is truncated
    assert obs_capacity_for(128, 16, columns=8) == 2 * 33 * 8
    algo = ApeX(ApeXConfig(capacity=128, learning_starts=0), spec(), 0)
    b = batch(16, 8, 0, truncated=np.ones((16, 8), bool), terminated=np.zeros((16, 8), bool))
    algo.update(b)
    algo.update(b)
    assert len(algo.replay) == 128 and algo.replay.obs_capacity == 528


@pytest.mark.parametrize("algo,wants", [("dqn", True), ("ppo", False)])
def test_the_policy_worker_passes_env_indices_to_policies_that_want_them(tmp_path, algo, wants):
    from zoo.core.config import build_config
    from zoo.core.plugins import PluginHost
    from zoo.core.workers.base import WorkerContext
    from zoo.core.workers.policy import Inference

    host = PluginHost()
    cfg = build_config(host.registry, algo, "CartPole-v1", seed=3, name="run", steps=10_000,
                       overrides=[f"runs_dir={tmp_path}", "actors.count=3", "actors.envs_per_actor=4",
                                  "actors.ring_size=2"])
    ctx = WorkerContext("policy", 0, cfg, cfg.spec, "run-id", "unused")
    ctx.registry = host.registry
    net = Inference(ctx, 0)
    seen = []
    act = net.policy.act

    def spy(obs, **kwargs):
        seen.append({k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
        return act(obs, **kwargs)

    net.policy.act = spy
    obs = {"obs": np.zeros((2, 4), np.float32)}
    out = net.act([(2, {"obs": obs, "slot": np.array([0, 1]), "on_reset": np.zeros(2, bool)},
                    {"rows": 2, "group": 1, "request_id": 0})])
    assert out[0]["action"].shape == (2,)
    # actor 2 of 3 x 4 envs, ring group 1 of 2: envs 10, 11 of 12
    assert seen == ([{"env_index": [10, 11], "num_envs": 12}] if wants else [{}])


def test_experiments_apex_cannot_run_are_refused_before_anything_starts(tmp_path, monkeypatch):
    from zoo.core.config import ConfigError, build_config
    from zoo.core.plugins import PluginHost
    from zoo.plugins.algorithms.apex import config as apex_config

    host = PluginHost()

    def build(*overrides):
        return build_config(host.registry, "dqn", "CartPole-v1", seed=3, name="run", steps=10_000,
                            overrides=[f"runs_dir={tmp_path}", *overrides])

    build()  # the presets pass
    assert build("trainer.count=2").trainer.count == 2  # data-parallel trainers, a replay shard each
    monkeypatch.setattr(apex_config, "available_memory", lambda: 7 * 2**20 // 2)  # 3.5 MiB: one shard, not two
    build()
    with pytest.raises(ConfigError, match=r"algo.capacity=50,000 transitions per trainer x trainer.count=2 need 2 x "
                                          r"\(53,625 observation rows x 16 B .* = 3.4 MiB \(71 B per transition\)\) "
                                          r"= 6.8 MiB, more than the 3.5 MiB available; lower --set algo.capacity or "
                                          r"trainer.count$") as info:
        build("trainer.count=2")
    assert info.value.field == "algo.capacity"
    monkeypatch.setattr(apex_config, "available_memory", lambda: 2**20)
    # CartPole rows: 4 float32 = 16 B; 50,000 + 3,125 + 500 rows (T = 16)
    with pytest.raises(ConfigError, match=r"algo.capacity=50,000 transitions need 53,625 observation rows x 16 B "
                                          r"\+ 50,000 x 33 B of fields \+ 1.0 MiB of sum-tree = 3.4 MiB \(71 B per "
                                          r"transition\), more than the 1.0 MiB available") as info:
        build()
    assert info.value.field == "algo.capacity"


def test_adam_is_fused_for_float_parameters_on_the_cpu_and_steps_as_adam():
    import torch

    from zoo.plugins.algorithms.tensors import adam

    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = adam([w], lr=0.1)
    assert opt.param_groups[0]["fused"] is True and opt.param_groups[0]["eps"] == 1e-8
    w.grad = torch.tensor([0.5, -4.0])
    opt.step()
    # Adam's first step moves each weight by lr x sign(grad) (m_hat / sqrt(v_hat) = g / |g|, eps aside)
    assert torch.allclose(w.detach(), torch.tensor([0.9, -1.9]), atol=1e-6)
