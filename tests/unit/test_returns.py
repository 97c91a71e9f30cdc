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


# -- decision_gae: GAE over the decisions, forced rows passed through ---------------------------

from zoo.plugins.algorithms.returns import decision_gae  # noqa: E402

# Rows d0, p1, d2, p3 (p: forced, one legal action), bootstrap row 4; gamma 0.5, lambda 0.5.
# The forced rows' values (9) must never count.
V5 = col(1, 9, 2, 9, 4)
R4 = col(0, 1, 0, -1)
NO = col(F, F, F, F, dtype=bool)


def dg(rewards=R4, values=V5, terminated=NO, truncated=NO, passive=(F, T_, F, T_, F), **kw):
    return decision_gae(rewards, values, terminated, truncated, col(*passive, dtype=bool), gamma=0.5,
                        gae_lambda=0.5, **kw)


def test_decision_gae_credits_forced_rows_rewards_to_the_decision_before_them():
    adv, ret, trained = dg()
    # d2: delta = r2 + g r3 + g^2 V4 - V2 = 0 - 0.5 + 0.25 * 4 - 2 = -1.5; A2 = delta (nothing after)
    # d0: delta = r0 + g r1 + g^2 V2 - V0 = 0 + 0.5 + 0.5 - 1 = 0; A0 = 0 + g^2 lambda A2 = 0.125 * -1.5
    assert adv[:, 0].tolist() == [-0.1875, 0.0, -1.5, 0.0]
    assert ret[:, 0].tolist() == [0.8125, 9.0, 0.5, 9.0]  # forced rows: target = value (no loss)
    assert trained[:, 0].tolist() == [True, False, True, False]


def test_decision_gae_leaves_out_a_decision_whose_bootstrap_is_a_forced_row():
    # obs[4] forced: d2 cannot be valued; V2 = 2 bootstraps d0: A0 = 0 + 0.5 + 0.25 * 2 - 1 = 0
    adv, ret, trained = dg(passive=(F, T_, F, T_, T_))
    assert adv[:, 0].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert ret[:, 0].tolist() == [1.0, 9.0, 2.0, 9.0]
    assert trained[:, 0].tolist() == [True, False, False, False]


def test_decision_gae_ends_the_sum_at_a_termination_on_a_forced_row():
    # p1 terminates (the opponent won: -1); d2 starts the next episode
    adv, ret, trained = dg(rewards=col(0, -1, 0, 1), terminated=col(F, T_, F, F, dtype=bool))
    # d2: 0 + 0.5 * 1 + 0.25 * 4 - 2 = -0.5; d0: 0 + 0.5 * -1 - 1 = -1.5 (nothing from d2)
    assert adv[:, 0].tolist() == [-1.5, 0.0, -0.5, 0.0]
    assert trained[:, 0].tolist() == [True, False, True, False]


def test_decision_gae_truncation_on_a_forced_row_bootstraps_from_its_final_observation():
    # p1 truncated, final observation a decision of value 6: d0 = 0 + 0.5 * 1 + 0.25 * 6 - 1 = 1
    adv, ret, trained = dg(truncated=col(F, T_, F, F, dtype=bool), final_value=col(0, 6, 0, 0))
    assert adv[0, 0] == 1.0 and bool(trained[0, 0])
    # the same truncation with a forced final observation: d0 cannot be valued
    adv, ret, trained = dg(truncated=col(F, T_, F, F, dtype=bool), final_value=col(0, 6, 0, 0),
                           final_passive=col(F, T_, F, F, dtype=bool))
    assert trained[:, 0].tolist() == [False, False, True, False] and adv[0, 0] == 0.0


def test_decision_gae_without_forced_rows_is_gae():
    rng = np.random.default_rng(3)
    T, B = 12, 5
    r, v = rng.normal(size=(T, B)), rng.normal(size=(T + 1, B))
    term, trunc, act = rng.random((T, B)) < 0.15, rng.random((T, B)) < 0.15, rng.random((T, B)) < 0.8
    fv = rng.normal(size=(T, B))
    a1, g1 = gae(r, v, term, trunc, gamma=0.9, gae_lambda=0.7, final_value=fv, active=act)
    a2, g2, trained = decision_gae(r, v, term, trunc, np.zeros((T + 1, B), bool), gamma=0.9, gae_lambda=0.7,
                                   final_value=fv, active=act)
    np.testing.assert_allclose(a2, a1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(g2, g1, rtol=0, atol=1e-12)
    assert (trained == act).all()


def test_decision_gae_torch_equals_numpy():
    adv, ret, trained = dg()
    t_adv, t_ret, t_trained = decision_gae(torch.tensor(R4), torch.tensor(V5), torch.tensor(NO), torch.tensor(NO),
                                           torch.tensor(col(F, T_, F, T_, F, dtype=bool)), gamma=0.5, gae_lambda=0.5)
    assert t_adv[:, 0].tolist() == adv[:, 0].tolist() and t_trained[:, 0].tolist() == trained[:, 0].tolist()


def test_decision_gae_refuses_a_passive_mask_without_the_bootstrap_row():
    with pytest.raises(ValueError, match=r"decision_gae: 'passive' has shape \(4, 1\), expected \(5, 1\)"):
        decision_gae(R4, V5, NO, NO, NO, gamma=0.5, gae_lambda=0.5)


def test_decision_gae_names_itself_in_a_final_index_error():
    with pytest.raises(ValueError, match=r"^decision_gae: 'final_index' has shape \(2,\), expected \[K, 2\]$"):
        dg(truncated=col(F, T_, F, F, dtype=bool), final_index=np.array([1, 0]), final_values=np.array([6.0]))


def test_a_nan_final_value_still_counts_as_given():
    # a truncated step whose final observation's value is nan (a diverged critic): its row is
    # present, so no "has no row in 'final_index'" error; the nan reaches the step's target
    adv, ret = gae(col(1.0), col(0.0, 0.0), col(F, dtype=bool), col(T_, dtype=bool), gamma=0.5, gae_lambda=1.0,
                   final_index=np.array([[0, 0]]), final_values=np.array([np.nan]))
    assert np.isnan(ret[0, 0])
