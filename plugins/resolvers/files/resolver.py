"""The ``files`` resolver: each key is a small JSON file in the run's directory.

Key ``<run_id>/<name>`` lives in ``<root>/zoo-<run_id>/keys/<name>.json`` (``root``
defaults to :func:`tempfile.gettempdir`, the folder the transports' run directories use),
written to a temporary file in the same folder and renamed over the old one, so a reader
sees the whole old address or the whole new one, never half of either. Processes of one
host find each other through it; hosts that share ``root`` (for example an NFS mount) do
too, which is all a multi-host run needs from it.

``clear(run_id)`` removes ``keys/`` and then the run's folder if nothing else is left in
it (the transports remove their own files). A run killed with SIGKILL leaves its keys in
its run directory, which the next run reclaims together with the rest of it
(:func:`zoo.transports.sockets.rundir.reclaim_stale_run_dirs`).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from zoo.core.resolver import Resolver, run_key, split_key

SUFFIX = ".json"


@dataclass
class FilesOptions:
    """Options of the ``files`` resolver (``--set resolver.options.<name>=value``)."""

    root: str | None = None
    """Folder holding the runs' ``zoo-<run_id>/keys/`` folders (default: the system's temporary
    folder). Give every host the same shared folder to span hosts."""

    def __post_init__(self) -> None:
        if self.root == "":
            raise ValueError("root must not be empty (leave it unset for the temporary folder)")


class FilesResolver(Resolver):
    """Keys as files under ``<root>/zoo-<run_id>/keys/`` (see the module docstring)."""

    name = "files"
    Options = FilesOptions

    def __init__(self, root: str | None = None) -> None:
        FilesOptions(root=root)
        self.root = root or tempfile.gettempdir()

    def _dir(self, run_id: str) -> str:
        return os.path.join(self.root, f"zoo-{run_id}", "keys")

    def _path(self, key: str) -> str:
        run_id, name = split_key(key)
        return os.path.join(self._dir(run_id), name + SUFFIX)

    def publish(self, key: str, address: dict[str, Any]) -> None:
        """Write ``address`` under ``key`` atomically.

        Raises:
            ValueError: a bad key, or ``address`` is not a JSON-serialisable dict.
            OSError: the folder cannot be written.
        """
        if not isinstance(address, dict):
            raise ValueError(f"address for {key!r} must be a dict, got {type(address).__name__}")
        path = self._path(key)
        data = json.dumps(address)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, path)

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)  # a bad key raises ValueError here, not swallowed below
        try:
            with open(path) as f:
                found = json.load(f)
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def remove(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def clear(self, run_id: str) -> None:
        run_key(run_id, "x")  # validates run_id
        shutil.rmtree(self._dir(run_id), ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(self._dir(run_id)))  # only if the transports left nothing there
        except OSError:
            pass

    def keys(self, run_id: str) -> list[str]:
        run_key(run_id, "x")
        try:
            names = os.listdir(self._dir(run_id))
        except OSError:
            return []
        return sorted(run_key(run_id, n[:-len(SUFFIX)]) for n in names if n.endswith(SUFFIX))
