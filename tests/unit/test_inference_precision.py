"""policy.precision: the inference forward pass in bfloat16, replies in float32."""
import numpy as np
import pytest
import torch

from zoo.core.workers.policy import _answer, inference_autocast
from tests.unit.test_recurrent_inference import FakeServer


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
    assert (client, meta) == (3, {"request_id": 5, "policy_version": 9})
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
