"""Guarded updates: a NaN or an infinity never reaches the weights or a checkpoint, and an
env that returns one is reported by the actor that stepped it."""
from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from tests.unit.fakes import assert_same_state
from tests.unit.trainer_harness import TrainerThread, fake_host, make_sample, trainer_config
from zoo.core.algorithm import NonFiniteUpdate
from zoo.core.checkpoint import load_checkpoint, nonfinite_tensors
from zoo.core.testing import CountingEnv
from zoo.core.workers.actor import EnvGroup, NonFiniteEnvError, SampleBuffer, env_seeds
from zoo.core.workers.trainer import NonFiniteRunError, collate, describe_sources, nonfinite_columns


# ----------------------------------------------------------------------------- locating bad columns
def test_nonfinite_columns_names_each_key_and_column():
    a, _ = make_sample(1, 4, 3, 1)
    b, _ = make_sample(2, 4, 2, 1)
    a["reward"][2, 1] = np.nan
    b["obs"]["obs"][4, 0, 0] = np.inf     # the bootstrap row counts too
    b["final_obs"] = {"obs": np.array([[0.5], [np.nan]], np.float32)}
    b["final_index"] = np.array([[1, 0], [3, 1]], np.int64)
    batch = collate([a, b])               # columns 0-2 from a, 3-4 from b
    bad = nonfinite_columns(batch)
    assert {k: v.tolist() for k, v in bad.items()} == {"reward": [1], "obs.obs": [3], "final_obs.obs": [4]}
    # a: actor 1, envs 6.. with 1 agent; b: actor 0, env_offset 2, 2 agents -> column 3 = env 2 agent 0,
    # column 4 = env 2 agent 1
    sources = describe_sources(bad, [(1, 6, 1, 3), (0, 2, 2, 2)])
    assert sources == [{"actor": 1, "env": 7, "agent": 0, "keys": ["reward"]},
                       {"actor": 0, "env": 2, "agent": 0, "keys": ["obs.obs"]},
                       {"actor": 0, "env": 2, "agent": 1, "keys": ["final_obs.obs"]}]
    assert nonfinite_columns(collate([make_sample(3, 4, 2, 1)[0]])) == {}


# ----------------------------------------------------------------------------- the algorithms' guard
def _algorithm(name: str, agents: int, **config):
    host = fake_host()
    component = host.registry.get("algorithm", name).load()
    spec = CountingEnv(num_agents=agents).spec
    return component(component.Config(**config), spec, 0)


def _state(algo) -> dict:
    state = copy.deepcopy(algo.state_dict())
    state["rng"] = copy.deepcopy(getattr(algo, "rng", None) and algo.rng.bit_generator.state)
    return state


@pytest.mark.parametrize("name,agents,config", [
    ("ppo", 1, {"epochs": 2, "minibatches": 2}),
    ("impala", 1, {}),
    ("mappo", 2, {"epochs": 2, "minibatches": 2, "max_reuse": 2}),
])
def test_an_update_that_meets_a_nan_is_undone_and_raises(name, agents, config):
    algo = _algorithm(name, agents, **config)
    batch = collate([make_sample(i, 8, 2 * agents, agents)[0] for i in range(2)])
    algo.update(batch)  # a normal update first: optimiser moments and (MAPPO) a kept batch exist
    before = _state(algo)
    calls = {"n": 0}
    evaluate = algo.policy.evaluate

    def poisoned(*args, **kwargs):  # the last gradient step's forward pass gives a NaN
        out = evaluate(*args, **kwargs)
        calls["n"] += 1
        last = {"ppo": 4, "impala": 1, "mappo": 4}[name]  # ppo/mappo: 2 epochs x 2 minibatches
        if calls["n"] == last:
            if isinstance(out, dict):
                out = {**out, "value": out["value"] * float("nan")}
            else:
                out = (out[0], out[1], out[2] * float("nan"))
        return out

    algo.policy.evaluate = poisoned
    with pytest.raises(NonFiniteUpdate) as info:
        algo.update(collate([make_sample(i, 8, 2 * agents, agents)[0] for i in range(2, 4)]))
    assert info.value.what == "loss" and info.value.step == {"ppo": 3, "impala": 0, "mappo": 3}[name]
    del algo.policy.evaluate
    assert_same_state(_state(algo), before, name)  # weights, optimiser, counters, RNG, kept batches
    assert nonfinite_tensors(algo.policy.state_dict()) == []


# ----------------------------------------------------------------------------- the trainer
def test_the_trainer_skips_nonfinite_batches_then_stops_naming_the_source(tmp_path):
    host = fake_host()
    cfg = trainer_config(host, "ppo", str(tmp_path), 1,
                         ("sample_length=16", "trainer.batch_samples=4", "algo.epochs=1",
                          "trainer.checkpoint_interval=1", "trainer.max_nonfinite_updates=2"))
    run = str(tmp_path / "run")
    os.makedirs(run)
    t = TrainerThread(host, cfg, run)
    for i in range(2):
        t.push(*make_sample(i, 16, 2, 1))
    t.wait_status(updates=1)
    good = {k: v.clone() for k, v in load_checkpoint(os.path.join(run, "checkpoints", "latest.pt"))
            ["algorithm"]["policy"].items()}
    for i in range(2, 6):  # two batches, each with a NaN reward from actor 1's env 3 (env_offset 2, column 1)
        sample, meta = make_sample(i, 16, 2, 1)
        if i % 2:
            sample["reward"][5, 1] = np.nan
            meta.update(actor=1, env_offset=2)
        t.push(sample, meta)
    t.join()
    assert isinstance(t.error, NonFiniteRunError)
    text = str(t.error)
    assert "2 consecutive updates" in text and "actor 1 env 3 agent 0: reward" in text
    assert "trainer.max_nonfinite_updates=2" in text and "policy version 1" in text
    rows = [__import__("json").loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    skipped = [r for r in rows if r["type"] == "nonfinite"]
    assert [(r["streak"], r["policy_version"], r["sources"]) for r in skipped] == [
        (1, 1, [{"actor": 1, "env": 3, "agent": 0, "keys": ["reward"]}]),
        (2, 1, [{"actor": 1, "env": 3, "agent": 0, "keys": ["reward"]}])]
    assert [r["updates"] for r in rows if r["type"] == "update"] == [1]
    warnings = [m for m in t.messages if m.get("type") == "warning" and m.get("key") == "nonfinite"]
    assert len(warnings) == 2
    ckpt = load_checkpoint(os.path.join(run, "checkpoints", "latest.pt"))
    assert ckpt["policy_version"] == 1  # the last finite weights, untouched by the skipped updates
    assert_same_state(dict(ckpt["algorithm"]["policy"]), good)


# ----------------------------------------------------------------------------- the actor
def test_an_env_returning_a_nan_reward_is_reported_by_its_actor_with_env_and_step():
    envs = [CountingEnv(), CountingEnv(nan_reward_at=3)]
    group = EnvGroup(envs, [0, 1], actor=2, env_offset=4)   # envs 4 and 5 of actor 2
    buf = SampleBuffer(8, group.obs)
    episodes: list = []
    for _ in range(2):
        group.step(np.zeros(2, np.int64), buf, episodes)
    with pytest.raises(NonFiniteEnvError) as info:
        group.step(np.zeros(2, np.int64), buf, episodes)
    assert str(info.value).startswith("env fake-counting (actor 2, env 5, agent 0) returned a non-finite reward "
                                      "(nan) at its env step 3 (step 3 of its episode)")


def test_an_env_returning_an_infinite_observation_at_reset_is_reported():
    class InfReset(CountingEnv):
        def reset(self, seed=None):
            obs, info = super().reset(seed)
            return {"obs": obs["obs"] + np.inf}, info

    with pytest.raises(NonFiniteEnvError, match=r"actor 1, env 3, agent 0\) returned a non-finite observation "
                                                r"'obs' \(inf\) at its env step 0 \(its first reset\)"):
        EnvGroup([CountingEnv(), InfReset()], [0, 1], actor=1, env_offset=2)


def test_env_seeds_of_a_resumed_run_are_new_ones():
    # zoo.core.seeding: SeedSequence(run seed, spawn_key=(env role 1, actor, slot[, resume])), 63 bits
    def by_hand(key):
        w = np.random.SeedSequence(1, spawn_key=key).generate_state(2, np.uint32)
        return (int(w[0]) * 2**32 + int(w[1])) % 2**63

    assert env_seeds(1, 2, 4) == [by_hand((1, 2, i)) for i in range(4)]
    resumed = env_seeds(1, 2, 4, resume=1)
    assert resumed == [by_hand((1, 2, i, 1)) for i in range(4)]
    assert resumed != env_seeds(1, 2, 4, resume=2) and len(set(resumed)) == 4
    assert set(resumed).isdisjoint(env_seeds(1, 2, 4))
