"""Validation of a resolved experiment config: the rules that combine options, checked before any
process starts (:func:`validate`), and the option tables of launchers and resolvers
(:func:`launcher_options`, :func:`resolver_options`).

:func:`zoo.core.config.build_config` calls :func:`validate` twice: on the user's layers alone
(``presets_pending``, to probe the env's spec) and on the final config. :mod:`zoo.core.config`
re-exports the public names. Each ``*_problems`` function returns ``(field, message)`` pairs;
:func:`validate` reports them all at once in one :class:`~zoo.core.options.ConfigError`.
"""
from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from zoo.core.curriculum import curriculum_problems, parse_condition
from zoo.core.kinds import worker_kinds, worker_options
from zoo.core.options import ConfigError, bound_problems
from zoo.core.resolve import _suggest
from zoo.core.streams import check_options, transport_for, transport_options
from zoo.core.transport import TransportError

if TYPE_CHECKING:
    from zoo.core.config import ExperimentConfig
    from zoo.core.registry import Registry

__all__ = ["validate", "launcher_options", "resolver_options", "missing_package", "stop_when_problems",
           "supervision_problems", "history_problems", "inline_problems"]


_DEVICE_RE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def _device_available(path: str, dev: str) -> tuple[bool, str, str]:
    """``(ok, path, message)``: whether this machine's torch can use ``dev`` (imports torch)."""
    import torch

    if dev == "mps":
        ok = torch.backends.mps.is_available()
        return ok, path, f"{path}='mps': this torch build or machine has no MPS; use cpu"
    if not torch.cuda.is_available():
        return False, path, (f"{path}={dev!r}: this torch build ({torch.__version__}) or machine has no CUDA; "
                             "use cpu, or install a CUDA build of torch")
    from zoo.core.devices import cuda_count_problem

    problem = cuda_count_problem(path, dev, torch.cuda.device_count())
    return problem is None, path, problem or ""


def launcher_options(registry: Registry, cfg: ExperimentConfig) -> dict[str, Any]:
    """The typed ``launcher_options`` of ``cfg.launcher`` (see :func:`zoo.core.streams.check_options`).

    Raises:
        ConfigError: an option the launcher does not have, or a value it refuses.
    """
    if not cfg.launcher_options:
        return {}
    factory = registry.get("launcher", cfg.launcher).load()
    return check_options(factory, cfg.launcher, cfg.launcher_options, "launcher_options", kind="launcher")


def missing_package(registry: Registry, kind: str, name: str, path: str) -> tuple[str, str] | None:
    """``(path, message)`` when component ``kind``/``name`` declares ``requires=PACKAGE`` at
    registration and that package is not installed (the message gives its ``install`` hint)."""
    import importlib.util

    component = registry.get(kind, name)
    package = component.option("requires")
    if package and importlib.util.find_spec(package) is None:
        return path, (f"{path}={name!r} needs the Python package {package!r}, which is not installed: "
                      f"{component.option('install') or f'pip install {package}'}")
    return None


def resolver_options(registry: Registry, cfg: ExperimentConfig) -> dict[str, Any]:
    """The typed ``resolver.options`` of ``cfg.resolver.name`` (see :func:`zoo.core.streams.check_options`).

    Raises:
        ConfigError: an option the resolver does not have, or a value it refuses.
    """
    if not cfg.resolver.options:
        return {}
    factory = registry.get("resolver", cfg.resolver.name).load()
    return check_options(factory, cfg.resolver.name, cfg.resolver.options, "resolver.options", kind="resolver")


# ----------------------------------------------------------------------------- validation
def stop_when_problems(cfg: ExperimentConfig) -> list[tuple[str, str]]:
    """``("stop_when", message)`` when ``stop_when`` is set and does not parse
    (:func:`zoo.core.curriculum.parse_condition`); empty otherwise."""
    if not cfg.stop_when:
        return []
    try:
        parse_condition(cfg.stop_when, "stop_when")
    except ValueError as exc:
        return [("stop_when", str(exc))]
    return []


def supervision_problems(cfg: ExperimentConfig) -> list[tuple[str, str]]:
    """``(field, message)`` for ``supervision`` values that do not fit together (each option's
    own range is checked by its ``bounded`` metadata): ``restart_backoff_max_s`` below
    ``restart_backoff_s``; ``trainer_restarts`` with more than one trainer (a restarted rank
    cannot rejoin its ``torch.distributed`` group)."""
    sv, out = cfg.supervision, []
    if sv.restart_backoff_max_s < sv.restart_backoff_s:
        out.append(("supervision.restart_backoff_max_s",
                    f"supervision.restart_backoff_max_s={sv.restart_backoff_max_s!r} is below "
                    f"supervision.restart_backoff_s={sv.restart_backoff_s!r}; raise it or lower the backoff"))
    trainers = getattr(cfg.trainer, "count", 1)
    if sv.trainer_restarts and trainers > 1:
        out.append(("supervision.trainer_restarts",
                    f"supervision.trainer_restarts={sv.trainer_restarts} needs a single trainer, but trainer.count="
                    f"{trainers} (a restarted rank cannot rejoin its torch.distributed group); set "
                    "--set supervision.trainer_restarts=0 and resume a stopped run with zoo resume NAME"))
    return out


def history_problems(cfg: ExperimentConfig) -> list[tuple[str, str]]:
    """``(field, message)`` for ``trainer.history`` values that do not fit together (each
    option's own range is checked by its ``bounded`` metadata): ``keep`` without a schedule
    (``every_updates`` and ``every_minutes`` both 0: no version would be kept), and a schedule
    with ``trainer.learn=false`` (no update, so no version)."""
    t = cfg.trainer
    h = getattr(t, "history", None)
    if h is None:
        return []
    on = h.every_updates > 0 or h.every_minutes > 0
    if h.keep > 0 and not on:
        return [("trainer.history.keep", f"trainer.history.keep={h.keep} has no schedule to keep versions by: set "
                 "trainer.history.every_updates=N and/or trainer.history.every_minutes=M, or drop "
                 "trainer.history.keep (docs/history.md)")]
    if on and not t.learn:
        key = "trainer.history.every_updates" if h.every_updates > 0 else "trainer.history.every_minutes"
        return [(key, f"{key} keeps versions of a policy that trainer.learn=false never updates; drop {key}, or "
                 "set trainer.learn=true")]
    return []


def inline_problems(cfg: ExperimentConfig) -> list[tuple[str, str]]:
    """``(field, message)`` for each policy option that contradicts ``policy.inline=true``
    (the policy inside each actor, on its CPU, with no policy worker): ``policy.count`` other
    than 1 and ``policy.device`` other than ``cpu``. Empty when ``policy.inline`` is false."""
    p = cfg.policy
    if not p.inline:
        return []
    problems = []
    if p.count != 1:
        problems.append(("policy.count", f"policy.count={p.count} contradicts policy.inline=true: inline inference "
                         "runs the policy inside each actor, with no policy worker; drop "
                         f"--set policy.count={p.count}, or set policy.inline=false to run {p.count} policy workers"))
    if p.device != "cpu":
        problems.append(("policy.device", f"policy.device={p.device!r} contradicts policy.inline=true: inline "
                         "inference runs the policy on each actor's CPU; set --set policy.device=cpu, or "
                         f"policy.inline=false to run inference on {p.device} in a policy worker"))
    return problems


def validate(cfg: ExperimentConfig, registry: Registry | None = None, *, check_budget: bool = True,
             presets_pending: bool = False) -> None:
    """Check cross-field rules; every problem is reported at once.

    ``presets_pending``: ``cfg`` holds the user's layers on the dataclass defaults, before the
    algorithm's presets (:func:`resolve_config`'s first pass, which only needs the env options to
    probe the spec). The rules whose verdict the presets can change are left to the second pass:
    those reading ``actors.count``, ``actors.envs_per_actor`` or ``actors.ring_size`` (the presets
    set them) and the algorithm Config's own cross-field checks (the presets set ``algo.*``, e.g.
    r2d2's ``sequence_length`` and ``burn_in``). Judged on the defaults they would refuse a setting
    the presets make valid (``--set actors.envs_per_actor=1`` with sac's ``actors.ring_size=1``).

    Rules: every option within its own range, declared by its ``bounded`` metadata
    (:func:`zoo.core.options.bound_problems`: counts and lengths >= 1, ``0 <= seed < 2**32``,
    every float finite, ...; this covers the algorithm's and the env's options too);
    ``envs_per_actor`` divisible by ``ring_size``; ``env_steps`` and ``frames`` not both
    non-zero; with ``check_budget`` and ``cfg.spec`` set, a budget of at least one update
    (:func:`steps_per_update`: a smaller one would end the run with 0 updates); with ``cfg.spec``
    set, an algorithm ``Config`` with ``check_batch`` accepts one trainer's batch
    (:func:`batch_agent_steps`; PPO: ``algo.minibatches`` at most its agent steps), and one
    with ``check_experiment(cfg)`` accepts the whole experiment (apex-dqn: a replay that fits
    in memory, one trainer); devices
    are cpu, cuda, cuda:N or mps; ``name`` follows :data:`NAME_RULE`; ``policy.count`` and
    ``trainer.count`` at most ``actors.count`` (every policy worker and trainer needs an actor);
    no option contradicting ``policy.inline`` (:func:`inline_problems`); with ``cfg.spec`` set, a
    ``[curriculum]`` only on an env with stages, with conditions that parse, one or one per
    advance, and no named policies (:func:`zoo.core.curriculum.curriculum_problems`); ``stop_when``
    a condition that parses (:func:`stop_when_problems`); with a launcher that
    runs every worker on this host, ``trainer.threads`` and ``policy.threads`` at most the
    machine's cores (:func:`zoo.core.workers.threads.thread_problems`); ``launcher`` is a registered
    launcher; every
    ``streams.*.transport`` is registered (``registry`` defaults to the process-wide one)
    and ``streams.*.options`` are options of that transport with values it accepts
    (:func:`zoo.core.streams.check_options`), and the transport can be built with them as a
    worker builds it (a bad ``ZOO_*`` environment variable is reported here);
    ``resolver.name`` is a registered resolver and ``resolver.options`` are its options;
    ``launcher_options`` are options of the launcher (its ``Options``); ``workers.<kind>`` names
    a registered worker kind and holds options of that kind, within their ranges
    (:func:`zoo.core.kinds.worker_options`); a launcher or
    resolver registered with ``requires=PACKAGE`` needs that package installed (the message
    gives its ``install`` hint, e.g. ``pip install "zoo-rl[ray]"``); with a launcher
    registered ``remote=True`` the devices are not checked on this machine (the workers' are);
    the algorithm's and the env's Config dataclasses are rebuilt with
    ``dataclasses.replace`` (re-running their ``__post_init__`` checks) and their
    ``validate()`` is called when they have one; a ``ValueError``/``TypeError`` from either
    is reported as a problem.

    Raises:
        ConfigError: ``field`` is the first bad field, ``problems`` lists all messages.
    """
    from zoo.core.config import _NAME_RE, _one_update_fits, batch_agent_steps, name_problem  # (a cycle at import)

    problems: list[tuple[str, str]] = []

    def need(ok: bool, path: str, msg: str) -> None:
        if not ok:
            problems.append((path, msg))

    problems += bound_problems(cfg)  # every option's own range (its ``bounded`` metadata; floats finite)
    a, p, t = cfg.actors, cfg.policy, cfg.trainer
    for path, count, who in (("policy.count", p.count, "policy worker"), ("trainer.count", t.count, "trainer")):
        need(presets_pending or count <= max(a.count, 1), path,
             f"{path}={count} is more than actors.count={a.count}: actor i goes to {who} i mod {path}, so "
             f"{count - a.count} {who}(s) would get no actor and wait forever; set --set {path}={a.count} "
             f"or --set actors.count={count}")
    if not presets_pending and a.envs_per_actor >= 1 and a.ring_size >= 1 and a.envs_per_actor % a.ring_size:
        problems.append((
            "actors.envs_per_actor",
            f"actors.envs_per_actor={a.envs_per_actor} is not divisible by actors.ring_size={a.ring_size}; "
            f"each ring group holds the same number of envs: use a multiple of {a.ring_size} "
            f"(e.g. {a.ring_size * max(1, a.envs_per_actor // a.ring_size)}) or change actors.ring_size",
        ))
    p = cfg.policy
    problems += supervision_problems(cfg)
    problems += inline_problems(cfg)
    problems += history_problems(cfg)
    problems += curriculum_problems(cfg)  # an env with stages, conditions that parse and fit them
    problems += stop_when_problems(cfg)
    # The trainer's network lives where the algorithm's own `device` option says. A launcher
    # registered with remote=True (ray) runs workers on other machines: their devices are theirs.
    reg0 = registry
    if reg0 is None:
        from zoo.core.plugins import get_registry

        reg0 = get_registry()
    remote = cfg.launcher in reg0.names("launcher") and bool(reg0.get("launcher", cfg.launcher).option("remote"))
    devices = [] if p.inline else [("policy.device", p.device)]  # inline: inline_problems says it
    if not remote:  # every worker on this host: explicit thread counts fit its cores
        from zoo.core.workers.threads import thread_problems

        problems += thread_problems(cfg)
    if isinstance(getattr(cfg.algo, "device", None), str):
        devices.append(("algo.device", cfg.algo.device))
    for path, dev in devices:
        if not _DEVICE_RE.match(dev):
            need(False, path, f"{path}={dev!r} is not a device; use cpu, cuda, cuda:N or mps")
        elif dev != "cpu" and not remote:
            ok, _, message = _device_available(path, dev)
            need(ok, path, message)
            if ok and path == "policy.device":
                from zoo.core.devices import precision_problem

                bad = precision_problem("policy.precision", p.precision, dev)
                need(bad is None, "policy.precision", bad or "")
            if ok and path == "algo.device" and isinstance(getattr(cfg.algo, "precision", None), str):
                from zoo.core.devices import precision_problem  # algo.precision=bfloat16 on a pre-Ampere GPU

                bad = precision_problem("algo.precision", cfg.algo.precision, dev)
                need(bad is None, "algo.precision", bad or "")
    need(not (cfg.env_steps and cfg.frames), "env_steps",
         f"both env_steps={cfg.env_steps} and frames={cfg.frames} are set; set only one budget "
         "(--steps N or --frames N)")
    if check_budget and cfg.env_steps == 0 and cfg.frames == 0:
        problems.append(("env_steps", "no budget: set env_steps or frames (--steps N or --frames N)"))
    if check_budget and cfg.spec is not None and not problems and (cfg.env_steps or cfg.frames):
        need(*_one_update_fits(cfg, cfg.spec))
    need(bool(cfg.runs_dir), "runs_dir", "runs_dir must not be empty")
    if cfg.name or check_budget:
        need(bool(_NAME_RE.match(cfg.name)), "name", name_problem(cfg.name))
    reg = registry
    if reg is None:
        from zoo.core.plugins import get_registry

        reg = get_registry()
    launchers = reg.names("launcher")
    if cfg.launcher not in launchers:
        close = _suggest(cfg.launcher, launchers)
        problems.append(("launcher", f"launcher={cfg.launcher!r} is not a registered launcher (--launcher NAME); "
                         + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                         + f"installed: {', '.join(launchers) or 'none'} (see `zoo list launchers`)"))
    else:
        problems += [p for p in [missing_package(reg, "launcher", cfg.launcher, "launcher")] if p]
        try:
            launcher_options(reg, cfg)
        except ConfigError as exc:
            problems += [(exc.field, m) for m in exc.problems]
    transports = reg.names("transport")
    for stream in ("inference", "sample", "parameter"):
        path = f"streams.{stream}.transport"
        value = getattr(cfg.streams, stream).transport
        if value not in transports:
            close = _suggest(value, transports)
            problems.append((path, f"{path}={value!r} is not a registered transport; "
                             + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                             + f"installed: {', '.join(transports) or 'none'}"))
            continue
        if reg.get("transport", value).option("cross_process", True) is False:
            problems.append((path, f"{path}={value!r} joins endpoints within one process only, but zoo train runs "
                             "every worker as its own process; use auto (the default), shm, nng or tcp"))
            continue
        try:
            transport_options(reg, cfg, stream)
        except ConfigError as exc:
            problems += [(exc.field, m) for m in exc.problems]
            continue
        try:  # built as a worker builds it (no files, no sockets): its environment variables are read now
            transport_for(reg, cfg, stream, "check")
        except TransportError as exc:
            problems.append((path, f"{path}={value!r}: {exc}"))
        except Exception as exc:  # noqa: BLE001 - a broken transport plugin is reported, not raised
            problems.append((path, f"{path}={value!r}: the transport failed to load or build: "
                                   f"{type(exc).__name__}: {exc}"))
    resolvers = reg.names("resolver")
    if cfg.resolver.name not in resolvers:
        close = _suggest(cfg.resolver.name, resolvers)
        problems.append(("resolver.name", f"resolver.name={cfg.resolver.name!r} is not a registered resolver; "
                         + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                         + f"installed: {', '.join(resolvers) or 'none'}"))
    else:
        problems += [p for p in [missing_package(reg, "resolver", cfg.resolver.name, "resolver.name")] if p]
        try:
            resolver_options(reg, cfg)
        except ConfigError as exc:
            problems += [(exc.field, m) for m in exc.problems]
    try:  # plugins' worker kinds: workers.<kind>.<option> (and one kind leading the run)
        if reg.names("worker") or cfg.workers:
            worker_options(worker_kinds(reg), cfg)
    except ConfigError as exc:
        problems += [(exc.field, m) for m in exc.problems]
    check_batch = getattr(cfg.algo, "check_batch", None)
    if cfg.spec is not None and callable(check_batch) and not any(f.startswith(("algo.", "actors.", "trainer.",
                                                                                "sample_length")) for f, _ in problems):
        try:
            check_batch(*batch_agent_steps(cfg, cfg.spec))
        except ValueError as exc:
            text = str(exc)
            problems.append((text.split("=")[0] if re.match(r"algo\.\w+=", text) else "algo", text))
    check_experiment = getattr(cfg.algo, "check_experiment", None)
    if cfg.spec is not None and callable(check_experiment) and not any(
            f.startswith(("algo.", "actors.", "trainer.", "sample_length")) for f, _ in problems):
        try:
            check_experiment(cfg)
        except ValueError as exc:
            text = str(exc)
            problems.append((m.group(1) if (m := re.match(r"([\w.]+)=", text)) else "algo", text))
    for part in ("algo", "env"):
        sub = getattr(cfg, part)
        if not dataclasses.is_dataclass(sub) or isinstance(sub, type) or (presets_pending and part == "algo"):
            continue
        if any(path.startswith(part + ".") for path, _ in problems):
            continue  # already reported by the bounds; __post_init__ would repeat the first one
        try:
            dataclasses.replace(sub)  # re-runs the plugin's __post_init__ checks on the final values
            check = getattr(sub, "validate", None)
            if callable(check):
                check()
        except (ValueError, TypeError) as exc:
            text = str(exc)
            problems.append((part, text if text.startswith(part + ".") else f"{part}: {text}"))
    if problems:
        raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0],
                          problems=[m for _, m in problems])
