"""Test-only plugin for supervision and stopping tests.

- env ``hang`` (``--env hang:CartPole-v1``): a Gymnasium env that, on its
  ``env.hang_at_step``-th step, hangs forever inside ``step`` (sleeps, as a deadlocked
  simulator would) if it is the first env of the run to get there: it claims the file
  ``env.hang_file`` with ``O_CREAT | O_EXCL`` first, so a restarted actor does not hang again.
- algorithm ``slow-ppo``: PPO whose every update first sleeps ``algo.update_sleep_s`` seconds,
  ignoring stop requests (a long hide-and-seek update, shortened); the first
  ``algo.fast_updates`` updates (default 0) do not sleep. Each sleeping update first prints
  ``zoo-chaos: update N sleeps S s`` to stderr (N counted in the trainer's process): the line
  tests wait for before they signal a run in its long update.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import zoo


@dataclass
class HangConfig:
    hang_at_step: int = 50
    """The step (per env, from 1) on which the first env to reach it hangs."""
    hang_file: str = ""
    """Claimed by the env that hangs; empty: never hang."""


class HangingEnv:
    def __init__(self, arg, config: HangConfig, seed: int) -> None:
        from zoo.plugins.envs.gym.env import GymConfig, make

        self.inner = make(arg, GymConfig(), seed)
        self.spec = self.inner.spec
        self.config, self.steps = config, 0

    def reset(self, seed=None):
        return self.inner.reset(seed=seed)

    def step(self, action):
        self.steps += 1
        if self.config.hang_file and self.steps == self.config.hang_at_step:
            try:
                os.close(os.open(self.config.hang_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                while True:  # hung: only a kill ends this
                    time.sleep(3600)
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()


def make_hanging(arg, config, seed):
    return HangingEnv(arg, config, seed)


def slow_ppo():
    from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig

    @dataclass
    class SlowPPOConfig(PPOConfig):
        update_sleep_s: float = 0.0
        """Seconds each update sleeps first (stop requests are not looked at)."""
        fast_updates: int = 0
        """Updates (counted in this process) made before the sleeping starts."""

    class SlowPPO(PPO):
        Config = SlowPPOConfig

        def update(self, batch):
            self.made = getattr(self, "made", 0) + 1
            if self.made > self.config.fast_updates:
                print(f"zoo-chaos: update {self.made} sleeps {self.config.update_sleep_s:g} s", file=sys.stderr,
                      flush=True)
                time.sleep(self.config.update_sleep_s)
            return super().update(batch)

    for cls in (SlowPPO, SlowPPOConfig):  # picklable by name (configs travel to the workers)
        cls.__qualname__ = cls.__name__
        cls.__module__ = __name__
    return SlowPPO, SlowPPOConfig


@zoo.hookimpl
def register_envs(register):
    register("hang", "zoo_chaos:make_hanging", summary="Test env: a Gymnasium env that hangs once in step",
             config="zoo_chaos:HangConfig", default_budget=("env_steps", 10_000))


@zoo.hookimpl
def register_algorithms(register):
    register("slow-ppo", "zoo_chaos:SlowPPO", summary="Test algorithm: PPO whose updates sleep first",
             config="zoo_chaos:SlowPPOConfig")


def __getattr__(name):  # SlowPPO / SlowPPOConfig are built on first use (torch is imported then)
    if name in ("SlowPPO", "SlowPPOConfig"):
        cls, cfg = _SLOW.get("v") or _SLOW.setdefault("v", slow_ppo())
        return cls if name == "SlowPPO" else cfg
    raise AttributeError(name)


_SLOW: dict = {}
