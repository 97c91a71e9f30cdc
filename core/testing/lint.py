"""Run Zoo's linter (ruff) and type checker (mypy) the way CI does.

The repository's folders are not laid out as the ``zoo`` package they install as:
``setup.py`` (``ROOTS``) maps ``core/`` to ``zoo.core``, ``plugins/`` to ``zoo.plugins``,
``transports/`` to ``zoo.transports`` and ``zoo/`` to ``zoo``. A normal editable install
(``pip install -e .``) follows that mapping with an import hook that static tools cannot
read, so mypy is run over a *link farm*: a folder ``zoo/`` holding a symbolic link to every
entry of the repository's ``zoo/`` plus ``core``, ``plugins`` and ``transports`` links
(:func:`link_farm`). Nothing is copied, so the farm always shows the working tree.

``python -m zoo.core.testing.lint`` runs both tools over what CI checks (ruff over
:data:`RUFF_PATHS`, its pyflakes rules over :data:`PYFLAKES_PATHS`, mypy over
:data:`MYPY_PACKAGES`) and exits non-zero with their findings;
``tests/unit/test_lint.py`` does the same inside the suite. Both tools read their settings
from ``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: The repository root: the folder holding ``setup.py`` and ``pyproject.toml``.
REPO = Path(__file__).resolve().parents[2]

#: ``setup.py``'s ``ROOTS`` without the top package: sub-package name -> repository folder.
SUBPACKAGES = {"core": "core", "plugins": "plugins", "transports": "transports"}

#: The folders ruff checks, relative to the repository root.
RUFF_PATHS = ("core", "transports", "zoo", "plugins")

#: Folders ruff checks for pyflakes' findings only (``--select F``: undefined names, unused
#: imports, redefinitions): the tests, benchmarks and examples, whose style is not enforced but
#: whose undefined names would fail only when the code runs (a merge that dropped an import).
PYFLAKES_PATHS = ("tests", "benchmarks", "examples")

#: The packages mypy checks (``-p``), inside the link farm: ``zoo`` holds them all (one ``-p`` per
#: package; ``-p zoo -p zoo.core`` would name ``zoo.core`` twice). ``[tool.mypy]``'s overrides
#: leave some modules out of the check (``ignore_errors``), not out of the analysis.
MYPY_PACKAGES = ("zoo",)


def link_farm(dest: Path, repo: Path = REPO) -> Path:
    """Build ``dest/zoo``: the ``zoo`` package as installed, made of symbolic links.

    ``dest/zoo/<entry>`` links to ``repo/zoo/<entry>`` for every entry of the repository's
    ``zoo/`` folder (``__pycache__`` left out), and ``dest/zoo/core``, ``dest/zoo/plugins``,
    ``dest/zoo/transports`` link to the repository's ``core/``, ``plugins/``, ``transports/``
    (:data:`SUBPACKAGES`, as ``setup.py``'s ``ROOTS``). Returns ``dest``: run mypy from there
    (or put it first on ``MYPYPATH``). Raises ``FileExistsError`` if ``dest/zoo`` exists.
    """
    repo = repo.resolve()
    top = dest / "zoo"
    top.mkdir(parents=True)
    for entry in sorted((repo / "zoo").iterdir()):
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in SUBPACKAGES.items():
        if (top / name).exists():
            raise FileExistsError(f"zoo/{name} in the repository would hide {folder}/")
        (top / name).symlink_to(repo / folder, target_is_directory=True)
    return dest


def _run(cmd: list[str], cwd: Path) -> tuple[int, str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def run_ruff(repo: Path = REPO, paths: tuple[str, ...] = RUFF_PATHS) -> tuple[int, str]:
    """``ruff check`` over ``paths`` with ``repo``'s settings: (exit status, output)."""
    return _run([sys.executable, "-m", "ruff", "check", "--no-cache", *paths], cwd=repo)


def run_mypy(repo: Path = REPO, packages: tuple[str, ...] = MYPY_PACKAGES,
             cache_dir: Path | None = None) -> tuple[int, str]:
    """mypy over ``packages`` through a link farm of ``repo``: (exit status, output).

    The farm lives in a temporary folder; the file names in the output are the
    repository's (``core/config.py``, not ``zoo/core/config.py``). ``cache_dir``: mypy's
    incremental cache (default: none kept, every run is cold).
    """
    repo = repo.resolve()
    with tempfile.TemporaryDirectory(prefix="zoo-mypy-") as tmp:
        farm = link_farm(Path(tmp) / "farm", repo)
        cache = ["--cache-dir", str(cache_dir)] if cache_dir else ["--cache-dir", os.devnull]
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(repo / "pyproject.toml"), *cache]
        for package in packages:
            cmd += ["-p", package]
        code, out = _run(cmd, cwd=farm)
    return code, _repo_paths(out)


def _repo_paths(text: str) -> str:
    """Rewrite the farm's ``zoo/core/x.py`` as the repository's ``core/x.py``."""
    lines = []
    for line in text.splitlines():
        for name, folder in SUBPACKAGES.items():
            if line.startswith(f"zoo/{name}/"):
                line = folder + line[len(f"zoo/{name}"):]
                break
        lines.append(line)
    return "\n".join(lines)


def run_pyflakes(repo: Path = REPO, paths: tuple[str, ...] = PYFLAKES_PATHS) -> tuple[int, str]:
    """``ruff check --select F`` over ``paths``: (exit status, output)."""
    return _run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F", *paths], cwd=repo)


def main() -> int:
    """Run ruff, then mypy (cache: the repository's ``.mypy_cache/``); print their findings;
    0 when both are clean."""
    status = 0
    checks = (("ruff", run_ruff), ("ruff --select F (tests, benchmarks, examples)", run_pyflakes),
              ("mypy", lambda: run_mypy(cache_dir=REPO / ".mypy_cache")))
    for name, run in checks:
        print(f"== {name}", flush=True)
        code, out = run()
        print(out, flush=True)
        status = status or code
    return status


if __name__ == "__main__":
    sys.exit(main())
