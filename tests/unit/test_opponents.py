"""Opponents from the history (issue 23, item 2; docs/history.md, "Opponents from the history"):
the config's refusals, the policy worker's per-row version routing and its pick schedule,
and the actor's ``<P>_version`` in episode rows."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from mpe2 import simple_spread_v3

from zoo.core.config import ConfigError, ExperimentConfig, algorithm_config_class
from zoo.core.env import PettingZooEnv
from zoo.core.plugins import get_registry
from zoo.core.policies import build_policies, policies_from_saved, policies_to_dict, split_policy_layers
from zoo.core.workers.policy import LIVE, PLAYED_VERSION, OpponentVersions
from zoo.plugins.envs.pettingzoo.env import PettingZooConfig

SPREAD = "mpe2.simple_spread_v3"


@pytest.fixture(scope="module")
def registry():
    return get_registry()


@pytest.fixture(scope="module")
def spec():
    env = PettingZooEnv(simple_spread_v3.parallel_env(), SPREAD)
    env.close()
    return env.spec


def _cfg(registry, spec) -> ExperimentConfig:
    cfg = ExperimentConfig(algo_name="mappo", env_name="pettingzoo:mpe2.simple_spread_v3",
                           algo=algorithm_config_class(registry.get("algorithm", "mappo"))(), env=PettingZooConfig(),
                           env_steps=1_000_000, name="opp")
    cfg.spec = spec
    return cfg


def _data(learner=None, opponent=None):
    learner = {"algo": "mappo", "trainer": {"history": {"every_updates": 5}}} if learner is None else learner
    opponent = {"algo": "mappo", "opponent": {"source": "learner", "pick": "pfsp"}} if opponent is None else opponent
    return {"policies": {"learner": learner, "opponent": opponent},
            "agents": [{"match": "agent_2", "policy": "opponent"}, {"match": "agent_*", "policy": "learner"}]}


def _build(registry, spec, data):
    rest, overrides, layers = split_policy_layers(data, [], source="--config opp.toml")
    return build_policies(registry, _cfg(registry, spec), layers, file_data=rest, overrides=overrides)


def _refused(registry, spec, data) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _build(registry, spec, data)
    return info.value


def test_an_opponent_is_not_trainable_needs_no_weights_and_travels_through_config_json(registry, spec):
    pols = _build(registry, spec, _data())
    opp = pols["opponent"]
    assert (opp.trainable, opp.weights, opp.agents) == (False, "", ("agent_2",))
    assert (opp.opponent.source, opp.opponent.pick, opp.opponent.every, opp.opponent.cache) == \
        ("learner", "pfsp", "episode", 4)
    assert pols.trainable == ["learner"]
    saved = policies_to_dict(pols)
    assert saved["policies"]["opponent"]["opponent"] == {"source": "learner", "pick": "pfsp", "every": "episode",
                                                         "cache": 4}
    assert saved["policies"]["opponent"]["trainable"] is False and "trainer" not in saved["policies"]["opponent"]
    again = policies_from_saved(registry, saved, _cfg(registry, spec))
    assert again["opponent"].opponent == opp.opponent and again["opponent"].trainable is False


@pytest.mark.parametrize("opponent, learner, line", [
    ({"opponent": {"source": "lerner"}}, None,
     "policies.opponent.opponent.source = 'lerner' names no policy of this run; set it to a trainable policy whose "
     "history it plays (policies: learner)"),
    ({"opponent": {"source": "opponent"}}, None,
     "policies.opponent.opponent.source = 'opponent' is the policy itself; set it to a trainable policy whose "
     "history it plays (policies: learner)"),
    ({"algo": "ppo", "opponent": {"source": "learner"}}, None,
     "policies.opponent.opponent.source = 'learner': policy learner is of algorithm 'mappo' and policy opponent of "
     "'ppo'; a past version only loads into its own algorithm's network: set policies.opponent.algo = 'mappo'"),
    ({"opponent": {"source": "learner"}}, {"algo": "mappo"},
     "policies.opponent.opponent.source = 'learner': policy learner keeps no history; set "
     "policies.learner.trainer.history.every_updates=N (or every_minutes=M; docs/history.md)"),
    ({"opponent": {"source": "learner", "pick": "best"}}, None,
     "policies.opponent.opponent.pick = 'best': history query 'best' is not a query; use one of "),
    ({"opponent": {"source": "learner", "every": "update"}}, None,
     "policies.opponent.opponent.every = 'update': the version is picked per env episode; set "
     "policies.opponent.opponent.every = \"episode\" (or leave it out)"),
    ({"opponent": {"source": "learner"}, "trainable": True}, None,
     "policies.opponent.trainable = true: policy opponent is served from policy learner's history "
     "(policies.opponent.opponent) and trains nothing; remove policies.opponent.trainable, or remove "
     "policies.opponent.opponent"),
    ({"opponent": {"source": "learner"}, "policy": {"inline": True}}, None,
     "policies.opponent.policy.inline = true: an opponent is served by policy workers (they hold its versions); set "
     "it to false"),
])
def test_bad_opponents_are_refused_in_one_line(registry, spec, opponent, learner, line):
    err = _refused(registry, spec, _data(learner, opponent))
    assert len(err.problems) == 1, err.problems
    assert err.problems[0].startswith(line), err.problems[0]


def test_an_opponent_of_a_frozen_policy_is_refused(registry, spec, tmp_path):
    data = _data()
    data["policies"]["third"] = {"opponent": {"source": "opponent"}}
    data["agents"] = [{"match": "agent_2", "policy": "opponent"}, {"match": "agent_1", "policy": "third"},
                      {"match": "agent_*", "policy": "learner"}]
    err = _refused(registry, spec, data)
    assert err.problems == ["policies.third.opponent.source = 'opponent': policy opponent is not trainable and keeps "
                            "no history; set it to a trainable policy"]


# ----------------------------------------------------------------------------- the policy worker's routing
class Scale(torch.nn.Module):
    """A tiny policy: action = the sum of the observation x ``k``; ``value`` = k."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self.k = k

    def act(self, obs):
        x = obs["obs"].sum(-1)
        return {"action": x * self.k, "value": torch.full_like(x, self.k)}


def _request(values, slots, resets):
    obs = np.array([[v, 0.0] for v in values], np.float32)
    return {"obs": {"obs": obs}, "slot": np.array(slots, np.int64), "on_reset": np.array(resets, bool)}


def _router(picks, agents=1, cache=4):
    live = types.SimpleNamespace(policy=Scale(1000.0), version=7, device="cpu", states=None, env_index=None,
                                 autocast=torch.no_grad())
    loads: list[int] = []
    built: list[Scale] = []

    def load(version, into=None):
        loads.append(version)
        if version == 99:
            return None
        if into is None:
            built.append(Scale(0.0))
            into = built[-1]
        into.k = float(version)  # the version's weights, in place
        return into

    queue = list(picks)
    router = OpponentVersions(live, lambda: queue.pop(0), load, agents, cache)
    router.built = built
    return router, loads, queue


def test_each_row_acts_with_its_envs_version_and_rows_of_one_version_run_together():
    router, loads, _ = _router([2, 3, None, 2])
    batch = [(0, _request([1, 2, 3], [0, 1, 2], [True, True, True]), {"request_id": 1, "rows": 3, "group": 0}),
             (1, _request([4], [0], [True]), {"request_id": 2, "rows": 1, "group": 0})]
    out = router.act(batch)
    # actor 0's envs 0, 1, 2 picked 2, 3, the current weights (no version kept); actor 1's env 0 picked 2
    assert out[0]["action"].tolist() == [2.0, 6.0, 3000.0]
    assert out[0]["value"].tolist() == [2.0, 3.0, 1000.0]
    assert out[0][PLAYED_VERSION].tolist() == [2, 3, 7] and out[0][PLAYED_VERSION].dtype == np.int64
    assert out[1]["action"].tolist() == [8.0] and out[1][PLAYED_VERSION].tolist() == [2]
    assert loads == [2, 3]  # version 2 loaded once for both actors' envs
    assert router.assigned == {(0, 0, 0): 2, (0, 0, 1): 3, (0, 0, 2): LIVE, (1, 0, 0): 2}


def test_an_env_keeps_its_version_until_its_next_episode_and_the_cache_drops_the_least_recently_used():
    router, loads, queue = _router([2, 3, 4, 5], agents=2, cache=2)
    # two agents of the opponent per env: slots 0, 1 are env 0, slots 2, 3 env 1; one pick per env per batch
    first = router.act([(0, _request([1, 1, 1, 1], [0, 1, 2, 3], [True] * 4), {"rows": 4, "group": 1})])
    assert first[0][PLAYED_VERSION].tolist() == [2, 2, 3, 3]
    mid = router.act([(0, _request([1, 1, 1], [0, 2, 3], [False, False, False]), {"rows": 3, "group": 1})])
    assert mid[0][PLAYED_VERSION].tolist() == [2, 3, 3] and queue == [4, 5]  # mid-episode: no pick
    new = router.act([(0, _request([1, 1], [1, 3], [True, False]), {"rows": 2, "group": 1})])
    assert new[0][PLAYED_VERSION].tolist() == [4, 3] and new[0]["action"].tolist() == [4.0, 3.0]
    assert list(router.nets) == [3, 4]  # 2 dropped (least recently used)
    back = router.act([(0, _request([1], [0], [True]), {"rows": 1, "group": 1})])
    assert back[0][PLAYED_VERSION].tolist() == [5] and loads == [2, 3, 4, 5]
    assert list(router.nets) == [4, 5]
    # Before: every miss built a network (with its orthogonal init: half the opponent worker's time
    # under pfsp over 100 kept versions). Two networks were built to fill the cache of 2; versions 4
    # and 5 took the weights of the evicted 2 and 3 in place.
    assert len(router.built) == 2
    assert [id(n) for n in router.nets.values()] == [id(router.built[0]), id(router.built[1])]
    assert [n.k for n in router.nets.values()] == [4.0, 5.0]


def test_a_version_whose_file_is_gone_plays_the_current_weights():
    router, loads, _ = _router([99])
    out = router.act([(3, _request([1], [0], [True]), {"rows": 1, "group": 0})])
    assert out[0]["action"].tolist() == [1000.0] and out[0][PLAYED_VERSION].tolist() == [7]
    assert router.assigned == {(3, 0, 0): LIVE} and loads == [99]


# ----------------------------------------------------------------------------- the actor's episode rows
def test_episode_rows_name_the_version_that_played_each_env_and_forget_it_after():
    from tests.unit.fakes import Counter
    from zoo.core.workers.actor import EnvGroup, SampleBuffer

    group = EnvGroup([Counter(terminate=False), Counter(terminate=True)], [0, 1])  # episodes of 3 steps
    group.played["opp"] = np.array([5, -1], np.int64)  # env 0 played version 5; no opponent acted in env 1
    buf = SampleBuffer(4, group.obs)
    episodes: list[dict] = []
    for step in range(3):
        reply = {"action": np.zeros(2, np.int64)}
        buf.record_policy(reply, version=step, active=group.active, on_reset=group.on_reset)
        group.step(reply["action"], buf, episodes)
    assert [e.get("opp_version") for e in episodes] == [5, None]
    assert group.played["opp"].tolist() == [-1, -1]
