"""Masked action distributions, by hand (issue 15)."""
import math

import pytest
import torch
from gymnasium import spaces

from zoo.plugins.algorithms.distributions import (DiscreteHead, MultiBinaryHead, MultiDiscreteHead,
                                                  categorical_logp_entropy, make_head)


def test_masked_categorical_probabilities_log_probs_and_entropy():
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.tensor([[True, False, True]])
    # legal: actions 0 and 2: pi(0) = e^1 / (e^1 + e^3) = 1 / (1 + e^2), pi(2) = e^2 / (1 + e^2), pi(1) = 0
    p0, p2 = 1 / (1 + math.e ** 2), math.e ** 2 / (1 + math.e ** 2)   # 0.1192029, 0.8807971
    for a, expected in ((0, math.log(p0)), (2, math.log(p2))):        # -2.1269280, -0.1269280
        logp, entropy = categorical_logp_entropy(logits, torch.tensor([a]), mask)
        assert logp.item() == pytest.approx(expected, abs=1e-6)
        assert entropy.item() == pytest.approx(-(p0 * math.log(p0) + p2 * math.log(p2)), abs=1e-6)  # 0.3653391
    logp1, _ = categorical_logp_entropy(logits, torch.tensor([1]), mask)
    assert logp1.item() < -1e30  # an illegal action has probability 0
    # unmasked, for comparison: H of softmax(1, 2, 3) = 0.8323955
    q = torch.softmax(logits, -1)[0]
    _, h = categorical_logp_entropy(logits, torch.tensor([0]), None)
    assert h.item() == pytest.approx(float(-(q * q.log()).sum()), abs=1e-6)


def test_masked_sampling_never_picks_an_illegal_action_and_the_mode_is_the_best_legal():
    head = DiscreteHead(spaces.Discrete(3))
    logits = torch.tensor([[1.0, 2.0, 3.0]]).repeat(2000, 1)
    mask = torch.tensor([[True, True, False]]).repeat(2000, 1)
    torch.manual_seed(0)
    a = head.sample(logits, False, mask)
    assert set(a.tolist()) == {0, 1}
    assert head.sample(logits[:1], True, mask[:1]).tolist() == [1]  # argmax over legal: logit 2


def test_a_row_that_allows_nothing_is_left_unmasked_and_finite():
    logits = torch.tensor([[0.0, 0.0]], requires_grad=True)
    logp, entropy = categorical_logp_entropy(logits, torch.tensor([1]), torch.tensor([[False, False]]))
    assert logp.item() == pytest.approx(math.log(0.5)) and entropy.item() == pytest.approx(math.log(2))
    (logp + entropy).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_masked_gradients_are_finite_and_zero_for_illegal_logits():
    logits = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    logp, entropy = categorical_logp_entropy(logits, torch.tensor([2]), torch.tensor([[True, False, True]]))
    (logp + entropy).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 1].item() == 0.0


def test_multidiscrete_masks_split_per_entry():
    head = MultiDiscreteHead(spaces.MultiDiscrete([2, 3]))
    out = torch.zeros(1, 5)
    mask = torch.tensor([[True, False, False, True, True]])  # entry 0: only 0; entry 1: 1 or 2
    logp, entropy = head.log_prob_entropy(out, torch.tensor([[0, 2]]), mask)
    # log(1) + log(1/2); entropy 0 + ln 2
    assert logp.item() == pytest.approx(math.log(0.5)) and entropy.item() == pytest.approx(math.log(2))
    torch.manual_seed(0)
    a = head.sample(out.repeat(500, 1), False, mask.repeat(500, 1))
    assert set(a[:, 0].tolist()) == {0} and set(a[:, 1].tolist()) == {1, 2}


def test_multibinary_is_one_two_way_categorical_per_bit():
    head = make_head(spaces.MultiBinary(3))
    assert isinstance(head, MultiBinaryHead) and head.num_outputs == 6
    out = torch.zeros(4, 6)
    a = head.sample(out)
    assert a.shape == (4, 3) and set(a.flatten().tolist()) <= {0, 1}
    logp, entropy = head.log_prob_entropy(out, a)
    assert logp.tolist() == pytest.approx([3 * math.log(0.5)] * 4) and entropy.tolist() == pytest.approx([3 * math.log(2)] * 4)


def test_sampling_draws_what_torch_categorical_draws_for_the_same_generator_state():
    """categorical_sample skips torch.distributions.Categorical's per-call object, not its maths:
    same probabilities, same multinomial draw, so the same actions for the same seed."""
    from zoo.plugins.algorithms.distributions import categorical_sample

    logits = torch.randn(64, 6, generator=torch.Generator().manual_seed(3))
    mask = torch.rand(64, 6, generator=torch.Generator().manual_seed(4)) > 0.3
    for m in (None, mask):
        torch.manual_seed(7)
        ours = categorical_sample(logits, m, False)
        torch.manual_seed(7)
        z = logits if m is None else logits.masked_fill(~(m | ~m.any(-1, keepdim=True)), torch.finfo(torch.float32).min)
        theirs = torch.distributions.Categorical(logits=z).sample()
        assert ours.dtype == torch.int64 and ours.shape == (64,)
        assert torch.equal(ours, theirs)
    assert categorical_sample(torch.zeros(0, 3), None, False).shape == (0,)


def test_log_prob_is_the_first_output_of_log_prob_entropy_for_every_head():
    out = torch.tensor([[1.0, 2.0, 3.0, 0.5, -0.5]])
    # Discrete(3, start=1): action 3 is index 2: log(e^3 / (e^1 + e^2 + e^3)) = -0.4076059
    head = DiscreteHead(spaces.Discrete(3, start=1))
    assert head.log_prob(out[:, :3], torch.tensor([3])).item() == pytest.approx(-0.4076059, abs=1e-6)
    # MultiDiscrete([3, 2]): index 0 of the first part (-2.4076059) + index 1 of the second
    # (log(e^-0.5 / (e^0.5 + e^-0.5)) = -1.3132617): -3.7208676
    md = MultiDiscreteHead(spaces.MultiDiscrete([3, 2]))
    action = torch.tensor([[0, 1]])
    assert md.log_prob(out, action).item() == pytest.approx(-3.7208676, abs=1e-6)
    assert md.log_prob(out, action).item() == md.log_prob_entropy(out, action)[0].item()
    box = make_head(spaces.Box(-1, 1, (2,)))
    a = torch.tensor([[0.3, -0.2]])
    assert box.log_prob(out[:, :2], a).item() == box.log_prob_entropy(out[:, :2], a)[0].item()
