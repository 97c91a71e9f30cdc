"""GAE (zoo.plugins.algorithms.returns.gae) against values worked out by hand."""
import numpy as np
import pytest
import torch

from zoo.plugins.algorithms.returns import gae

F, T_ = False, True


def col(*xs, dtype=np.float64):
    """A [T, 1] column."""
    return np.array(xs, dtype=dtype).reshape(-1, 1)


def three_step(terminated, truncated, next_row_value=0.0, **kw):
    # Rewards 1, 1, 1; gamma 0.5, lambda 1; V(s_t) = 0 for the episode's observations, the
    # next row (the auto-reset observation of the next episode) has value next_row_value.
    # Returns at t=0: truncated 1 + 0.5 + 0.25 + 0.125 * V(final) = 1.75 + 0.125 * 2 = 2.0;
    # terminated 1 + 0.5 + 0.25 = 1.75.
    return gae(col(1, 1, 1), col(0, 0, 0, next_row_value), col(F, F, terminated, dtype=bool),
               col(F, F, truncated, dtype=bool), gamma=0.5, gae_lambda=1.0, **kw)


def final_at_end(v):
    return np.array([[0.0], [0.0], [v]])


def test_truncated_bootstraps_from_final_observation():
    adv, ret = three_step(False, True, final_value=final_at_end(2.0))
    assert ret[0, 0] == pytest.approx(2.0, abs=1e-12)
    assert ret[:, 0] == pytest.approx([2.0, 2.0, 2.0], abs=1e-12)  # 1 + .5*2, 1 + .5*(1 + .5*2) ...


def test_terminated_does_not_bootstrap():
    adv, ret = three_step(True, False)
    assert ret[:, 0] == pytest.approx([1.75, 1.5, 1.0], abs=1e-12)


def test_termination_wins_when_both_flags_set():
    adv, ret = three_step(True, True, final_value=final_at_end(2.0))
    assert ret[0, 0] == pytest.approx(1.75, abs=1e-12)


def test_truncated_ignores_reset_observation_in_next_row():
    adv, ret = three_step(False, True, next_row_value=10.0, final_value=final_at_end(2.0))
    assert ret[0, 0] == pytest.approx(2.0, abs=1e-12)


def test_final_index_form_equals_dense_form():
    adv, ret = three_step(False, True, next_row_value=10.0,
                          final_index=np.array([[2, 0]]), final_values=np.array([2.0]))
    assert ret[0, 0] == pytest.approx(2.0, abs=1e-12)


def test_torch_input_gives_torch_output():
    adv, ret = gae(torch.ones(3, 1, dtype=torch.float64), torch.tensor([[0.0], [0.0], [0.0], [10.0]], dtype=torch.float64),
                   torch.zeros(3, 1, dtype=torch.bool), torch.tensor([[False], [False], [True]]),
                   gamma=0.5, gae_lambda=1.0, final_index=torch.tensor([[2, 0]]), final_values=torch.tensor([2.0]))
    assert isinstance(ret, torch.Tensor)
    assert ret[0, 0].item() == pytest.approx(2.0, abs=1e-12)


def test_two_step_td0_targets():
    # A -> B, terminated after B; rewards 0, 1; gamma 0.95, lambda 0; V(A)=0.3, V(B)=0.8.
    # target(A) = 0 + 0.95 * V(B) = 0.76; target(B) = 1 (no bootstrap).
    adv, ret = gae(col(0.0, 1.0), col(0.3, 0.8, 123.0), col(F, T_, dtype=bool), col(F, F, dtype=bool),
                   gamma=0.95, gae_lambda=0.0)
    assert ret[:, 0] == pytest.approx([0.76, 1.0], abs=1e-12)
    assert adv[:, 0] == pytest.approx([0.46, 0.2], abs=1e-12)


def test_nothing_flows_across_episode_boundaries():
    # Column 0: episode 1 = steps 0-1 (terminated at 1), episode 2 = steps 2-3 (cut by the
    # sample end, bootstraps from row 4). Column 1: truncated at step 1, final value 4.
    # gamma 0.5, lambda 1, all values 0 except the bootstrap row (V = 8) and the reset
    # observation at row 2 of column 1 (V = 100, must never leak into steps 0-1).
    r = np.array([[1.0, 1.0], [2.0, 2.0], [4.0, 0.0], [8.0, 0.0]])
    v = np.zeros((5, 2))
    v[4] = 8.0
    v[2, 1] = 100.0
    term = np.zeros((4, 2), bool)
    term[1, 0] = True
    trunc = np.zeros((4, 2), bool)
    trunc[1, 1] = True
    adv, ret = gae(r, v, term, trunc, gamma=0.5, gae_lambda=1.0,
                   final_index=np.array([[1, 1]]), final_values=np.array([4.0]))
    # column 0: t3 = 8 + .5*8 = 12; t2 = 4 + .5*12 = 10; t1 = 2; t0 = 1 + .5*2 = 2
    assert ret[:, 0] == pytest.approx([2.0, 2.0, 10.0, 12.0], abs=1e-12)
    # column 1: t1 = 2 + .5*4 = 4; t0 = 1 + .5*4 = 3; t2, t3: rewards 0, bootstrap 8:
    # t3 = 0 + .5*8 = 4, t2 = 0 + .5*4 = 2; advantage at t2 = 2 - 100 = -98
    assert ret[:, 1] == pytest.approx([3.0, 4.0, 2.0, 4.0], abs=1e-12)
    assert adv[2, 1] == pytest.approx(-98.0, abs=1e-12)


def test_inactive_steps_are_skipped():
    # Column of 4 steps, step 1 inactive (its reward 1000 and value 1000 are ignored):
    # the scan links step 0 directly to step 2. gamma 0.5, lambda 1, V = 0 elsewhere,
    # bootstrap row V = 16.
    r = col(1.0, 1000.0, 2.0, 4.0)
    v = col(0.0, 1000.0, 0.0, 0.0, 16.0)
    active = col(T_, F, T_, T_, dtype=bool)
    none = col(F, F, F, F, dtype=bool)
    adv, ret = gae(r, v, none, none, gamma=0.5, gae_lambda=1.0, active=active)
    # t3 = 4 + .5*16 = 12; t2 = 2 + .5*12 = 8; t0 = 1 + .5*8 = 5
    assert ret[:, 0] == pytest.approx([5.0, 1000.0, 8.0, 12.0], abs=1e-12)
    assert adv[1, 0] == 0.0


def test_inactive_truncated_step_needs_no_final_value():
    act = col(T_, F, dtype=bool)
    adv, ret = gae(col(1.0, 1.0), col(0.0, 0.0, 0.0), col(F, F, dtype=bool), col(F, T_, dtype=bool),
                   gamma=0.5, gae_lambda=1.0, active=act)
    assert ret[:, 0] == pytest.approx([1.0, 0.0], abs=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    ({}, "neither 'final_value'"),
    ({"final_index": np.zeros((0, 2), np.int64), "final_values": np.zeros(0)}, r"\(t=2, b=0\) has no row"),
    ({"final_value": np.zeros((3, 1)), "final_index": np.array([[2, 0]]), "final_values": np.ones(1)}, "not both"),
    ({"final_value": np.zeros((3, 2))}, "'final_value' has shape"),
])
def test_bad_final_values_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        three_step(False, True, **kwargs)


def test_bad_shapes_and_coefficients_raise():
    with pytest.raises(ValueError, match="'values' has shape"):
        gae(col(1.0), col(0.0), col(F, dtype=bool), col(F, dtype=bool), gamma=0.5, gae_lambda=1.0)
    with pytest.raises(ValueError, match="gamma"):
        gae(col(1.0), col(0.0, 0.0), col(F, dtype=bool), col(F, dtype=bool), gamma=1.5, gae_lambda=1.0)
