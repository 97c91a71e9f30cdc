"""Every env's close() is called at the end of a run within a time budget; slow closes are reported (issue 15)."""
import time

from zoo.core.env import close_envs
from zoo.core.testing.fake_envs import CountingEnv


class SlowClose(CountingEnv):
    def __init__(self, delay, fail=False):
        super().__init__(env_id=f"slow-{delay}")
        self.delay, self.fail = delay, fail

    def close(self):
        time.sleep(self.delay)
        super().close()
        if self.fail:
            raise RuntimeError("socket already gone")


def test_all_envs_are_closed_and_slow_or_failing_closes_are_reported():
    envs = [CountingEnv(), SlowClose(0.3), SlowClose(0.0, fail=True), CountingEnv()]
    reported = []
    problems = close_envs(envs, budget_s=30.0, slow_s=0.1, report=reported.append)
    assert all(e.closed for e in envs)
    assert problems == reported
    assert len(problems) == 2
    assert problems[0].startswith("env 1 (slow-0.3): close() took ") and "slow: over 0.1 s" in problems[0]
    assert problems[1] == "env 2 (slow-0.0): close() raised RuntimeError: socket already gone"


def test_a_close_that_overruns_the_budget_is_reported_and_the_rest_left():
    envs = [CountingEnv(), SlowClose(3.0), CountingEnv()]
    problems = close_envs(envs, budget_s=0.2, slow_s=10.0)
    assert envs[0].closed and not envs[2].closed
    assert problems == ["env 1 (slow-3.0): close() still running after the close budget of 0.2 s; "
                        "1 more env(s) left unclosed"]
