"""Conformance checks any resolver can run — built-in or third-party (:mod:`zoo.core.resolver`).

Usage (a third-party resolver registered as ``"myresolver"``)::

    from zoo.core.testing import check_resolver
    print(check_resolver("myresolver", endpoint="..."))  # options go to its factory

``tests/contract/test_resolvers.py`` runs every check, one pytest case each, over every
registered resolver. What is checked (exact values; no timing assertions):

=================  ==========================================================================
check              contract
=================  ==========================================================================
publish_lookup     an address published under a key comes back equal from ``get`` and
                   ``lookup`` (str, int, float, bool, None and nested values); a second
                   publish replaces it; an unknown key gives None from ``get``; ``keys``
                   lists exactly the run's published keys
deadline           ``lookup`` of a key nobody publishes raises ``ResolveTimeout`` whose
                   ``key`` and ``timeout`` are the ones asked and whose message names the
                   key; a key published by another thread while ``lookup`` waits is returned
remove             ``remove`` forgets exactly that key; removing a missing key is no error
clear              ``clear(run)`` forgets every key of that run (``keys`` is empty, ``get``
                   None) and none of another run's
bad_keys           keys that are not ``<run_id>/<name>`` with ``[A-Za-z0-9_.-]`` parts raise
                   ValueError
cross_process      a key published by a spawned process is found by this one, and a key
                   this process publishes is found by that one
=================  ==========================================================================

Every check clears the run ids it used, even when it fails.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zoo.core.resolver import ResolveTimeout, run_key


class ResolverCheckError(AssertionError):
    """A resolver broke the contract; the message says which check and what differed."""


def _fail(check: str, message: str) -> None:
    raise ResolverCheckError(f"[{check}] {message}")


def _equal(check: str, what: str, got: Any, want: Any) -> None:
    if got != want:
        _fail(check, f"{what}: got {got!r}, expected {want!r}")


@dataclass
class ResolverUnderTest:
    """A resolver to check: its registry name and the options passed to ``factory(**options)``
    (in this process and in spawned children, so they must be picklable)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def make(self):
        from zoo.core.plugins import get_registry

        return get_registry().get("resolver", self.name).load()(**self.options)

    @staticmethod
    def new_run_id() -> str:
        """A fresh run id: ``rchk<pid>-<8 hex>``."""
        return f"rchk{os.getpid()}-{uuid.uuid4().hex[:8]}"


ADDRESS = {"host": "10.1.2.3", "port": 40512, "pid": 4242, "weight": 0.5, "tls": False, "note": None,
           "path": ["a", 1]}
OTHER = {"url": "ipc:///tmp/zoo-x/sample.ipc"}


def check_publish_lookup(rut: ResolverUnderTest) -> None:
    name = "publish_lookup"
    resolver, run = rut.make(), rut.new_run_id()
    try:
        a, b = run_key(run, "sample.tcp"), run_key(run, "inference-c3.nng-tcp")
        _equal(name, f"get({a!r}) before any publish", resolver.get(a), None)
        resolver.publish(a, ADDRESS)
        _equal(name, f"get({a!r})", resolver.get(a), ADDRESS)
        _equal(name, f"lookup({a!r}, 1.0)", resolver.lookup(a, 1.0), ADDRESS)
        resolver.publish(a, OTHER)
        _equal(name, f"get({a!r}) after publishing again", resolver.get(a), OTHER)
        resolver.publish(b, ADDRESS)
        _equal(name, f"keys({run!r})", resolver.keys(run), sorted([a, b]))
    finally:
        resolver.clear(run)


def check_deadline(rut: ResolverUnderTest) -> None:
    name = "deadline"
    resolver, run = rut.make(), rut.new_run_id()
    try:
        missing = run_key(run, "nobody.tcp")
        try:
            resolver.lookup(missing, 0.05)
        except ResolveTimeout as exc:
            _equal(name, "ResolveTimeout.key", exc.key, missing)
            _equal(name, "ResolveTimeout.timeout", exc.timeout, 0.05)
            if missing not in str(exc):
                _fail(name, f"the timeout message does not name the key {missing!r}: {exc}")
        else:
            _fail(name, f"lookup({missing!r}, 0.05) returned instead of raising ResolveTimeout")
        late = run_key(run, "late.shm")
        timer = threading.Timer(0.1, resolver.publish, args=(late, OTHER))
        timer.start()
        try:
            _equal(name, f"lookup({late!r}, 10.0) of a key published 0.1 s later", resolver.lookup(late, 10.0), OTHER)
        finally:
            timer.cancel()
            timer.join()
    finally:
        resolver.clear(run)


def check_remove(rut: ResolverUnderTest) -> None:
    name = "remove"
    resolver, run = rut.make(), rut.new_run_id()
    try:
        a, b = run_key(run, "a"), run_key(run, "b")
        resolver.publish(a, ADDRESS)
        resolver.publish(b, OTHER)
        resolver.remove(a)
        _equal(name, f"get({a!r}) after remove", resolver.get(a), None)
        _equal(name, f"get({b!r}) after removing {a!r}", resolver.get(b), OTHER)
        _equal(name, f"keys({run!r})", resolver.keys(run), [b])
        resolver.remove(a)  # a second time: no error
        resolver.remove(run_key(run, "never"))
    finally:
        resolver.clear(run)


def check_clear(rut: ResolverUnderTest) -> None:
    name = "clear"
    resolver, one, two = rut.make(), rut.new_run_id(), rut.new_run_id()
    try:
        for run in (one, two):
            for k in ("sample.shm", "parameter.shm", "control.ipc"):
                resolver.publish(run_key(run, k), {"run": run, "k": k})
        resolver.clear(one)
        _equal(name, f"keys({one!r}) after clear({one!r})", resolver.keys(one), [])
        _equal(name, "get of a cleared key", resolver.get(run_key(one, "sample.shm")), None)
        want = sorted(run_key(two, k) for k in ("sample.shm", "parameter.shm", "control.ipc"))
        _equal(name, f"keys({two!r}) after clear({one!r})", resolver.keys(two), want)
        _equal(name, "another run's address", resolver.get(run_key(two, "control.ipc")),
               {"run": two, "k": "control.ipc"})
        resolver.clear(one)  # a second time: no error
    finally:
        resolver.clear(one)
        resolver.clear(two)
    _equal(name, f"keys({two!r}) after clear({two!r})", resolver.keys(two), [])


def check_bad_keys(rut: ResolverUnderTest) -> None:
    name = "bad_keys"
    resolver = rut.make()
    for key in ("no-slash", "/name", "run/", "run/../x", "run/a/b", "run/.hidden", "ru n/x", ""):
        for call, args in (("publish", (key, OTHER)), ("get", (key,)), ("remove", (key,)), ("lookup", (key, 0.0))):
            try:
                getattr(resolver, call)(*args)
            except ValueError:
                continue
            _fail(name, f"{call}({key!r}) did not raise ValueError")


def _child(name: str, options: dict[str, Any], run: str, done) -> None:
    from zoo.core.plugins import get_registry

    resolver = get_registry().get("resolver", name).load()(**options)
    resolver.publish(run_key(run, "child"), {"pid": os.getpid()})
    found = resolver.lookup(run_key(run, "parent"), 20.0)
    resolver.publish(run_key(run, "child-saw"), found)
    done.set()


def check_cross_process(rut: ResolverUnderTest) -> None:
    name = "cross_process"
    resolver, run = rut.make(), rut.new_run_id()
    ctx = mp.get_context("spawn")
    done = ctx.Event()
    proc = ctx.Process(target=_child, args=(rut.name, rut.options, run, done), daemon=True)
    try:
        resolver.publish(run_key(run, "parent"), {"pid": os.getpid(), "hello": "child"})
        proc.start()
        _equal(name, "the child's address", resolver.lookup(run_key(run, "child"), 30.0), {"pid": proc.pid})
        if not done.wait(30.0):
            _fail(name, f"the child did not finish within 30 s (exit code {proc.exitcode})")
        _equal(name, "what the child looked up", resolver.get(run_key(run, "child-saw")),
               {"pid": os.getpid(), "hello": "child"})
    finally:
        proc.join(10.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
        resolver.clear(run)


CHECKS: dict[str, Callable[[ResolverUnderTest], None]] = {
    "publish_lookup": check_publish_lookup,
    "deadline": check_deadline,
    "remove": check_remove,
    "clear": check_clear,
    "bad_keys": check_bad_keys,
    "cross_process": check_cross_process,
}
"""Every check by name, in the order :func:`check_resolver` runs them."""


def check_resolver(name: str, checks: list[str] | None = None, **options: Any) -> list[str]:
    """Run the conformance checks on the registered resolver ``name`` built with ``options``;
    returns the names of the checks passed.

    Raises:
        ResolverCheckError: at the first broken contract.
    """
    rut = ResolverUnderTest(name, options)
    passed = []
    for check in checks or list(CHECKS):
        CHECKS[check](rut)
        passed.append(check)
    return passed
