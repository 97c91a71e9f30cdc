"""``zoo eval RUN_OR_CHECKPOINT``: play a trained policy and report its returns (and a video).

Prints, for the episode return and length (and, with several agents, each team's and
agent's return), the mean, standard deviation (``ddof=0``), min and max over the
episodes, each number printed exactly (Python's shortest round-trip form), so the
printed mean is the mean of the ``return`` fields of the JSON lines written to ``--out``
(default ``<run>/eval/<checkpoint>-seed<S>[-deterministic].jsonl``, one line per
episode; with named policies or ``--policy``, :func:`zoo.evaluate.output_stem` names it).
How episodes are played and what a video frame is: :mod:`zoo.evaluate`.

A run of named policies (docs/policies.md) plays every policy for its agents, each from
its own checkpoint (``checkpoints/<policy>/latest.pt``; a frozen one's ``weights``), and
prints each policy's return too (mean over its agents; ``policy_returns`` in the JSON
lines). ``--policy NAME=CHECKPOINT`` (repeatable) plays a checkpoint file, run folder,
``POLICY@VERSION`` or ``init`` (its initial weights) in place of policy NAME's weights; a
malformed value, a policy the run does not have, or a checkpoint that cannot be found, read
or does not fit is refused in one line before any episode is played.
"""
from __future__ import annotations

import json
from pathlib import Path

import typer


def _num(x: float) -> str:
    """Every figure of the summary with two decimals (``21.700000000000003`` -> ``21.70``,
    ``500.0`` -> ``500.00``; ``-0.001`` -> ``0.00``, never ``-0.00``); the JSON lines keep full precision."""
    text = f"{float(x):.2f}"
    return "0.00" if text == "-0.00" else text


def _agent_names(ev, seat) -> list[str]:
    """The names of ``seat``'s agents (``ev.config``'s ``policies.<name>.agents``)."""
    return list(ev.config["policies"][seat.name]["agents"])


def eval_command(
    target: str = typer.Argument(..., metavar="RUN_OR_CHECKPOINT",
                                 help="A run folder (its checkpoints/latest.pt), a run name under ./runs, "
                                      "or a checkpoint file inside a run folder."),
    episodes: int = typer.Option(10, "--episodes", "-n", min=1, help="Episodes to play."),
    seed: int = typer.Option(0, "--seed", min=0, help="Episode k starts with env.reset(seed=SEED + k); "
                                                       "also seeds action sampling."),
    deterministic: bool = typer.Option(False, "--deterministic", metavar="",
                                       help="Take the most likely action instead of sampling."),
    out: Path | None = typer.Option(None, "--out", "-o", dir_okay=False,
                                    help="JSON lines file, one line per episode (default "
                                            "<run>/eval/<checkpoint>-seed<SEED>[-deterministic].jsonl)."),
    video: Path | None = typer.Option(None, "--video", dir_okay=False,
                                      help="Record the episodes to this .mp4 or .gif: the first screen of "
                                              "each episode, then one frame per env step."),
    fps: float = typer.Option(30.0, "--fps", min=1.0, help="Frames per second of the video."),
    envs: int = typer.Option(1, "--envs", min=1, help="Envs stepped in lock-step (one batched forward pass)."),
    run: str | None = typer.Option(None, "--run", help="Take the config from this run folder instead of "
                                                          "the checkpoint's own."),
    threads: int = typer.Option(1, "--threads", min=1, help="Torch CPU threads (as the policy worker's default: "
                                                            "small forward passes run slower on more)."),
    policy: list[str] = typer.Option([], "--policy", metavar="NAME=CHECKPOINT",
                                     help="Play policy NAME with this checkpoint file, run folder, POLICY@VERSION or "
                                          "init (its initial weights; named policies) instead of its own weights "
                                          "(repeatable; a run that names no policies has one, default)."),
) -> None:
    """Evaluate a trained policy in-process on CPU: returns, lengths, per-episode JSON lines, video."""
    from zoo.cli import _console, _fail
    from zoo.runinfo import RunError
    from zoo.video import VideoWriter, check_video_path, headless_gl

    if video is not None:
        headless_gl()  # MuJoCo envs (Hopper-v5, ...) render without a display
        try:
            check_video_path(video)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    try:
        from zoo.evaluate import parse_policy_swaps

        swaps = parse_policy_swaps(policy)  # a malformed --policy before torch is imported
        import torch

        from zoo.evaluate import Recorder, RenderError, load_evaluation, play, summarise

        torch.set_num_threads(threads)
        ev = load_evaluation(target, run, swaps=swaps)
    except RunError as exc:
        raise _fail(str(exc)) from None
    if video is not None and ev.renderer is None:
        raise _fail(f"--video: env {ev.env_name!r} has no renderer; its plugin can register one "
                    "(register_envs: renderer='module:function')")
    mode = "deterministic" if deterministic else "stochastic"
    if out is None:
        from zoo.evaluate import output_stem

        stem = output_stem(ev, swapped_default=bool(swaps))  # policies[-lead=<run>.<file>.<hash>...]
        out = ev.run_dir / "eval" / f"{stem}-seed{seed}{'-deterministic' if deterministic else ''}.jsonl"
    console = _console()

    def where(counters: dict[str, int]) -> str:
        return ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in counters.items() if k in ("policy_version",
                                                                                            "env_steps"))
    played = f"{episodes} episode{'s' if episodes != 1 else ''}, seeds {seed}..{seed + episodes - 1}, {mode} actions"
    if ev.seats:
        console.print(f"zoo eval {ev.run_dir}: {ev.algo_name} on {ev.env_name}, {played}; policies:", highlight=False,
                      soft_wrap=True)
        for seat in ev.seats:
            agents = ", ".join(_agent_names(ev, seat))
            console.print(f"  {seat.name} ({agents}): {seat.checkpoint} ({where(seat.counters)})"
                          + (" from --policy" if seat.swapped else ""), highlight=False, soft_wrap=True)
    else:
        console.print(f"zoo eval {ev.checkpoint} ({where(ev.counters)}): {ev.algo_name} on {ev.env_name}, {played}",
                      highlight=False, soft_wrap=True)
    pool = [ev.make_env(seed + i) for i in range(min(envs, episodes))]
    writer = None
    try:
        recorder = None
        if video is not None and ev.renderer is not None:  # (a video without a renderer was refused above)
            writer = VideoWriter(video, fps)
            recorder = Recorder(ev.renderer, writer, len(pool))
        rows = play(ev.players, pool, episodes, seed, deterministic=deterministic, recorder=recorder)
    except RenderError as exc:
        raise _fail(str(exc)) from None
    finally:
        if writer is not None:
            writer.close()
        for env in pool:
            env.close()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w") as f:
            for row in rows:
                if ev.seats:
                    meta = {"checkpoints": {seat.name: str(seat.checkpoint) for seat in ev.seats},
                            "policy_versions": {seat.name: seat.counters.get("policy_version") for seat in ev.seats},
                            "trained_env_steps": {seat.name: seat.counters.get("env_steps") for seat in ev.seats},
                            "deterministic": deterministic}
                else:
                    meta = {"checkpoint": str(ev.checkpoint), "policy_version": ev.counters.get("policy_version"),
                            "trained_env_steps": ev.counters.get("env_steps"), "deterministic": deterministic}
                f.write(json.dumps({**row, **{k: v for k, v in meta.items() if k not in row}}) + "\n")
    except OSError as exc:
        raise _fail(f"--out {str(out)!r}: cannot write ({exc.strerror})") from None
    lines = [("return", [r["return"] for r in rows]), ("length (env steps)", [r["length"] for r in rows])]
    for key, label in (("policy_returns", "policy"), ("team_returns", "team"), ("agent_returns", "agent")):
        names = list(dict.fromkeys(n for r in rows for n in r.get(key, {})))
        for name in names:
            lines.append((f"{label} {name} return", [r[key][name] for r in rows if name in r.get(key, {})]))
    width = max(len(label) for label, _ in lines)
    for label, values in lines:
        s = summarise(values)
        console.print(f"{label:<{width}}  mean {_num(s['mean'])}  std {_num(s['std'])}  min {_num(s['min'])}  "
                      f"max {_num(s['max'])}", highlight=False, soft_wrap=True)
    console.print(f"wrote {len(rows)} episode{'s' if len(rows) != 1 else ''} to {out}", highlight=False, soft_wrap=True)
    if writer is not None:  # (--video given)
        console.print(f"wrote {video}: {writer.count} frames (the first screen of each episode, then one per "
                      "env step)", highlight=False, soft_wrap=True)
