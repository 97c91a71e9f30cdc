"""The linter and the type checker are clean (settings: pyproject.toml's [tool.ruff], [tool.mypy]).

ruff runs over core/, transports/, zoo/ and plugins/; mypy over the package zoo through a link
farm of the folders (zoo.core.testing.lint; CONTRIBUTING.md says why). Both are in the ``test``
extra; without them these tests skip, saying so. ``python -m zoo.core.testing.lint`` runs the
same two checks from a shell.
"""
import importlib.util
import os
from pathlib import Path

import pytest

from zoo.core.testing.lint import REPO, link_farm, run_mypy, run_pyflakes, run_ruff


def _need(tool: str) -> None:
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed (pip install -e '.[test]' installs it)")


def test_link_farm_maps_the_folders_as_setup_py_does(tmp_path):
    farm = link_farm(tmp_path)
    top = farm / "zoo"
    assert (top / "core").resolve() == REPO / "core"
    assert (top / "plugins").resolve() == REPO / "plugins"
    assert (top / "transports").resolve() == REPO / "transports"
    assert (top / "cli.py").resolve() == REPO / "zoo" / "cli.py"
    assert (top / "core" / "config.py").is_file()
    assert sorted(p.name for p in top.iterdir()) == sorted(
        [p.name for p in (REPO / "zoo").iterdir() if p.name != "__pycache__"] + ["core", "plugins", "transports"])


def test_ruff_is_clean():
    _need("ruff")
    code, out = run_ruff()
    assert code == 0, f"ruff found problems (fix them, or `python -m ruff check --fix` the safe ones):\n{out}"


def test_tests_benchmarks_and_examples_have_no_pyflakes_findings():
    # An undefined name in a test fails only when that test runs (two merged branches once left
    # test_ray.py calling subprocess.Popen without importing subprocess).
    _need("ruff")
    code, out = run_pyflakes()
    assert code == 0, f"ruff --select F found problems in tests/, benchmarks/ or examples/:\n{out}"


def test_mypy_is_clean():
    _need("mypy")
    # A kept cache (ZOO_MYPY_CACHE=folder) makes reruns take seconds; by default every run is cold.
    cache = os.environ.get("ZOO_MYPY_CACHE")
    code, out = run_mypy(cache_dir=Path(cache) if cache else None)
    assert code == 0, f"mypy found problems:\n{out}"
