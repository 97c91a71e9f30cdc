"""The experiment config: typed dataclasses, layered resolution, validation.

One :class:`ExperimentConfig` describes a whole run; the controller builds the worker
graph from it and every worker receives a copy. It is resolved in this order, each
layer overriding the previous one:

1. the dataclass defaults below (plus the defaults of the algorithm's and the
   environment's own ``Config`` dataclasses, under ``algo.*`` and ``env.*``);
2. the algorithm's ``presets(spec)``: dotted keys suited to the environment;
3. a TOML config file (``--config FILE``; nested tables or dotted keys);
4. ``--set key=value`` overrides, in the order given;
5. ``--seed``, ``--name``, ``--steps N`` / ``--frames N``.

Every value is checked against the field's type (``int``, ``float``, ``bool``, ``str``,
``Optional[...]``, ``Literal[...]``, ``tuple[...]``/``list[...]``); a bad value or an
unknown field raises :class:`ConfigError` naming the field, the bad value and what is
allowed, before any worker starts.

The generic option machinery (type coercion, listing, ``--set``) lives in
:mod:`zoo.core.options`; env resolution in :mod:`zoo.core.resolve`; the cross-field rules
(:func:`validate`) in :mod:`zoo.core.validation`. Their public names are re-exported here.

Units: ``env_steps`` are environment steps; ``frames`` are env steps x the environment's
frame-skip (``EnvSpec.frame_skip``); see :func:`budget`.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli before it joined the standard library
    import tomli as tomllib

from zoo.core.curriculum import CurriculumConfig, curriculum_problems
from zoo.core.env import EnvSpec
from zoo.core.kinds import worker_kinds, worker_options
from zoo.core.options import (  # noqa: F401  (re-exported)
    NOT_OPTION,
    ConfigError,
    OptionInfo,
    apply_mapping,
    apply_override,
    bound_problems,
    bounded,
    list_options,
    set_value,
)
from zoo.core.pbt import PBTOptions
from zoo.core.registry import Registry
from zoo.core.resolve import (  # noqa: F401  (re-exported)
    UnknownEnvError,
    _probe_spec,
    _suggest,
    algorithm_config_class,
    default_budget,
    env_config_class,
    make_env,
    resolve_env,
)
from zoo.core.streams import STREAMS, transport_options
from zoo.core.validation import (  # noqa: F401  (re-exported)
    history_problems,
    inline_problems,
    launcher_options,
    missing_package,
    resolver_options,
    stop_when_problems,
    supervision_problems,
    validate,
)

__all__ = [
    "ActorsConfig", "PolicyConfig", "TrainerConfig", "HistoryConfig", "StreamConfig", "StreamsConfig", "LogConfig",
    "SupervisionConfig", "CurriculumConfig",
    "ExperimentConfig", "ConfigError", "UnknownEnvError", "OptionInfo",
    "resolve_env", "make_env", "build_config", "apply_override", "set_value", "apply_mapping",
    "load_config_file", "validate", "config_to_dict", "save_config", "budget", "default_budget",
    "list_options", "algorithm_config_class", "env_config_class", "sanitize_name", "name_problem",
    "steps_per_update", "NAME_RULE",
]


# ----------------------------------------------------------------------------- dataclasses
_POSITIONAL = {NOT_OPTION: "is given on the command line (zoo train ALGO --env ENV)"}


@dataclass
class ActorsConfig:
    """Actor workers: they step environments and cut trajectories into samples."""

    count: int = field(default=2, metadata=bounded(ge=1))
    """Number of actor worker processes."""
    envs_per_actor: int = field(default=8, metadata=bounded(ge=1))
    """Environments stepped by each actor; must be divisible by ``ring_size``."""
    ring_size: int = field(default=2, metadata=bounded(ge=1))
    """Environment groups per actor: one group steps while the others wait for actions."""
    drop_when_full: bool = False
    """True: a sample the trainer cannot take at once is dropped (and counted) instead of
    waited for, so actors never wait for the trainer (fully asynchronous, as IMPALA)."""


@dataclass
class PolicyConfig:
    """The policy (inference) workers."""

    count: int = field(default=1, metadata=bounded(ge=1))
    """Number of policy worker processes (M); actor i is served by policy worker i mod M,
    which batches across its own actors only (docs/graph.md). 1 <= M <= actors.count."""
    max_batch: int = field(default=4096, metadata=bounded(ge=1))
    """Most agent-slots in one forward pass."""
    max_wait_ms: float = field(default=1.0, metadata=bounded(ge=0))
    """Longest wait (milliseconds) for more requests before running a partial batch."""
    device: str = "cpu"
    """Torch device of the inference network: cpu, cuda, cuda:N or mps. With several policy
    workers, ``cuda`` puts worker m on GPU m mod (GPUs visible); ``cuda:N`` puts all on GPU N."""
    threads: int = field(default=1, metadata=bounded(ge=1))
    """Torch CPU threads of each policy worker, or of each actor with ``policy.inline``
    (otherwise actors use none); with the local launcher at most the machine's cores."""
    inline: bool = False
    """True: no policy worker; each actor runs the policy itself on its CPU (one forward pass
    over all its envs per step) and pulls new parameters between rollouts (SRL's inline
    inference, for cheap policies and many CPU actors; docs/graph.md). ``policy.count`` must
    then stay 1 and ``policy.device`` cpu; ``max_batch`` and ``max_wait_ms`` do not apply."""
    precision: Literal["float32", "bfloat16", "auto"] = "float32"
    """Arithmetic of the inference forward pass. ``auto``: bfloat16 on a CUDA device with native
    bfloat16 (compute capability >= 8.0), float32 elsewhere (:func:`zoo.core.devices.choose_precision`);
    ``bfloat16`` on a GPU without it (V100, T4) is refused before the run starts. ``bfloat16`` runs it under
    ``torch.autocast`` (matrix products and convolutions in bfloat16, their weights stored in
    bfloat16 once; softmax and log-probabilities in float32): about 45% less CPU time for a
    Nature CNN in batches of 16-32 on CPUs with AVX512-BF16 (``benchmarks/inference_bench.py``),
    at the cost of behaviour log-probabilities that differ slightly from the trainer's
    float32 ones (importance ratios start near, not at, 1)."""
    stall_warning_s: float = field(default=30.0, metadata=bounded(gt=0))
    """Warn when no new parameters arrived for this many seconds while serving requests (only
    after the trainer's first update: sampling the first batch of a slow run is no stall)."""


@dataclass
class HistoryConfig:
    """Version history of a trainable policy (docs/history.md): past versions kept with their
    metadata in ``<run_dir>/history.sqlite`` and ``history/<policy>/v<version>.pt``, for
    self-play against past versions and ratings. Off unless a schedule is set."""

    every_updates: int = field(default=0, metadata=bounded(ge=0, hint="0 = not by updates"))
    """Keep the policy's version after every this many updates (when it divides the update count)."""
    every_minutes: float = field(default=0.0, metadata=bounded(ge=0, hint="0 = not by time"))
    """Also keep a version when this many minutes of wall time have passed since the last kept
    one (checked after each update)."""
    keep: int = field(default=0, metadata=bounded(ge=0, hint="0 = keep every version"))
    """Most versions kept: beyond it the oldest kept version is dropped (its weights file is
    deleted; its row and metadata stay, marked not kept, and queries no longer see it)."""


@dataclass
class TrainerConfig:
    """The trainer workers (their network's device is the algorithm's ``algo.device``)."""

    count: int = field(default=1, metadata=bounded(ge=1))
    """Number of trainer processes (K), one ``torch.distributed`` group: trainer k takes the
    samples of its own actors (actor i -> trainer i mod K), gradients are combined across
    trainers before every optimiser step, trainer 0 alone publishes parameters, writes
    metrics and checkpoints (docs/graph.md). 1 <= K <= actors.count."""
    batch_samples: int = field(default=16, metadata=bounded(ge=1))
    """Length-T agent trajectories (samples) per update, per trainer: one update trains on
    trainer.count x batch_samples of them (the global batch)."""
    max_policy_lag: int = field(default=4, metadata=bounded(ge=0, hint="0 accepts only the current version"))
    """Samples whose policy version is older than the trainer's by more than this are dropped."""
    checkpoint_interval: int = field(default=100, metadata=bounded(ge=1))
    """Write a checkpoint every this many updates."""
    checkpoint_interval_s: float = field(default=600.0, metadata=bounded(
        ge=0, hint="0 = only every trainer.checkpoint_interval updates"))
    """Also write a checkpoint when this many seconds of wall time have passed since the last
    one (checked after each update), so a run with slow updates always has a recent one; 0: off."""
    max_nonfinite_updates: int = field(default=10, metadata=bounded(ge=1))
    """Stop the run (with the likely source) after this many consecutive updates skipped
    because a batch, loss, gradient or the new weights held NaN or infinity."""
    keep_checkpoints: bool = False
    """Besides ``checkpoints/latest.pt``, keep every checkpoint, the final one included, as
    ``checkpoints/policy-v{policy_version:08d}.pt`` (learning curves, evaluation of old policies)."""
    threads: int = field(default=0, metadata=bounded(ge=0, hint="0 = automatic"))
    """Torch CPU threads of each trainer; 0 = chosen from the cores and the network: for image
    observations (a convolutional encoder) every core divided among the trainers, otherwise the
    cores the actors (one each) and policy workers (``policy.threads`` each) leave, divided among
    the trainers; at least 1 (:mod:`zoo.core.workers.threads`; ``zoo train`` prints the plan).
    With the local launcher a value above the machine's cores is refused."""
    collective_timeout_s: float = field(default=30.0, metadata=bounded(gt=0))
    """With trainer.count > 1: longest wait (seconds) inside one collective operation
    (gradient all-reduce, counter exchange) before a trainer gives up on its peers. Waiting
    for a slower peer's batch happens outside collectives and is not bounded by it."""
    learn: bool = True
    """False: count and discard samples without updating (sampling-throughput benchmarks)."""
    history: HistoryConfig = field(default_factory=HistoryConfig)
    """Version history (``trainer.history.*``; docs/history.md)."""


@dataclass
class StreamConfig:
    """One stream of the dataflow."""

    transport: str = "auto"
    """Registered transport carrying this stream (see `zoo list transports`). Default ``auto``:
    ``shm`` when every end of the stream runs on one host (always so with the local launcher),
    where shared-memory slot rings copy least, else ``nng`` over tcp; the choice per stream is
    recorded in ``graph.json``. ``shm``, ``nng``, ``tcp`` force one."""
    options: dict[str, Any] = field(default_factory=dict)
    """Options of that transport by name, e.g. ``--set streams.<stream>.options.slots=16``
    (docs/transports.md lists each transport's options). Checked against the transport when
    the config is built; unset options come from its environment variables, then defaults."""


@dataclass
class StreamsConfig:
    """The three streams: actors <-> policy, actors -> trainer, trainer -> policy."""

    inference: StreamConfig = field(default_factory=StreamConfig)
    """Request/reply: observations to the policy worker, actions back."""
    sample: StreamConfig = field(default_factory=StreamConfig)
    """Push/pull: samples from actors to the trainer."""
    parameter: StreamConfig = field(default_factory=StreamConfig)
    """Publish/latest: versioned parameters from the trainer to the policy worker."""


@dataclass
class ResolverConfig:
    """Name resolution: where listeners publish their addresses and dialers find them."""

    name: str = "files"
    """Registered resolver (see `zoo list resolvers`). Default ``files``: one file per key in
    the run's temporary folder (one host, or hosts that share ``resolver.options.root``). A
    launcher registered with ``resolver=NAME`` replaces ``files`` by its own unless
    ``resolver.options.root`` is set (``--launcher ray`` uses ``ray``, Ray's key-value store)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Options of that resolver by name, e.g. ``--set resolver.options.root=/shared/zoo``;
    checked against the resolver's ``Options`` when the config is built."""


@dataclass
class LogConfig:
    """Progress and metrics output."""

    interval_s: float = field(default=5.0, metadata=bounded(gt=0))
    """Seconds between status lines and metric records."""
    tensorboard: bool = True
    """Also write TensorBoard event files to the run directory."""


@dataclass
class SupervisionConfig:
    """How the controller watches workers and restarts failed ones (docs/supervision.md)."""

    heartbeat_timeout_s: float = field(default=60.0, metadata=bounded(gt=0))
    """A worker silent this many seconds is failed even if its process lives (hung in
    ``env.step``, deadlocked). Workers report from their main loop at least every second;
    inside a declared long operation (start-up, a trainer update, a checkpoint) a background
    thread reports for them (see ``start_timeout_s``, ``busy_timeout_s``)."""
    start_timeout_s: float = field(default=180.0, metadata=bounded(gt=0))
    """Longest a started worker may take to start (spawn, imports, building its envs and
    networks) before it is failed."""
    busy_timeout_s: float = field(default=0.0, metadata=bounded(ge=0, hint="0 means no limit"))
    """Longest one declared long operation (a trainer update, a checkpoint) may take before
    the worker is failed; 0: no limit (an update ends, however long it takes)."""
    max_restarts: int = field(default=3, metadata=bounded(ge=0, hint="0: no restart"))
    """Restarts allowed per actor or policy worker (each counted separately); one more failure
    stops the run (exit 1). 0: any failure stops the run."""
    restart_backoff_s: float = field(default=1.0, metadata=bounded(ge=0))
    """Wait before a worker's first restart; doubled for each further restart of that worker."""
    restart_backoff_max_s: float = field(default=30.0, metadata=bounded(ge=0))
    """Longest wait before a restart."""
    trainer_restarts: int = field(default=0, metadata=bounded(ge=0, hint="0: a failed trainer stops the run"))
    """Restarts allowed for the trainer, each continuing from the run's last checkpoint
    (``checkpoints/latest.pt``, as ``zoo resume`` would); 0: a failed trainer stops the run."""
    stop_timeout_s: float = field(default=600.0, metadata=bounded(gt=0))
    """On a stop (Ctrl-C, SIGTERM, SIGHUP, the controller gone) the trainer finishes its
    update and writes its checkpoint and ``end`` row; it is killed only after this many
    seconds (or sooner when it stops reporting for ``heartbeat_timeout_s``)."""


@dataclass
class ExperimentConfig:
    """Everything one run needs; built by :func:`build_config`.

    ``spec`` is the :class:`~zoo.core.env.EnvSpec` of the environment, filled by
    :func:`build_config` from one in-process env instance. It is not an option: it
    cannot be set with ``--set`` and :func:`config_to_dict` writes it as ``env_spec``
    (with ``spec.resolved``), never reads it back.
    """

    algo_name: str = field(metadata=_POSITIONAL)
    """Registered algorithm name (e.g. ``ppo``)."""
    env_name: str = field(metadata=_POSITIONAL)
    """The environment as the user typed it (``CartPole-v1``, ``atari:Pong``)."""
    seed: int = field(default=1, metadata=bounded(ge=0, lt=2**32))
    """Base random seed (0 <= seed < 2**32)."""
    name: str = ""
    """Run name; the run writes to ``<runs_dir>/<name>``. Default ``<algo>-<env>-<YYYYmmdd-HHMMSS>``."""
    runs_dir: str = "runs"
    """Folder holding one sub-folder per run."""
    env_steps: int = field(default=0, metadata=bounded(ge=0, hint="0 = not set"))
    """Budget in env steps (0: not set). At most one of env_steps and frames is non-zero."""
    frames: int = field(default=0, metadata=bounded(ge=0, hint="0 = not set"))
    """Budget in frames = env steps x frame-skip (0: not set). 0 and 0: the env's default budget."""
    stop_when: str = ""
    """End the run early, as its budget would (exit 0, final checkpoint), at the first update point
    where this condition on the last ``stop_over_episodes`` training episodes holds, e.g.
    'mean_return >= 450' (the curriculum's grammar, docs/curriculum.md); empty: the budget alone
    ends the run (docs/looking-at-runs.md, "Stopping early")."""
    stop_over_episodes: int = field(default=20, metadata=bounded(ge=1))
    """The window of ``stop_when``: the last N training episodes (it must be full to stop)."""
    sample_length: int = field(default=128, metadata=bounded(ge=1))
    """T: env steps per sample (each sample also holds the bootstrap observation)."""
    actors: ActorsConfig = field(default_factory=ActorsConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    resolver: ResolverConfig = field(default_factory=ResolverConfig)
    log: LogConfig = field(default_factory=LogConfig)
    supervision: SupervisionConfig = field(default_factory=SupervisionConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """A curriculum over the env's stages (``[curriculum]``, docs/curriculum.md); off while
    ``curriculum.advance_when`` is empty."""
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Options of plugins' worker kinds by kind and name, e.g. ``--set workers.param-stats.count=1``
    or a TOML table ``[workers.param-stats]`` (``zoo list workers`` lists the kinds; docs/graph.md);
    checked against each kind's options when the config is built. Actors, policy workers and
    trainers keep their own sections (``actors``, ``policy``, ``trainer``)."""
    launcher: str = "local"
    """Registered launcher that starts the worker processes (``zoo train --launcher NAME``,
    see `zoo list launchers`); ``local``: spawned processes on this host."""
    launcher_options: dict[str, Any] = field(default_factory=dict)
    """Options of that launcher by name, e.g. ``--set launcher_options.strategy=SPREAD`` for
    ``ray`` (docs/cluster.md); checked against the launcher's ``Options`` when the config is built."""
    pbt: PBTOptions = field(default_factory=PBTOptions)
    """Population-based training (``[pbt]``, docs/pbt.md): off while ``pbt.members`` is 0; then
    ``config.json`` holds no ``pbt`` key."""
    algo: Any = None
    """The algorithm's ``Config`` dataclass instance (``--set algo.X=...``)."""
    env: Any = None
    """The environment plugin's ``Config`` dataclass instance (``--set env.X=...``)."""
    spec: EnvSpec | None = field(default=None, repr=False, compare=False,
                                 metadata={NOT_OPTION: "is computed from the environment"})
    """Filled by :func:`build_config`; not an option (see the class docstring)."""
    policies: Any = field(default=None, repr=False, compare=False,
                          metadata={NOT_OPTION: "is built from [policies.NAME] tables and [[agents]] entries"})
    """The run's policies (:class:`zoo.core.policies.Policies`), filled by :func:`build_config`;
    None: the run's one implicit policy (its top-level ``algo``/``policy``/``trainer``).
    :func:`config_to_dict` merges :func:`zoo.core.policies.policies_to_dict` of it."""
    resume: int = field(default=0, compare=False,
                        metadata={NOT_OPTION: "is set by zoo train --resume RUN_DIR and zoo resume NAME"})
    """0 for a fresh run; ``n`` >= 1 when the run continues in its run directory for the
    n-th time (``zoo resume``, or a trainer restarted from its last checkpoint): the trainer
    starts from ``checkpoints/latest.pt`` and the actors seed their envs from (``seed``, n).
    Not an option and not written to ``config.json`` (checkpoints record it as ``resumes``)."""


# ----------------------------------------------------------------------------- config files
def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML experiment config file into a nested dict.

    Raises:
        ConfigError: the file is missing, unreadable or not valid TOML.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file", field="config") from None
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it: {exc}", field="config") from None
    except tomllib.TOMLDecodeError as exc:
        from zoo.core.policies import duplicate_table_message

        twice = duplicate_table_message(str(exc), f"--config {path}")  # e.g. two [policies.NAME] of one name
        raise ConfigError(twice or f"--config {path}: not valid TOML: {exc}", field="config") from None


# ----------------------------------------------------------------------------- build
def _now() -> _dt.datetime:
    return _dt.datetime.now()


_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
NAME_RULE = ("a run name is one folder name: 1 to 200 letters, digits, '.', '_' and '-', not starting "
             "with '.' or '-' (so no '/', '..' or spaces)")


def name_problem(name: str) -> str:
    """Why ``name`` is refused as a run name (see :data:`NAME_RULE`), with a name that would do.

    ``"my run/1"`` -> ``"name 'my run/1' is not allowed: a run name is one folder name: ...;
    e.g. --name my-run-1"``. User-given names are never rewritten, only refused.
    """
    fixed = sanitize_name(name)[:200]
    return f"name {name!r} is not allowed: {NAME_RULE}" + (f"; e.g. --name {fixed}" if fixed else "")


def steps_per_update(cfg: ExperimentConfig, spec: EnvSpec) -> tuple[int, str]:
    """Env steps the trainer consumes before its first update, and the arithmetic in words.

    One update takes ``trainer.batch_samples`` agent-slot trajectories of ``T =
    sample_length`` steps. An actor pushes one sample per ring group: ``G = envs_per_actor /
    ring_size`` envs x ``A = spec.num_agents`` agent-slots, ``G x T`` env steps; the trainer
    takes whole samples, so ``ceil(batch_samples / (G x A))`` of them, i.e. that many x ``G x T``
    env steps (PPO, IMPALA and MAPPO alike: they all train on the trainer's batch); with
    ``trainer.count`` = K trainers each fills its own batch, so K times that. Example:
    16 samples, 8 envs in 2 groups, 1 agent, T = 128: ceil(16 / 4) = 4 samples x 4 envs x 128
    = 2,048 env steps (x 2 = 4,096 with 2 trainers).
    """
    group = cfg.actors.envs_per_actor // cfg.actors.ring_size
    slots = group * spec.num_agents
    samples = -(-cfg.trainer.batch_samples // slots)
    trainers = cfg.trainer.count
    steps = trainers * samples * group * cfg.sample_length
    per = f" per trainer, for each of trainer.count={trainers}" if trainers > 1 else ""
    text = (f"one update takes trainer.batch_samples={cfg.trainer.batch_samples} agent-slot samples{per}: "
            f"{samples} sample(s) of {group} env(s) x {spec.num_agents} agent(s) (actors.envs_per_actor="
            f"{cfg.actors.envs_per_actor} / actors.ring_size={cfg.actors.ring_size}) x sample_length="
            f"{cfg.sample_length} steps" + (f" x {trainers} trainers" if trainers > 1 else "")
            + f" = {steps:,} env steps")
    return steps, text


def batch_agent_steps(cfg: ExperimentConfig, spec: EnvSpec) -> tuple[int, str]:
    """Agent steps in one trainer's batch (every slot active), and the arithmetic in words.

    ``ceil(batch_samples / (G x A))`` whole samples of ``G x A`` agent-slots x ``T`` steps
    (:func:`steps_per_update`): 16 samples, 4 envs per group, 1 agent, T = 128 give
    4 x 4 x 128 = 2,048. An algorithm whose ``Config`` has ``check_batch(agent_steps, text)``
    is asked whether it can train on that many (PPO: ``algo.minibatches`` at most that).
    """
    group = cfg.actors.envs_per_actor // cfg.actors.ring_size
    slots = group * spec.num_agents
    samples = -(-cfg.trainer.batch_samples // slots)
    steps = samples * slots * cfg.sample_length
    return steps, (f"{samples} sample(s) x {slots} agent-slot(s) x sample_length={cfg.sample_length} "
                   f"= {steps:,} agent steps (trainer.batch_samples={cfg.trainer.batch_samples})")


def _one_update_fits(cfg: ExperimentConfig, spec: EnvSpec) -> tuple[bool, str, str]:
    """``(ok, field, message)``: the budget covers at least one update (else the run would end
    with 0 updates and exit 0)."""
    need, text = steps_per_update(cfg, spec)
    _, have = budget(cfg, spec)
    skip = max(1, int(spec.frame_skip))
    if cfg.frames:
        what, fix = f"frames={cfg.frames:,} ({have:,} env steps at frame-skip {skip})", f"--frames {need * skip}"
    else:
        what, fix = f"env_steps={have:,}", f"--steps {need}"
    return have >= need, ("frames" if cfg.frames else "env_steps"), (
        f"the budget {what} is smaller than one update, so the run would end without training: {text}; "
        f"give a budget of at least that ({fix}) or lower trainer.batch_samples or sample_length")


def sanitize_name(name: str) -> str:
    """A run name safe as one folder name: characters other than ``A-Za-z0-9._-`` become ``-``.

    ``"ppo-atari:Pong"`` -> ``"ppo-atari-Pong"``; ``"ALE/Pong-v5"`` -> ``"ALE-Pong-v5"``.
    """
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
    return out.lstrip(".")


def _user_layers(cfg: ExperimentConfig, file_data: dict | None, config_file: Any,
                 overrides: Iterable[str], base: dict[str, Any] | None = None) -> None:
    if base:
        apply_mapping(cfg, base, source="the run's config.json")
    if file_data:
        for key in ("algo_name", "env_name"):
            if key in file_data:
                if file_data[key] != getattr(cfg, key):
                    raise ConfigError(
                        f"--config {config_file}: {key} = {file_data[key]!r} but the command line says "
                        f"{getattr(cfg, key)!r}; remove {key} from the file", field=key)
        data = {k: v for k, v in file_data.items() if k not in ("algo_name", "env_name")}
        apply_mapping(cfg, data, source=f"--config {config_file}")
    for override in overrides:
        apply_override(cfg, override)


def _fresh(algo_name: str, env_name: str, algo_cls: type | None, env_cls: type | None) -> ExperimentConfig:
    return ExperimentConfig(algo_name=algo_name, env_name=env_name,
                            algo=algo_cls() if algo_cls else None, env=env_cls() if env_cls else None)


def build_config(
    registry: Registry,
    algo_name: str,
    env_name: str,
    *,
    seed: int | None = None,
    config_file: str | Path | None = None,
    overrides: Iterable[str] = (),
    steps: int | None = None,
    frames: int | None = None,
    name: str | None = None,
    launcher: str | None = None,
    base: dict[str, Any] | None = None,
) -> ExperimentConfig:
    """Resolve the full experiment config; nothing is started.

    Order: dataclass defaults -> ``algorithm.presets(spec)`` -> ``base`` (a nested mapping
    of typed values: a resumed run's ``config.json``, see :mod:`zoo.core.resume`) ->
    ``config_file`` (TOML) -> ``overrides`` (``"a.b=value"``) -> ``seed`` / ``name`` /
    ``launcher`` / ``steps`` / ``frames``.
    ``seed=None`` and ``name=None`` keep what the layers set (default seed 1, default name
    ``<algo>-<env>-<YYYYmmdd-HHMMSS>``, sanitised). ``steps`` (env steps) or ``frames``
    replaces any budget set by the layers; when neither the layers nor these set a budget,
    the env's ``default_budget`` is written into ``env_steps`` or ``frames``.

    One env is built in-process (``component.load()(arg, cfg.env, cfg.seed)``) to read its
    :class:`EnvSpec`, then closed; the spec is stored in ``cfg.spec``. If presets change
    ``env.*`` options the env is built again with the final options.

    Raises:
        UnknownComponentError: unknown algorithm (closest names suggested); checked first,
            before anything is imported.
        UnknownEnvError: unknown env (closest names and ids suggested).
        ConfigError: a bad file, override, budget or env, or :func:`validate` failed.
    """
    overrides = list(overrides)
    algo_component = registry.get("algorithm", algo_name)
    env_component, env_arg = resolve_env(registry, env_name)
    if steps is not None and frames is not None:
        raise ConfigError("--steps and --frames are mutually exclusive: give the budget in env steps "
                          "or in frames, not both", field="env_steps")
    file_data = load_config_file(config_file) if config_file is not None else None
    # Named policies ([policies.NAME], [[agents]], --set policies.*): taken out here, built last
    # (zoo.core.policies, docs/policies.md); a resumed run's come from its config.json (base).
    from zoo.core.policies import merge_policy_layers, split_policy_layers

    file_data, overrides, layers = split_policy_layers(file_data, overrides, source=f"--config {config_file}")
    if base and ("policies" in base or "agents" in base):
        base = dict(base)
        saved = {"policies": {n: {k: v for k, v in t.items() if k != "agents"}
                              for n, t in (base.pop("policies", None) or {}).items()}}
        if base.get("agents"):
            saved["agents"] = base.pop("agents")
        base.pop("agents", None)
        _, _, saved_layers = split_policy_layers(saved, [], source="the run's config.json")
        layers = merge_policy_layers(saved_layers, layers)
    algo_cls = algorithm_config_class(algo_component)
    env_cls = env_config_class(env_component)

    def finish(cfg: ExperimentConfig) -> None:
        if seed is not None:
            set_value(cfg, "seed", seed, source="--seed")
        if name is not None:
            if not name:
                raise ConfigError(name_problem(name), field="name")
            cfg.name = name
        if launcher is not None:
            cfg.launcher = launcher
        implied = registry.get("launcher", cfg.launcher).option("resolver") if cfg.launcher in registry.names(
            "launcher") else None
        if implied and cfg.resolver.name == "files" and "root" not in cfg.resolver.options:
            cfg.resolver.name = implied  # e.g. ray: listeners on any node are found (a files root keeps files)
        if steps is not None:
            cfg.env_steps, cfg.frames = int(steps), 0
        if frames is not None:
            cfg.env_steps, cfg.frames = 0, int(frames)

    # Pass 1: the user's layers alone decide the env options used to probe the spec.
    def mixed_spaces(c: ExperimentConfig) -> None:  # named policies: agents of different spaces may be routed
        if not layers.empty and hasattr(c.env, "mixed_spaces"):
            c.env.mixed_spaces = True

    scratch = _fresh(algo_name, env_name, algo_cls, env_cls)
    _user_layers(scratch, file_data, config_file, overrides, base)
    finish(scratch)
    mixed_spaces(scratch)
    validate(scratch, registry, check_budget=False, presets_pending=True)  # the presets' rules: pass 2
    spec = _probe_spec(env_component, env_arg, scratch.env, scratch.seed, env_name)

    # Pass 2: the real order, with presets for this spec.
    cfg = _fresh(algo_name, env_name, algo_cls, env_cls)
    presets_fn = getattr(algo_component.load(), "presets", None)
    presets = presets_fn(spec) if callable(presets_fn) else {}
    for key, value in (presets or {}).items():
        set_value(cfg, key, value, source=f"{algo_name} presets for {spec.env_id}")
    _user_layers(cfg, file_data, config_file, overrides, base)
    finish(cfg)
    mixed_spaces(cfg)
    if cfg.env != scratch.env:
        spec = _probe_spec(env_component, env_arg, cfg.env, cfg.seed, env_name)
    cfg.spec = spec

    if cfg.env_steps == 0 and cfg.frames == 0:
        kind, n = default_budget(env_component, env_arg)
        setattr(cfg, kind, n)
    if not cfg.name:
        cfg.name = sanitize_name(f"{algo_name}-{env_name}-{_now():%Y%m%d-%H%M%S}")
    validate(cfg, registry)
    for stream in STREAMS:  # typed values ("16" from --set -> 16) for config.json and the workers
        getattr(cfg.streams, stream).options = transport_options(registry, cfg, stream)
    cfg.resolver.options = resolver_options(registry, cfg)
    cfg.launcher_options = launcher_options(registry, cfg)
    if registry.names("worker") or cfg.workers:
        cfg.workers = worker_options(worker_kinds(registry), cfg)
    if not layers.empty:
        from zoo.core.policies import build_policies

        run_dir = Path(cfg.runs_dir) / cfg.name if base else None  # a resume: POLICY@VERSION in its own folder
        cfg.policies = build_policies(registry, cfg, layers, file_data=file_data, overrides=overrides,
                                      run_dir=run_dir)
        named = curriculum_problems(cfg)  # a curriculum with named policies (validate ran before they were built)
        if named:
            raise ConfigError("\n".join(m for _, m in named), field=named[0][0], problems=[m for _, m in named])
    if cfg.pbt.members:  # a population: pbt.policy expanded into its members (docs/pbt.md)
        from zoo.core.pbt import population_policies

        cfg.policies = population_policies(registry, cfg, named=not layers.empty)
        if cfg.curriculum.on:
            raise ConfigError("curriculum.advance_when: a curriculum with a PBT population ([pbt]) is not supported "
                              "yet; drop the [curriculum] section or pbt.members", field="curriculum.advance_when")
    if registry.names("worker"):  # kinds' own checks, with the whole config (e.g. the eval manager's baselines)
        from zoo.core.kinds import kind_problems

        problems = kind_problems(worker_kinds(registry), cfg, registry)
        if problems:
            raise ConfigError("\n".join(m for _, m in problems), field=problems[0][0],
                              problems=[m for _, m in problems])
    return cfg


# ----------------------------------------------------------------------------- output
def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        try:
            return _jsonable(value.item())
        except (TypeError, ValueError):
            pass
    return str(value)


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The config as JSON-serialisable data for ``runs/<name>/config.json``.

    Every field except ``spec``, ``resume`` and ``policies`` (named policies are merged as
    ``policies`` and ``agents``), with ``algo``/``env`` as dicts of their fields, plus
    ``env_spec``: ``{env_id, agents, frame_skip, observation_space, action_space,
    resolved}`` (plus ``agent_spaces``, ``{agent: {observation_space, action_space}}``, for
    agents with different spaces: :attr:`EnvSpec.mixed`; spaces as their ``str``; ``resolved``
    holds what the env plugin resolved, e.g. Atari's frame-skip and sticky-action
    probability). Tuples become lists; values JSON cannot hold become strings.
    """
    out = {f.name: _jsonable(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
           if f.name not in ("spec", "resume", "policies")}
    if not cfg.pbt.members:  # no population: the file stays as it was before PBT
        out.pop("pbt", None)
    spec = cfg.spec
    if spec is not None:
        out["env_spec"] = {
            "env_id": spec.env_id,
            "agents": list(spec.agents),
            "frame_skip": spec.frame_skip,
            "observation_space": {k: str(v) for k, v in spec.observation_space.items()},
            "action_space": str(spec.action_space),
            "resolved": _jsonable(spec.resolved),
        }
        if spec.agent_spaces is not None:  # agents with different spaces (EnvSpec.mixed): each one's
            out["env_spec"]["agent_spaces"] = {a: {"observation_space": {k: str(v) for k, v in obs.items()},
                                                   "action_space": str(act)}
                                               for a, (obs, act) in spec.agent_spaces.items()}
    if cfg.policies is not None and not cfg.pbt.members:  # a population's members come from its pbt table
        from zoo.core.policies import policies_to_dict

        out.update(policies_to_dict(cfg.policies))
    return out


def save_config(cfg: ExperimentConfig, run_dir: str | Path) -> Path:
    """Write :func:`config_to_dict` to ``run_dir/config.json`` (indented); returns the path."""
    path = Path(run_dir) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config_to_dict(cfg), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def budget(cfg: ExperimentConfig, spec: EnvSpec | None = None, registry: Registry | None = None) -> tuple[str, int]:
    """The run's budget as ``("env_steps", N)``.

    ``env_steps`` is used as is; ``frames`` is converted with ``spec.frame_skip``
    (``ceil(frames / frame_skip)`` env steps, so at least that many frames are played:
    100,000 frames at frame-skip 4 -> 25,000 env steps). ``spec`` defaults to
    ``cfg.spec``. When both are 0 the env's default budget is used (resolved from
    ``registry``, default the process-wide one).

    Raises:
        ConfigError: both budgets set, a negative budget, or no spec to convert frames.
    """
    spec = spec if spec is not None else cfg.spec
    env_steps, frames = cfg.env_steps, cfg.frames
    if env_steps < 0 or frames < 0:
        raise ConfigError(f"budget must be >= 0, got env_steps={env_steps} frames={frames}", field="env_steps")
    if env_steps and frames:
        raise ConfigError(f"both env_steps={env_steps} and frames={frames} are set; set only one budget",
                          field="env_steps")
    if not env_steps and not frames:
        if registry is None:
            from zoo.core.plugins import get_registry

            registry = get_registry()
        component, arg = resolve_env(registry, cfg.env_name)
        kind, n = default_budget(component, arg)
        env_steps, frames = (n, 0) if kind == "env_steps" else (0, n)
    if env_steps:
        return ("env_steps", int(env_steps))
    if spec is None:
        raise ConfigError("frames budget needs the env spec (its frame_skip) to convert to env steps", field="frames")
    skip = max(1, int(spec.frame_skip))
    return ("env_steps", -(-int(frames) // skip))
