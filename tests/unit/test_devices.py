"""Every tensor on its device, checked without a GPU: ``meta`` tensors and torch's
``FakeTensorMode`` stand in for ``cuda`` (issue 21), and :mod:`zoo.core.testing.devices`
names each tensor left on another device by its path."""
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch._subclasses.fake_tensor import FakeTensorMode

from zoo.core.env import EnvSpec
from zoo.core.testing.devices import assert_on_device, misplaced, tensors
from zoo.plugins.algorithms.impala.impala import IMPALA, IMPALAConfig
from zoo.plugins.algorithms.mappo.mappo import MAPPO, MAPPOConfig
from zoo.plugins.algorithms.normalization import RewardNorm, scaled_rewards
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig


def box_spec(agents=1):
    obs = {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)}
    return EnvSpec("Toy-v0", tuple(f"agent_{i}" for i in range(agents)), obs, spaces.Box(-1, 1, (2,), np.float32))


# -- the check itself -------------------------------------------------------------------

def test_tensors_walks_a_nested_batch_by_path():
    batch = {"obs": {"image": torch.zeros(2), "vec": [torch.zeros(1), np.zeros(3)]}, "reward": torch.zeros(2)}
    assert [p for p, _ in tensors(batch)] == ["obs.image", "obs.vec.0", "reward"]


def test_misplaced_names_each_meta_tensor_with_its_path():
    batch = {"obs": {"image": torch.zeros(2, device="meta"), "vec": torch.zeros(1)}, "mask": (torch.zeros(1),)}
    assert misplaced(batch, "meta") == ["obs.vec: cpu", "mask.0: cpu"]
    with pytest.raises(AssertionError, match=r"^2 tensors not on meta: obs\.vec: cpu; mask\.0: cpu$"):
        assert_on_device(batch, "meta")


def test_module_and_optimiser_state_are_walked():
    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.ones(1, 2)).sum().backward()
    opt.step()
    paths = [p for p, _ in tensors({"net": lin, "opt": opt})]
    # Adam's "step" is a host counter by design (HOST_STATE_KEYS): not checked
    assert paths == ["net.weight", "net.bias", "opt.state.0.exp_avg", "opt.state.0.exp_avg_sq",
                     "opt.state.1.exp_avg", "opt.state.1.exp_avg_sq"]
    assert assert_on_device({"net": lin, "opt": opt}, "cpu") == 6
    assert misplaced(lin, "cuda") == ["weight: cpu", "bias: cpu"]


def test_cuda_without_index_matches_any_index_but_an_index_must_agree():
    with FakeTensorMode():
        a, b = torch.zeros(1, device="cuda:0"), torch.zeros(1, device="cuda:1")
        assert misplaced([a, b], "cuda") == []
        assert misplaced([a, b], "cuda:1") == ["0: cuda:0"]


def test_a_check_of_nothing_fails():
    with pytest.raises(AssertionError, match="no tensor found in dict"):
        assert_on_device({"a": np.zeros(2)}, "cpu")


# -- the statistics of every algorithm follow its device (issue 21, fault 2) ------------

ALGOS = [
    pytest.param(lambda: PPO(PPOConfig(device="meta", norm_reward=True, norm_obs=True), box_spec(), 0), id="ppo"),
    pytest.param(lambda: IMPALA(IMPALAConfig(device="meta", norm_reward=True, norm_obs=True), box_spec(), 0),
                 id="impala"),
    pytest.param(lambda: MAPPO(MAPPOConfig(device="meta", norm_reward=True), box_spec(2), 0), id="mappo"),
]


@pytest.mark.parametrize("make", ALGOS)
def test_reward_and_observation_statistics_live_on_the_algorithm_device(make):
    """Before the fix RewardNorm stayed on the CPU: 'reward_norm.returns.mean: cpu' (and var, count)."""
    algo = make()
    assert_on_device(algo, "meta")
    # the statistics path of an update: discounted returns merged, rewards scaled, observations merged
    reward = torch.ones(3, 2, device="meta")
    out = scaled_rewards(algo.reward_norm, {"disc_return": torch.ones(3, 2, device="meta")}, reward, None)
    assert out.device.type == "meta" and out.shape == (3, 2)
    algo.policy.update_obs_stats({"obs": torch.ones(6, 4, device="meta")})
    assert_on_device(algo, "meta")


@pytest.mark.parametrize("make", ALGOS)
def test_reward_statistics_load_onto_the_algorithm_device(make):
    algo = make()
    state = RewardNorm().state_dict()  # as a checkpoint loaded with map_location="cpu" holds them
    algo.reward_norm.load_state_dict(state)
    assert_on_device(algo.reward_norm, "meta")


# -- resume onto a device (issue 21, fault 3) -------------------------------------------

@pytest.fixture
def keep_rng():
    """Leave torch's, numpy's and Python's global RNGs as they were."""
    from zoo.core.workers.trainer import rng_state, set_rng_state
    saved = rng_state()
    saved.pop("cuda", None)
    yield
    set_rng_state(saved)


def test_resume_onto_a_device_restores_rng_from_a_cpu_byte_tensor(tmp_path, monkeypatch, keep_rng):
    """Before the fix the checkpoint was loaded with map_location=algo.device, which moved the
    saved RNG state there: 'RNG state must be a torch.ByteTensor' at every resume on CUDA."""
    from zoo.core.workers import trainer

    cpu = PPO(PPOConfig(norm_reward=True, norm_obs=True), box_spec(), 0)
    loss = sum(p.sum() for p in cpu.policy.parameters())
    loss.backward()
    cpu.optimizer.step()  # optimiser state to carry
    st = trainer.TrainerState()
    path = str(tmp_path / "latest.pt")
    trainer.save_checkpoint(path, cpu, {**st.counters(1), "trainer": st.to_dict(0.0, 0)})

    algo = PPO(PPOConfig(device="meta", norm_reward=True, norm_obs=True), box_spec(), 0)
    seen = []
    real = torch.set_rng_state
    monkeypatch.setattr(torch, "set_rng_state", lambda s: (seen.append((s.device.type, s.dtype)), real(s)))
    ckpt = trainer.load_resume(path, algo)
    assert_on_device(algo, "meta")  # weights, Adam's moments, reward and observation statistics
    assert len(algo.optimizer.state) == len(list(algo.policy.parameters()))
    resumed = trainer.TrainerState()
    resumed.load(ckpt)
    assert seen == [("cpu", torch.uint8)]
    assert resumed.rng_note is None


def test_cuda_rng_states_of_more_devices_than_here_are_dropped_with_a_note(monkeypatch, keep_rng):
    """Before the fix set_rng_state_all restored every saved state: 'invalid device ordinal'
    on a machine with fewer GPUs than the one that wrote the checkpoint."""
    from zoo.core.workers.trainer import rng_state, set_rng_state

    restored = []

    def fake_cuda_set(state, device=0):
        if device >= 1:  # as CUDA does for an ordinal this machine lacks
            raise RuntimeError("CUDA error: invalid device ordinal")
        restored.append((device, state.device.type, state.dtype, state.tolist()))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", fake_cuda_set)
    monkeypatch.setattr(torch.cuda.random, "set_rng_state", fake_cuda_set)
    state = rng_state()
    state["cuda"] = [torch.tensor([i, 7], dtype=torch.uint8) for i in range(3)]
    note = set_rng_state(state)
    assert restored == [(0, "cpu", torch.uint8, [0, 7])]
    assert note == ("the checkpoint holds the CUDA RNG states of 3 devices and this machine has 1: restored those "
                    "of cuda:0..cuda:0, dropped 2; random draws on the dropped devices will not repeat those of "
                    "the first run")


def test_cuda_rng_states_on_a_machine_without_cuda_are_all_dropped(monkeypatch, keep_rng):
    from zoo.core.workers.trainer import rng_state, set_rng_state

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    state = rng_state()
    state["cuda"] = [torch.zeros(2, dtype=torch.uint8)]
    assert set_rng_state(state) == (
        "the checkpoint holds the CUDA RNG states of 1 devices and this machine has 0: restored none, dropped 1; "
        "random draws on the dropped devices will not repeat those of the first run")


# -- device facts and bad input before any worker starts (issue 21) ---------------------

def test_cuda_count_problem_names_the_devices_there_are():
    from zoo.core.devices import cuda_count_problem

    assert cuda_count_problem("algo.device", "cuda:3", 1) == \
        "algo.device=cuda:3: this machine has 1 CUDA device (cuda:0); use cuda:0"
    assert cuda_count_problem("policy.device", "cuda:2", 2) == \
        "policy.device=cuda:2: this machine has 2 CUDA devices (cuda:0..cuda:1); use one of cuda:0..cuda:1"
    assert cuda_count_problem("algo.device", "cuda", 0) == "algo.device=cuda: this machine has no CUDA device; use cpu"
    assert cuda_count_problem("algo.device", "cuda:1", 2) is None
    assert cuda_count_problem("algo.device", "cpu", 0) is None


@pytest.mark.parametrize("capability, supported, native", [
    ((7, 0), False, False),  # V100
    ((7, 5), True, False),   # T4: torch emulates bfloat16
    ((8, 0), True, True),    # A100
    ((9, 0), True, True),    # H100
    ((8, 6), False, False),
])
def test_bf16_native_needs_ampere_and_torch_support(capability, supported, native):
    from zoo.core.devices import bf16_native
    assert bf16_native(capability, supported) is native


@pytest.mark.parametrize("capability, supported, chosen", [((7, 5), True, "float32"), ((8, 0), True, "bfloat16")])
def test_auto_precision_picks_bfloat16_only_where_native(monkeypatch, capability, supported, chosen):
    from zoo.core import devices

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: supported)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla T4")
    assert devices.choose_precision("auto", "cuda:0") == chosen
    assert devices.choose_precision("auto", "cpu") == "float32"
    assert devices.choose_precision("bfloat16", "cpu") == "bfloat16"


def test_bfloat16_on_a_gpu_without_it_is_refused_in_one_line(monkeypatch):
    from zoo.core.config import ConfigError, build_config, validate
    from zoo.core.plugins import get_registry

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (7, 5))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla T4")
    reg = get_registry()
    with pytest.raises(ConfigError) as info:
        validate(build_config(reg, "ppo", "CartPole-v1", steps=1000,
                              overrides=["policy.device=cuda", "policy.precision=bfloat16"]), reg)
    assert info.value.problems == [
        "policy.precision=bfloat16 on cuda (Tesla T4, compute capability 7.5): no native bfloat16 below 8.0 "
        "(Ampere); use float32 or auto"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_on_this_machine_without_cuda_is_refused_before_anything_starts(tmp_path):
    """For real: no mock. `zoo train` exits 2 with one line naming the option."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "zoo", "train", "ppo", "--env", "CartPole-v1", "--steps", "1000",
                          "--set", "algo.device=cuda", "--set", f"runs_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    text = " ".join(out.stderr.replace("│", " ").split())  # the error box, unwrapped
    assert f"algo.device='cuda': this torch build ({torch.__version__}) or machine has no CUDA" in text
    assert list(tmp_path.iterdir()) == []  # no run folder: nothing started


def test_the_policy_worker_sets_its_cuda_device_first(monkeypatch):
    from zoo.core import devices

    seen = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: seen.append(str(d)))
    devices.use_device("cuda:1")
    devices.use_device("cpu")
    assert seen == ["cuda:1"]


def test_the_trainer_sets_its_device_before_building_its_algorithm(tmp_path, monkeypatch):
    """The trainer makes its device current (``torch.cuda.set_device`` for ``cuda:N``) before the
    algorithm builds its network there, as the policy worker does (issue 21 fault 6)."""
    import os

    from tests.unit.trainer_harness import TrainerThread, fake_host, trainer_config
    from zoo.core import devices

    events: list[str] = []
    monkeypatch.setattr(devices, "use_device", lambda d: events.append(f"use_device {d}"))
    host = fake_host()
    entry = host.registry.get("algorithm", "ppo")
    real = entry.load()

    def build(cfg, spec, seed):
        events.append("algorithm")
        return real(cfg, spec, seed)

    load = type(entry).load
    monkeypatch.setattr(type(entry), "load", lambda self: build if self is entry else load(self))
    cfg = trainer_config(host, "ppo", str(tmp_path))
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    t = TrainerThread(host, cfg, run_dir)
    t.stop()
    assert t.error is None
    assert events == ["use_device cpu", "algorithm"]
