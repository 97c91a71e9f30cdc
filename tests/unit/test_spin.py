"""Adaptive spin-then-block (zoo.transports.sockets.spin) on a scripted clock: when it
spins, when it blocks, how long the block may wait, and the moving average it keeps."""
from __future__ import annotations

import pytest

from zoo.core.transport import TransportError
from zoo.transports.sockets import spin
from zoo.transports.sockets.spin import AdaptiveSpin, spin_budget_us


@pytest.fixture
def clock(monkeypatch):
    """time.perf_counter() of the spin module returns t, advanced by hand or per call."""
    state = {"t": 100.0, "step": 0.0}

    def perf_counter():
        state["t"] += state["step"]
        return state["t"]

    monkeypatch.setattr(spin.time, "perf_counter", perf_counter)
    yields = []
    monkeypatch.setattr(spin.os, "sched_yield", lambda: yields.append(1))
    state["yields"] = yields
    return state


def test_a_poll_that_succeeds_while_spinning_never_blocks(clock):
    s = AdaptiveSpin(100)  # 100 us
    polls = iter([None, None, "msg"])
    clock["step"] = 10e-6  # every clock read advances 10 us
    blocked = []
    got = s.wait(lambda: next(polls), lambda t: blocked.append(t), timeout=1.0)
    assert got == "msg"
    assert blocked == []
    assert len(clock["yields"]) == 3  # one yield before each poll
    # Reads: start, 3 loop checks, the final one: the wait took 4 x 10 us = 40 us.
    assert s.wait_avg_s == pytest.approx(0.25 * 40e-6)


def test_spinning_gives_up_after_the_budget_and_blocks_for_the_rest_of_the_timeout(clock):
    s = AdaptiveSpin(100)
    clock["step"] = 30e-6
    polls, blocked = [], []
    got = s.wait(lambda: polls.append(1), lambda t: blocked.append(t) or "late", timeout=0.01)
    assert got == "late"
    # Clock reads at 30, 60, 90 us are inside the 100 us budget (3 polls); 120 us is not.
    assert len(polls) == 3
    assert blocked == [pytest.approx(0.01 - 150e-6)]  # timeout minus what spinning used (read at 150 us)


def test_long_waits_stop_the_spinning_and_short_ones_bring_it_back(clock):
    s = AdaptiveSpin(100)
    s.wait_avg_s = 250e-6  # over 2 budgets: block at once
    polls = []

    def block(t):
        clock["t"] += 40e-6  # this wait took 40 us
        return "msg"

    assert s.wait(lambda: polls.append(1), block, timeout=1.0) == "msg"
    assert polls == []
    assert s.wait_avg_s == pytest.approx(250e-6 + 0.25 * (40e-6 - 250e-6))  # 197.5 us: under 200
    s.wait(lambda: polls.append(1) or "msg", block, timeout=1.0)
    assert polls == [1]  # spins again


def test_a_zero_budget_always_blocks(clock):
    s = AdaptiveSpin(0)
    polls, blocked = [], []
    s.wait(lambda: polls.append(1), lambda t: blocked.append(t), timeout=0.5)
    assert polls == [] and blocked == [0.5]


def test_the_budget_comes_from_the_option_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv("ZOO_SPIN_US", raising=False)
    assert spin_budget_us(None) == 100
    assert spin_budget_us(0) == 0
    monkeypatch.setenv("ZOO_SPIN_US", "250")
    assert spin_budget_us(None) == 250
    assert spin_budget_us(7) == 7  # the option wins
    with pytest.raises(ValueError, match=r"^spin_us must be >= 0 \(microseconds; 0 disables spinning\), got -1$"):
        spin_budget_us(-1)
    for bad in ("fast", "-3"):
        monkeypatch.setenv("ZOO_SPIN_US", bad)
        with pytest.raises(TransportError, match=rf"^ZOO_SPIN_US='{bad}' must be an integer >= 0"):
            spin_budget_us(None)
