"""The ``zoo`` command line (typer + rich).

Commands:

- ``zoo list [algorithms|envs|transports|launchers|resolvers]``: registered components; imports no plugin's
  heavy dependencies (no torch, ale-py or mujoco).
- ``zoo plugins``: plugin distributions, versions, the hooks they implement, failures.
- ``zoo train ALGO --env ENV [--seed N] [--config FILE] [--set key=value ...]
  [--steps N | --frames N] [--name NAME] [--launcher NAME] [--ray-address ADDR]``: resolve the config,
  then run the controller (``--ray-address`` implies ``--launcher ray``: docs/cluster.md).
- ``zoo train --resume RUN_DIR [--steps N | --frames N] [--set key=value ...]`` and
  ``zoo resume NAME [--runs-dir DIR] [...]``: continue a stopped, crashed or finished run
  in its run directory from ``checkpoints/latest.pt`` (:mod:`zoo.core.resume`); a changed
  config key that is not safe to change is refused (exit 2) with the list of differences.
- ``zoo watch RUN [--runs-dir DIR] [--refresh S]``: the live display of a run started
  elsewhere, from its ``live.json``, until the run ends (``zoo.watch``).
- plugin commands, added through the ``register_commands(app)`` hook.

Exit codes: 0 success; 1 plugin start-up failure (``ZOO_STRICT_PLUGINS=1``, duplicate
component names) or a failed run; 130 / 143 / 129: the run was stopped by Ctrl-C / SIGTERM /
SIGHUP (each stops it the same way: see :mod:`zoo.core.controller`); 2 usage errors: unknown
algorithm or environment (the closest names are suggested), bad option values (the field, the
bad value and what is allowed). No worker process is started before the config is fully resolved.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    # typer's own (vendored) click: the Context type its command classes' methods take
    from typer import _click as click

from zoo.core import config as zconfig
from zoo.core.plugins import PluginHost, PluginLoadError, get_host
from zoo.core.registry import DuplicateComponentError, UnknownComponentError
from zoo.core.stopping import CTRL_C, from_ctrl_c

__all__ = ["build_app", "main", "app", "EXIT_USAGE", "EXIT_FAILURE"]

EXIT_FAILURE = 1
EXIT_USAGE = 2
_KIND_OF = {"algorithms": "algorithm", "envs": "env", "transports": "transport", "launchers": "launcher",
            "resolvers": "resolver", "workers": "worker", "baselines": "baseline"}


class ComponentKind(str, Enum):
    algorithms = "algorithms"
    envs = "envs"
    transports = "transports"
    launchers = "launchers"
    resolvers = "resolvers"
    workers = "workers"
    baselines = "baselines"


# ----------------------------------------------------------------------------- output helpers

def _plural(n: int, what: str) -> str:
    """``"1 trainer"``, ``"2 trainers"``."""
    return f"{n} {what}{'' if n == 1 else 's'}"

def _console(stderr: bool = False) -> Console:
    """A console on stdout/stderr; 160 columns when not a terminal (unless COLUMNS is set)."""
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=160)
    return console


def _error(message: str) -> None:
    _console(stderr=True).print(Text("error: ", style="bold red") + Text(message), soft_wrap=True, highlight=False)


def _warn(console: Console, message: str) -> None:
    console.print(Text("warning: ", style="bold yellow") + Text(message, style="yellow"), soft_wrap=True,
                  highlight=False)


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """``error: <message>`` and exit status ``code``; after a Ctrl-C (:data:`zoo.core.stopping.CTRL_C`)
    the failure is the Ctrl-C's: ``error: interrupted (Ctrl-C)`` and 130 (a Ctrl-C inside an import
    can surface as another error, which would read as bad input)."""
    if code != 130 and CTRL_C.is_set():
        return _interrupted()
    _error(message)
    return typer.Exit(code)


def _interrupted() -> typer.Exit:
    """``error: interrupted (Ctrl-C)`` on stderr and exit status 130. SIGINT is ignored first (main
    thread): a second Ctrl-C while the line is written would otherwise reach typer, which ends with
    status 130 and prints nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping already
    return _fail("interrupted (Ctrl-C)", 130)


# ----------------------------------------------------------------------------- zoo list / plugins
ENV_NAMING_HINT = (
    "Your own env: a Gymnasium env registered by a module -> --env my_package.envs:MyEnv-v0 (the module is "
    "imported in every worker; --set env.kwargs=key=value,... for gymnasium.make); a PettingZoo Parallel env -> "
    "--env pettingzoo:my_package.my_env (a module with parallel_env()); any other -> an env plugin "
    "(examples/zoo-corridor). Spaces, action masks and conventions: docs/envs.md.")
def list_command(
    kind: ComponentKind | None = typer.Argument(None, metavar="KIND",
                                                help="Show only this kind of component."),
) -> None:
    """List registered algorithms, environments, transports, launchers, resolvers, worker kinds and baselines."""
    host = get_host()
    components = host.registry.all(_KIND_OF[kind.value] if kind else None)
    console = _console()
    table = Table(title=f"Zoo {kind.value if kind else 'components'}", title_justify="left")
    with_budget = any(c.kind == "env" for c in components)
    for column in ("name", "kind", "plugin", "version", *(("default budget",) if with_budget else ()), "summary"):
        table.add_column(column, no_wrap=column != "summary")
    for c in components:
        budget = (Text(_budget_text(c)),) if with_budget else ()
        table.add_row(Text(c.name, style="bold"), c.kind, Text(c.plugin), Text(c.version), *budget, Text(c.summary))
    console.print(table)
    if not components:
        console.print(f"no {kind.value if kind else 'components'} registered")
    if kind is None or kind.value == "envs":
        console.print(ENV_NAMING_HINT, soft_wrap=True)
    for p in host.failures:
        _warn(console, f"plugin {p.name} ({p.distribution} {p.version}) failed to load: {p.error}")


def _plugin_workers(cfg: Any, registry: Any) -> str:
    """``"1 param-stats worker, "``: the workers of kinds other than the three built-in ones (the
    eval manager, plugins' kinds) the run asks for (``workers.<kind>``), or ``""``."""
    from zoo.core.kinds import worker_kinds
    from zoo.core.workers.kinds import BUILTIN

    counts = [(k.name, k.workers(cfg)) for k in worker_kinds(registry) if k.name not in BUILTIN] \
        if registry.names("worker") else []
    return "".join(f"{_plural(n, name + ' worker')}, " for name, n in counts if n)


def _budget_text(component: Any) -> str:
    """An env's default budget for ``zoo list``: ``"10,000,000 frames"``; ``""`` for other kinds.

    A budget computed from ``ARG`` (``--env NAME:ARG``; a ``"module:function"``) shows the value
    for no argument and says that it varies; a missing or broken one says so.
    """
    if component.kind != "env":
        return ""
    try:
        kind, n = zconfig.default_budget(component, None)
    except Exception as exc:  # noqa: BLE001 - one broken plugin must not break the listing
        return "none (give --steps)" if component.options.get("default_budget") is None else f"error: {exc}"
    text = f"{n:,} {kind.replace('_', ' ')}"
    value = component.options.get("default_budget")
    return text + " (varies with ARG)" if isinstance(value, str) or callable(value) else text


def plugins_command() -> None:
    """List installed plugins: distribution, version, hooks implemented, failures."""
    host = get_host()
    console = _console()
    table = Table(title="Zoo plugins", title_justify="left")
    for column in ("plugin", "distribution", "version", "source", "hooks", "status"):
        table.add_column(column, no_wrap=column not in ("hooks",))
    for p in sorted(host.plugins.values(), key=lambda p: (not p.builtin, p.name)):
        status = Text("failed", style="red") if p.error else Text("ok", style="green")
        table.add_row(Text(p.name, style="bold"), Text(p.distribution), Text(p.version),
                      "built-in" if p.builtin else "entry point", Text(", ".join(p.hooks) or "-"), status)
    console.print(table)
    for p in host.failures:
        _warn(console, f"plugin {p.name} ({p.distribution} {p.version}) failed to load: {p.error}")


def _failed_plugins_note(host: Any) -> str:
    """`` Plugins that failed to load ...: plugin 'x' (dist 1.0): ImportError: ...`` or ``""``."""
    failed = host.failures
    if not failed:
        return ""
    head = " A plugin failed to load" if len(failed) == 1 else f" {len(failed)} plugins failed to load"
    return (head + " (its components are missing; see `zoo plugins`): "
            + "; ".join(f"plugin {p.name!r} ({p.distribution} {p.version}): {p.error}" for p in failed) + ".")


# ----------------------------------------------------------------------------- zoo train --help
def _plain(doc: str) -> str:
    """Docstring markup to plain text: ````x```` -> ``x``, ``:func:`f``` -> ``f``."""
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", doc).replace("``", "")


def _options_table(title: str, options: list[zconfig.OptionInfo]) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("option", no_wrap=True, style="bold")
    table.add_column("type", no_wrap=True)
    table.add_column("default", no_wrap=True)
    table.add_column("description")
    for o in options:
        doc = _plain(o.doc) + (f" Allowed: {o.allowed}." if o.allowed else "")
        table.add_row(Text(o.path), Text(o.type), Text(repr(o.default)), Text(doc.strip()))
    return table


def _train_help(algo_name: Any, env_name: Any) -> list[Any]:
    """Rich renderables listing the options ``--set`` accepts for this algorithm and env."""
    registry = get_host().registry
    out: list[Any] = []
    if isinstance(algo_name, str):
        try:
            component = registry.get("algorithm", algo_name)
            cls = zconfig.algorithm_config_class(component)
            if cls is None:
                out.append(Text(f"Algorithm {component.name!r} has no options."))
            else:
                out.append(_options_table(
                    f"Algorithm options ({component.name}): --set algo.NAME=VALUE",
                    zconfig.list_options(cls, "algo.")))
        except UnknownComponentError as exc:
            out.append(Text(f"warning: {exc}", style="yellow"))
        except Exception as exc:  # noqa: BLE001 - help must not crash on a broken plugin
            out.append(Text(f"warning: cannot load the options of {algo_name!r}: {type(exc).__name__}: {exc}",
                            style="yellow"))
    else:
        out.append(Text("Algorithms: " + ", ".join(registry.names("algorithm"))
                        + ". Run `zoo train ALGO --help` for an algorithm's options."))
    if isinstance(env_name, str):
        try:
            component, arg = zconfig.resolve_env(registry, env_name)
            cls = zconfig.env_config_class(component)
            where = component.name + (f", for {env_name}" if env_name != component.name else "")
            if cls is None:
                out.append(Text(f"Environment {component.name!r} has no options."))
            else:
                out.append(_options_table(f"Environment options ({where}): --set env.NAME=VALUE",
                                          zconfig.list_options(cls, "env.")))
        except UnknownComponentError as exc:
            out.append(Text(f"warning: {exc}", style="yellow"))
        except Exception as exc:  # noqa: BLE001
            out.append(Text(f"warning: cannot load the options of env {env_name!r}: {type(exc).__name__}: {exc}",
                            style="yellow"))
    else:
        brief = Table(title="Environment options: --set env.NAME=VALUE", title_justify="left")
        brief.add_column("env", no_wrap=True, style="bold")
        brief.add_column("options (defaults)")
        for component in registry.all("env"):
            try:
                cls = zconfig.env_config_class(component)
                text = ", ".join(f"{o.path}={o.default!r}" for o in zconfig.list_options(cls, "env.")) if cls else "-"
            except Exception as exc:  # noqa: BLE001
                text = f"(cannot load: {type(exc).__name__}: {exc})"
            brief.add_row(Text(component.name), Text(text))
        out.append(brief)
        out.append(Text(f"For an environment's option descriptions: zoo train {algo_name or 'ALGO'} --env ENV --help"))
    out.append(_options_table("Experiment options: --set NAME=VALUE (also as TOML in --config FILE)",
                              zconfig.list_options(zconfig.ExperimentConfig)))
    out.append(Text("Defaults above are the dataclass defaults; the algorithm's presets for the environment "
                    "come next, then --config, then --set. The resolved config is written to "
                    "<runs_dir>/<name>/config.json."))
    return out


def _plain_help(option: Any) -> Any:
    """The ``--help`` flag without typer's type placeholder (``<bool>``): it takes no value."""
    if option is not None:
        option.metavar = ""
    return option


def _plain_usage(command: Any) -> None:
    """Required arguments in the usage line as ``ALGO``, not typer 0.29's ``{ALGO}``."""
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") == "argument" and param.required:
            name = param.metavar or param.name.upper()
            param._usage_display_name = lambda name=name, many=param.nargs != 1: name + ("..." if many else "")


class ZooGroup(TyperGroup):
    """The ``zoo`` group: its own and every subcommand's help shows no ``<bool>`` after
    ``--help`` and no braces around required arguments (plugin commands included: every
    subcommand is reached through :meth:`get_command`)."""

    def get_help_option(self, ctx: click.Context) -> Any:
        return _plain_help(super().get_help_option(ctx))

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        """Parse the command line; a Ctrl-C meanwhile (typer imports its parameter modules while it
        parses, a few hundred ms on a loaded machine) ends it like one in :meth:`invoke`: typer would
        turn it into exit status 130 with nothing printed."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except typer.Exit:  # an exit already decided (after a Ctrl-C: its line is written)
            raise
        except Exception as exc:
            if from_ctrl_c(exc):
                raise _interrupted() from None
            raise
        except KeyboardInterrupt:
            raise _interrupted() from None

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a Ctrl-C that it does not handle itself (while the config is built,
        plugins and torch are imported, the probe env runs...) ends it with one line and exit
        status 130, not click's "Aborted!" with status 1, typer's silent 130 or a traceback."""
        try:
            return super().invoke(ctx)
        except typer.Exit:  # an exit already decided (after a Ctrl-C: its line is written)
            raise
        except Exception as exc:  # a RuntimeError raised from a Ctrl-C (zoo.core.stopping.from_ctrl_c)
            if from_ctrl_c(exc):
                raise _interrupted() from None
            raise
        except KeyboardInterrupt:
            raise _interrupted() from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _plain_help(command.get_help_option(ctx))  # cached by the command: the one its help shows
            _plain_usage(command)
        return command


class TrainCommand(TyperCommand):
    """``zoo train``: its help lists the chosen algorithm's and environment's options.

    The raw ``ALGO`` and ``--env`` values are read with click's own parser before the
    eager ``--help`` runs, so ``zoo train ppo --help --env atari:Pong`` works in any order.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            opts, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except Exception:  # noqa: BLE001 - only a peek: typer's own (vendored) click reports bad args later
            opts = {}
        ctx.meta["zoo.train"] = {k: v for k, v in opts.items() if k in ("algo", "env") and isinstance(v, str)}
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter) -> None:
        super().format_help(ctx, formatter)
        raw = ctx.meta.get("zoo.train", {})
        renderables = _train_help(raw.get("algo"), raw.get("env"))
        console = _console()
        if self.rich_markup_mode is None:  # plain click help: keep the order by writing to the formatter
            with console.capture() as capture:
                console.print(*renderables)
            formatter.write(capture.get())
        else:
            console.print(*renderables)


# ----------------------------------------------------------------------------- zoo train
def train_command(
    algo: str | None = typer.Argument(None, metavar="ALGO", help="Algorithm name (see `zoo list algorithms`), "
                                      "e.g. ppo (with --resume: taken from the run)."),
    env: str | None = typer.Option(None, "--env", "-e", metavar="ENV",
                                   help="Environment: a Gymnasium id (CartPole-v1), NAME:ARG (atari:Pong) or a "
                                   "name (with --resume: taken from the run)."),
    seed: int | None = typer.Option(None, "--seed", metavar="N",
                                    help="Random seed, 0 <= N < 2**32 (default 1, or the config file's)."),
    config_file: Path | None = typer.Option(None, "--config", "-c", metavar="FILE",
                                            help="TOML file of options (tables or dotted keys).", dir_okay=False),
    overrides: list[str] = typer.Option([], "--set", "-s", metavar="KEY=VALUE",
                                        help="Override one option: --set actors.count=4 "
                                        "(repeatable; applied after --config)."),
    steps: int | None = typer.Option(None, "--steps", min=1, metavar="N",
                                     help="Budget in env steps, N >= 1 (default: the env's default budget)."),
    frames: int | None = typer.Option(None, "--frames", min=1, metavar="N",
                                      help="Budget in frames = env steps x frame-skip, N >= 1 (default: the env's "
                                      "default budget)."),
    name: str | None = typer.Option(None, "--name", metavar="NAME",
                                    help="Run name: one folder name of letters, digits, '.', '_' and '-', not "
                                    "starting with '.' or '-' (default <algo>-<env>-<YYYYmmdd-HHMMSS>)."),
    launcher: str | None = typer.Option(None, "--launcher", metavar="NAME",
                                        help="How workers are started (see `zoo list launchers`; default local)."),
    ray_address: str | None = typer.Option(None, "--ray-address", metavar="ADDR",
                                           help="With --launcher ray: the Ray cluster, auto (the one on this "
                                           "machine), local (a new one for this run) or the head's IP:PORT."),
    resume: Path | None = typer.Option(None, "--resume", file_okay=False, metavar="RUN_DIR",
                                       help="Continue the run in this run directory (e.g. runs/NAME) from its last "
                                       "checkpoint; --steps/--frames extend its budget (counted from its start)."),
) -> None:
    """Train ALGO on an environment through the SRL dataflow (actors -> policy worker -> trainer)."""
    host = get_host()
    if steps is not None and frames is not None:
        raise _fail("--steps and --frames are mutually exclusive: give the budget in env steps or in frames")
    launcher, overrides = _ray_address(launcher, ray_address, overrides)
    if resume is not None:
        if name is not None:
            raise _fail("--name with --resume: a resumed run keeps its run directory and name; drop --name")
        _resume(host, str(resume), algo=algo, env=env, seed=seed, config_file=config_file, overrides=overrides,
                steps=steps, frames=frames, launcher=launcher)
        return
    if algo is None or env is None:
        raise _fail("zoo train needs an algorithm and an environment, e.g. zoo train ppo --env CartPole-v1 "
                    "(or --resume RUN_DIR to continue a run)")
    try:
        cfg = zconfig.build_config(host.registry, algo, env, seed=seed, config_file=config_file,
                                   overrides=overrides, steps=steps, frames=frames, name=name,
                                   launcher=launcher)
    except UnknownComponentError as exc:  # a plugin that failed to load may be where it should come from
        raise _fail(str(exc) + _failed_plugins_note(host)) from None
    except zconfig.ConfigError as exc:
        raise _fail(str(exc)) from None
    from zoo.core.controller import prepare_run_dir

    try:  # claimed atomically: a taken default name gets a suffix, a taken --name is refused
        run_dir = prepare_run_dir(cfg)
    except FileExistsError as exc:  # nothing was overwritten
        raise _fail(str(exc)) from None
    except OSError as exc:  # e.g. runs_dir is a file, or not writable
        raise _fail(f"runs_dir={cfg.runs_dir!r}: cannot create the run directory {exc.filename!r} "
                    f"({exc.strerror}); choose a writable folder with --set runs_dir=PATH") from None
    spec = cfg.spec
    assert spec is not None, "build_config probes the env for its spec"
    console = _console()
    _, total = zconfig.budget(cfg, spec)
    env_component, _ = zconfig.resolve_env(host.registry, env)
    unit = (f"{cfg.frames:,} frames = {total:,} env steps (frame-skip {spec.frame_skip})" if cfg.frames
            else f"{total:,} env steps")
    policy_workers = "policy inline in each actor" if cfg.policy.inline else _plural(cfg.policy.count, "policy worker")
    trainers = _plural(cfg.trainer.count, 'trainer') + ", "
    if cfg.policies is not None and not cfg.policies.implicit:  # named policies: each one's workers
        policy_workers = "policies " + ", ".join(
            f"{n} ({_plural(len(p.agents), 'agent')}, "
            + ("inline" if p.policy.inline else _plural(p.policy.count, "policy worker"))
            + (f", {_plural(p.trainer.count, 'trainer')})" if p.trainable else ", frozen)")
            for n, p in cfg.policies.named.items())
        trainers = ""
    console.print(
        Text.assemble(("zoo train ", "bold"), (cfg.name, "bold cyan"),
                      f": {algo} on {env} ({env_component.name}), seed {cfg.seed}, budget {unit}, "
                      f"{_plural(cfg.actors.count, 'actor')} x {_plural(cfg.actors.envs_per_actor, 'env')}, "
                      f"{policy_workers}, "
                      f"{trainers}{_plugin_workers(cfg, host.registry)}"
                      f"run dir {Path(cfg.runs_dir) / cfg.name}"),
        soft_wrap=True, highlight=False)
    explain = getattr(host.registry.get("algorithm", algo).load(), "explain_presets", None)
    if explain is not None:  # presets scaled to this machine say what they chose and why
        console.print(Text(f"{algo} presets: ", style="bold") + Text(explain(spec)), soft_wrap=True, highlight=False)
    _print_precision(host, cfg, algo, console)
    _print_threads(host, cfg, console)
    _launch(cfg, console, run_dir, fresh=True)


def _ray_address(launcher: str | None, address: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """``--ray-address ADDR`` as ``--launcher ray --set launcher_options.address=ADDR``.

    Raises:
        typer.Exit: (2) with another ``--launcher``.
    """
    if address is None:
        return launcher, list(overrides)
    if launcher not in (None, "ray"):
        raise _fail(f"--ray-address is an option of --launcher ray, not of --launcher {launcher}; drop one of them")
    return "ray", [*overrides, f"launcher_options.address={address}"]


def _print_precision(host: PluginHost, cfg: Any, algo: str, console: Console) -> None:
    """``algo.precision`` as the trainer will resolve it on this machine, and why (the
    algorithm's optional ``explain_precision(config, spec)``); nothing for an explicit ``float32``,
    which needs no torch import here (the default ``auto`` is printed with its choice)."""
    if getattr(cfg.algo, "precision", "float32") == "float32" or cfg.spec is None:
        return
    explain = getattr(host.registry.get("algorithm", algo).load(), "explain_precision", None)
    if explain is not None:
        remote = bool(host.registry.get("launcher", cfg.launcher).option("remote"))
        where = " (on this machine; each trainer resolves it on its own)" if remote else ""
        console.print(Text("training precision: ", style="bold") + Text(explain(cfg.algo, cfg.spec) + where),
                      soft_wrap=True, highlight=False)


def _print_threads(host: PluginHost, cfg: Any, console: Console) -> None:
    """The torch threads per role chosen for this machine (:mod:`zoo.core.workers.threads`), and
    the busy-machine hint where this machine's cores are busy with other work (a local launcher
    only: a remote one's trainers run on other hosts)."""
    from zoo.core.workers.threads import busy_cores, thread_plan

    plan = thread_plan(cfg)
    console.print(Text(plan.describe()), soft_wrap=True, highlight=False)
    remote = bool(host.registry.get("launcher", cfg.launcher).option("remote"))
    if plan.trainer_auto and plan.trainer > 1 and not remote:  # measured only where the hint could apply (0.2 s)
        hint = plan.busy_hint(busy_cores())
        if hint:
            console.print(Text(hint, style="yellow"), soft_wrap=True, highlight=False)


def _resume(host: PluginHost, target: str, runs_dir: str = "runs", **given: Any) -> None:
    """Continue the run ``target`` names (a run directory, or a run name under ``runs_dir``)."""
    from zoo.core.resume import find_run_dir, resume_config

    try:
        run_dir = find_run_dir(target, runs_dir)
        cfg, ckpt = resume_config(host.registry, run_dir, **given)
    except UnknownComponentError as exc:
        raise _fail(str(exc)) from None
    except zconfig.ConfigError as exc:
        raise _fail(str(exc)) from None
    console = _console()
    _, total = zconfig.budget(cfg)
    console.print(
        Text.assemble(("zoo resume ", "bold"), (cfg.name, "bold cyan"),
                      f": {cfg.algo_name} on {cfg.env_name}, seed {cfg.seed}, from its checkpoint at update "
                      f"{int(ckpt['updates']):,} (policy version {int(ckpt['policy_version']):,}, "
                      f"{int(ckpt['env_steps']):,} of {total:,} env steps), resume #{cfg.resume}, run dir {run_dir}"),
        soft_wrap=True, highlight=False)
    from zoo.core.graph import write_graph
    from zoo.core.rundir import snapshot_files

    before = snapshot_files(run_dir)  # put back if the segment is refused before it starts
    zconfig.save_config(cfg, run_dir)  # the budget (and other safe changes) as they now are
    write_graph(cfg, run_dir)
    _print_precision(host, cfg, cfg.algo_name, console)
    _print_threads(host, cfg, console)
    _launch(cfg, console, run_dir, start={"env_steps": int(ckpt["env_steps"]), "resume": cfg.resume,
                                          "trained_env_steps": int(ckpt.get("trained_env_steps", 0))},
            before=before)


def _unchanged(run_dir: str, name: str, before: dict[str, bytes | None]) -> bool:
    """Whether ``run_dir/name`` holds what the snapshot ``before`` holds (the controller writes
    ``status.json`` when a segment starts: unchanged, it never started)."""
    from zoo.core.rundir import snapshot_files

    return snapshot_files(run_dir, (name,))[name] == before.get(name)


def _launch(cfg: Any, console: Console, run_dir: str, fresh: bool = False,
            start: dict[str, Any] | None = None, before: dict[str, bytes | None] | None = None) -> None:
    """Run the controller for ``cfg`` in ``run_dir`` with the live display; exits with its code.

    ``fresh``: ``run_dir`` was just claimed for a new run; a refusal before the controller
    started (no ``status.json`` yet) removes it (:func:`~zoo.core.rundir.discard_run_dir`), so a
    refused run leaves nothing. ``start``: a resumed run's counters at its checkpoint (the
    ``done:`` line's segment, :func:`~zoo.display.format_summary`). ``before``: a resumed run's
    files as they were (:func:`~zoo.core.rundir.snapshot_files`), put back on such a refusal."""
    from zoo.core.controller import run
    from zoo.core.launcher import LaunchError
    from zoo.core.rundir import discard_run_dir, restore_files
    from zoo.core.transport import TransportError
    from zoo.display import Display, final_status, format_summary

    spec = cfg.spec
    started = time.monotonic()
    try:
        with Display(console=console, title=cfg.name) as display:
            code = run(cfg, spec, display, run_dir)
            if code:  # stopped: the last frame shows the counters the run ended with
                display.catch_up(os.path.join(run_dir, "metrics.jsonl"))
    except (KeyboardInterrupt, TransportError, LaunchError) as exc:  # refused, or stopped before any worker started
        if fresh and not os.path.exists(os.path.join(run_dir, "status.json")):  # the controller never started
            discard_run_dir(run_dir)
        elif before is not None and _unchanged(run_dir, "status.json", before):
            restore_files(run_dir, before)  # a resume refused before its segment started: the run stays as it was
        if isinstance(exc, TransportError):  # e.g. ZOO_SHM_SLOTS=abc: refused while building the streams
            raise _fail(f"transport: {exc}") from None
        if isinstance(exc, LaunchError):  # e.g. Ray cannot place the workers: nothing was started
            raise _fail(f"launcher {cfg.launcher}: {exc}", EXIT_FAILURE) from None
        signum = getattr(exc, "signum", 2)
        if signum == signal.SIGINT:
            raise _interrupted() from None
        raise _fail(f"interrupted (signal {signum})", 128 + signum) from None
    if not code:
        last = final_status(display.last, os.path.join(run_dir, "metrics.jsonl"))
        kept = "checkpoints/latest.pt"
        if cfg.policies is not None and not cfg.policies.implicit:
            kept = ", ".join(f"checkpoints/{n}/latest.pt" for n in cfg.policies.trainable)
        if os.path.exists(os.path.join(run_dir, "history.sqlite")):  # trainer.history.* (docs/history.md)
            kept += ", history.sqlite, history/"
        console.print(format_summary(last, time.monotonic() - started, run_dir, start, kept),
                      markup=False, highlight=False, soft_wrap=True)
        from zoo.runinfo import read_status

        reason = (read_status(Path(run_dir)) or {}).get("reason")
        if isinstance(reason, str) and reason.startswith("stop_when"):  # ended early (docs/looking-at-runs.md)
            console.print(f"stopped early: {reason}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(int(code or 0))


def resume_command(
    run: str = typer.Argument(..., help="The run: its name under --runs-dir, or its run directory (runs/NAME)."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Folder holding the runs (for a run name)."),
    steps: int | None = typer.Option(None, "--steps", min=1,
                                     help="New budget in env steps, counted from the run's start (extends it)."),
    frames: int | None = typer.Option(None, "--frames", min=1,
                                      help="New budget in frames, counted from the run's start (extends it)."),
    config_file: Path | None = typer.Option(None, "--config", "-c", dir_okay=False,
                                            help="TOML file of options that may change on resume."),
    overrides: list[str] = typer.Option([], "--set", "-s", help="Change an option that may change on resume, "
                                        "e.g. --set log.interval_s=10 (others are refused)."),
    launcher: str | None = typer.Option(None, "--launcher",
                                        help="How workers are started (see `zoo list launchers`; default: the run's)."),
    ray_address: str | None = typer.Option(None, "--ray-address", metavar="ADDR",
                                           help="With --launcher ray: the Ray cluster (auto, local or IP:PORT)."),
) -> None:
    """Continue a stopped, crashed or finished run from its last checkpoint, in its run directory."""
    if steps is not None and frames is not None:
        raise _fail("--steps and --frames are mutually exclusive: give the budget in env steps or in frames")
    launcher, overrides = _ray_address(launcher, ray_address, overrides)
    _resume(get_host(), run, str(runs_dir), config_file=config_file, overrides=overrides, steps=steps, frames=frames,
            launcher=launcher)
# ----------------------------------------------------------------------------- zoo watch
def watch_command(
    run: str = typer.Argument(..., help="The run: its folder (runs/NAME) or its name under --runs-dir."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run names are looked up.", file_okay=False),
    refresh: float = typer.Option(1.0, "--refresh", min=0.1, help="Seconds between reads of the run's live.json."),
    wait: float = typer.Option(60.0, "--wait", min=0.0, metavar="SECONDS",
                               help="How long to wait for a run that has not started yet (0: fail at once)."),
) -> None:
    """Show the live display of a run started elsewhere (another terminal, a detached job) until it ends."""
    from zoo.watch import RunNotFound, wait_for_run, watch

    console = _console()
    try:
        # zoo train may not have claimed it yet
        run_dir = wait_for_run(run, runs_dir, console, wait_s=wait, refresh_s=refresh)
    except RunNotFound as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    try:
        code, line = watch(run_dir, console, refresh_s=refresh)
    except KeyboardInterrupt:  # only the watching stops; the run goes on
        raise typer.Exit(130) from None
    if code:
        raise _fail(line, code)
    console.print(line, markup=False, highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- app
def _version_callback(value: bool) -> None:
    if value:
        from zoo.core.plugins import _zoo_version

        typer.echo(f"zoo {_zoo_version()}")
        raise typer.Exit()


def _root(
    # A bool option is already a plain flag (no value); metavar="" only keeps typer's rich help
    # (0.29) from printing its type, "<bool>", next to it.
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, metavar="",
                                 help="Show Zoo's version and exit."),
) -> None:
    """Zoo: distributed reinforcement learning on SRL's dataflow; everything concrete is a plugin."""


def _register_plugin_commands(app: typer.Typer, host: PluginHost) -> None:
    """Call each plugin's ``register_commands(app)``; a failing one is reported (fatal if strict)."""
    for impl in host.pm.hook.register_commands.get_hookimpls():
        try:
            impl.function(app=app)
        except Exception as exc:  # noqa: BLE001 - one broken plugin never takes the CLI down
            message = f"plugin {impl.plugin_name} failed in register_commands: {type(exc).__name__}: {exc}"
            if host.strict:
                raise PluginLoadError(message + " [ZOO_STRICT_PLUGINS=1 makes this fatal]") from exc
            _warn(_console(stderr=True), message)


def build_app(host: PluginHost | None = None) -> typer.Typer:
    """A fresh ``zoo`` application; with ``host``, plugin commands are added too.

    Raises:
        PluginLoadError: a plugin's ``register_commands`` failed in strict mode.
    """
    app = typer.Typer(name="zoo", cls=ZooGroup, no_args_is_help=True, add_completion=False,
                      pretty_exceptions_show_locals=False,
                      context_settings={"help_option_names": ["-h", "--help"]})
    app.callback()(_root)
    app.command("list")(list_command)
    app.command("plugins")(plugins_command)
    app.command("train", cls=TrainCommand)(train_command)
    app.command("resume")(resume_command)
    app.command("watch")(watch_command)
    if host is not None:
        _register_plugin_commands(app, host)
    return app


app = build_app()
"""The core commands without plugin commands (for ``typer.testing.CliRunner``)."""


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``zoo`` console script and ``python -m zoo``.

    Builds the plugin host first: with ``ZOO_STRICT_PLUGINS=1`` a failed plugin (or, always,
    a duplicate component name or a misspelt hook) exits with status 1 and the error.
    """
    try:
        host = get_host()
        application = build_app(host)
    except (PluginLoadError, DuplicateComponentError) as exc:
        _error(str(exc))
        sys.exit(EXIT_FAILURE)
    application(args=argv, prog_name="zoo")
