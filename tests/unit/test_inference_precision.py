"""policy.precision: the inference forward pass in bfloat16, replies in float32."""
import numpy as np
import pytest
import torch

from tests.unit.fakes import FakeServer
from zoo.core.workers.policy import _answer, inference_autocast


class LinearPolicy(torch.nn.Module):
    """logp = x @ w with w = [1, 1/3]: exact in float32, rounded in bfloat16."""

    state_shape = None

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[1.0], [1 / 3]]))

    def act(self, obs, state=None, deterministic=False):
        logp = (obs["x"] @ self.w)[:, 0]
        return {"action": torch.zeros(logp.shape[0], dtype=torch.int64), "logp": logp}


def answer(precision):
    server = FakeServer()
    bundle = {"obs": {"x": np.array([[1.0, 1.0], [2.0, 3.0]], np.float32)}}
    with torch.no_grad(), inference_autocast(precision, "cpu"):
        _answer(LinearPolicy(), server, [(3, bundle, {"request_id": 5, "rows": 2})], version=9, device="cpu")
    (client, reply, meta), = server.replies
    assert (client, meta) == (3, {"request_id": 5, "policy_version": 9, "policy": 0})
    return reply


def test_float32_replies_are_exact():
    reply = answer("float32")
    assert reply["logp"].dtype == np.float32
    assert reply["logp"].tolist() == [np.float32(1 + np.float32(1 / 3)), 3.0]


def test_bfloat16_forward_pass_replies_in_float32():
    reply = answer("bfloat16")
    # The product ran in bfloat16 (1/3 -> 0.333984375, 8 mantissa bits; 1.333984375 -> 1.3359375),
    # and came back as float32 because numpy has no bfloat16.
    assert reply["logp"].dtype == np.float32
    assert reply["logp"].tolist() == [1.3359375, 3.0]


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="policy.precision"):
        inference_autocast("float16", "cpu")


def test_weights_cast_once_give_the_same_bfloat16_results_and_new_versions_load_into_them():
    from zoo.core.workers.policy import cast_for_precision, load_parameters

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    cast = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    cast.load_state_dict(net.state_dict())
    cast_for_precision(cast, "bfloat16")
    assert [p.dtype for p in cast.parameters()] == [torch.bfloat16] * 2 + [torch.float32] * 2 + [torch.bfloat16] * 2
    x = torch.tensor([[0.1, -2.0, 3.3], [1.0, 0.5, -0.25]])
    with torch.no_grad(), inference_autocast("bfloat16", "cpu"):
        assert torch.equal(cast(x), net(x))  # autocast would have cast the very same weights
    bundle = {k: v.numpy() for k, v in net.state_dict().items()}
    bundle["0.weight"] = np.full((4, 3), 1 / 3, np.float32)
    load_parameters(cast, bundle)
    assert cast[0].weight.dtype == torch.bfloat16
    assert cast[0].weight[0, 0].item() == 0.333984375  # 1/3 rounded to bfloat16's 8 mantissa bits
    plain = torch.nn.Linear(2, 2)
    cast_for_precision(plain, "float32")
    assert plain.weight.dtype == torch.float32
