"""Helpers for testing Zoo and Zoo plugins.

- :func:`check_env`: validate an environment against :mod:`zoo.core.env`'s contract
  (:func:`check_vector_env`: a vector env, against its own and the single env's spec).
- Deterministic fake environments (:class:`CountingEnv`, :class:`CrashingEnv`,
  :class:`SlowEnv`) with their configs and ``factory(arg, config, seed)`` functions;
  :mod:`zoo.core.testing.plugin` registers them as ``fake-counting``, ``fake-crashing``
  and ``fake-slow`` (and :mod:`.fake_envs`' ``fake-stages`` and ``fake-mixed``).
- :func:`subprocess_env`: an environment for a subprocess that sees extra plugin dirs.
- :func:`check_transport` / :func:`check_resolver`: the conformance suites of transports
  (:mod:`.transport_checks`) and resolvers (:mod:`.resolver_checks`).

Importing this package imports numpy only (gymnasium when an env is built or checked).
"""
from zoo.core.testing.env_check import AUTORESET_INFO_KEYS, EnvCheckError, EnvCheckReport, check_env, check_vector_env
from zoo.core.testing.fake_envs import (
    CountingConfig,
    CountingEnv,
    CrashingConfig,
    CrashingEnv,
    SlowConfig,
    SlowEnv,
    make_boom,
    make_counting,
    make_crashing,
    make_slow,
)
from zoo.core.testing.procs import subprocess_env
from zoo.core.testing.resolver_checks import CHECKS as RESOLVER_CHECKS
from zoo.core.testing.resolver_checks import ResolverCheckError, check_resolver
from zoo.core.testing.transport_checks import CHECKS as TRANSPORT_CHECKS
from zoo.core.testing.transport_checks import TransportCheckError, TransportUnderTest, check_transport

__all__ = [
    "AUTORESET_INFO_KEYS",
    "RESOLVER_CHECKS",
    "TRANSPORT_CHECKS",
    "CountingConfig",
    "CountingEnv",
    "CrashingConfig",
    "CrashingEnv",
    "EnvCheckError",
    "EnvCheckReport",
    "ResolverCheckError",
    "SlowConfig",
    "SlowEnv",
    "TransportCheckError",
    "TransportUnderTest",
    "check_env",
    "check_resolver",
    "check_transport",
    "check_vector_env",
    "make_boom",
    "make_counting",
    "make_crashing",
    "make_slow",
    "subprocess_env",
]
