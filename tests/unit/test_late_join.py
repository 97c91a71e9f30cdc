"""PettingZoo agents that join mid-episode start from a fresh recurrent state, at rollout and in training (issue 15)."""
import numpy as np
import torch

from zoo.core.env import PettingZooEnv
from zoo.core.testing.masked_envs import LateJoinParallel
from zoo.core.workers.actor import EnvGroup, SampleBuffer
from zoo.core.workers.policy import RecurrentStates
from zoo.plugins.algorithms.mappo.mappo import MAPPO, MAPPOConfig


def rollout(T=18):
    """The actor's loop with a stand-in recurrent policy whose state counts the steps it was fed:
    new state = fed state + 1. Returns the buffer and the state fed to agent_1 at every step."""
    group = EnvGroup([PettingZooEnv(LateJoinParallel(length=6, join_at=3), "late")], [0])
    buf = SampleBuffer(T, group.obs)
    states = RecurrentStates((1, 2))
    fed_agent_1, episodes = [], []
    for t in range(T):
        slots = np.flatnonzero(group.active)
        fed = states.gather((0, 0), slots, group.on_reset[slots])
        states.scatter((0, 0), slots, fed + 1.0)
        fed_agent_1.append(float(fed[list(slots).index(1), 0, 0]) if 1 in slots else None)
        reply = {"action": np.zeros(len(slots), np.int64), "rnn_state": fed}
        action = buf.record_policy(reply, 0, group.active, group.on_reset)
        group.step(action, buf, episodes)
    return buf, fed_agent_1


def test_a_late_joiner_sees_a_zero_state_at_its_first_step_of_every_episode():
    buf, fed = rollout()
    # episodes of 6 steps; agent_1 acts at steps 3, 4, 5 of each: fed states 0, 1, 2 every episode
    # (without the fix its state carried over: 3, 4, 5 in the second episode)
    assert fed == [None, None, None, 0.0, 1.0, 2.0] * 3
    # on_reset of agent_1 stays True from the reset until its first active step (inclusive)
    assert buf.on_reset[:, 1].tolist() == [True, True, True, True, False, False] * 3
    assert buf.on_reset[:, 0].tolist() == [True, False, False, False, False, False] * 3
    assert buf.active[:, 1].tolist() == [False, False, False, True, True, True] * 3


def test_training_replays_the_same_zero_state_at_the_join_step():
    buf, _ = rollout()
    env = PettingZooEnv(LateJoinParallel(), "late")
    algo = MAPPO(MAPPOConfig(recurrent=True, chunk_length=18, hidden=8, obs_norm=False), env.spec, 0)
    policy = algo.policy
    obs = {k: torch.as_tensor(v[:18]) for k, v in buf.obs.items()}
    state0 = torch.ones(2, *policy.state_shape)  # a non-zero state carried in from before the sample
    out = policy.evaluate(obs, torch.as_tensor(buf.action), state0, torch.as_tensor(buf.on_reset),
                          torch.as_tensor(buf.active))
    fed = out["fed"][:, 1]  # agent_1's slot: [18, 2k, H]
    for join in (3, 9, 15):
        assert torch.count_nonzero(fed[join]) == 0
    # before its first join the slot is reset and held at zero too; after acting it is not zero
    assert torch.count_nonzero(fed[0]) == 0 and torch.count_nonzero(fed[4]) > 0
