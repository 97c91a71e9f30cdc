"""Adaptive spin-then-block waiting, shared by the socket engine (``shm``, ``tcp``) and ``nng``.

A receiver that blocks hands its core back, and waking it again costs tens of microseconds
(more on a VM, where an idle vCPU halts and an interrupt must go through the hypervisor) —
as much as a small message's whole round trip. Polling without blocking for a short while
first avoids that wake-up when the answer is close. But spinning while a peer is slow only
burns a core, so :class:`AdaptiveSpin` spins only while this endpoint's recent waits (an
exponential moving average, timeouts included) were short — under
:data:`SPIN_IF_AVG_BELOW` budgets: long waits (a slow peer, an idle stream) stop the
spinning by themselves, and short ones bring it back.
Between polls the spinner yields the core (``sched_yield``) to any other runnable thread —
on a busy machine the peer, or its transport threads, may be waiting for exactly that core.

Measured on the 2-core development VM (``benchmarks/transport_bench.py``, see
``benchmarks/RESULTS.md``): with the default budget of 100 us the 1 KiB request/reply round
trip fell from 180 to 61 us on ``shm`` and from 347 to 198 us on ``nng``.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from zoo.core.transport import TransportError

T = TypeVar("T")

DEFAULT_SPIN_US = 100
"""Default busy-poll budget of one wait, in microseconds (transport option ``spin_us``)."""
WAIT_AVG_WEIGHT = 0.25
"""Weight of the newest wait in the moving average that decides whether to spin."""
SPIN_IF_AVG_BELOW = 2.0
"""Spin while the average wait is below this many budgets: a wait that blocks also pays for
the wake-up (with ``nng``, several: its I/O threads hand the message on), so a wait that
spinning would catch measures up to about twice as long when it blocks."""


def spin_budget_us(value: int | None) -> int:
    """The spin budget in microseconds: ``value``, else ``ZOO_SPIN_US``, else :data:`DEFAULT_SPIN_US`.

    Raises:
        ValueError: ``value`` is negative.
        TransportError: ``ZOO_SPIN_US`` is not an integer >= 0.
    """
    if value is None:
        raw = os.environ.get("ZOO_SPIN_US")
        if not raw:
            return DEFAULT_SPIN_US
        try:
            value = int(raw)
            if value < 0:
                raise ValueError
        except ValueError:
            raise TransportError(f"ZOO_SPIN_US={raw!r} must be an integer >= 0 "
                                 "(microseconds; 0 disables spinning)") from None
    if value < 0:
        raise ValueError(f"spin_us must be >= 0 (microseconds; 0 disables spinning), got {value}")
    return int(value)


class AdaptiveSpin:
    """Spin-then-block for one endpoint.

    Attributes:
        budget_s: longest busy-poll of one wait, in seconds (0: always block at once).
        wait_avg_s: moving average of how long this endpoint's waits took, in seconds.
    """

    __slots__ = ("budget_s", "wait_avg_s")

    def __init__(self, budget_us: int) -> None:
        self.budget_s = budget_us * 1e-6
        self.wait_avg_s = 0.0

    def wait(self, poll: Callable[[], T], block: Callable[[float], T], timeout: float) -> T:
        """The first truthy ``poll()`` within the spin budget, else ``block(rest of timeout)``.

        ``poll()`` must not block; ``block(t)`` waits up to ``t`` seconds. Either returns a
        falsy value when nothing came. Call it after a ``poll()`` that found nothing and with
        ``timeout > 0``.
        """
        start = time.perf_counter()
        got = None
        if self.budget_s > 0 and self.wait_avg_s < SPIN_IF_AVG_BELOW * self.budget_s:
            end = start + min(self.budget_s, timeout)
            while time.perf_counter() < end:
                os.sched_yield()
                got = poll()
                if got:
                    break
        if not got:
            got = block(max(0.0, timeout - (time.perf_counter() - start)))
        self.wait_avg_s += (time.perf_counter() - start - self.wait_avg_s) * WAIT_AVG_WEIGHT
        return got
