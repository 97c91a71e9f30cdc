"""V-trace (arXiv 1802.01561, eq. 1 and section 4.2) against values worked out by hand.

Each expected number is derived in the comment next to it. Arrays are time-major [T, B].
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.plugins.algorithms.vtrace import vtrace


def col(*xs, dtype=np.float64) -> np.ndarray:
    """A [T, 1] column."""
    return np.array(xs, dtype=dtype)[:, None]


def flags(T: int, *steps: int) -> np.ndarray:
    out = np.zeros((T, 1), bool)
    out[list(steps), 0] = True
    return out


BACKENDS = ["numpy", "torch"]


def run(backend: str, behaviour, target, rewards, values, terminated, truncated, **kw):
    """Call vtrace with numpy arrays or torch tensors; results back as numpy."""
    if backend == "torch":
        conv = {k: torch.as_tensor(v) for k, v in kw.items() if isinstance(v, np.ndarray)}
        kw = {**kw, **conv}
        behaviour, target, rewards, values, terminated, truncated = (
            torch.as_tensor(x) for x in (behaviour, target, rewards, values, terminated, truncated))
    out = vtrace(behaviour, target, rewards, values, terminated, truncated, **kw)
    return tuple(np.asarray(x) for x in out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_policy_targets_are_the_n_step_bootstrapped_returns(backend):
    # 4 steps, gamma 0.9, pi = mu, rho_bar = c_bar = lambda = 1: rho_t = c_t = 1.
    logp = col(math.log(0.5), math.log(0.25), math.log(0.8), math.log(0.1))
    rewards = col(1.0, 2.0, 3.0, 4.0)
    values = col(0.5, 1.0, 1.5, 2.0, 10.0)  # row 4: V(x_4), the bootstrap
    vs, adv, rhos = run(backend, logp, logp, rewards, values, flags(4), flags(4), gamma=0.9)
    # n-step returns to the end of the sample, bootstrapped with V(x_4) = 10:
    # v_3 = 4 + 0.9 * 10                                              = 13
    # v_2 = 3 + 0.9 * 4 + 0.81 * 10                                   = 14.7
    # v_1 = 2 + 0.9 * 3 + 0.81 * 4 + 0.729 * 10                       = 15.23
    # v_0 = 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 4 + 0.6561 * 10          = 14.707
    assert vs[:, 0] == pytest.approx([14.707, 15.23, 14.7, 13.0], abs=1e-12)
    # A_s = r_s + gamma * v_{s+1} - V(x_s), with v_4 = V(x_4) = 10:
    # A_3 = 4 + 9 - 2 = 11;  A_2 = 3 + 11.7 - 1.5 = 13.2;
    # A_1 = 2 + 13.23 - 1 = 14.23;  A_0 = 1 + 13.707 - 0.5 = 14.207
    assert adv[:, 0] == pytest.approx([14.207, 14.23, 13.2, 11.0], abs=1e-12)
    assert rhos[:, 0] == pytest.approx([1.0, 1.0, 1.0, 1.0])


# Off-policy data for the clipping tests: gamma 0.9, two steps,
# pi/mu = 0.5/0.25 = 2 at step 0 and 0.4/0.8 = 0.5 at step 1.
OFF_BEHAVIOUR = col(math.log(0.25), math.log(0.8))
OFF_TARGET = col(math.log(0.5), math.log(0.4))
OFF_REWARDS = col(1.0, 0.0)
OFF_VALUES = col(1.0, 2.0, 4.0)  # V(x_0), V(x_1), bootstrap V(x_2)
# Step 1 is the same in every case (rho_1 = c_1 = 0.5, below every truncation level):
# delta_1 = 0.5 * (0 + 0.9 * 4 - 2) = 0.8;  v_1 = 2 + 0.8 = 2.8;  A_1 = 0.5 * (0 + 0.9 * 4 - 2) = 0.8


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rho_bar, c_bar, v0, a0, rho0", [
    # rho_bar = c_bar = 1 (the default): rho_0 = c_0 = min(1, 2) = 1
    #   delta_0 = 1 * (1 + 0.9 * 2 - 1) = 1.8;  v_0 = 1 + 1.8 + 0.9 * 1 * (2.8 - 2) = 3.52
    #   A_0 = 1 * (1 + 0.9 * 2.8 - 1) = 2.52
    (1.0, 1.0, 3.52, 2.52, 1.0),
    # no truncation (levels 100): rho_0 = c_0 = 2
    #   delta_0 = 2 * 1.8 = 3.6;  v_0 = 1 + 3.6 + 0.9 * 2 * 0.8 = 6.04;  A_0 = 2 * 2.52 = 5.04
    (100.0, 100.0, 6.04, 5.04, 2.0),
    # only c truncated (rho_bar 2, c_bar 1): rho_0 = 2, c_0 = 1
    #   v_0 = 1 + 3.6 + 0.9 * 1 * 0.8 = 5.32;  A_0 = 5.04
    (2.0, 1.0, 5.32, 5.04, 2.0),
])
def test_clipping_of_rho_and_c_changes_the_targets(backend, rho_bar, c_bar, v0, a0, rho0):
    vs, adv, rhos = run(backend, OFF_BEHAVIOUR, OFF_TARGET, OFF_REWARDS, OFF_VALUES, flags(2), flags(2),
                        gamma=0.9, rho_bar=rho_bar, c_bar=c_bar)
    assert vs[:, 0] == pytest.approx([v0, 2.8], abs=1e-12)
    assert adv[:, 0] == pytest.approx([a0, 0.8], abs=1e-12)
    assert rhos[:, 0] == pytest.approx([rho0, 0.5], abs=1e-12)


def test_lambda_discounts_the_traces():
    # rho_bar = c_bar = 1, lambda = 0.5: c_0 = 0.5 * min(1, 2) = 0.5, c_1 = 0.5 * 0.5 = 0.25
    # v_1 = 2.8 (no trace after the last step);  v_0 = 1 + 1.8 + 0.9 * 0.5 * 0.8 = 3.16
    vs, adv, _ = run("numpy", OFF_BEHAVIOUR, OFF_TARGET, OFF_REWARDS, OFF_VALUES, flags(2), flags(2),
                     gamma=0.9, vtrace_lambda=0.5)
    assert vs[:, 0] == pytest.approx([3.16, 2.8], abs=1e-12)
    assert adv[:, 0] == pytest.approx([2.52, 0.8], abs=1e-12)  # A uses v_{s+1}, not the trace


@pytest.mark.parametrize("backend", BACKENDS)
def test_terminated_and_truncated_steps_inside_one_sample(backend):
    # gamma 0.5, on-policy. Episode A: steps 0-1, terminated at 1. Episode B: steps 2-3,
    # truncated at 3 with V(final obs) = 8. Episode C: step 4, cut by the sample end,
    # bootstrap V(x_5) = 6. Rows 2 and 4 of the observations are reset observations: their
    # values (30, 50) must never reach episodes A and B.
    logp = col(-1.0, -2.0, -0.5, -0.7, -1.5)
    rewards = col(1.0, 2.0, 3.0, 4.0, 5.0)
    values = col(10.0, 20.0, 30.0, 40.0, 50.0, 6.0)
    vs, adv, _ = run(backend, logp, logp, rewards, values, flags(5, 1), flags(5, 3), gamma=0.5,
                     final_index=np.array([[3, 0]], np.int64), final_values=np.array([8.0]))
    # v_4 = 5 + 0.5 * 6 = 8          (sample end: bootstrap row)
    # v_3 = 4 + 0.5 * 8 = 8          (truncated: V(final obs) = 8, not V(x_4) = 50 nor v_4)
    # v_2 = 3 + 0.5 * v_3 = 7
    # v_1 = 2                        (terminated: nothing bootstrapped, V(x_2) = 30 ignored)
    # v_0 = 1 + 0.5 * 2 = 2
    assert vs[:, 0] == pytest.approx([2.0, 2.0, 7.0, 8.0, 8.0], abs=1e-12)
    # A_s = r_s + 0.5 * v_{s+1} - V(x_s), v_{s+1} as above (0 after 1, 8 after 3, 6 after 4):
    # A_0 = 1 + 1 - 10 = -8; A_1 = 2 - 20 = -18; A_2 = 3 + 4 - 30 = -23; A_3 = 4 + 4 - 40 = -32; A_4 = 5 + 3 - 50 = -42
    assert adv[:, 0] == pytest.approx([-8.0, -18.0, -23.0, -32.0, -42.0], abs=1e-12)


def test_termination_wins_over_truncation_and_needs_no_final_value():
    logp = col(0.0, 0.0)
    both = flags(2, 0)
    vs, adv, _ = run("numpy", logp, logp, col(1.0, 1.0), col(5.0, 7.0, 9.0), both, both, gamma=0.5)
    # step 0: terminated and truncated -> terminated: v_0 = 1;  step 1: v_1 = 1 + 0.5 * 9 = 5.5
    assert vs[:, 0] == pytest.approx([1.0, 5.5])
    assert adv[:, 0] == pytest.approx([1.0 - 5.0, 5.5 - 7.0])


def test_off_policy_trace_is_cut_at_truncation():
    # gamma 0.5; pi/mu = 2 at both steps (rho = c = 1 after truncation at 1);
    # truncated at step 0 (final value 4), then a new episode at step 1 with bootstrap 2.
    behaviour, target = col(math.log(0.25), math.log(0.25)), col(math.log(0.5), math.log(0.5))
    vs, adv, _ = run("numpy", behaviour, target, col(1.0, 1.0), col(3.0, 100.0, 2.0), flags(2), flags(2, 0),
                     gamma=0.5, final_value=col(4.0, 0.0))
    # v_1 = 100 + 1 * (1 + 0.5 * 2 - 100) = 2;  v_0 = 3 + 1 * (1 + 0.5 * 4 - 3) = 3 (no trace from step 1)
    assert vs[:, 0] == pytest.approx([3.0, 2.0])
    # A_0 = 1 * (1 + 0.5 * 4 - 3) = 0;  A_1 = 1 + 1 - 100 = -98
    assert adv[:, 0] == pytest.approx([0.0, -98.0])


def test_inactive_steps_are_skipped():
    # gamma 0.5, on-policy; step 1 inactive: its reward (77) and value (99) are ignored.
    logp = col(0.0, 0.0, 0.0)
    active = col(True, False, True, dtype=bool)
    vs, adv, rhos = run("numpy", logp, logp, col(1.0, 77.0, 1.0), col(1.0, 99.0, 2.0, 4.0), flags(3), flags(3),
                        gamma=0.5, active=active)
    # v_2 = 1 + 0.5 * 4 = 3;  v_1 = V(x_1) = 99 (inactive);  v_0 = 1 + 0.5 * v_2 = 2.5
    assert vs[:, 0] == pytest.approx([2.5, 99.0, 3.0])
    # A_0 = 1 + 0.5 * 3 - 1 = 1.5;  A_1 = 0;  A_2 = 1 + 2 - 2 = 1
    assert adv[:, 0] == pytest.approx([1.5, 0.0, 1.0])
    assert rhos[:, 0] == pytest.approx([1.0, 0.0, 1.0])


def test_errors_name_the_problem():
    logp = col(0.0, 0.0)
    with pytest.raises(ValueError, match="truncated but neither"):
        vtrace(logp, logp, col(1.0, 1.0), col(0.0, 0.0, 0.0), flags(2), flags(2, 1), gamma=0.9)
    with pytest.raises(ValueError, match=r"truncated step \(t=1, b=0\) has no row"):
        vtrace(logp, logp, col(1.0, 1.0), col(0.0, 0.0, 0.0), flags(2), flags(2, 1), gamma=0.9,
               final_index=np.array([[0, 0]]), final_values=np.array([1.0]))
    with pytest.raises(ValueError, match="'values' has shape"):
        vtrace(logp, logp, col(1.0, 1.0), col(0.0, 0.0), flags(2), flags(2), gamma=0.9)
    with pytest.raises(ValueError, match="rho_bar"):
        vtrace(logp, logp, col(1.0, 1.0), col(0.0, 0.0, 0.0), flags(2), flags(2), gamma=0.9, rho_bar=0.0)


# ------------------------------------------------------------------------- property test
def reference_trajectory(logp_b, logp_t, r, v, boot, gamma, rho_bar, c_bar, lam):
    """Eq. 1 written as the sum, for one trajectory without boundaries inside it.

    ``v`` [n] values of its steps, ``boot`` the value after its last step (0 after a
    termination, the final observation's value after a truncation, else the bootstrap row).
    """
    n = len(r)
    ratio = np.exp(np.asarray(logp_t) - np.asarray(logp_b))
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
    v_next = np.append(v[1:], boot)
    delta = rho * (r + gamma * v_next - v)
    vs = np.array([v[s] + sum(gamma ** (t - s) * np.prod(c[s:t]) * delta[t] for t in range(s, n))
                   for s in range(n)])
    vs_next = np.append(vs[1:], boot)
    return vs, rho * (r + gamma * vs_next - v)


@st.composite
def batches(draw):
    T = draw(st.integers(1, 7))
    B = draw(st.integers(1, 4))
    floats = st.floats(-3, 3, allow_nan=False)

    def grid(strategy, rows=T):
        return np.array(draw(st.lists(st.lists(strategy, min_size=B, max_size=B), min_size=rows, max_size=rows)))

    return dict(
        logp_b=grid(st.floats(-3, 0)), logp_t=grid(st.floats(-3, 0)), rewards=grid(floats),
        values=grid(floats, T + 1), final=grid(floats),
        terminated=grid(st.booleans()).astype(bool), truncated=grid(st.booleans()).astype(bool),
        active=grid(st.sampled_from([True, True, True, False])).astype(bool),
        gamma=draw(st.floats(0, 1)), rho_bar=draw(st.floats(0.1, 3)), c_bar=draw(st.floats(0.1, 3)),
        lam=draw(st.floats(0, 1)),
    )


@settings(max_examples=200, deadline=None)
@given(batches())
def test_batch_equals_each_trajectory_computed_separately(b):
    T, B = b["rewards"].shape
    params = dict(gamma=b["gamma"], rho_bar=b["rho_bar"], c_bar=b["c_bar"], vtrace_lambda=b["lam"])
    vs, adv, _ = vtrace(b["logp_b"], b["logp_t"], b["rewards"], b["values"], b["terminated"], b["truncated"],
                        final_value=b["final"], active=b["active"], **params)
    expect_vs, expect_adv = b["values"][:T].copy(), np.zeros((T, B))
    for col_ in range(B):
        # Cut the column into trajectories: runs of active steps ending at a flag or at the sample end.
        steps: list[int] = []
        for t in range(T):
            if not b["active"][t, col_]:
                continue
            steps.append(t)
            term, trunc = b["terminated"][t, col_], b["truncated"][t, col_]
            if term or trunc or t == max(np.flatnonzero(b["active"][:, col_])):
                boot = 0.0 if term else b["final"][t, col_] if trunc else b["values"][T, col_]
                idx = np.array(steps)
                sl = (idx, col_)
                # 1) V-trace itself on the trajectory alone, as a [n, 1] sample without flags
                one = vtrace(b["logp_b"][sl][:, None], b["logp_t"][sl][:, None], b["rewards"][sl][:, None],
                             np.append(b["values"][sl], boot)[:, None], np.zeros((len(idx), 1), bool),
                             np.zeros((len(idx), 1), bool), **params)
                # 2) eq. 1 as the explicit sum
                ref_vs, ref_adv = reference_trajectory(b["logp_b"][sl], b["logp_t"][sl], b["rewards"][sl],
                                                       b["values"][sl], boot, b["gamma"], b["rho_bar"],
                                                       b["c_bar"], b["lam"])
                np.testing.assert_allclose(one.vs[:, 0], ref_vs, rtol=1e-9, atol=1e-9)
                np.testing.assert_allclose(one.pg_advantages[:, 0], ref_adv, rtol=1e-9, atol=1e-9)
                expect_vs[sl], expect_adv[sl] = ref_vs, ref_adv
                steps = []
    np.testing.assert_allclose(vs, expect_vs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(adv, expect_adv, rtol=1e-9, atol=1e-9)
