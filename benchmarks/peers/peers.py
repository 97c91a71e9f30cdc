"""Run Zoo and its peers (CleanRL, Sample Factory, RLlib) at one named workload for a fixed time
and measure their throughput the same way.

Each system runs as its own process (peers in their own virtual environments, made by
``setup.sh``: never Zoo's); its output lines are read as they come, each stamped with its
arrival time, and turned into progress points ``(seconds, env steps, trained env steps)`` by
the system's line parser below. The rate of a run is measured over a window: from the first
point at least ``warmup`` seconds after the first point, to the first point at least
``seconds`` after that (:func:`window_bounds`, :func:`window_rates`: the same rule as
``zoo bench``, so a system reporting once per 20 s iteration still gets whole iterations);
then the process group is stopped.

Zoo runs as ``zoo bench --workload W --phases train --json FILE`` (its own window, same
definition) in the Python that runs this script.

Systems and workloads are data: :data:`SYSTEMS` (how to start each, how to read it) and
:data:`zoo.bench.workloads.WORKLOADS` (the shape each system is given).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
PEERS_DIR = Path(os.environ.get("ZOO_PEERS_DIR", Path.home() / ".cache" / "zoo-peers"))
"""Where ``setup.sh`` put each peer: ``<PEERS_DIR>/<peer>/venv`` (outside the repository)."""

Point = tuple[float, int, int]
"""(seconds since the process started, env steps, trained env steps)."""


# ----------------------------------------------------------------------------- line parsers
_SPS = re.compile(r"^SPS: (\d+)\s*$")


def parse_cleanrl(line: str, state: dict[str, Any], per_iteration: int) -> tuple[int, int] | None:
    """CleanRL prints ``SPS: N`` once per iteration, after the update: iteration k has stepped
    and trained on k x ``per_iteration`` (num_envs x num_steps) env steps. Returns
    ``(env steps, trained env steps)`` at that line, else None."""
    if not _SPS.match(line.strip()):
        return None
    state["k"] = state.get("k", 0) + 1
    steps = state["k"] * per_iteration
    return steps, steps


_CLEANRL_EPISODE = re.compile(r"global_step=(\d+), episodic_return=")


def parse_cleanrl_dqn(line: str, state: dict[str, Any], learning_starts: int) -> tuple[int, int] | None:
    """CleanRL's ``dqn.py`` prints ``global_step=N, episodic_return=R`` when an episode ends (its
    ``SPS:`` line is a mean since the start, not a count): N + 1 env steps are done there; of
    them, those after ``learning_starts`` were stepped while it trained (one batch per
    ``train_frequency`` steps, at its replay ratio). Returns ``(N + 1, max(0, N + 1 -
    learning_starts))``, else None."""
    m = _CLEANRL_EPISODE.search(line)
    if not m:
        return None
    steps = int(m.group(1)) + 1
    return steps, max(0, steps - learning_starts)


def parse_cleanrl_dqn_sps(line: str, state: dict[str, Any], learning_starts: int) -> tuple[int, int] | None:
    """CleanRL's ``dqn_atari.py`` prints ``SPS: X`` at every training step whose ``global_step`` is
    a multiple of 100 (it trains every 4th step after ``learning_starts``; Pong's episode lines are
    minutes apart): the k-th such line is at ``N = 100 * (learning_starts // 100 + k)``, with N + 1
    env steps done. Returns ``(N + 1, N + 1 - learning_starts)``, else None.

    Example: learning_starts 2,000: the first line is at N = 2,100 -> (2,101, 101); the third at
    2,300 -> (2,301, 301)."""
    if not line.startswith("SPS:"):
        return None
    state["sps_lines"] = k = state.get("sps_lines", 0) + 1
    steps = 100 * (learning_starts // 100 + k) + 1
    return steps, steps - learning_starts


_SF = re.compile(r"Total num frames: (\d+).*?Samples: (\d+)")


def parse_sample_factory(line: str, state: dict[str, Any], frameskip: int) -> tuple[int, int] | None:
    """Sample Factory's periodic report ``Fps is (...). Total num frames: F. Throughput: ...
    Samples: S. ...``: F is the learner's env steps (frames: env steps x ``frameskip`` on
    Atari) trained on, S the observations the samplers collected (env steps sampled). Returns
    ``(S, F / frameskip)``, else None."""
    m = _SF.search(line)
    if not m:
        return None
    return int(m.group(2)), int(m.group(1)) // frameskip


def parse_json_progress(line: str, state: dict[str, Any]) -> tuple[int, int] | None:
    """``rllib_run.py``'s one JSON object per training iteration: ``{"env_steps": N,
    "trained_env_steps": M}``. Returns ``(N, M)``, else None."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        row = json.loads(line)
        return int(row["env_steps"]), int(row["trained_env_steps"])
    except (ValueError, KeyError, TypeError):
        return None


# ----------------------------------------------------------------------------- rates
def window_bounds(points: list[Point], warmup: float, seconds: float) -> tuple[int, int | None] | None:
    """Indices ``(start, end)`` of the measured window in ``points``: start is the first point at
    least ``warmup`` s after the first point, end the first point at least ``seconds`` s after
    start (None while there is none yet); None before start exists."""
    if not points:
        return None
    t_first = points[0][0]
    start = next((i for i, p in enumerate(points) if p[0] - t_first >= warmup), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(points)) if points[i][0] - points[start][0] >= seconds), None)
    return start, end


def window_rates(points: list[Point], warmup: float, seconds: float) -> tuple[float, float, float] | None:
    """``(env steps/s, trained env steps/s, window seconds)`` over the window of
    :func:`window_bounds`; when the window never reached ``seconds`` (the run was stopped at its
    time limit), up to the last point after its start; None without two points.

    Example: points at 0, 10, 20, 30, 50 s with 0, 1,024, 3,072, 5,120, 9,216 env steps,
    warm-up 5 s, 15 s: window 10 -> 30 s, (5,120 - 1,024) / 20 = 204.8 env steps/s.
    """
    bounds = window_bounds(points, warmup, seconds)
    if bounds is None:
        return None
    start, end = bounds
    end = len(points) - 1 if end is None else end
    if end <= start or points[end][0] <= points[start][0]:
        return None
    (t0, s0, r0), (t1, s1, r1) = points[start], points[end]
    return (s1 - s0) / (t1 - t0), (r1 - r0) / (t1 - t0), t1 - t0


def median(values: list[float]) -> float:
    """The median (mean of the middle two for an even count). [3, 1, 2] -> 2; [4, 1, 3, 2] -> 2.5."""
    v = sorted(values)
    n = len(v)
    if not n:
        raise ValueError("median of no values")
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


# ----------------------------------------------------------------------------- the systems
@dataclass(frozen=True)
class System:
    """One system of the table: how to start it at a workload and read its progress.

    ``command(workload, workdir)`` -> argv (None when this system has no run for the
    workload); ``parse(line, state, workload)`` -> ``(env steps, trained env steps)`` or None;
    ``peer``: its ``setup.sh`` name (None for Zoo); ``label``: the table's row name.
    """

    name: str
    label: str
    peer: str | None
    command: Callable[[Any, str], list[str] | None]
    parse: Callable[[str, dict, Any], tuple[int, int] | None] | None = None


def _venv_python(peer: str) -> str:
    return str(PEERS_DIR / peer / "venv" / "bin" / "python")


CLEANRL_DQN_LEARNING_STARTS = 1_000
"""dqn.py's ``--learning-starts`` in a throughput run: the Zoo workload's ``algo.learning_starts``
(dqn-cartpole), so both windows train."""


def workload_sets(w) -> dict[str, str]:
    """The workload's ``--set`` overrides as ``{key: value}`` (``"algo.lr=2.5e-4"`` -> ``{"algo.lr": "2.5e-4"}``)."""
    return dict(o.partition("=")[::2] for o in w.overrides)


def replay_learning_starts(w) -> int:
    """The replay workload's ``algo.learning_starts`` (given to CleanRL's script too, so both windows
    train); 0 when it sets none."""
    return int(workload_sets(w).get("algo.learning_starts", 0))


def _cleanrl_command(w, workdir: str) -> list[str] | None:
    if not w.peer_script:
        return None
    if w.peer_script == "dqn_atari":
        # dqn_atari.py at its defaults (1 env, batch 32 every 4 steps, Nature CNN, target every 1,000) but for
        # the throughput window: an endless run, epsilon at its end value after 10,000 env steps, learning after
        # the workload's algo.learning_starts and a replay of the workload's 100,000 (2.8 GB of 4x84x84 frames;
        # its default 1M would be 28 GB); gymnasium 0.29's episode ends, as for dqn.py
        return [_venv_python("cleanrl"), "-u", "-W", "ignore", str(HERE / "cleanrl_compat.py"), "--same-step-autoreset",
                str(PEERS_DIR / "cleanrl" / "src" / "cleanrl" / "dqn_atari.py"), "--env-id", w.gym_id,
                "--total-timesteps", str(10**9), "--exploration-fraction", "1e-5",
                "--learning-starts", str(replay_learning_starts(w)), "--buffer-size", "100000", "--no-cuda",
                "--seed", "1"]
    if w.peer_script == "dqn":
        # dqn.py at its defaults (1 env, batch 128 every 10 steps, replay 10,000, target every 500) but for
        # the throughput window: no end in sight (10^9 env steps) with epsilon at its end value (0.05) after
        # 10,000 env steps (an exploration fraction of 10^-5 of 10^9), learning after 1,000 as Zoo's workload
        return [_venv_python("cleanrl"), "-u", "-W", "ignore", str(HERE / "cleanrl_compat.py"), "--same-step-autoreset",
                str(PEERS_DIR / "cleanrl" / "src" / "cleanrl" / "dqn.py"), "--env-id", w.gym_id,
                "--total-timesteps", str(10**9), "--exploration-fraction", "1e-5",
                "--learning-starts", str(CLEANRL_DQN_LEARNING_STARTS), "--no-cuda", "--seed", "1"]
    return [_venv_python("cleanrl"), "-u", "-W", "ignore", str(HERE / "cleanrl_compat.py"),
            str(PEERS_DIR / "cleanrl" / "src" / "cleanrl" / f"{w.peer_script}.py"),
            "--env-id", w.gym_id, "--num-envs", str(w.num_envs), "--num-steps", str(w.rollout_steps),
            "--num-minibatches", str(w.minibatches), "--update-epochs", str(w.epochs),
            "--total-timesteps", str(10**9), "--no-cuda", "--seed", "1"]


_SF_ATARI = {"PongNoFrameskip-v4": "atari_pong"}


def _sample_factory_command(w, workdir: str) -> list[str] | None:
    if w.replay:  # its PPO/APPO only
        return None
    common = ["--experiment=bench", f"--train_dir={workdir}/train", "--device=cpu", "--train_for_env_steps=1000000000",
              "--save_every_sec=100000", "--save_best_every_sec=100000", f"--num_workers={w.num_envs // 4 or 1}",
              f"--num_envs_per_worker={min(4, w.num_envs)}", f"--rollout={w.rollout_steps}",
              f"--num_epochs={w.epochs}", f"--num_batches_per_epoch={w.minibatches}",
              f"--batch_size={w.minibatch_size}", "--experiment_summaries_interval=3", "--async_rl=False"]
    if w.gym_id in _SF_ATARI:
        return [_venv_python("sample-factory"), "-u", "-m", "sf_examples.atari.train_atari",
                f"--env={_SF_ATARI[w.gym_id]}", *common]
    return [_venv_python("sample-factory"), "-u", "-m", "sf_examples.train_gym_env", f"--env={w.gym_id}",
            "--use_rnn=False", "--recurrence=1", "--with_vtrace=False", "--algo=APPO", *common]


def _rllib_command(w, workdir: str) -> list[str] | None:
    if w.replay:  # rllib_run.py runs PPO only
        return None
    return [_venv_python("rllib"), "-u", str(HERE / "rllib_run.py"), "--env-id", w.gym_id,
            "--num-envs", str(w.num_envs), "--num-steps", str(w.rollout_steps), "--epochs", str(w.epochs),
            "--minibatch-size", str(w.minibatch_size)]


def _zoo_command(suffix: str, *extra: str, trainers: int = 1) -> Callable[[Any, str], list[str] | None]:
    """``zoo bench --workload W<suffix> --phases train`` with ``extra``; with ``trainers`` = K > 1,
    K data-parallel trainers that each take 1/K of the workload's update batch
    (``trainer.batch_samples`` is per trainer), so the learning problem is the workload's."""
    def command(w, workdir: str) -> list[str] | None:
        from zoo.bench.workloads import WORKLOADS

        name = w.name + suffix
        if name not in WORKLOADS:
            return None
        dp: list[str] = []
        if trainers > 1:
            batch = int(workload_sets(WORKLOADS[name]).get("trainer.batch_samples", 0))
            if not batch or batch % trainers:
                return None  # the workload's batch does not split into K whole shares
            dp = ["--set", f"trainer.count={trainers}", "--set", f"trainer.batch_samples={batch // trainers}"]
        return [sys.executable, "-m", "zoo", "bench", "--workload", name, "--phases", "train",
                "--json", f"{workdir}/zoo.json", *extra, *dp]
    return command


SYSTEMS: dict[str, System] = {s.name: s for s in (
    System("zoo", "Zoo (at the workload: PPO, or the replay workloads' algorithm)", None, _zoo_command("")),
    System("zoo-f32", "Zoo PPO (at the workload, float32 training)", None,
           _zoo_command("", "--set", "algo.precision=float32")),
    System("zoo-defaults", "Zoo PPO (its own defaults)", None, _zoo_command("-defaults")),
    System("zoo-bf16", "Zoo PPO (at the workload, bfloat16 training)", None,
           _zoo_command("", "--set", "algo.precision=bfloat16")),
    System("zoo-dp-bf16", "Zoo PPO (at the workload, bfloat16 training on 2 data-parallel trainers of 1 thread, "
           "each with half the update batch)",
           None, _zoo_command("", "--set", "algo.precision=bfloat16", "--set", "trainer.threads=1", trainers=2)),
    System("zoo-inline-bf16", "Zoo PPO (at the workload, inline bfloat16 inference and training)", None,
           _zoo_command("", "--set", "algo.precision=bfloat16", "--set", "policy.inline=true", "--set",
                        "policy.precision=bfloat16")),
    System("cleanrl", "CleanRL", "cleanrl", _cleanrl_command,
           lambda line, st, w: (parse_cleanrl_dqn(line, st, CLEANRL_DQN_LEARNING_STARTS) if w.peer_script == "dqn"
                                else parse_cleanrl_dqn_sps(line, st, replay_learning_starts(w))
                                if w.peer_script == "dqn_atari"
                                else parse_cleanrl(line, st, w.num_envs * w.rollout_steps))),
    System("sample-factory", "Sample Factory 2.1.1 (sync PPO)", "sample-factory", _sample_factory_command,
           lambda line, st, w: parse_sample_factory(line, st, 4 if w.gym_id in _SF_ATARI else 1)),
    System("rllib", "RLlib 2.60.0 PPO", "rllib", _rllib_command,
           lambda line, st, w: parse_json_progress(line, st)),
)}


def installed(system: System) -> bool:
    """Zoo always; a peer once ``setup.sh <peer>`` finished (its ``installed.txt``)."""
    return system.peer is None or (PEERS_DIR / system.peer / "installed.txt").is_file()


# ----------------------------------------------------------------------------- running one
def _stop(proc: subprocess.Popen) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the process's own group (it was started in a new session)."""
    for sig, wait in ((signal.SIGINT, 10), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue


def run_system(system: System, w, seconds: float, warmup: float, limit_s: float, log: Path | None = None,
               peer_threads: int | None = None) -> dict:
    """Run ``system`` at workload ``w``; ``{"env_steps_per_s", "trained_env_steps_per_s",
    "window_s"}`` (or ``{"error": ...}``). Zoo reports its own window (``zoo bench``); a peer is
    stopped once ``warmup + seconds`` of progress lines were seen, or at ``limit_s``.
    ``peer_threads``: OpenMP/MKL threads of a peer's processes (``OMP_NUM_THREADS``; None: the
    peer's own default, torch's = the cores); Zoo chooses its threads per role itself."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{system.name}-") as workdir:
        argv = system.command(w, workdir)
        if argv is None:
            return {"error": "no run for this workload"}
        if system.peer is None:
            argv = [*argv, "--seconds", str(seconds), "--warmup", str(warmup), "--limit", str(limit_s)]
        out = open(log, "w") if log else subprocess.DEVNULL
        env = dict(os.environ)
        if system.peer is not None and peer_threads:
            env.update(OMP_NUM_THREADS=str(peer_threads), MKL_NUM_THREADS=str(peer_threads))
        proc = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, bufsize=1, env=env)
        points: list[Point] = []
        state: dict[str, Any] = {}
        began = time.monotonic()

        def read() -> None:
            for line in proc.stdout:
                if log:
                    out.write(line)
                if system.parse is None:
                    continue
                got = system.parse(line, state, w)
                if got is not None:
                    points.append((time.monotonic() - began, *got))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            while proc.poll() is None and time.monotonic() - began < limit_s:
                bounds = window_bounds(points, warmup, seconds) if system.parse is not None else None
                if bounds is not None and bounds[1] is not None:
                    break
                time.sleep(0.5)
        finally:
            _stop(proc)
            reader.join(10)
            if log:
                out.close()
        if system.peer is None:
            try:
                res = json.loads(Path(workdir, "zoo.json").read_text())["train"]
            except (OSError, ValueError, KeyError, TypeError):
                return {"error": f"zoo bench failed (exit {proc.returncode})"}
            return {k: res[k] for k in ("env_steps_per_s", "trained_env_steps_per_s", "window_s", "dropped_fraction")}
        rates = window_rates(points, warmup, seconds)
        if rates is None:
            return {"error": f"fewer than two progress lines in the window ({len(points)} in all, exit {proc.returncode})"}
        return {"env_steps_per_s": rates[0], "trained_env_steps_per_s": rates[1], "window_s": rates[2]}


class EpisodeLog:
    """``time_to_return.py --episodes FILE``: every episode either system reported, one JSON row each, appended and
    flushed as it is read: ``{"system": "zoo", "seed": 1, "t": 15.0, "env_steps": 48, "return":
    5.76}`` (``t``: seconds since the run's process was launched, as the rows' times). The curves
    of ``benchmarks/peers/plot_curves.py`` are drawn from it."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", buffering=1)

    def write(self, system: str, seed: int, t: float, env_steps: int, ret: float) -> None:
        self.file.write(json.dumps({"system": system, "seed": seed, "t": round(t, 3), "env_steps": env_steps,
                                    "return": ret}) + "\n")

    def close(self) -> None:
        self.file.close()
