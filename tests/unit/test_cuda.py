"""On a real CUDA device (issue 21): an update with reward normalisation, a checkpoint written
there and resumed there and on the CPU, the precision ``auto`` picks.

Every test here is marked ``cuda``: without a usable CUDA device it is skipped, saying why
(``tests/conftest.py``); ``benchmarks/gpu_check.py`` runs them with ``ZOO_REQUIRE_CUDA=1``,
which fails them instead. The CPU-only suite checks the same paths with ``meta`` tensors and
``FakeTensorMode`` (``test_devices.py``); these run the real kernels.
"""
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.core.testing.devices import assert_on_device
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig

pytestmark = pytest.mark.cuda

T, B = 8, 4


def box_spec():
    obs = {"obs": spaces.Box(-np.inf, np.inf, (3,), np.float32)}
    return EnvSpec("Toy-v0", ("agent_0",), obs, spaces.Box(-1, 1, (2,), np.float32))


def algo_on(device):
    cfg = PPOConfig(device=device, norm_reward=True, norm_obs=True, epochs=1, minibatches=1, lr=3e-4)
    return PPO(cfg, box_spec(), seed=5)


def make_batch():
    """A batch of T x B steps whose behaviour logp and values are the first policy's own (on the CPU)."""
    rng = np.random.default_rng(2)
    obs = rng.standard_normal((T + 1, B, 3)).astype(np.float32)
    cpu = algo_on("cpu")  # the same weights as on any device: built on the CPU from seed 5, then moved
    with torch.no_grad():
        out = cpu.policy.act({"obs": torch.as_tensor(obs[:T].reshape(T * B, 3))})
    reward = rng.standard_normal((T, B)).astype(np.float32)
    disc = np.zeros((T, B), np.float32)
    running = np.zeros(B, np.float32)
    for t in range(T):
        running = 0.99 * running + reward[t]
        disc[t] = running
    return {
        "obs": {"obs": obs},
        "action": out["action"].numpy().reshape(T, B, 2),
        "reward": reward,
        "disc_return": disc,
        "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool),
        "active": np.ones((T, B), bool),
        "policy_version": np.zeros((T, B), np.int64),
        "logp": out["logp"].numpy().reshape(T, B),
        "value": out["value"].numpy().reshape(T, B),
        "final_obs": {"obs": np.zeros((0, 3), np.float32)},
        "final_index": np.zeros((0, 2), np.int64),
    }


@pytest.fixture
def keep_rng():
    from zoo.core.workers.trainer import rng_state, set_rng_state
    saved = rng_state()
    yield
    set_rng_state(saved)


def test_one_ppo_update_with_reward_normalisation_on_cuda_matches_the_cpu():
    """Fault 2 of issue 21: RewardNorm left on the host failed the first update on CUDA."""
    cpu, gpu = algo_on("cpu"), algo_on("cuda")
    batch = make_batch()
    cpu_stats, gpu_stats = cpu.update(batch), gpu.update(batch)
    assert_on_device(gpu, "cuda")  # weights, Adam's moments, observation and reward statistics
    assert gpu_stats["agent_steps"] == cpu_stats["agent_steps"] == T * B
    for key in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "explained_variance", "lr"):
        assert math.isfinite(gpu_stats[key]), key
        assert gpu_stats[key] == pytest.approx(cpu_stats[key], rel=1e-4, abs=1e-6), key
    # the reward statistics merged every active discounted return, on the device
    cpu_norm, gpu_norm = cpu.reward_norm.state_dict(), gpu.reward_norm.state_dict()
    assert float(gpu_norm["returns.count"]) == pytest.approx(1e-4 + T * B, rel=1e-12)
    for key, value in cpu_norm.items():
        torch.testing.assert_close(gpu_norm[key].cpu(), value, rtol=1e-5, atol=1e-6)
    for p, q in zip(gpu.policy.parameters(), cpu.policy.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def test_a_checkpoint_written_on_cuda_resumes_on_cuda_and_on_the_cpu(tmp_path, keep_rng):
    """Fault 3 of issue 21: the CPU RNG state loaded onto the GPU failed every resume there."""
    from zoo.core.workers import trainer

    gpu = algo_on("cuda")
    gpu.update(make_batch())
    st = trainer.TrainerState()
    st.updates, st.env_steps = 1, T * B
    path = str(tmp_path / "latest.pt")
    trainer.save_checkpoint(path, gpu, {**st.counters(1), "trainer": st.to_dict(0.0, 0)})
    for device in ("cuda", "cpu"):
        algo = algo_on(device)
        ckpt = trainer.load_resume(path, algo)
        assert_on_device(algo, device)
        resumed = trainer.TrainerState()
        resumed.load(ckpt)  # restores the CPU RNG state and the CUDA ones of the devices here
        assert resumed.rng_note is None
        assert (resumed.updates, resumed.env_steps) == (1, T * B)
        assert algo.updates == 1 and algo.agent_steps == T * B
        for p, q in zip(algo.policy.parameters(), gpu.policy.parameters()):
            assert torch.equal(p.detach().cpu(), q.detach().cpu())
        for key, value in gpu.reward_norm.state_dict().items():
            assert torch.equal(algo.reward_norm.state_dict()[key].cpu(), value.cpu()), key
        assert len(algo.optimizer.state) == len(list(algo.policy.parameters()))


def test_auto_precision_is_bfloat16_exactly_where_this_gpu_has_it_natively():
    from zoo.core.devices import BF16_MIN_CAPABILITY, choose_precision, precision_problem

    for i in range(torch.cuda.device_count()):
        native = (torch.cuda.is_bf16_supported()
                  and tuple(torch.cuda.get_device_capability(i)) >= BF16_MIN_CAPABILITY)
        assert choose_precision("auto", f"cuda:{i}") == ("bfloat16" if native else "float32")
        assert (precision_problem("policy.precision", "bfloat16", f"cuda:{i}") is None) is native
