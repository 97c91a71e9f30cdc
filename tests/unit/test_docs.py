"""The docs stay true to a clone of the repository (issue 16, item 5).

- No file cites something a clone does not have: no ``shared/...`` path, no relative link
  that leaves the repository.
- Every file path the Markdown docs name (in a link or in backticks, e.g. ``core/hookspecs.py``)
  exists, relative to the repository root or to the document's folder.
- What the README says about the ``inline`` transport is what ``zoo train`` does.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tracked(*patterns: str) -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
        files = [ROOT / line for line in out.stdout.splitlines()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): walk the tree
        files = [p for pat in patterns for p in ROOT.rglob(pat.replace("**/", ""))]
    return [f for f in files if f.is_file() and ".venv" not in f.parts]


DOCS = _tracked("*.md", "**/*.md")
SOURCES = _tracked("*.py", "**/*.py", "*.toml", "**/*.toml")
PATH_RE = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+\.(?:py|md|toml))`")
LINK_RE = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_nothing_cites_files_outside_the_repository():
    offenders = []
    for path in DOCS + SOURCES:
        if path.name == Path(__file__).name:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if re.search(r"(?<![\w.])shared/(specs|DESIGN)", line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_named_in_docs_exist_in_the_repository(doc):
    text = doc.read_text(encoding="utf-8")
    missing = []
    for target in LINK_RE.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (doc.parent / target).resolve()
        if ROOT not in resolved.parents and resolved != ROOT:
            missing.append(f"link {target!r} leaves the repository")
        elif not resolved.exists():
            missing.append(f"link {target!r} does not exist")
    for name in PATH_RE.findall(text):
        if "<" in name or not any((base / name).exists() for base in (ROOT, doc.parent)):
            missing.append(f"`{name}` is not a file of the repository (from the root or {doc.parent.name}/)")
    assert missing == []


def test_readme_says_what_zoo_train_does_with_inline():
    from zoo.core.config import ExperimentConfig, validate
    from zoo.core.options import ConfigError

    readme = (ROOT / "README.md").read_text()
    assert "`zoo train` refuses it" in " ".join(readme.split())
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=1000, name="r")
    cfg.streams.sample.transport = "inline"
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert info.value.problems == [
        "streams.sample.transport='inline' joins endpoints within one process only, but zoo train runs every worker "
        "as its own process; use auto (the default), shm, nng or tcp"]
