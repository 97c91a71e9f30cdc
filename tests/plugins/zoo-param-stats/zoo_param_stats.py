"""Test-only plugin: the worker kind ``param-stats``, a third-party kind (issue 22, item 5).

Each ``param-stats`` worker subscribes to the parameter stream (publish/latest: any number of
subscribers) and appends one JSON line per new policy version it sees to
``<run_dir>/<file>-<index>.jsonl``: ``{"policy_version", "l2_norm", "arrays", "env_steps"}``
(``l2_norm``: the square root of the sum of squares of every parameter, float64). The run
asks for it in its config: ``--set workers.param-stats.count=1`` (default 0: none).
Nothing in the core knows it.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import zoo
from zoo.core.options import bounded


@dataclass
class ParamStatsOptions:
    count: int = field(default=0, metadata=bounded(ge=0))
    """Number of param-stats workers (each records every version it sees)."""
    file: str = "param-stats"
    """Name of the files written in the run folder: ``<file>-<index>.jsonl``."""

    def __post_init__(self) -> None:
        if not self.file or "/" in self.file or self.file.startswith("."):
            raise ValueError(f"file must be a plain file name (no '/', not starting with '.'), got {self.file!r}")


@zoo.hookimpl
def register_worker_kinds(register):
    register("param-stats", "zoo_param_stats:run", options="zoo_param_stats:ParamStatsOptions",
             connects=("parameter",), cpus=0.5, order=50,
             summary="records each policy version's parameter L2 norm (workers.param-stats.count)")


def squares(value) -> tuple[float, int]:
    """Sum of squares (float64) and number of arrays in a parameter bundle (nested dicts/lists of arrays)."""
    import numpy as np

    if isinstance(value, dict):
        parts = [squares(v) for v in value.values()]
    elif isinstance(value, (list, tuple)):
        parts = [squares(v) for v in value]
    else:
        array = np.asarray(value, dtype=np.float64)
        return float(np.sum(array * array)), 1
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def run(ctx) -> None:
    from zoo.core.graph import PARAMETER_ENDPOINT
    from zoo.core.kinds import options_of

    opts = options_of(ctx)
    params = ctx.transport("parameter").subscriber(PARAMETER_ENDPOINT)
    last = -1
    path = os.path.join(ctx.run_dir, f"{opts.file}-{ctx.index}.jsonl")
    try:
        with open(path, "a") as out:
            while not ctx.stop:
                ctx.heartbeat()
                msg = params.latest(0.5)
                if msg is None:
                    continue
                bundle, meta = msg
                version = int(meta.get("policy_version", -1))
                if version <= last:  # a republished version (a data-parallel trainer waiting for its peers)
                    continue
                last = version
                total, arrays = squares(bundle)
                out.write(json.dumps({"policy_version": version, "l2_norm": math.sqrt(total), "arrays": arrays,
                                      "env_steps": meta.get("env_steps")}) + "\n")
                out.flush()
    finally:
        params.close()
