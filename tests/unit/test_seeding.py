"""Reproducible, independent seeds (issue 14, item 6): every env and worker seed comes from
``zoo.core.seeding.derive_seed`` (numpy SeedSequence over (run seed, role, index, env slot))."""
from __future__ import annotations

import numpy as np
import pytest

from zoo.core.seeding import ROLES, derive_seed, env_seeds


def _by_hand(run_seed: int, role_code: int, index: int, slot: int) -> int:
    """The documented formula, written out again: two 32-bit words of SeedSequence's state, 63 bits."""
    w = np.random.SeedSequence(run_seed, spawn_key=(role_code, index, slot)).generate_state(2, np.uint32)
    return (int(w[0]) * 2**32 + int(w[1])) % 2**63


def test_seeds_are_the_documented_seed_sequence_words():
    assert ROLES == {"env": 1, "actor": 2, "policy": 3, "trainer": 4, "eval": 5}  # codes never change
    for run_seed, role, index, slot in [(0, "env", 0, 0), (1, "env", 63, 15), (3, "policy", 0, 0),
                                        (2**32 - 1, "trainer", 0, 0), (7, "actor", 5, 0)]:
        assert derive_seed(run_seed, role, index, slot) == _by_hand(run_seed, ROLES[role], index, slot)
    assert env_seeds(3, 2, 4) == [_by_hand(3, 1, 2, s) for s in range(4)]
    assert all(0 <= s < 2**63 for s in env_seeds(0, 0, 16))


def test_runs_0_and_1_share_no_env_seed_over_64_actors_x_16_envs():
    run0 = [s for actor in range(64) for s in env_seeds(0, actor, 16)]
    run1 = [s for actor in range(64) for s in env_seeds(1, actor, 16)]
    assert len(set(run0)) == len(set(run1)) == 64 * 16  # no two envs of one run share a seed
    assert set(run0).isdisjoint(run1)
    # The old scheme, seed * 100_003 + actor * envs_per_actor + slot, gave each run a block of
    # consecutive seeds; with 64 x 16 = 1,024 envs per run, runs 0 and 1 were apart by 100,003, but
    # with 6,251 actors of 16 envs the blocks overlapped, and env seeds of one run were neighbours.
    # Every role has its own stream: the policy worker's seed is none of the env seeds.
    assert derive_seed(0, "policy", 0) not in run0 and derive_seed(0, "trainer", 0) not in run0


def test_bad_inputs():
    with pytest.raises(KeyError):
        derive_seed(0, "learner")
    with pytest.raises(ValueError):
        derive_seed(-1, "env")


def _first_observations(make, seeds: list[int], actions: np.ndarray, steps: int) -> list[np.ndarray]:
    """Per env: the reset observation and those of ``steps`` steps with ``actions`` (resetting as the actor does)."""
    out = []
    for seed in seeds:
        env = make(seed)
        obs, _ = env.reset(seed=seed)
        rows = [np.concatenate([v.ravel() for v in obs.values()])]
        for t in range(steps):
            obs, _, term, trunc, _ = env.step(actions[t])
            if np.all(term | trunc):
                obs, _ = env.reset()
            rows.append(np.concatenate([v.ravel() for v in obs.values()]))
        env.close()
        out.append(np.stack(rows))
    return out


@pytest.mark.parametrize("env_id", ["CartPole-v1", "hide-and-seek"])
def test_two_runs_with_seed_3_see_identical_first_100_observations_per_env(env_id):
    from zoo.core.config import env_config_class, make_env, resolve_env
    from zoo.core.plugins import get_registry

    registry = get_registry()
    component, _ = resolve_env(registry, env_id)
    config_cls = env_config_class(component)

    def make(seed):
        return make_env(registry, env_id, config_cls() if config_cls else None, seed)

    spec = make(0).spec
    rng = np.random.default_rng(0)  # one fixed action sequence, the same for every env and run
    space = spec.action_space
    n = space.n if hasattr(space, "n") else space.nvec
    actions = rng.integers(0, n, size=(100, spec.num_agents, *np.shape(n)))
    # 2 actors x 2 envs of each run, the seeds the actors derive
    run_a = _first_observations(make, [s for a in range(2) for s in env_seeds(3, a, 2)], actions, 100)
    run_b = _first_observations(make, [s for a in range(2) for s in env_seeds(3, a, 2)], actions, 100)
    other = _first_observations(make, [s for a in range(2) for s in env_seeds(4, a, 2)], actions, 100)
    assert all(np.array_equal(x, y) for x, y in zip(run_a, run_b))  # bit for bit, 101 rows per env
    assert all(x.shape[0] == 101 for x in run_a)
    assert not any(np.array_equal(x[0], y[0]) for x, y in zip(run_a, other))  # another seed: other starts
    assert len({x[0].tobytes() for x in run_a}) == 4  # the 4 envs of one run start differently


def _by_hand_key(run_seed, key):
    words = np.random.SeedSequence(run_seed, spawn_key=key).generate_state(2, np.uint32)
    return ((int(words[0]) << 32) | int(words[1])) & ((1 << 63) - 1)


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_restarted_attempt_draws_new_seeds_and_attempt_0_keeps_todays(role):
    code = ROLES[role]
    # attempt 0: the key is (code, index, slot) as before attempts existed, (.., resume) after a resume
    assert derive_seed(7, role, 2, 1, attempt=0) == _by_hand_key(7, (code, 2, 1)) == derive_seed(7, role, 2, 1)
    assert derive_seed(7, role, 2, 1, resume=3, attempt=0) == _by_hand_key(7, (code, 2, 1, 3))
    # attempt a >= 1: (code, index, slot, resume, a)
    assert derive_seed(7, role, 2, 1, attempt=1) == _by_hand_key(7, (code, 2, 1, 0, 1))
    assert derive_seed(7, role, 2, 1, resume=3, attempt=2) == _by_hand_key(7, (code, 2, 1, 3, 2))
    seeds = {derive_seed(7, role, 2, 1, resume=r, attempt=a) for r in range(3) for a in range(3)}
    assert len(seeds) == 9  # no (resume, attempt) pair repeats another's seed, e.g. (1, 0) vs (0, 1)
    with pytest.raises(ValueError):
        derive_seed(7, role, attempt=-1)


class RecordingEnv:
    """Records the seed of every reset (a fake-counting env underneath)."""

    def __init__(self, seeds: list):
        from zoo.core.testing.fake_envs import make_counting

        self.inner, self.seeds = make_counting(None), seeds
        self.spec = self.inner.spec

    def reset(self, seed=None):
        self.seeds.append(seed)
        return self.inner.reset(seed=seed)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_restarted_actor_resets_its_envs_with_new_seeds():
    """The actor's envs as its worker builds them (``actor_env_seeds`` -> ``EnvGroup``), for
    attempt 0 and for the restarted attempt 1 of actor 1: the envs record their reset seeds;
    attempt 0's are today's (``derive_seed(seed, "env", 1, slot)``), attempt 1's are all new."""
    from zoo.core.config import build_config
    from zoo.core.workers.actor import EnvGroup, actor_env_seeds
    from zoo.core.workers.base import WorkerContext
    from tests.unit.trainer_harness import fake_host

    host = fake_host()
    cfg = build_config(host.registry, "ppo", "fake-counting", seed=5, name="run", steps=1000,
                       overrides=["actors.envs_per_actor=4", "log.tensorboard=false"])
    recorded = []
    for attempt in (0, 1):
        ctx = WorkerContext("actor", 1, cfg, cfg.spec, "run-id", "/nonexistent", attempt=attempt)
        seeds: list = []
        EnvGroup([RecordingEnv(seeds) for _ in range(4)], actor_env_seeds(ctx), actor=1)
        recorded.append(seeds)
    assert recorded[0] == [_by_hand(5, 1, 1, s) for s in range(4)]
    assert recorded[1] == [_by_hand_key(5, (1, 1, s, 0, 1)) for s in range(4)]
    assert set(recorded[0]).isdisjoint(recorded[1])


def test_a_restarted_actor_numbers_its_inference_requests_apart_from_the_crashed_attempt():
    # A late reply to the crashed attempt's request 0 must not match the new attempt's request 0.
    from zoo.core.workers.actor import first_request_id
    from zoo.core.workers.base import WorkerContext

    firsts = [first_request_id(WorkerContext("actor", 1, None, None, "run-id", "/nonexistent", attempt=a))
              for a in (0, 1, 2)]
    assert firsts == [0, 4_294_967_296, 8_589_934_592]
