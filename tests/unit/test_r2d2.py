"""R2D2: value rescaling, sequence priorities, sequence cutting (overlap, burn-in), the burn-in
outside the loss, recurrent resets, the rate limiter, the non-finite guard and exact resume,
with hand-worked values."""
import copy
import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tests.unit.replay_fakes import R2D2_LSTM as H
from tests.unit.replay_fakes import r2d2_batch as batch
from tests.unit.replay_fakes import r2d2_config as config
from tests.unit.replay_fakes import r2d2_spec as spec
from zoo.core.algorithm import NonFiniteUpdate
from zoo.plugins.algorithms.r2d2.r2d2 import R2D2
from zoo.plugins.algorithms.r2d2.replay import SequenceReplay
from zoo.plugins.algorithms.r2d2.sequences import cut_sequences, h, h_inv, sequence_priority, sequence_starts

# -- value rescaling and priorities ------------------------------------------------------

def test_value_rescaling_values_and_round_trip():
    x = torch.tensor([0.0, 3.0, -8.0, 15.0], dtype=torch.float64)
    # sign(x)(sqrt(|x| + 1) - 1) + 1e-3 x: 0; 2 - 1 + 0.003; -(3 - 1) - 0.008; 4 - 1 + 0.015
    assert h(x).tolist() == pytest.approx([0.0, 1.003, -2.008, 3.015], abs=1e-15)
    assert h(x, eps=0.0).tolist() == [0.0, 1.0, -2.0, 3.0]
    # eps = 0: h^-1(y) = sign(y)((|y| + 1)^2 - 1)
    assert h_inv(torch.tensor([0.0, 1.0, -2.0, 3.0], dtype=torch.float64), eps=0.0).tolist() == [0.0, 3.0, -8.0, 15.0]
    assert h_inv(torch.tensor([1.003, -2.008, 3.015], dtype=torch.float64)).tolist() == pytest.approx(
        [3.0, -8.0, 15.0], abs=1e-9)
    grid = torch.linspace(-1000, 1000, 20_001, dtype=torch.float64)
    assert torch.allclose(h_inv(h(grid)), grid, rtol=0, atol=1e-8)
    assert torch.allclose(h(h_inv(grid)), grid, rtol=0, atol=1e-8)


def test_sequence_priority_mixes_max_and_mean_over_the_masked_steps():
    td = np.array([[1.0, -2.0, 7.0], [-3.0, 0.0, 7.0], [5.0, 4.0, 7.0]])
    mask = np.array([[False, True, False], [True, True, False], [True, False, False]])
    # column 0: |3|, |5| -> 0.9 x 5 + 0.1 x 4 = 4.9; column 1: 2, 0 -> 0.9 x 2 + 0.1 x 1 = 1.9; column 2: none
    assert sequence_priority(td, mask, 0.9).tolist() == pytest.approx([4.9, 1.9, 0.0], abs=1e-15)
    assert sequence_priority(td, mask, 0.0).tolist() == [4.0, 1.0, 0.0]
    assert sequence_priority(td, mask, 1.0).tolist() == [5.0, 2.0, 0.0]


# -- sequences ----------------------------------------------------------------------------

def test_sequence_starts_overlap_by_the_period():
    assert sequence_starts(80, 80, 40).tolist() == [0]
    assert sequence_starts(40, 20, 10).tolist() == [0, 10, 20]
    assert sequence_starts(7, 4, 2).tolist() == [0, 2]
    with pytest.raises(ValueError, match="do not fit"):
        sequence_starts(3, 4, 2)


def test_cut_sequences_hand_worked():
    """T = 6, two columns, m = 4 every 2 steps (starts 0, 2), burn-in 1, n = 2, gamma 0.5, reward
    1. Column 0 terminates at step 2 (step 3 starts an episode); column 1 is truncated at step 5
    (final observation 99). Observations and states are 10 t + b."""
    T, B = 6, 2
    t = np.arange(T + 1)[:, None] * 10 + np.arange(B)[None, :]
    terminated = np.zeros((T, B), bool)
    terminated[2, 0] = True
    truncated = np.zeros((T, B), bool)
    truncated[5, 1] = True
    on_reset = np.zeros((T, B), bool)
    on_reset[0] = True
    on_reset[3, 0] = True
    b = {"obs": {"obs": t.astype(np.float32)[..., None]}, "action": t[:T] % 2, "reward": np.ones((T, B), np.float32),
         "terminated": terminated, "truncated": truncated, "active": np.ones((T, B), bool), "on_reset": on_reset,
         "rnn_state": t[:T].astype(np.float32)[..., None, None].repeat(2, axis=2),
         "final_obs": {"obs": np.array([[99.0]], np.float32)}, "final_index": np.array([[5, 1]])}
    s = cut_sequences(b, m=4, period=2, burn_in=1, gamma=0.5, n=2)
    # sequence i * B + b: (start 0, col 0), (0, 1), (2, 0), (2, 1)
    assert s["obs"]["obs"][..., 0].tolist() == [[0, 10, 20, 30, 40], [1, 11, 21, 31, 41],
                                                [20, 30, 40, 50, 60], [21, 31, 41, 51, 61]]
    assert s["state0"][:, 0, 0].tolist() == [0, 1, 20, 21]
    assert s["action"].tolist() == [[0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
    assert s["reset"].tolist() == [[True, False, False, True, False], [True, False, False, False, False],
                                   [False, True, False, False, False], [False, False, False, False, True]]
    assert s["mask"].tolist() == [[False, True, True, True]] * 4  # the burn-in step is never trained
    assert s["ret"].tolist() == [[1.5, 1.5, 1.0, 1.0], [1.5, 1.5, 1.5, 1.0], [1.0, 1.5, 1.5, 1.0],
                                 [1.5, 1.5, 1.5, 1.0]]
    assert s["disc"].tolist() == [[0.25, 0.0, 0.0, 0.5], [0.25, 0.25, 0.25, 0.5], [0.0, 0.25, 0.25, 0.5],
                                  [0.25, 0.25, 0.25, 0.5]]
    assert s["last"].tolist() == [[1, 2, 2, 3], [1, 2, 3, 3], [0, 2, 3, 3], [1, 2, 3, 3]]
    assert s["from_final"].tolist() == [[False] * 4] * 3 + [[False, False, True, True]]
    assert s["final_pos"].tolist() == [[3, 3]] and s["final_obs"]["obs"].tolist() == [[99.0]]
    del b["rnn_state"]
    with pytest.raises(KeyError, match="rnn_state"):
        cut_sequences(b, m=4, period=2, burn_in=1, gamma=0.5, n=2)



def test_cut_sequences_a_step_both_terminated_and_truncated_needs_no_final_observation():
    """CartPole's pole can fall on its 500th step: terminated and truncated both True. The actor
    keeps no final observation for it (a terminated step bootstraps from nothing), so the cut
    must neither ask for one nor bootstrap from one. T = 4, one column, m = 4, n = 2, gamma 0.5,
    reward 1, step 1 terminated and truncated; the CI run of r2d2 on CartPole raised here."""
    T, B = 4, 1
    t = np.arange(T + 1)[:, None].astype(np.float32)
    terminated = np.zeros((T, B), bool)
    terminated[1, 0] = True
    truncated = terminated.copy()
    on_reset = np.zeros((T, B), bool)
    on_reset[0] = on_reset[2] = True
    b = {"obs": {"obs": t[..., None]}, "action": np.zeros((T, B), np.int64), "reward": np.ones((T, B), np.float32),
         "terminated": terminated, "truncated": truncated, "active": np.ones((T, B), bool), "on_reset": on_reset,
         "rnn_state": np.zeros((T, B, 2, 1), np.float32),
         "final_obs": {"obs": np.zeros((0, 1), np.float32)}, "final_index": np.zeros((0, 2), np.int64)}
    s = cut_sequences(b, m=4, period=2, burn_in=0, gamma=0.5, n=2)
    assert s["ret"].tolist() == [[1.5, 1.0, 1.5, 1.0]]
    assert s["disc"].tolist() == [[0.0, 0.0, 0.25, 0.5]]
    assert s["from_final"].tolist() == [[False] * 4]
    assert s["final_pos"].shape == (0, 2) and s["final_obs"]["obs"].shape == (0, 1)


# -- the network ----------------------------------------------------------------------------

def test_unroll_resets_the_state_at_on_reset_and_matches_stepping():
    torch.manual_seed(0)
    net = R2D2.build_policy(config(), spec())
    L, M = 6, 3
    obs = {"obs": torch.randn(L, M, 4)}
    state0 = torch.randn(M, 2, H)
    reset = torch.zeros(L, M, dtype=torch.bool)
    reset[2, 1] = True
    q, after = net.unroll(obs, state0, reset)
    # column 1 from step 2 on is what a fresh episode (zero state) from step 2 gives, whatever came before
    q_fresh, _ = net.unroll({"obs": obs["obs"][2:, 1:2]}, torch.zeros(1, 2, H),
                            torch.zeros(L - 2, 1, dtype=torch.bool))
    assert torch.allclose(q[2:, 1], q_fresh[:, 0], rtol=0, atol=1e-6)  # (another batch size: another matmul)
    q_other, _ = net.unroll({"obs": obs["obs"]}, torch.randn(M, 2, H), reset)
    assert torch.equal(q[2:, 1], q_other[2:, 1]) and not torch.equal(q[:2, 1], q_other[:2, 1])
    assert not torch.equal(q[2:, 0], q_other[2:, 0])  # no reset in column 0: the state carries
    # the same as the acting policy stepping with the state the policy worker stores
    s = state0
    for t in range(L):
        s = torch.where(reset[t].reshape(M, 1, 1), torch.zeros_like(s), s)
        qt, s = net.step({"obs": obs["obs"][t]}, s)
        assert torch.allclose(qt, q[t], atol=1e-6) and torch.allclose(s, after[t], atol=1e-6)
    out = net.act({"obs": obs["obs"][0]}, state=state0, deterministic=True)
    assert out["state"].shape == (M, 2, H) and torch.equal(out["action"], q[0].argmax(1))


def test_burn_in_steps_are_outside_the_loss_but_unroll_the_state():
    algo = R2D2(config(sequence_length=6, sequence_period=6, burn_in=2, n_step=1), spec(), seed=0)
    b = batch(6, 3, 0)
    b["terminated"][:] = False
    b["on_reset"][:] = False

    def loss_and_td(bb):
        s = cut_sequences(bb, 6, 6, 2, 0.9, 1)
        td, _, mask = algo.sequence_td(s)
        return (0.5 * td ** 2 * mask.float()).sum(0) / mask.float().sum(0), td, mask

    base, td, mask = loss_and_td(b)
    assert mask[:2].any().item() is False and mask[2:].all().item() is True
    changed = copy.deepcopy(b)
    changed["reward"][:1] += 100.0  # rewards and actions of burn-in steps (step 1's horizon is step 1 only: n = 1)
    changed["action"][:2] = 1 - changed["action"][:2]
    assert torch.equal(loss_and_td(changed)[0], base)
    changed["reward"][1] += 100.0
    assert torch.equal(loss_and_td(changed)[0], base)
    changed["obs"]["obs"][0] += 1.0  # a burn-in observation moves the state, so the trained Q-values
    assert not torch.equal(loss_and_td(changed)[0], base)
    # the burn-in unroll has no graph: the gradient of the loss reaches no Q of a burn-in step
    s = cut_sequences(b, 6, 6, 2, 0.9, 1)
    td, q_sa, _ = algo.sequence_td(s)
    grads = torch.autograd.grad(q_sa[2:].sum(), list(algo.policy.parameters()), allow_unused=True)
    assert any(g is not None for g in grads)
    assert q_sa.requires_grad


def test_per_env_epsilons_and_refusals():
    algo = R2D2(config(), spec(), seed=0)
    obs = {"obs": torch.randn(400, 4)}
    greedy = algo.policy.act(obs, deterministic=True)["action"]
    explored = algo.policy.act(obs, env_index=torch.zeros(400, dtype=torch.long), num_envs=400)["action"]
    assert 0.2 < (explored != greedy).float().mean().item() < 0.8  # epsilon 0.4 (half of those random = greedy)
    assert torch.equal(algo.policy.act(obs)["action"], greedy)  # no env index: eval_epsilon 0
    with pytest.raises(TypeError, match=r"^r2d2 needs a Discrete action space; env 'Toy-v0' has Box"):
        R2D2.build_policy(config(), spec(spaces.Box(-1, 1, (2,), np.float32)))
    with pytest.raises(ValueError, match=r"algo.burn_in=4 leaves no trained step in a sequence of "
                                         r"algo.sequence_length=4"):
        config(burn_in=4)


# -- the update ---------------------------------------------------------------------------

def test_rate_limiter_counts_sequences():
    # T = 6, m = 4 every 2: 2 sequences per column, 3 columns: 6 per batch; credit 12 -> 3 steps of 4
    algo = R2D2(config(learning_starts=10), spec(), seed=0)
    stats = [algo.update(batch(6, 3, i)) for i in range(4)]
    assert [s["gradient_steps"] for s in stats] == [0.0, 3.0, 3.0, 3.0]
    assert [s["replay_size"] for s in stats] == [6.0, 12.0, 18.0, 24.0]
    assert stats[-1]["replay_ratio"] == 36 / 24 and algo.credit == 0.0


def test_nonfinite_loss_restores_everything():
    algo = R2D2(config(), spec(), seed=0)
    algo.update(batch(6, 3, 0))
    algo.update(batch(6, 3, 1))
    algo.replay.data["ret"][:12] = np.nan
    before, tree = copy.deepcopy(algo.state_dict()), algo.replay.tree.tree.copy()
    with pytest.raises(NonFiniteUpdate, match="non-finite loss"):
        algo.update(batch(6, 3, 2))
    assert_same(before, algo.state_dict())
    assert np.array_equal(tree, algo.replay.tree.tree)
    bad = batch(6, 3, 3)
    algo.replay.data["ret"][:12] = 0.0
    before, tree = copy.deepcopy(algo.state_dict()), algo.replay.tree.tree.copy()
    bad["reward"][4, 1] = np.inf
    with pytest.raises(NonFiniteUpdate, match="initial_priority"):
        algo.update(bad)
    assert_same(before, algo.state_dict())
    assert np.array_equal(tree, algo.replay.tree.tree)


def assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
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


def test_resume_from_state_dict_is_exact_and_final_rows_evict():
    cfg = config(capacity=20, learning_starts=8, batch_size=4, samples_per_insert=3.0)
    batches = [batch(6, 3, i, truncate_every=4) for i in range(10)]
    a = R2D2(cfg, spec(), seed=3)
    for b in batches[:5]:
        a.progress = 0.1
        a.update(b)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    restored = R2D2(cfg, spec(), seed=99)
    restored.load_state_dict(torch.load(buf, weights_only=False))
    for b in batches[5:]:  # capacity 20 < 60 sequences: the ring wraps after the resume too
        for algo in (a, restored):
            algo.progress = 0.5
            algo.update(b)
    assert a.gradient_steps > 20 and (a.replay.final_ref >= 0).any()
    assert a.replay.store.obs_written > a.replay.obs_capacity  # the row ring wrapped too
    assert_same(a.state_dict(), restored.state_dict())
    assert np.array_equal(a.replay.tree.tree, restored.replay.tree.tree)


def test_replay_evicts_sequences_whose_rows_are_overwritten():
    from zoo.plugins.algorithms.replay import observation_rows

    # T = 4, B = 1, m = 2 every 2: sequences at steps 0 and 2 (rows 0-2, 2-4); a truncation at step 1
    # adds final row 5; 6 rows per insert in a ring of 8: the second insert overwrites rows 0-3
    def one(seed):
        b = batch(4, 1, seed)
        b["terminated"][:] = False
        b["truncated"][:] = False
        b["truncated"][1, 0] = True
        b["final_index"] = np.array([[1, 0]], np.int64)
        b["final_obs"] = {"obs": np.full((1, 4), 100.0 + seed, np.float32)}
        return b

    r = SequenceReplay(capacity=10, obs_capacity=8)
    for seed in (0, 1):
        b = one(seed)
        seqs = cut_sequences(b, 2, 2, 0, 0.9, 1)
        assert seqs["row0"].tolist() == [0, 2] and seqs["stride"] == 1 and seqs["final_row"].tolist() == [5]
        r.insert(seqs, np.ones(2), *observation_rows(b))
    # the first insert's rows 0-5 are absolute rows 0-5; the second's 6-11 overwrite 0-3: both first sequences go
    assert r.row0[:4].tolist() == [0, 2, 6, 8] and r.final_ref[0].tolist() == [-1, 5]
    assert r.valid[:4].tolist() == [False, False, True, True] and len(r) == 2
    s = r.sample(2, 0.0, np.random.default_rng(0))
    assert sorted(s["index"].tolist()) == [2, 3]
    b = one(1)
    i = s["index"].tolist().index(2)
    assert np.array_equal(s["obs"]["obs"][i], b["obs"]["obs"][0:3, 0])
    assert s["final_pos"].tolist() == [[i, 1]] and s["final_obs"]["obs"].tolist() == [[101.0] * 4]


def test_presets_and_experiment_checks(tmp_path, monkeypatch, two_cores):
    from zoo.core.config import ConfigError, build_config
    from zoo.core.options import ConfigError as OptionsConfigError
    from zoo.core.plugins import PluginHost

    with pytest.raises(OptionsConfigError, match=r"env 'Toy-v0' has Box"):
        R2D2.presets(spec(spaces.Box(-1, 1, (2,), np.float32)))
    host = PluginHost()

    def build(*overrides):
        return build_config(host.registry, "r2d2", "CartPole-v1", seed=3, name="run", steps=10_000,
                            overrides=[f"runs_dir={tmp_path}", *overrides])

    cfg = build()
    assert (cfg.sample_length, cfg.algo.sequence_length, cfg.algo.period, cfg.algo.burn_in) == (40, 20, 10, 4)
    assert cfg.trainer.threads == 1 and build("trainer.threads=2").trainer.threads == 2  # presets, then --set
    with pytest.raises(ConfigError, match=r"algo.sequence_length=50 is longer than sample_length=40"):
        build("algo.sequence_length=50")
    assert build("trainer.count=2").trainer.count == 2  # data-parallel trainers, a replay shard each
    # 8 columns x 3 sequences per batch
    with pytest.raises(ConfigError, match=r"algo.capacity=10 sequences is less than one batch's 24 sequences"):
        build("algo.capacity=10", "algo.learning_starts=0")
    from zoo.plugins.algorithms import replay

    monkeypatch.setattr(replay, "available_memory", lambda: 2**20)
    # T = 40, m = 20 every 10: 3 sequences per column, 5,000 cover 1,667 x 40 = 66,680 steps: 66,680 + 1,667 + 667
    # (1%) rows of 16 B; per sequence 20 x 35 B of step fields + 21 reset flags + 2 x 64 x 4 B of state + 17 B
    with pytest.raises(ConfigError, match=r"algo.capacity=5,000 sequences need 69,014 observation rows x 16 B \+ "
                                          r"5,000 sequences x 1,250 B \+ 0.1 MiB of sum-tree = 7.1 MiB \(112 B per "
                                          r"env step over 66,666 steps\), more than the 1.0 MiB available; lower "
                                          r"--set algo.capacity or algo.sequence_length") as info:
        build()
    assert info.value.field == "algo.capacity"
    monkeypatch.setattr(replay, "available_memory", lambda: 10 * 2**20)  # 10 MiB: one shard of 7.1 MiB, not two
    build("algo.capacity=5000")
    with pytest.raises(ConfigError, match=r"algo.capacity=5,000 sequences need .* = 7.1 MiB \(112 B per env step over "
                                          r"66,666 steps\) per trainer x trainer.count=2 = 14.3 MiB, more than the "
                                          r"10.0 MiB available; lower --set algo.capacity or algo.sequence_length or "
                                          r"trainer.count$"):
        build("algo.capacity=5000", "trainer.count=2")


def test_the_policy_worker_feeds_and_stores_the_recurrent_state_with_env_indices(tmp_path):
    from zoo.core.config import build_config
    from zoo.core.plugins import PluginHost
    from zoo.core.workers.base import WorkerContext
    from zoo.core.workers.policy import Inference

    host = PluginHost()
    cfg = build_config(host.registry, "r2d2", "CartPole-v1", seed=3, name="run", steps=10_000,
                       overrides=[f"runs_dir={tmp_path}", "actors.count=3", "actors.envs_per_actor=4"])
    ctx = WorkerContext("policy", 0, cfg, cfg.spec, "run-id", "unused")
    ctx.registry = host.registry
    net = Inference(ctx, 0)
    obs = {"obs": np.ones((2, 4), np.float32)}
    request = {"obs": obs, "slot": np.array([0, 1]), "on_reset": np.array([True, True])}
    first = net.act([(2, request, {"rows": 2, "group": 1, "request_id": 0})])[0]
    assert first["rnn_state"].shape == (2, 2, 64) and not first["rnn_state"].any()  # zeros at an episode start
    request["on_reset"] = np.array([False, True])
    second = net.act([(2, request, {"rows": 2, "group": 1, "request_id": 1})])[0]
    assert second["rnn_state"][0].any() and not second["rnn_state"][1].any()  # slot 1 started again
