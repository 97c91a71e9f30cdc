"""Every hook a Zoo plugin can implement.

A plugin is a module (or object) with functions decorated by :data:`hookimpl`. It is
found through the ``zoo.plugins`` entry-point group, or is one of Zoo's built-ins, which
go through exactly the same hooks. Each ``register_*`` hook receives a ``register``
callback and calls it once per component; none of them returns a value (no
``firstresult``), every implementation is called, in registration order.

Registration must be cheap: pass factories as ``"package.module:attr"`` strings so that
listing components never imports heavy libraries (torch, ale-py, mujoco).
"""
from __future__ import annotations

from collections.abc import Callable

import pluggy

PROJECT = "zoo"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_algorithms(register: Callable[..., None]) -> None:
    """Register algorithms.

    Called once per process when the registry is first built.
    ``register(name, factory, *, summary, config="module:ConfigClass", aliases=())``:
    ``factory`` is an :class:`zoo.core.algorithm.Algorithm` class or its ``"module:attr"``
    path; ``config`` names its hyperparameter dataclass.
    """


@hookspec
def register_envs(register: Callable[..., None]) -> None:
    """Register environments.

    Called once per process when the registry is first built.
    ``register(name, factory, *, summary, config="module:ConfigClass", aliases=(),
    default_budget=("env_steps", N) or ("frames", N), resolves=None, renderer=None,
    vector_factory=None)``.
    ``factory(arg, config, seed) -> zoo.core.env.Env``; ``arg`` is the part after the colon
    of ``--env NAME:ARG`` (or None). ``resolves``, optional ``"module:function"``, takes an
    id such as ``CartPole-v1`` and returns True when this plugin serves it without a prefix.
    ``renderer``, optional ``"module:function"``: ``renderer(env) -> uint8 [H, W, 3]``, the
    picture of an env built by ``factory`` as it is now (called after each ``reset`` and
    ``step``; every frame of one env must have the same size); ``zoo eval --video`` records
    with it. Without one, ``zoo eval --video`` refuses the env.
    ``vector_factory``, optional ``"module:function"``: ``vector_factory(arg, config,
    num_envs) -> zoo.core.env.VectorEnv | None``, the env's own vectorised backend; the
    actor builds one per ring group (``num_envs`` = envs per group) and steps it with one
    call, or builds ``factory`` envs one by one when it returns None (a config that asks
    for the per-env path). ``factory`` still builds single envs (config check, ``zoo eval``).
    """


@hookspec
def register_transports(register: Callable[..., None]) -> None:
    """Register transports.

    Called once per process when the registry is first built.
    ``register(name, factory, *, summary)``; ``factory(run_id, create=False) -> zoo.core.transport.Transport``
    (``create=True`` in the controller, which owns the run's transport resources).
    """


@hookspec
def register_launchers(register: Callable[..., None]) -> None:
    """Register launchers: how worker processes are started, watched and stopped.

    Called once per process when the registry is first built.
    ``register(name, factory, *, summary)``; ``factory(cfg) -> zoo.core.launcher.Launcher``
    (``cfg``: the run's :class:`~zoo.core.config.ExperimentConfig`). ``zoo train --launcher
    NAME`` picks one (default ``local``). The interface is in :mod:`zoo.core.launcher`.
    """


@hookspec
def register_resolvers(register: Callable[..., None]) -> None:
    """Register resolvers (name resolution: where a run's listeners are, by key).

    Called once per process when the registry is first built.
    ``register(name, factory, *, summary)``; ``factory(**options) -> zoo.core.resolver.Resolver``,
    called in the controller and in every worker with ``resolver.options`` of the experiment
    config; an ``Options`` dataclass attribute on the factory declares those options.
    """


@hookspec
def register_worker_kinds(register: Callable[..., None]) -> None:
    """Register worker kinds: kinds of worker process a run is made of (:mod:`zoo.core.kinds`).

    Called once per process when the registry is first built.
    ``register(name, entry, *, summary, count=None, options=None, listens=(), connects=(),
    cpus=1.0, device=None, restart="restartable", lead=False, order=100, describe=None, check=None)``:
    ``entry`` is ``"module:function"``, ``function(ctx: WorkerContext)``, what each worker
    process runs; ``count`` (``"module:function"`` of the experiment config) how many workers
    the config asks for, by default the kind's option ``workers.<name>.count``; ``options``
    (``"module:Class"``) the dataclass of its ``workers.<name>.*`` options; ``listens`` and
    ``connects`` the streams its workers bind and connect to. :mod:`zoo.core.kinds` says what
    every keyword means. The built-in actor, policy worker and trainer register here too
    (plugin ``zoo.workers``).
    """


@hookspec
def register_baselines(register: Callable[..., None]) -> None:
    """Register baselines: fixed players the eval manager rates versions against (docs/history.md,
    "The eval manager").

    Called once per process when the registry is first built.
    ``register(name, factory, *, summary)``; ``factory(spec, seed) -> player``, ``spec`` the
    :class:`zoo.core.env.EnvSpec` of the agents it plays (it may raise ``ValueError`` for an
    action space it cannot play, naming it), ``seed`` an int; ``player.act(obs,
    deterministic=False) -> {"action": torch.Tensor [N, *action_shape]}`` for a batch of
    ``N`` agents' observations ``{key: torch.Tensor [N, ...]}`` (action masks under
    ``"zoo:action_mask"``, bool ``[N, n]``), as a policy network acts. Built in: ``random``
    (:mod:`zoo.core.baselines`).
    """


@hookspec
def register_commands(app) -> None:
    """Add sub-commands to the ``zoo`` CLI.

    Called once when the CLI starts, with the root :class:`typer.Typer` application.
    """
