"""The worker graph of one run: how many workers of each role, and who talks to whom.

One experiment config gives the whole graph (SRL's worker graph, Mei et al., "SRL: Scaling
Distributed Reinforcement Learning to Over Ten Thousand Cores", arXiv 2306.16688, section 3):

- ``actors.count`` = N actor workers, ``policy.count`` = M policy workers,
  ``trainer.count`` = K trainer workers (one ``torch.distributed`` group, see
  :mod:`zoo.core.distributed`).
- Actor ``i`` is served by policy worker ``i mod M`` and sends its samples to trainer
  ``i mod K`` (round robin: as even as integers allow, the first ``N mod M`` policy
  workers hold one actor more; deterministic, so every worker computes the same
  assignment from the config alone).
- Each policy worker answers on its own inference endpoint, ``inference-<m>``; each
  trainer pulls its own sample endpoint, ``sample-<k>``; trainer 0 alone publishes on
  ``parameter``, to which every policy worker subscribes (:func:`endpoint`).
- With ``policy.inline`` there are no policy workers (M = 0): every actor runs the policy
  itself (:mod:`zoo.core.workers.inline`) and subscribes to ``parameter``; the inference
  stream has no endpoint.

:func:`write_graph` records every worker's role and index and these assignments in
``<run_dir>/graph.json``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

GRAPH_FILE = "graph.json"
ROLES = ("trainer", "policy", "actor")


def endpoint(stream: str, index: int) -> str:
    """The endpoint name of worker ``index``'s side of ``stream``: ``"inference-0"``, ``"sample-1"``.

    Names use only ``[A-Za-z0-9_-]``, which every transport keeps as is in its file and
    segment names (nng's ipc paths take the name unchanged, so no ``/``).
    """
    return f"{stream}-{index}"


PARAMETER_ENDPOINT = "parameter"
"""The one parameter endpoint: trainer 0 publishes, every policy worker (inline: every actor) subscribes."""


@dataclass(frozen=True)
class Graph:
    """Worker counts and the actor -> policy worker / trainer assignment (module docstring).

    ``policies == 0``: inline inference (``policy.inline``), no policy worker.
    """

    actors: int
    policies: int
    trainers: int

    @classmethod
    def from_config(cls, cfg: Any) -> Graph:
        return cls(cfg.actors.count, 0 if getattr(cfg.policy, "inline", False) else cfg.policy.count,
                   cfg.trainer.count)

    @property
    def inline(self) -> bool:
        """True when the actors run the policy themselves (no policy worker)."""
        return self.policies == 0

    def stream_roles(self) -> dict[str, tuple[str, ...]]:
        """The roles at the ends of each stream (what :mod:`zoo.core.placement` resolves
        transports from): inference: actor and policy (inline: none); sample: actor and
        trainer; parameter: trainer and policy (inline: trainer and actor)."""
        if self.inline:
            return {"inference": (), "sample": ("actor", "trainer"), "parameter": ("trainer", "actor")}
        return {"inference": ("actor", "policy"), "sample": ("actor", "trainer"), "parameter": ("trainer", "policy")}

    def workers(self) -> list[tuple[str, int]]:
        """Every ``(role, index)``: trainers first, then policy workers, then actors."""
        return ([("trainer", k) for k in range(self.trainers)] + [("policy", m) for m in range(self.policies)]
                + [("actor", i) for i in range(self.actors)])

    def policy_of(self, actor: int) -> int | None:
        """The policy worker that answers actor ``actor``: ``actor mod M`` (None: inline)."""
        return None if self.inline else actor % self.policies

    def trainer_of(self, actor: int) -> int:
        """The trainer that takes actor ``actor``'s samples: ``actor mod K``."""
        return actor % self.trainers

    def actors_of_policy(self, policy: int) -> list[int]:
        return [i for i in range(self.actors) if self.policy_of(i) == policy]

    def actors_of_trainer(self, trainer: int) -> list[int]:
        return [i for i in range(self.actors) if self.trainer_of(i) == trainer]

    def producers(self, stream: str) -> int:
        """The most workers sending to one listener of ``stream``: inference, the actors of one
        policy worker; sample, the actors of one trainer; parameter, the one publishing trainer;
        control, every worker (to the controller). Transports size their rings by it
        (:func:`zoo.core.streams.transport_for`)."""
        if stream == "inference":
            return max((len(self.actors_of_policy(m)) for m in range(self.policies)), default=0)
        if stream == "sample":
            return max((len(self.actors_of_trainer(k)) for k in range(self.trainers)), default=0)
        if stream == "parameter":
            return 1
        return len(self.workers())

    def to_dict(self) -> dict[str, Any]:
        """What ``graph.json`` holds: counts, every worker with its endpoints and assignments."""
        workers: list[dict[str, Any]] = []
        for k in range(self.trainers):
            workers.append({"role": "trainer", "index": k, "rank": k, "pulls": endpoint("sample", k),
                            "publishes": PARAMETER_ENDPOINT if k == 0 else None,
                            "actors": self.actors_of_trainer(k)})
        for m in range(self.policies):
            workers.append({"role": "policy", "index": m, "serves": endpoint("inference", m),
                            "subscribes": PARAMETER_ENDPOINT, "actors": self.actors_of_policy(m)})
        for i in range(self.actors):
            policy = self.policy_of(i)
            inference: dict[str, Any]
            if policy is None:  # inline: the policy runs in the actor, which pulls the parameters itself
                inference = {"policy": None, "inference": "inline", "subscribes": PARAMETER_ENDPOINT}
            else:
                inference = {"policy": policy, "requests": endpoint("inference", policy)}
            workers.append({"role": "actor", "index": i, **inference, "trainer": self.trainer_of(i),
                            "pushes": endpoint("sample", self.trainer_of(i))})
        assignment = ("actor i runs the policy inline, trainer i mod trainer.count" if self.inline else
                      "actor i -> policy worker i mod policy.count, trainer i mod trainer.count")
        return {"counts": {"actor": self.actors, "policy": self.policies, "trainer": self.trainers},
                "assignment": assignment, "workers": workers}


def write_graph(cfg: Any, run_dir: str) -> str:
    """Write :meth:`Graph.to_dict` of ``cfg`` to ``<run_dir>/graph.json`` atomically; returns the path."""
    path = os.path.join(run_dir, GRAPH_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(Graph.from_config(cfg).to_dict(), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


def worker_device(device: str, index: int) -> str:
    """The torch device of worker ``index`` of a role configured with ``device``.

    ``"cuda"`` (no index) spreads the workers of a role over the visible GPUs: worker ``i``
    gets ``cuda:<i mod GPUs>``; any other value (``cpu``, ``cuda:N``, ``mps``) is used as is
    by every worker of the role. Imports torch only for ``"cuda"``.
    """
    if device != "cuda":
        return device
    import torch

    count = torch.cuda.device_count()
    return f"cuda:{index % count}" if count else device
