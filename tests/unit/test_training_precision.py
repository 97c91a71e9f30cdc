"""Mixed-precision training (``algo.precision``, issue 25): bfloat16 losses against float32 on the
same batch, float32 master weights and optimiser state, guarded updates, ``auto``'s choice,
config validation, checkpoints and the channels-last frames of the Nature CNN.

Tolerance of the loss comparisons. bfloat16 keeps 8 significant bits, so one rounding is off by
at most 2^-9 relative (round to nearest) and a product of two rounded values by about 2^-8. In
a forward pass under autocast every matrix product rounds its input, its weights and its output:
about 3 x 2^-9 per layer, so a few layers stay within 2^-6 relative at a single entry, worst case
(the sums inside a product accumulate in float32). The losses are means over hundreds of steps,
whose rounding errors mostly cancel, and everything after the network's outputs (softmax,
ratios, advantages, the loss arithmetic) is float32. We allow 2^-5 (3.1%) relative to the loss's
size, twice the worst single-entry bound; the observed differences are 10-100x smaller (about
1e-4 to 5e-3 relative). A float32 run against itself agrees exactly, so the tolerance is only
bfloat16's.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from gymnasium import spaces

from tests.unit.trainer_harness import fake_host, make_sample
from zoo.core import devices
from zoo.core.algorithm import NonFiniteUpdate
from zoo.core.env import EnvSpec
from zoo.core.testing import CountingEnv
from zoo.core.workers.trainer import collate
from zoo.plugins.algorithms.precision import TrainingPrecision, as_float32, largest_layer

TOL = 2.0 ** -5

ALGOS = [
    ("ppo", 1, {"epochs": 1, "minibatches": 1}),
    ("impala", 1, {}),
    ("mappo", 2, {"epochs": 1, "minibatches": 1}),
]


def _component(name: str):
    return fake_host().registry.get("algorithm", name).load()


def _algorithm(name: str, agents: int, precision: str, **config):
    component = _component(name)
    algo = component(component.Config(precision=precision, **config), CountingEnv(num_agents=agents).spec, 0)
    # the freshly initialised policy head gives logits of ~0.01 (entropy ln 2 either way): scale it up
    # so that the policy's outputs, and so pg_loss and entropy, depend on the arithmetic
    with torch.no_grad():
        for mod_name, p in algo.policy.named_parameters():
            if mod_name.startswith(("actor.4.", "actor_out.")):
                p.mul_(100.0)
    return algo


def _batch(agents: int, first: int = 0):
    return collate([make_sample(i, 16, 4 * agents, agents)[0] for i in range(first, first + 4)])


def _fake_cpu(monkeypatch, capability: str, flags: set[str]) -> None:
    monkeypatch.setattr(devices, "cpu_bf16_facts", lambda cpuinfo="/proc/cpuinfo": (capability, frozenset(flags)))


# ----------------------------------------------------------------------------- autocast, by hand
def test_bfloat16_rounds_the_product_and_returns_float32():
    # 1 + 2^-10 needs 11 significant bits: bfloat16 (8 bits) rounds it to 1 exactly
    lin = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0 + 2.0 ** -10)
    x = torch.ones(1, 1)
    f32 = TrainingPrecision("float32", "cpu", lin).forward(lin, x)
    bf16 = TrainingPrecision("bfloat16", "cpu", lin).forward(lin, x)
    assert f32.dtype == bf16.dtype == torch.float32
    assert f32.item() == 1.0 + 2.0 ** -10 and bf16.item() == 1.0
    assert lin.weight.dtype == torch.float32 and lin.weight.item() == 1.0 + 2.0 ** -10  # the master weight


def test_as_float32_casts_reduced_precision_tensors_only():
    out = as_float32({"v": torch.ones(3, dtype=torch.bfloat16), "s": None,
                      "t": (torch.ones(2, dtype=torch.float16), torch.ones(1, dtype=torch.float64)),
                      "i": [torch.ones(1, dtype=torch.int64)]})
    assert out["v"].dtype == torch.float32 and out["s"] is None
    assert [t.dtype for t in out["t"]] == [torch.float32, torch.float64] and out["i"][0].dtype == torch.int64


# ----------------------------------------------------------------------------- the losses
@pytest.mark.parametrize("name,agents,config", ALGOS)
def test_bfloat16_losses_match_float32_on_the_same_batch(name, agents, config):
    batch = _batch(agents)
    f32 = _algorithm(name, agents, "float32", **config)
    bf16 = _algorithm(name, agents, "bfloat16", **config)
    assert bf16.precision.name == "bfloat16" and f32.precision.name == "float32"
    # one gradient step: the statistics are those of the loss at the shared initial weights
    a, b = f32.update(batch), bf16.update(batch)
    for key in ("pg_loss", "v_loss", "entropy"):
        scale = max(abs(a[key]), 1.0 if key == "pg_loss" else 0.0)  # pg_loss ~ mean(A r): advantages are ~1
        assert abs(b[key] - a[key]) <= TOL * scale, (key, a[key], b[key])
    again = _algorithm(name, agents, "float32", **config).update(batch)
    assert {k: again[k] for k in a} == a  # float32 against float32: exactly equal


def test_ppo_bfloat16_losses_match_float32_with_the_nature_cnn():
    spec = EnvSpec("frames", ("a",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)}, spaces.Discrete(6))
    rng = np.random.default_rng(0)
    T, B = 8, 4
    batch = {
        "obs": {"obs": rng.integers(0, 255, (T + 1, B, 4, 84, 84), dtype=np.uint8)},
        "action": rng.integers(0, 6, (T, B)).astype(np.int64),
        "reward": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": np.zeros((T, B), bool), "truncated": np.zeros((T, B), bool),
        "logp": np.full((T, B), np.log(1 / 6), np.float32),
    }
    component = _component("ppo")
    stats = {}
    for precision in ("float32", "bfloat16"):
        algo = component(component.Config(precision=precision, epochs=1, minibatches=1), spec, 0)
        assert algo.policy.encoder.channels_last_memory  # on the CPU, in both precisions
        stats[precision] = algo.update(batch)
    a, b = stats["float32"], stats["bfloat16"]
    for key in ("pg_loss", "v_loss", "entropy"):
        scale = max(abs(a[key]), 1.0 if key == "pg_loss" else 0.0)
        assert abs(b[key] - a[key]) <= TOL * scale, (key, a[key], b[key])


# ----------------------------------------------------------------------------- what stays float32
@pytest.mark.parametrize("name,agents,config", ALGOS)
def test_weights_gradients_and_optimiser_state_stay_float32_after_a_bfloat16_update(name, agents, config):
    algo = _algorithm(name, agents, "bfloat16", **config)
    algo.update(_batch(agents))
    assert {p.dtype for p in algo.policy.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in algo.policy.parameters() if p.grad is not None} == {torch.float32}
    state = algo.optimizer.state_dict()["state"]
    assert state and {t.dtype for s in state.values() for k, t in s.items() if k != "step"} == {torch.float32}
    # buffers (observation / value statistics) keep their own float dtypes: float32 or float64, never bfloat16
    assert {t.dtype for t in algo.policy.state_dict().values() if t.is_floating_point()} <= {torch.float32,
                                                                                             torch.float64}


@pytest.mark.parametrize("name,agents,config", [
    ("ppo", 1, {"epochs": 2, "minibatches": 2}),
    ("impala", 1, {}),
    ("mappo", 2, {"epochs": 2, "minibatches": 2, "max_reuse": 2}),
])
def test_a_nonfinite_value_under_bfloat16_is_a_guarded_update(name, agents, config):
    from tests.unit.fakes import assert_same_state
    from zoo.core.checkpoint import nonfinite_tensors

    algo = _algorithm(name, agents, "bfloat16", **config)
    algo.update(_batch(agents))  # optimiser moments and (MAPPO) a kept batch exist
    before = copy.deepcopy(algo.state_dict())
    evaluate = algo.policy.evaluate
    calls = {"n": 0}
    last = {"ppo": 4, "impala": 1, "mappo": 4}[name]  # the last gradient step's forward pass

    def poisoned(*args, **kwargs):  # runs inside the bfloat16 autocast: the value comes out bfloat16 inf
        out = evaluate(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == last:
            if isinstance(out, dict):
                assert out["value"].dtype == torch.bfloat16
                out = {**out, "value": out["value"] * float("inf")}
            else:
                assert out[2].dtype == torch.bfloat16
                out = (out[0], out[1], out[2] * float("inf"))
        return out

    algo.policy.evaluate = poisoned
    with pytest.raises(NonFiniteUpdate) as info:
        algo.update(_batch(agents, first=4))
    del algo.policy.evaluate
    assert info.value.what == "loss" and info.value.step == last - 1
    after = algo.state_dict()
    assert_same_state(after, before, name)  # weights, optimiser state, counters, RNG, kept batches
    assert nonfinite_tensors(algo.policy.state_dict()) == []


# ----------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("name,agents,config", ALGOS)
def test_checkpoints_do_not_depend_on_the_precision(name, agents, config):
    trained = _algorithm(name, agents, "bfloat16", **config)
    trained.update(_batch(agents))
    state = copy.deepcopy(trained.state_dict())
    assert {t.dtype for t in state["policy"].values() if t.is_floating_point()} <= {torch.float32, torch.float64}
    resumed = _algorithm(name, agents, "float32", **config)  # resumed in the other precision
    resumed.load_state_dict(state)
    for k, v in resumed.policy.state_dict().items():
        assert torch.equal(v, state["policy"][k]) and v.dtype == state["policy"][k].dtype, k
    back = _algorithm(name, agents, "bfloat16", **config)
    back.load_state_dict(copy.deepcopy(resumed.state_dict()))
    batch = _batch(agents, first=8)
    assert back.update(batch) == trained.update(batch)  # the same state and precision: the same update


# ----------------------------------------------------------------------------- auto
def test_cpu_bf16_facts_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\nprocessor\t: 1\n"
                    "flags\t\t: fpu\n")
    assert devices.cpu_bf16_facts(str(info))[1] == frozenset({"avx512_bf16"})
    assert devices.cpu_bf16_facts(str(tmp_path / "missing"))[1] == frozenset()
    assert devices.cpu_bf16_native("AVX512", {"avx512_bf16"}) and devices.cpu_bf16_native("AVX512", {"amx_bf16"})
    assert not devices.cpu_bf16_native("AVX2", {"avx512_bf16"})   # torch's kernels do not use it
    assert not devices.cpu_bf16_native("AVX512", set())


def test_auto_picks_bfloat16_on_a_native_cpu_for_large_layers_only(monkeypatch):
    choose = devices.choose_training_precision
    _fake_cpu(monkeypatch, "AVX512", {"avx512_bf16"})
    assert choose("auto", "cpu", 256 * 256)[0] == "bfloat16"
    assert choose("auto", "cpu", 256 * 256 - 1)[0] == "float32"
    assert choose("auto", "cpu", 0) == ("float32", "auto: CPU with avx512_bf16, torch capability AVX512: native "
                                        "bfloat16, but the largest layer has 0 weights, under the 65,536 from "
                                        "which bfloat16 measured faster")
    assert choose("float32", "cpu", 10**7) == ("float32", "as set")
    _fake_cpu(monkeypatch, "AVX2", set())
    assert choose("auto", "cpu", 10**7) == ("float32", "auto: CPU with no avx512_bf16/amx_bf16, torch capability "
                                            "AVX2: no native bfloat16")
    name, reason = choose("bfloat16", "cpu", 10)  # as asked, with a warning in the reason
    assert name == "bfloat16" and "no native bfloat16, torch emulates it" in reason
    with pytest.raises(ValueError, match="algo.precision must be auto, float32 or bfloat16, got 'fp16'"):
        choose("fp16", "cpu", 0)


def test_auto_on_a_faked_gpu(monkeypatch):
    monkeypatch.setattr(devices, "_cuda_facts", lambda device: ((8, 0), True, "A100"))
    assert devices.choose_training_precision("auto", "cuda:0", 10**6) == (
        "bfloat16", "auto: A100, compute capability 8.0: native bfloat16, and a layer of 1,000,000 weights")
    monkeypatch.setattr(devices, "_cuda_facts", lambda device: ((7, 5), True, "T4"))
    assert devices.choose_training_precision("auto", "cuda:0", 10**6)[0] == "float32"


def test_auto_with_the_real_networks(monkeypatch):
    _fake_cpu(monkeypatch, "AVX512", {"avx512_bf16"})
    ppo = _component("ppo")
    cartpole = CountingEnv().spec
    frames = EnvSpec("frames", ("a",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)}, spaces.Discrete(6))
    auto = ppo.Config(precision="auto")
    assert largest_layer(ppo.build_policy(auto, cartpole)) == 64 * 64
    assert largest_layer(ppo.build_policy(auto, frames)) == 3136 * 512
    assert ppo(auto, cartpole, 0).precision.name == "float32"
    assert ppo(auto, frames, 0).precision.name == "bfloat16"
    assert ppo.explain_precision(auto, frames) == ("bfloat16 (auto: CPU with avx512_bf16, torch capability AVX512: "
                                                   "native bfloat16, and a layer of 1,605,632 weights)")
    _fake_cpu(monkeypatch, "AVX2", set())
    assert ppo(auto, frames, 0).precision.name == "float32"


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize("algo", ["ppo", "impala", "mappo"])
def test_a_bad_precision_is_refused_naming_the_option(algo):
    from zoo.core.config import ConfigError, build_config

    with pytest.raises(ConfigError) as info:
        build_config(fake_host().registry, algo, "CartPole-v1", overrides=["algo.precision=fp16"], steps=1000)
    assert info.value.field == "algo.precision"
    assert str(info.value) == ("--set algo.precision=fp16: algo.precision expects one of 'auto', 'float32', "
                               "'bfloat16', got 'fp16'")


# ----------------------------------------------------------------------------- channels-last frames
def test_channels_last_frames_change_the_layout_not_the_features():
    from zoo.plugins.algorithms.encoders import NatureCNN

    torch.manual_seed(0)
    cnn = NatureCNN((4, 84, 84))
    x = {"obs": torch.from_numpy(np.random.default_rng(0).integers(0, 255, (3, 4, 84, 84), dtype=np.uint8))}
    nchw = cnn(x)
    cnn.channels_last_memory = True
    nhwc = cnn(x)
    assert nhwc.shape == nchw.shape == (3, 512)
    torch.testing.assert_close(nhwc, nchw, rtol=1e-5, atol=1e-5)  # float32: only the summation order differs
    assert all(p.is_contiguous() for p in cnn.parameters())  # the weights keep their layout (checkpoints, publishing)
    spec = EnvSpec("frames", ("a",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)}, spaces.Discrete(6))
    ppo = _component("ppo")
    assert not ppo.build_policy(ppo.Config(), spec).encoder.channels_last_memory  # the policy workers' copy


def test_bfloat16_training_on_a_gpu_without_it_is_refused_in_one_line(monkeypatch):
    from zoo.core.config import ConfigError, build_config, validate
    from zoo.core.plugins import get_registry

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (7, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla V100")
    reg = get_registry()
    with pytest.raises(ConfigError) as info:
        validate(build_config(reg, "impala", "CartPole-v1", steps=1000,
                              overrides=["algo.device=cuda", "algo.precision=bfloat16"]), reg)
    assert info.value.problems == [
        "algo.precision=bfloat16 on cuda (Tesla V100, compute capability 7.0): no native bfloat16 below 8.0 "
        "(Ampere); use float32 or auto"]
    validate(build_config(reg, "impala", "CartPole-v1", steps=1000,  # auto resolves to float32 there: accepted
                          overrides=["algo.device=cuda", "algo.precision=auto"]), reg)


def test_zoo_train_prints_the_choice(monkeypatch):
    import io

    from rich.console import Console

    from zoo.cli import _print_precision
    from zoo.core.config import build_config
    from zoo.core.plugins import get_host

    _fake_cpu(monkeypatch, "AVX512", {"avx512_bf16"})
    host = get_host()
    printed = []
    for precision in ("float32", "auto", "bfloat16"):
        cfg = build_config(host.registry, "mappo", "CartPole-v1", steps=10_000,
                           overrides=[f"algo.precision={precision}"])
        out = io.StringIO()
        _print_precision(host, cfg, "mappo", Console(file=out, width=400))
        printed.append(out.getvalue())
    assert printed == [
        "",  # an explicit float32: no line, no torch import for it
        "training precision: float32 (auto: CPU with avx512_bf16, torch capability AVX512: native bfloat16, but the "
        "largest layer has 4,096 weights, under the 65,536 from which bfloat16 measured faster)\n",
        "training precision: bfloat16 (as set)\n"]


@pytest.mark.parametrize("name,agents,config", ALGOS)
def test_the_default_is_auto_and_keeps_small_networks_in_float32(monkeypatch, name, agents, config):
    from zoo.core.options import _field_docs

    component = _component(name)
    assert component.Config().precision == "auto"
    assert _field_docs(component.Config)["precision"] == devices.TRAINING_PRECISION_HELP  # one shared text
    # auto resolves per machine: float32 for a 64-unit MLP even where bfloat16 is native
    _fake_cpu(monkeypatch, "AVX512", {"avx512_bf16"})
    algo = component(component.Config(**config), CountingEnv(num_agents=agents).spec, 0)
    assert algo.precision.name == "float32"


def test_a_run_may_be_resumed_in_another_precision(tmp_path):
    from zoo.core.checkpoint import FORMAT, latest_path, write_checkpoint
    from zoo.core.config import build_config, save_config
    from zoo.core.resume import resume_config

    host = fake_host()
    cfg = build_config(host.registry, "ppo", "fake-counting", name="r", steps=1000,
                       overrides=[f"runs_dir={tmp_path}", "algo.precision=bfloat16"])
    save_config(cfg, tmp_path / "r")
    (tmp_path / "r" / "checkpoints").mkdir()
    write_checkpoint(latest_path(str(tmp_path / "r")), {"format": FORMAT, "algorithm": {}, "policy_version": 4,
                                                         "updates": 4, "env_steps": 1024, "frames": 1024})
    resumed, _ = resume_config(host.registry, str(tmp_path / "r"), steps=3000, overrides=["algo.precision=float32"])
    assert resumed.algo.precision == "float32"
