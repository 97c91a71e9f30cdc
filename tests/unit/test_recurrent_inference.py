"""The policy worker's recurrent-state bookkeeping, with a policy whose state counts steps."""
import numpy as np
import torch

from tests.unit.fakes import Counter, FakeServer
from zoo.core.workers.actor import EnvGroup, SampleBuffer
from zoo.core.workers.policy import RecurrentStates, _answer


class CountingPolicy(torch.nn.Module):
    """h_t = h_{t-1} + 1 with h_0 = 0; the action is always 0."""

    state_shape = (1,)

    def act(self, obs, state=None, deterministic=False):
        n = next(iter(obs.values())).shape[0]
        return {"action": torch.zeros(n, dtype=torch.int64), "state": state + 1}


def request(group, g):
    slots = np.flatnonzero(group.active)
    return ({"obs": {k: v[slots] for k, v in group.obs.items()}, "slot": slots,
             "on_reset": group.on_reset[slots]}, {"request_id": 0, "rows": int(slots.size), "group": g})


def test_states_fed_reset_at_episode_start_and_are_stored_in_the_sample():
    # One env whose episodes end after 3 steps; 6 steps: the states fed are 0, 1, 2, 0, 1, 2.
    group = EnvGroup([Counter(terminate=True)], [0])
    buf = SampleBuffer(6, group.obs)
    states, server = RecurrentStates((1,)), FakeServer()
    for _ in range(6):
        bundle, meta = request(group, 0)
        _answer(CountingPolicy(), server, [(7, bundle, meta)], version=0, device="cpu", states=states)
        reply = server.replies[-1][1]
        buf.record_policy(reply, 0, group.active, group.on_reset)
        group.step(reply["action"], buf, [])
    sample = buf.bundle()
    assert sample["rnn_state"][:, 0, 0].tolist() == [0, 1, 2, 0, 1, 2]
    assert sample["on_reset"][:, 0].tolist() == [True, False, False, True, False, False]


def test_states_never_mix_between_actors_groups_or_slots_when_served_out_of_order():
    states, server = RecurrentStates((1,)), FakeServer()
    obs = {"obs": np.zeros((2, 1), np.float32)}
    reqs = {(c, g): ({"obs": obs, "slot": np.array([0, 1]), "on_reset": np.array([False, False])},
                     {"request_id": 10 * c + g, "rows": 2, "group": g}) for c in (0, 1) for g in (0, 1)}
    # Actor 0 group 0 is served three times, actor 1 group 1 once, in interleaved batches.
    order = [[(0, 0), (1, 1)], [(0, 0)], [(1, 0), (0, 0)]]
    for batch in order:
        _answer(CountingPolicy(), server, [(c, *reqs[(c, g)]) for c, g in reversed(batch)], 0, "cpu", states)
    fed = [(c, m["request_id"], b["rnn_state"][:, 0].tolist()) for c, b, m in server.replies]
    assert fed == [(1, 11, [0, 0]), (0, 0, [0, 0]), (0, 0, [1, 1]), (0, 0, [2, 2]), (1, 10, [0, 0])]
    assert states.table[(0, 0)][:, 0].tolist() == [3, 3]
    assert states.table[(1, 1)][:, 0].tolist() == [1, 1]
    assert (0, 1) not in states.table
