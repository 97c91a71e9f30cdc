"""Every registered resolver passes the conformance suite (:mod:`zoo.core.testing.resolver_checks`):
publish, lookup, the lookup deadline, remove, clearing a run, key validation, across processes."""
from __future__ import annotations

import pytest

from zoo.core.plugins import get_registry
from zoo.core.testing.resolver_checks import CHECKS, ResolverUnderTest

EXPECTED = ("files", "ray")
REGISTERED = get_registry().names("resolver")


@pytest.mark.parametrize("name", sorted(set(REGISTERED) | set(EXPECTED)))
@pytest.mark.parametrize("check", list(CHECKS))
def test_conformance(name: str, check: str, request) -> None:
    if name not in REGISTERED:
        pytest.skip(f"resolver {name!r} is not registered in this checkout")
    if name == "ray":  # keys in a one-node Ray cluster's store (skips without Ray)
        CHECKS[check](ResolverUnderTest(name, {"address": request.getfixturevalue("ray_cluster")}))
        return
    CHECKS[check](ResolverUnderTest(name))


def test_every_builtin_resolver_is_registered() -> None:
    assert [n for n in EXPECTED if n in REGISTERED] == list(EXPECTED)


def test_files_resolver_with_a_root_keeps_keys_under_it(tmp_path) -> None:
    """``root`` moves the keys (hosts sharing a folder share the names): one file per key,
    <root>/zoo-<run_id>/keys/<name>.json, and clear() leaves an empty root."""
    CHECKS["clear"](ResolverUnderTest("files", {"root": str(tmp_path)}))
    from zoo.plugins.resolvers.files.resolver import FilesResolver

    resolver = FilesResolver(root=str(tmp_path))
    resolver.publish("r1/sample.tcp", {"port": 1})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "zoo-r1", "zoo-r1/keys", "zoo-r1/keys/sample.tcp.json"]
    resolver.clear("r1")
    assert list(tmp_path.iterdir()) == []
