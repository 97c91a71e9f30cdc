"""Multi-agent layout: PettingZoo adapter, active masks, no actions for finished agents."""
import numpy as np
import pytest
from gymnasium import spaces

from zoo.core.env import PettingZooEnv
from zoo.core.workers.actor import EnvGroup, SampleBuffer


class TwoAgents:
    """A ParallelEnv: 'a' lives 4 steps (truncated), 'b' terminates after its 2nd step.

    Observation of each agent = its step count; reward = 1 for 'a', 10 for 'b'.
    """

    possible_agents = ["a", "b"]

    def __init__(self):
        self.agents = []
        self.t = 0
        self.received = []
        self.actions = []

    def observation_space(self, agent):
        return spaces.Box(0, 100, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        self.agents, self.t = ["a", "b"], 0
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.received.append(sorted(actions))
        self.actions.append({a: int(v) for a, v in actions.items()})
        self.t += 1
        obs = {a: np.array([float(self.t)], np.float32) for a in self.agents}
        rew = {a: (1.0 if a == "a" else 10.0) for a in self.agents}
        term = {a: a == "b" and self.t == 2 for a in self.agents}
        trunc = {a: a == "a" and self.t == 4 for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, infos

    def close(self):
        pass


def test_adapter_masks_finished_agents():
    env = PettingZooEnv(TwoAgents(), "two")
    obs, info = env.reset()
    assert obs["obs"].shape == (2, 1) and info["active"].tolist() == [True, True]
    actives, rewards, terms = [], [], []
    for _ in range(4):
        obs, r, te, tr, info = env.step(np.zeros(2, np.int64))
        actives.append(info["active"].tolist())
        rewards.append(r.tolist())
        terms.append(te.tolist())
    assert rewards == [[1, 10], [1, 10], [1, 0], [1, 0]]  # 'b' keeps its final reward on its last step
    assert terms == [[False, False], [False, True], [False, False], [False, False]]
    assert actives == [[True, True], [True, False], [True, False], [False, False]]
    assert env.env.received == [["a", "b"], ["a", "b"], ["a"], ["a"]]  # no action sent for 'b' after it ended


def test_sample_active_mask_and_no_rows_for_inactive_agents():
    group = EnvGroup([PettingZooEnv(TwoAgents(), "two")], [0])
    buf = SampleBuffer(4, group.obs)
    rows_requested = []
    for _ in range(4):
        rows = int(group.active.sum())
        rows_requested.append(rows)
        reply = {"action": np.ones(rows, np.int64), "value": np.full(rows, 0.5, np.float32)}
        buf.record_policy(reply, 0, group.active.copy(), group.on_reset.copy())
        group.step(np.where(group.active, 1, 0), buf, [])
    sample = buf.bundle()
    assert rows_requested == [2, 2, 1, 1]
    assert sample["active"].T.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert sample["action"].T.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert sample["value"].T.tolist() == [[0.5] * 4, [0.5, 0.5, 0, 0]]
    assert sample["reward"].T.tolist() == [[1, 1, 1, 1], [10, 10, 0, 0]]
    assert sample["terminated"][:, 1].tolist() == [False, True, False, False]
    # 'a' was truncated at step 4 (t = 3): its real final observation (4) is kept.
    assert sample["final_index"].tolist() == [[3, 0]]
    assert sample["final_obs"]["obs"][:, 0].tolist() == [4.0]


def test_replies_for_the_active_agents_reach_the_right_env_and_agent():
    # The actor's own sequence: reply rows are the active slots only; the full-width action
    # that record_policy returns is what the envs are stepped with. Two envs, so a reply
    # that skipped 'b' of env 0 must not shift env 1's actions.
    envs = [PettingZooEnv(TwoAgents(), "two"), PettingZooEnv(TwoAgents(), "two")]
    group = EnvGroup(envs, [0, 1])
    buf = SampleBuffer(4, group.obs)
    for t in range(4):
        slots = np.flatnonzero(group.active)
        reply = {"action": (10 * t + slots) % 3, "value": np.zeros(slots.size, np.float32)}
        group.step(buf.record_policy(reply, 0, group.active.copy(), group.on_reset.copy()), buf, [])
    # slot s = env * 2 + agent; action = (10 t + s) % 3 while active
    assert envs[0].env.actions == [{"a": 0, "b": 1}, {"a": 1, "b": 2}, {"a": 2}, {"a": 0}]
    assert envs[1].env.actions == [{"a": 2, "b": 0}, {"a": 0, "b": 1}, {"a": 1}, {"a": 2}]
    assert buf.bundle()["action"].tolist() == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 0], [0, 0, 2, 0]]


def test_a_step_with_only_the_active_rows_is_refused():
    group = EnvGroup([PettingZooEnv(TwoAgents(), "two")], [0])
    buf = SampleBuffer(4, group.obs)
    with pytest.raises(ValueError, match=r"^actions for 1 agent-slots; this group has 1 envs x 2 agents = 2"):
        group.step(np.zeros(1, np.int64), buf, [])
