"""Evaluate a trained policy in-process: load a run's checkpoint, play episodes, record video.

Used by ``zoo eval`` (:mod:`zoo.commands.eval`) and ``benchmarks/hide_and_seek_learning.py``.
No worker process, no transport, no display: the policy runs on CPU in this process.

**What is loaded.** The run's ``config.json`` gives the algorithm, the env (name and
``env.*`` options) and the ``algo.*`` options; the algorithm's ``build_policy(config,
spec)`` builds the network and the checkpoint's ``["algorithm"]["policy"]`` state dict
fills it (the trainer's checkpoint format: ``{"algorithm": algo.state_dict(),
"policy_version", "updates", "env_steps", "frames", "episodes"}``).

**How episodes are played** (:func:`play`). Episode ``k`` (0-based) starts with
``env.reset(seed=seed + k)`` in a fresh env, so the same ``seed`` gives the same starts;
action sampling draws from torch's generator seeded with ``seed``. Each step the policy
acts for the agents that are active (``info["active"]``, all of them by default), as the
actor worker asks the policy worker; recurrent policies (``policy.state_shape``) start
each episode from a zero state. An episode ends when every agent is terminated, truncated
or inactive, exactly as in training, except for envs whose training episodes are shorter
than the scored ones (``spec.reports_episodes``: Atari's episodic life): their episode
ends only with ``info["episode"]``, and the env's own ``reset()`` continues the game in
between (one no-op env step after a lost life), so an Atari episode is the whole game,
all lives, and its return is the raw (unclipped) game score.

**Per-episode results** (one dict each, in episode order): ``episode`` (k), ``seed``,
``return`` and ``length`` — ``info["episode"]``'s when the env reports it (Atari: raw
score, env steps of the whole game), else the sum of the rewards and the env steps; for
several agents ``return`` is the mean over the agents that took part (were active at
some step) of their summed rewards — plus, for several agents, ``agent_returns``
(``{agent: return}``) and, when their names form two or more teams (``hider_0`` ->
``hider``), ``team_returns`` (mean over the team's agents that took part), and the env's
``info["stats"]`` of the last step (hide-and-seek: ``hider_return``, box statistics...).

**Video frames** (:class:`Recorder`): one frame after each ``reset`` that starts an
episode and one after each env step, so an episode of ``length`` env steps has
``length + 1`` frames and a video of episodes ``E`` has ``sum(length_e + 1)`` frames. For
Atari an env step is ``frame_skip`` emulator frames (the frame shown is the last one,
the real ``210 x 160`` RGB screen) and ``length`` counts the no-op step of each lost
life, so a game has ``1 + length`` frames = ``1 + (emulator frames after the reset's
no-ops) / frame_skip``. Episodes are written whole, in the order they finish (with one
env, episode order); each result holds ``video_frames: [first, end)``.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.runinfo import RunError, read_config, resolve_run, resolve_target

__all__ = ["Evaluation", "load_evaluation", "play", "Recorder", "RenderError", "team_of", "summarise"]


def team_of(agent: str) -> str:
    """The team of an agent name: the name without a trailing ``_<number>`` (``hider_1`` -> ``hider``)."""
    return re.sub(r"_?\d+$", "", agent) or agent


@dataclass
class Evaluation:
    """A policy ready to play, with where it came from.

    ``make_env(seed)`` builds one env of the run (its ``env.*`` options); ``renderer`` is the
    env plugin's registered ``renderer`` (None if it has none); ``counters``: the
    checkpoint's ``policy_version``, ``env_steps``... (those present).
    """

    run_dir: Path
    checkpoint: Path
    config: dict[str, Any]
    algo_name: str
    env_name: str
    policy: Any
    make_env: Callable[[int], Any]
    renderer: Callable[[Any], np.ndarray] | None
    counters: dict[str, int]


def _torch_load(path: Path) -> Any:
    """:func:`zoo.core.checkpoint.load_checkpoint` (it unpickles numpy states: load only
    checkpoints you trust, such as your own runs'), its error as one :class:`RunError` line."""
    from zoo.core.checkpoint import CheckpointError, load_checkpoint

    try:
        return load_checkpoint(str(path))
    except CheckpointError as exc:
        raise RunError(str(exc).splitlines()[0]) from None


def _algorithms_with_fields(registry, fields: set[str]) -> list[str]:
    from zoo.core.config import algorithm_config_class

    names = []
    for component in registry.all("algorithm"):
        try:
            cls = algorithm_config_class(component)
        except Exception:  # noqa: BLE001 - a broken plugin cannot be the match
            continue
        if cls is not None and {f.name for f in dataclasses.fields(cls)} == fields:
            names.append(component.name)
    return names


def _config_name(config: dict[str, Any], key: str, run_dir: Path) -> str:
    """``config[key]``, a name (``algo_name``, ``env_name``). Raises RunError when it is not a string."""
    value = config.get(key)
    if not isinstance(value, str):
        raise RunError(f"run {str(run_dir)!r} cannot be rebuilt: its config.json has no {key} (a name, got "
                       f"{value!r}); take the config from a run that zoo train wrote with --run RUN")
    return value


def load_evaluation(target: str | os.PathLike, run: str | os.PathLike | None = None, registry=None) -> Evaluation:
    """Load the policy of ``target`` (a run folder -> its ``checkpoints/latest.pt``, or a
    checkpoint file inside a run folder); ``run`` takes the config from another run folder.

    Raises:
        RunError: the run folder or checkpoint does not exist or cannot be read; the run's
            config.json names no algorithm or env, or they are not installed; the checkpoint
            holds another algorithm's state (naming it when its config matches an installed
            algorithm) or a policy of another shape.
    """
    import torch  # noqa: F401  (fail here, not half-way)

    from zoo.core.config import (
        ConfigError,
        ExperimentConfig,
        algorithm_config_class,
        apply_mapping,
        env_config_class,
        resolve_env,
    )
    from zoo.core.registry import UnknownComponentError

    if registry is None:
        from zoo.core.plugins import get_registry

        registry = get_registry()
    folder = Path(run if run is not None else target)
    if (folder / "config.json").is_file():  # issue 22: every policy playing its agents is a later step
        named = read_config(folder).get("policies")
        if named:
            raise RunError(f"run {str(folder)!r} names policies ({', '.join(named)}): zoo eval plays a run of one "
                           "policy; evaluating named policies is not built yet (docs/policies.md, 'Not yet')")
    if run is not None:
        run_dir = resolve_run(run)
        path = Path(target)
        if path.is_dir():
            _, checkpoint = resolve_target(path)
        elif path.is_file():
            checkpoint = path
        else:
            raise RunError(f"checkpoint {str(target)!r} does not exist")
    else:
        run_dir, checkpoint = resolve_target(target)
    config = read_config(run_dir)
    algo_name, env_name = _config_name(config, "algo_name", run_dir), _config_name(config, "env_name", run_dir)
    try:
        algo = registry.get("algorithm", algo_name)
        env_component, env_arg = resolve_env(registry, env_name)
    except (UnknownComponentError, LookupError) as exc:
        raise RunError(f"run {str(run_dir)!r} cannot be rebuilt: {exc}") from None
    algo_cls, env_cls = algorithm_config_class(algo), env_config_class(env_component)
    holder = ExperimentConfig(algo_name=algo_name, env_name=env_name, algo=algo_cls() if algo_cls else None,
                              env=env_cls() if env_cls else None)
    try:
        apply_mapping(holder, {k: config[k] for k in ("algo", "env") if isinstance(config.get(k), dict)},
                      source=f"{run_dir / 'config.json'}")
    except ConfigError as exc:
        raise RunError(str(exc).splitlines()[0]) from None

    ckpt = _torch_load(checkpoint)
    state = ckpt.get("algorithm") if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not isinstance(state.get("policy"), dict):
        raise RunError(f"{str(checkpoint)!r} is not a Zoo checkpoint (no algorithm policy state in it)")
    stored = ckpt.get("algo_name") or state.get("algo_name")
    if stored is not None and stored != algo.name:
        raise RunError(f"checkpoint {str(checkpoint)!r} was written by algorithm {stored}, but run {str(run_dir)!r} "
                       f"trains {algo.name}; evaluate it with its own run (or --run RUN of a {stored} run)")
    fields = set(state["config"]) if isinstance(state.get("config"), dict) else None
    if fields is not None and algo_cls is not None and fields != {f.name for f in dataclasses.fields(algo_cls)}:
        owners = _algorithms_with_fields(registry, fields)
        what = f"algorithm {' or '.join(owners)}" if owners else "another algorithm"
        raise RunError(f"checkpoint {str(checkpoint)!r} was written by {what}, but run {str(run_dir)!r} trains "
                       f"{algo.name}; evaluate it with its own run (or --run RUN of a run of its algorithm)")

    def make_env(seed: int):
        return env_component.load()(env_arg, holder.env, seed)

    probe = make_env(0)
    try:
        spec = probe.spec
    finally:
        probe.close()
    policy = algo.load().build_policy(holder.algo, spec)
    try:
        policy.load_state_dict(state["policy"])
    except (RuntimeError, KeyError, ValueError) as exc:
        first = str(exc).strip().splitlines()
        raise RunError(f"checkpoint {str(checkpoint)!r} does not fit run {str(run_dir)!r}'s {algo.name} policy for "
                       f"{env_name}: {first[0] if first else type(exc).__name__}"
                       + (f" {first[1].strip()}" if len(first) > 1 else "")) from None
    policy.eval()
    counters = {k: int(ckpt[k]) for k in ("policy_version", "updates", "env_steps", "frames", "episodes")
                if isinstance(ckpt.get(k), (int, float))}
    return Evaluation(run_dir, checkpoint, config, algo.name, env_name, policy, make_env,
                      env_component.option("renderer"), counters)


class RenderError(ValueError):
    """The env's renderer failed on the first frame of a video (no picture can be made here)."""


class Recorder:
    """Collects each env's frames per episode and writes whole episodes to a video.

    ``renderer(env) -> uint8 [H, W, 3]``; ``writer`` has ``append(frame)`` and ``count``
    (:class:`zoo.video.VideoWriter`). With one env, frames go straight to the writer.
    """

    def __init__(self, renderer: Callable[[Any], np.ndarray], writer, n_envs: int) -> None:
        self.renderer, self.writer = renderer, writer
        self.stream = n_envs == 1
        self.pending: list[list[np.ndarray]] = [[] for _ in range(n_envs)]
        self.first = [0] * n_envs

    def start(self, slot: int) -> None:
        self.pending[slot] = []
        self.first[slot] = self.writer.count

    def capture(self, slot: int, env) -> None:
        """Render ``env`` once. Raises :class:`RenderError` when the first frame fails (e.g. MuJoCo
        without an OpenGL backend); a later failure propagates as it is."""
        if self.writer.count == 0 and not any(self.pending):
            try:
                frame = np.asarray(self.renderer(env))
            except Exception as exc:  # noqa: BLE001 - one line for the user, before any frame exists
                raise RenderError(f"--video: the env's renderer failed on the first frame: {type(exc).__name__}: "
                                  f"{str(exc).strip()}; for a MuJoCo env without a display set MUJOCO_GL=egl (or "
                                  "osmesa)") from exc
        else:
            frame = np.asarray(self.renderer(env))
        if self.stream:
            self.writer.append(frame)
        else:
            self.pending[slot].append(frame)

    def finish(self, slot: int) -> list[int]:
        """Write the slot's episode; ``[first, end)`` frame indices in the video."""
        if self.stream:
            return [self.first[slot], self.writer.count]
        first = self.writer.count
        for frame in self.pending[slot]:
            self.writer.append(frame)
        self.pending[slot] = []
        return [first, self.writer.count]


class _Episode:
    def __init__(self, index: int, seed: int, n_agents: int) -> None:
        self.index, self.seed = index, seed
        self.returns = np.zeros(n_agents, np.float64)
        self.length = 0
        self.seen = np.zeros(n_agents, bool)


def _active(info: dict[str, Any], n_agents: int) -> np.ndarray:
    return np.asarray(info.get("active", np.ones(n_agents, bool)), bool).reshape(n_agents)


def play(policy, envs: Sequence[Any], episodes: int, seed: int, *, deterministic: bool = False,
         recorder: Recorder | None = None,
         override: Callable[[np.ndarray], None] | None = None) -> list[dict[str, Any]]:
    """Play ``episodes`` episodes with ``policy`` on ``envs`` in lock-step (one batched
    forward pass per step); the per-episode results of the module docstring, in episode order.

    ``override(actions)``, optional, may change the actions in place before they are
    stepped: ``actions`` is ``[len(envs), A, *action_shape]`` (e.g. random actions for one
    team). ``deterministic`` takes the mode of the action distribution.
    """
    import torch

    torch.manual_seed(seed)
    from zoo.core.spaces import ActionClipper

    spec = envs[0].spec
    to_env = ActionClipper(spec.action_space)  # Box actions: clipped to the bounds, as the actors do
    n, A = len(envs), spec.num_agents
    agents = list(spec.agents)
    teams: dict[str, list[int]] = {}
    for a, name in enumerate(agents):
        teams.setdefault(team_of(name), []).append(a)
    state_shape = getattr(policy, "state_shape", None)
    state = np.zeros((n * A, *state_shape), np.float32) if state_shape else None
    current: list[_Episode | None] = [None] * n
    obs: list[dict[str, np.ndarray]] = [{} for _ in range(n)]  # each env's latest observation
    active = [np.ones(A, bool) for _ in range(n)]
    results: list[dict[str, Any]] = []
    next_index = 0

    def start(i: int) -> None:
        nonlocal next_index
        if next_index >= episodes:
            current[i] = None
            return
        k = next_index
        next_index += 1
        obs[i], info = envs[i].reset(seed=seed + k)
        current[i] = ep = _Episode(k, seed + k, A)
        active[i] = _active(info, A)
        ep.seen |= active[i]
        if state is not None:
            state[i * A:(i + 1) * A] = 0.0
        if recorder is not None:
            recorder.start(i)
            recorder.capture(i, envs[i])

    def finish(i: int, reported: dict[str, Any] | None, info: dict[str, Any]) -> None:
        ep = current[i]
        assert ep is not None, "finish(i) is called for an env in an episode"
        seen = ep.seen if ep.seen.any() else np.ones(A, bool)
        row: dict[str, Any] = {"episode": ep.index, "seed": ep.seed}
        if reported is not None:
            row["return"], row["length"] = float(reported["return"]), int(reported["length"])
        else:
            row["return"], row["length"] = float(ep.returns[seen].mean()), ep.length
        if A > 1:
            row["agent_returns"] = {agents[a]: float(ep.returns[a]) for a in range(A) if seen[a]}
            if len(teams) > 1:
                row["team_returns"] = {t: float(ep.returns[[a for a in idx if seen[a]]].mean())
                                       for t, idx in teams.items() if seen[idx].any()}
        for k, v in (info.get("stats") or {}).items():
            if k not in row:
                row[k] = float(v)
        if recorder is not None:
            row["video_frames"] = recorder.finish(i)
        results.append(row)
        start(i)

    for i in range(n):
        start(i)
    while any(ep is not None for ep in current):
        live = [i for i in range(n) if current[i] is not None]
        slots = np.concatenate([i * A + np.flatnonzero(active[i]) for i in live])
        keys = obs[live[0]].keys()
        batch = {k: torch.as_tensor(np.concatenate([obs[i][k][active[i]] for i in live])) for k in keys}
        with torch.no_grad():
            if state is None:
                out = policy.act(batch, deterministic=deterministic)
            else:
                out = policy.act(batch, state=torch.as_tensor(state[slots]), deterministic=deterministic)
                state[slots] = out["state"].float().numpy()
        act = out["action"].numpy()
        actions = np.zeros((n * A, *act.shape[1:]), act.dtype)
        actions[slots] = act
        actions = actions.reshape(n, A, *act.shape[1:])
        if override is not None:
            override(actions)
        for i in live:
            env, ep = envs[i], current[i]
            assert ep is not None, "live: in an episode"
            obs[i], reward, terminated, truncated, info = env.step(to_env(actions[i]))
            ep.returns += reward
            ep.length += 1
            active[i] = _active(info, A)
            ep.seen |= active[i]
            if recorder is not None:
                recorder.capture(i, env)
            if not np.all(terminated | truncated | ~active[i]):
                continue
            if "episode" in info or not spec.reports_episodes:
                finish(i, info.get("episode"), info)
                continue
            # A training episode ended inside a scored one (a lost life): the env's reset continues it.
            obs[i], info = env.reset()
            if "episode" in info:  # the game ended on the reset's own no-op step
                finish(i, info["episode"], info)
                continue
            active[i] = _active(info, A)
            if state is not None:
                state[i * A:(i + 1) * A] = 0.0  # as the policy worker does for on_reset slots
            if recorder is not None:
                recorder.capture(i, env)
    results.sort(key=lambda r: r["episode"])
    return results


def summarise(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "std", "min", "max"}`` of ``values`` (numpy; ``std`` with ``ddof=0``)."""
    v = np.asarray(values, np.float64)
    return {"mean": float(np.mean(v)), "std": float(np.std(v)), "min": float(np.min(v)), "max": float(np.max(v))}
