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

script = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.dirname(os.path.dirname(script)))
sys.argv = [script, *sys.argv[2:]]
runpy.run_path(script, run_name="__main__")
