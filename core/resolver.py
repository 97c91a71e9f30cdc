"""Name resolution: where a run's listeners can be reached, by key.

Every listening endpoint (a puller, a reply server, a publisher, the controller's control
puller) *publishes* its address under a key; every dialing endpoint *looks it up*. Nothing
else tells a worker where its peers are, so a resolver whose keys are visible on several
hosts is all the transports need to span them.

Keys are ``"<run_id>/<name>"`` (:func:`run_key`); ``name`` says which listener, e.g.
``sample.tcp`` for the tcp puller of the sample stream. Both parts use only
``[A-Za-z0-9_.-]`` and do not start with ``.``. Addresses are JSON objects (dicts of str,
int, float, bool, None), e.g. ``{"host": "10.0.0.7", "port": 40512, "owner": "..."}``.

A resolver is a plugin (the ``register_resolvers`` hook, ``zoo list resolvers``); the
experiment config picks one with ``resolver.name`` and passes it ``resolver.options``.
Its factory is called as ``factory(**options)`` in the controller and in every worker and
must return an object with the methods of :class:`Resolver`; subclassing it gives
:meth:`Resolver.lookup` (polling :meth:`Resolver.get` until the deadline) for free. The
built-in ``files`` resolver keeps one file per key in the run directory
(``plugins/resolvers/files``). ``zoo.core.testing.check_resolver`` checks any resolver
against this contract.
"""
from __future__ import annotations

import re
import time
from typing import Any

KEY_PART = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
LOOKUP_POLL_S = (0.002, 0.05)
"""First and largest pause, in seconds, between two :meth:`Resolver.get` calls of a lookup."""


class ResolveTimeout(TimeoutError):
    """No address was published under ``key`` before the lookup's deadline.

    Attributes:
        key: the key looked up; timeout: the seconds waited; resolver: the resolver's name.
    """

    def __init__(self, key: str, timeout: float, resolver: str) -> None:
        self.key, self.timeout, self.resolver = key, timeout, resolver
        super().__init__(f"no address was published under {key!r} within {timeout:g} s (resolver {resolver!r}); "
                         "is the listener of that stream running, and do both ends use the same resolver "
                         "and run id?")


def run_key(run_id: str, name: str) -> str:
    """The key ``"<run_id>/<name>"``.

    Raises:
        ValueError: ``run_id`` or ``name`` is empty, starts with ``.``, or holds a character
            outside ``[A-Za-z0-9_.-]``.
    """
    for what, part in (("run_id", run_id), ("name", name)):
        if not isinstance(part, str) or not KEY_PART.match(part):
            raise ValueError(f"resolver key {what} {part!r} must be non-empty, use only [A-Za-z0-9_.-] "
                             "and not start with '.'")
    return f"{run_id}/{name}"


def split_key(key: str) -> tuple[str, str]:
    """``(run_id, name)`` of a key made by :func:`run_key`.

    Raises:
        ValueError: ``key`` is not ``"<run_id>/<name>"`` with valid parts.
    """
    run_id, sep, name = key.partition("/") if isinstance(key, str) else ("", "", "")
    if not sep:
        raise ValueError(f"resolver key {key!r} is not '<run_id>/<name>'")
    run_key(run_id, name)
    return run_id, name


class Resolver:
    """The resolver interface; subclasses implement :meth:`publish`, :meth:`get`,
    :meth:`remove` and :meth:`clear` (and may replace :meth:`lookup` with a blocking wait).

    Contract (``tests/contract/test_resolvers.py`` checks it for every registered resolver):

    - ``publish(key, address)`` makes ``address`` what every later ``get``/``lookup`` of
      ``key`` returns, in any process that uses the same resolver options; publishing
      again replaces it (never a mix of two addresses).
    - ``get(key)`` returns the address or None at once.
    - ``lookup(key, timeout)`` waits up to ``timeout`` seconds for the key and raises
      :class:`ResolveTimeout` naming the key after that.
    - ``remove(key)`` forgets the key (no error if it is not there).
    - ``clear(run_id)`` forgets every key of the run and anything the resolver stored for
      it; other runs' keys stay. The controller calls it when the run ends, however it ends.
    """

    name = "resolver"

    def publish(self, key: str, address: dict[str, Any]) -> None:
        raise NotImplementedError

    def get(self, key: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def remove(self, key: str) -> None:
        raise NotImplementedError

    def clear(self, run_id: str) -> None:
        raise NotImplementedError

    def keys(self, run_id: str) -> list[str]:
        """The run's keys that hold an address now, sorted (used by tests and clean-up checks)."""
        raise NotImplementedError

    def lookup(self, key: str, timeout: float) -> dict[str, Any]:
        """The address published under ``key``, waiting up to ``timeout`` seconds for it.

        Raises:
            ResolveTimeout: nothing was published under ``key`` by then (the message names
                the key, the seconds waited and the resolver).
            ValueError: ``key`` is not a valid key.
        """
        split_key(key)
        deadline = time.monotonic() + max(0.0, timeout)
        pause = LOOKUP_POLL_S[0]
        while True:
            found = self.get(key)
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResolveTimeout(key, timeout, self.name)
            time.sleep(min(pause, left))
            pause = min(2 * pause, LOOKUP_POLL_S[1])


def resolver_from_config(registry: Any, cfg: Any) -> Resolver:
    """The resolver ``cfg.resolver.name`` built with ``cfg.resolver.options`` (``files`` with
    no options when ``cfg`` has no ``resolver`` section).

    Raises:
        UnknownComponentError: no resolver of that name is registered.
    """
    section = getattr(cfg, "resolver", None)
    name = getattr(section, "name", "files")
    options = dict(getattr(section, "options", None) or {})
    return registry.get("resolver", name).load()(**options)
