"""No test module imports another test module (CONTRIBUTING.md).

What several test modules share lives in helper modules whose names do not start with
``test_`` (``tests/unit/fakes.py``, ``tests/unit/replay_fakes.py``, ``tests/unit/gpu_harness.py``,
``tests/unit/trainer_harness.py``, ``zoo.core.testing.*``) or, for a fixture, in a
``conftest.py``: a test module imported by another runs its module-level code twice, and any
``test_*`` function it hands over is collected again. Every ``.py`` file under ``tests/`` is
read with :mod:`ast` (imports inside functions included); an import of a module whose last
dotted component starts with ``test_`` is a finding, named by file and line.
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``source`` of a module whose last dotted component
    starts with ``test_``: ``import a.test_x``, ``from a.test_x import y``, ``from a import test_x``,
    ``from .test_x import y``, ``from . import test_x`` (relative modules keep their dots), at any
    depth (inside functions, classes, ``if`` blocks)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.rsplit(".", 1)[-1].startswith("test_")]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.module and node.module.rsplit(".", 1)[-1].startswith("test_"):
                found.append((node.lineno, module))
            else:  # ``from package import test_x``: a module (or a test function, collected twice)
                sep = "" if module.endswith(".") else "."
                found += [(node.lineno, module + sep + a.name) for a in node.names if a.name.startswith("test_")]
    return sorted(found)


SAMPLE = '''\
import os, tests.unit.test_a
import tests.unit.test_b as b
from tests.unit.test_c import x
from tests.unit import fakes, test_d
from .test_e import y
from . import test_f
from ..unit.test_g import z
import tests.unit.fakes
from tests.unit.fakes import Counter
from zoo.core.testing import transport_checks
from tests.unit.test_data import testing
import pytest_x, attest_y


def f():
    from tests.unit.test_h import w
    if w:
        import test_i


class C:
    def m(self):
        from tests.integration import test_j as j
'''


def test_the_scan_finds_every_import_form():
    assert imported_test_modules(SAMPLE) == [
        (1, "tests.unit.test_a"),
        (2, "tests.unit.test_b"),
        (3, "tests.unit.test_c"),
        (4, "tests.unit.test_d"),
        (5, ".test_e"),
        (6, ".test_f"),
        (7, "..unit.test_g"),
        (11, "tests.unit.test_data"),
        (16, "tests.unit.test_h"),
        (18, "test_i"),
        (23, "tests.integration.test_j"),
    ]
    assert imported_test_modules("import tests.unit.fakes\nfrom tests.unit.trainer_harness import fake_host\n") == []


def test_no_test_module_imports_another_test_module():
    files = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 100  # the scan reads the suite, not an empty folder
    findings = [f"{path.relative_to(TESTS.parent)}:{line}: imports {module}"
                for path in files
                for line, module in imported_test_modules(path.read_text(encoding="utf-8"), str(path))]
    assert findings == [], "a test module imports another:\n" + "\n".join(findings)
