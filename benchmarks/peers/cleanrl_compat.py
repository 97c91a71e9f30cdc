"""Run one of CleanRL's scripts unchanged on the env stack Zoo uses (gymnasium 1.x, ale-py 0.12).

    <peers>/cleanrl/venv/bin/python cleanrl_compat.py <peers>/cleanrl/src/cleanrl/ppo_atari.py --env-id ...

Runs inside CleanRL's own virtual environment (``setup.sh cleanrl``), never in Zoo's. CleanRL's
pinned stack is gymnasium 0.29 with ale-py 0.8 (whose ROMs need a download); on gymnasium 1.x
two wrappers its ``ppo_atari.py`` names were renamed (``GrayScaleObservation`` ->
``GrayscaleObservation``, ``FrameStack`` -> ``FrameStackObservation``, same positional
arguments), and ale-py's ``*NoFrameskip-v4`` ids are registered by ``gym.register_envs(ale_py)``.
This adapter adds the old names as aliases, registers the ALE ids, puts the script's
repository folder (for ``cleanrl_utils``) on ``sys.path`` and runs the script as ``__main__``.
Nothing of CleanRL is copied here.

``--same-step-autoreset`` (first argument, before the script) also gives the script gymnasium
0.29's vector-env episode ends, which its loop was written for: ``SyncVectorEnv`` resets a
finished env in the same step (``AutoresetMode.SAME_STEP``; gymnasium 1.x's default resets it
one step later, a step whose action is ignored and whose reward is 0), and ``infos["final_info"]``
is a list with one entry per env, the finished env's info dict (with ``"episode"``) or None;
``infos["final_observation"]`` (``dqn.py`` reads it for a truncated env's last observation) is
gymnasium 1.x's ``infos["final_obs"]``.
Without it, ``ppo.py`` trains on one such reset step per episode and never prints its
``global_step=..., episodic_return=...`` lines (gymnasium 1.x has no list ``final_info``).
"""
import os
import runpy
import sys

import gymnasium as gym

if not hasattr(gym.wrappers, "GrayScaleObservation"):
    gym.wrappers.GrayScaleObservation = gym.wrappers.GrayscaleObservation
if not hasattr(gym.wrappers, "FrameStack"):
    gym.wrappers.FrameStack = gym.wrappers.FrameStackObservation
try:
    import ale_py

    gym.register_envs(ale_py)
except ImportError:  # ppo.py (CartPole) needs no ALE
    pass


def _unstack(info: dict, i: int) -> dict:
    """Env ``i``'s entries of a gymnasium 1.x vector info dict (``key`` with mask ``_key``)."""
    out = {}
    for k, v in info.items():
        if k.startswith("_") or not info.get(f"_{k}", [False] * (i + 1))[i]:
            continue
        out[k] = _unstack(v, i) if isinstance(v, dict) else v[i]
    return out


class _SameStepSyncVectorEnv(gym.vector.SyncVectorEnv):
    """gymnasium 0.29's ``SyncVectorEnv`` as seen by CleanRL (see the module's docstring)."""

    def __init__(self, env_fns, **kwargs):
        kwargs.setdefault("autoreset_mode", gym.vector.AutoresetMode.SAME_STEP)
        super().__init__(env_fns, **kwargs)

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = super().step(actions)
        if "final_info" in infos:
            final, done = infos["final_info"], infos["_final_info"]
            infos = dict(infos, final_info=[_unstack(final, i) if done[i] else None for i in range(self.num_envs)])
        if "final_obs" in infos:  # 0.29's name, which dqn.py reads for a truncated env's last observation
            infos = dict(infos, final_observation=infos["final_obs"])
        return obs, rewards, terminations, truncations, infos


if sys.argv[1] == "--same-step-autoreset":
    del sys.argv[1]
    gym.vector.SyncVectorEnv = _SameStepSyncVectorEnv

script = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.dirname(os.path.dirname(script)))
sys.argv = [script, *sys.argv[2:]]
runpy.run_path(script, run_name="__main__")
