"""The worker graph of one run: how many workers of each kind, and who talks to whom.

One experiment config gives the whole graph (SRL's worker graph, Mei et al., "SRL: Scaling
Distributed Reinforcement Learning to Over Ten Thousand Cores", arXiv 2306.16688, section 3).
The graph is made of the registered worker kinds (:mod:`zoo.core.kinds`), each with the
number of workers the config asks for, started in the kinds' order. The built-in kinds
(:mod:`zoo.core.workers.kinds`):

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

A plugin's kind adds its workers after those (by its ``order``), on the streams it declares.
:func:`write_graph` records every worker's role (its kind's name) and index, the kinds and
these assignments in ``<run_dir>/graph.json``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GRAPH_FILE = "graph.json"


def endpoint(stream: str, index: int, policy: str = "") -> str:
    """The endpoint name of worker ``index``'s side of ``stream``: ``"inference-0"``, ``"sample-1"``;
    of named policy ``policy``'s worker ``index`` (its index within the policy):
    ``"inference-hiders-0"``. ``policy`` "" is the run's one implicit policy (today's names).

    Names use only ``[A-Za-z0-9_-]``, which every transport keeps as is in its file and
    segment names (nng's ipc paths take the name unchanged, so no ``/``); a policy name has
    no ``-`` (:data:`zoo.core.policies.POLICY_NAME_RULE`), so the names parse back.
    """
    return f"{stream}-{policy}-{index}" if policy else f"{stream}-{index}"


PARAMETER_ENDPOINT = "parameter"
"""The implicit policy's parameter endpoint: trainer 0 publishes, every policy worker (inline:
every actor) subscribes."""


def parameter_endpoint(policy: str = "") -> str:
    """The parameter endpoint of ``policy``: ``"parameter"`` for the implicit policy (""),
    ``"parameter-<policy>"`` for a named one (its trainer rank 0 publishes)."""
    return f"{PARAMETER_ENDPOINT}-{policy}" if policy else PARAMETER_ENDPOINT


@dataclass(frozen=True)
class PolicyCounts:
    """One policy's share of the graph (docs/policies.md).

    ``name``: the policy's name (``"default"`` for the implicit one); ``tag``: what its endpoint
    names carry ("" for the implicit policy, else ``name``); ``policy_workers``: M_P (0 when
    ``inline``); ``trainers``: K_P (0 when frozen); ``first_policy_worker``/``first_trainer``:
    the global index (``(role, index)`` of the graph) of its worker 0; ``weights``: a frozen
    policy's resolved checkpoint file.
    """

    name: str
    tag: str
    trainable: bool
    inline: bool
    policy_workers: int
    trainers: int
    first_policy_worker: int = 0
    first_trainer: int = 0
    agents: tuple[str, ...] = ()
    weights: str = ""


def policy_layout(cfg: Any) -> list[PolicyCounts]:
    """The run's policies as the graph lays them out, in declaration order: each one's policy
    workers and trainers, numbered globally in that order (``cfg.policies`` None or implicit:
    the one implicit policy of ``cfg.policy``/``cfg.trainer``, tag "")."""
    from zoo.core.policies import DEFAULT_POLICY

    policies = getattr(cfg, "policies", None)
    if policies is None or policies.implicit:
        agents = tuple(getattr(getattr(cfg, "spec", None), "agents", ()) or ())
        inline = bool(getattr(cfg.policy, "inline", False))
        return [PolicyCounts(DEFAULT_POLICY, "", True, inline, 0 if inline else int(cfg.policy.count),
                             int(cfg.trainer.count), agents=agents)]
    out, m, k = [], 0, 0
    for name, pol in policies.named.items():
        inline = bool(pol.policy.inline)
        M = 0 if inline else int(pol.policy.count)
        K = int(pol.trainer.count) if pol.trainable else 0
        out.append(PolicyCounts(name, name, pol.trainable, inline, M, K, m, k, tuple(pol.agents),
                                "" if pol.trainable else pol.weights))
        m, k = m + M, k + K
    return out


def _builtin_names() -> tuple[str, str, str]:
    from zoo.core.workers.kinds import ACTOR, POLICY, TRAINER

    return ACTOR, POLICY, TRAINER


class Graph:
    """The run's workers by kind, and the actor -> policy worker / trainer assignment (module docstring).

    ``Graph(actors, policies, trainers)``: the built-in kinds alone with those counts
    (``policies == 0``: inline inference, no policy worker); :meth:`from_config`: every
    registered kind with the counts ``cfg`` asks for.

    Attributes:
        kinds: the worker kinds (:class:`~zoo.core.kinds.WorkerKind`), in start order.
        counts: ``{kind name: workers}`` (0: the kind runs no worker).
        cfg: the experiment config (None for a graph given counts).
    """

    def __init__(self, actors: int = 0, policies: int = 0, trainers: int = 0, *, kinds: Iterable[Any] | None = None,
                 counts: Mapping[str, int] | None = None, cfg: Any = None) -> None:
        if kinds is None:
            from zoo.core.workers.kinds import builtin_kinds

            kinds = builtin_kinds()
        self.kinds = list(kinds)
        if counts is None:
            actor, policy, trainer = _builtin_names()
            counts = {actor: actors, policy: policies, trainer: trainers}
        self.counts = {k.name: int(counts.get(k.name, 0)) for k in self.kinds}
        self.cfg = cfg
        named = getattr(cfg, "policies", None)
        if named is not None and not named.implicit:
            self.layout = policy_layout(cfg)
        else:  # the one implicit policy, with the kinds' counts
            from zoo.core.policies import DEFAULT_POLICY

            agents = tuple(getattr(getattr(cfg, "spec", None), "agents", ()) or ())
            self.layout = [PolicyCounts(DEFAULT_POLICY, "", True, self.policies == 0, self.policies, self.trainers,
                                        agents=agents)]

    @classmethod
    def from_config(cls, cfg: Any, kinds: Iterable[Any] | None = None) -> Graph:
        """The graph ``cfg`` asks for, of ``kinds`` (default: every registered kind,
        :func:`zoo.core.kinds.worker_kinds`)."""
        if kinds is None:
            from zoo.core.kinds import worker_kinds

            kinds = worker_kinds()
        kinds = list(kinds)
        return cls(kinds=kinds, counts={k.name: k.workers(cfg) for k in kinds}, cfg=cfg)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.counts == other.counts and self.kinds == other.kinds

    def __repr__(self) -> str:
        return f"Graph({', '.join(f'{k}={n}' for k, n in self.counts.items())})"

    @property
    def actors(self) -> int:
        return self.counts.get(_builtin_names()[0], 0)

    @property
    def policies(self) -> int:
        return self.counts.get(_builtin_names()[1], 0)

    @property
    def trainers(self) -> int:
        return self.counts.get(_builtin_names()[2], 0)

    @property
    def inline(self) -> bool:
        """True when the actors run the policy themselves (no policy worker)."""
        return self.policies == 0

    def kind(self, name: str) -> Any:
        """The kind named ``name``.

        Raises:
            KeyError: the graph has no such kind.
        """
        for k in self.kinds:
            if k.name == name:
                return k
        raise KeyError(f"no worker kind {name!r} in the graph")

    def lead(self) -> tuple[str, int]:
        """``(kind, 0)``: the worker that leads the run (trainer 0; :mod:`zoo.core.kinds`)."""
        from zoo.core.kinds import lead_kind

        return lead_kind(self.kinds).name, 0

    def stream_roles(self) -> dict[str, tuple[str, ...]]:
        """The kinds at the ends of each stream, in start order (what :mod:`zoo.core.placement`
        resolves transports from): every kind with workers that listens on it or connects to it.
        Built-ins: inference: policy and actor (inline: none); sample: trainer and actor;
        parameter: trainer and policy (inline: trainer and actor)."""
        from zoo.core.kinds import STREAM_NAMES

        ends: dict[str, tuple[str, ...]] = {}
        for stream in STREAM_NAMES:
            ends[stream] = tuple(k.name for k in self.kinds if self.counts[k.name] > 0
                                 and any(stream in side for side in k.streams(self)))
        return ends

    def workers(self) -> list[tuple[str, int]]:
        """Every ``(role, index)`` in start order: trainers first, then policy workers, then actors,
        then plugins' kinds (by their ``order``)."""
        return [(k.name, i) for k in self.kinds for i in range(self.counts[k.name])]

    @property
    def named(self) -> bool:
        """True when the run names its policies (endpoints carry their names; docs/policies.md)."""
        return bool(self.layout) and self.layout[0].tag != ""

    def policy(self, name: str) -> PolicyCounts:
        """The :class:`PolicyCounts` of policy ``name``.

        Raises:
            KeyError: no such policy.
        """
        for p in self.layout:
            if p.name == name:
                return p
        raise KeyError(f"no policy {name!r} in the graph")

    def policy_of_worker(self, role: str, index: int) -> tuple[PolicyCounts, int] | None:
        """``(policy, local index)`` of policy worker or trainer ``index`` (global); None for
        other roles. Policy workers and trainers are numbered across policies in declaration
        order."""
        _, policy, trainer = _builtin_names()
        for p in self.layout:
            if role == policy and p.first_policy_worker <= index < p.first_policy_worker + p.policy_workers:
                return p, index - p.first_policy_worker
            if role == trainer and p.first_trainer <= index < p.first_trainer + p.trainers:
                return p, index - p.first_trainer
        return None

    def policy_worker_for(self, actor: int, name: str) -> int | None:
        """Policy ``name``'s worker (its local index) that answers actor ``actor``: ``actor mod
        M_P``; None when the policy runs inline."""
        p = self.policy(name)
        return None if p.inline or not p.policy_workers else actor % p.policy_workers

    def trainer_for(self, actor: int, name: str) -> int | None:
        """Policy ``name``'s trainer (its rank) that takes actor ``actor``'s samples: ``actor
        mod K_P``; None for a frozen policy."""
        p = self.policy(name)
        return actor % p.trainers if p.trainers else None

    def policy_of(self, actor: int) -> int | None:
        """The policy worker that answers actor ``actor``: ``actor mod M`` (None: inline). With
        named policies, the first policy's (global index)."""
        p = self.layout[0]
        m = self.policy_worker_for(actor, p.name)
        return None if m is None else p.first_policy_worker + m

    def trainer_of(self, actor: int) -> int:
        """The trainer that takes actor ``actor``'s samples: ``actor mod K``. With named
        policies, the first trainable policy's (global index)."""
        p = next(p for p in self.layout if p.trainers)
        return p.first_trainer + actor % p.trainers

    def actors_of_policy(self, policy: int) -> list[int]:
        """The actors that policy worker ``policy`` (global index) answers."""
        found = self.policy_of_worker(_builtin_names()[1], policy)
        if found is None:
            return []
        p, m = found
        return [i for i in range(self.actors) if i % p.policy_workers == m]

    def actors_of_trainer(self, trainer: int) -> list[int]:
        """The actors whose samples trainer ``trainer`` (global index) takes."""
        found = self.policy_of_worker(_builtin_names()[2], trainer)
        if found is None:
            return []
        p, k = found
        return [i for i in range(self.actors) if i % p.trainers == k]

    def producers(self, stream: str) -> int:
        """The most workers sending to one listener of ``stream``: inference, the actors of one
        policy worker; sample, the actors of one trainer; parameter, the one publishing trainer;
        control, every worker (to the controller). Workers of a plugin's kind that connect to
        inference or sample count as senders to every listener (an upper bound). Transports size
        their rings by it (:func:`zoo.core.streams.transport_for`)."""
        actor = _builtin_names()[0]
        others = sum(self.counts[k.name] for k in self.kinds if k.name != actor and stream in k.streams(self)[1])
        if stream == "inference":  # each endpoint is its own ring: the most actors of one policy worker
            return max((len(self.actors_of_policy(m)) for m in range(self.policies)), default=0) + others
        if stream == "sample":
            return max((len(self.actors_of_trainer(k)) for k in range(self.trainers)), default=0) + others
        if stream == "parameter":
            return 1
        return len(self.workers())

    def to_dict(self) -> dict[str, Any]:
        """What ``graph.json`` holds: ``counts`` (every kind's number of workers, 0 included), the
        assignment, every worker with its endpoints and assignments (its kind's
        :meth:`~zoo.core.kinds.WorkerKind.graph_entry`), and ``kinds``: each kind with workers in
        this run, its plugin, streams, restart policy and start order."""
        workers = [k.graph_entry(self, i) for k in self.kinds for i in range(self.counts[k.name])]
        assignment = ("actor i runs the policy inline, trainer i mod trainer.count" if self.inline else
                      "actor i -> policy worker i mod policy.count, trainer i mod trainer.count")
        kinds = {}
        for k in self.kinds:
            if self.counts[k.name]:
                listens, connects = k.streams(self)
                kinds[k.name] = {"plugin": k.plugin, "entry": k.entry, "listens": list(listens),
                                 "connects": list(connects), "restart": k.restart, "lead": k.lead, "order": k.order}
        out = {"counts": dict(self.counts), "assignment": assignment, "workers": workers, "kinds": kinds}
        if self.named:
            out["assignment"] = ("actor i -> each policy P's worker i mod policy.count of P (or inline) and trainer "
                                 "i mod trainer.count of P")
            out["policies"] = {p.name: self.policy_entry(p) for p in self.layout}
        return out

    def policy_entry(self, p: PolicyCounts) -> dict[str, Any]:
        """``graph.json``'s entry of named policy ``p``: trainable, agents, its workers' global
        indices, its parameter endpoint (trainable) or weights file (frozen)."""
        entry: dict[str, Any] = {"trainable": p.trainable, "agents": list(p.agents), "inline": p.inline,
                                 "policy_workers": list(range(p.first_policy_worker,
                                                              p.first_policy_worker + p.policy_workers)),
                                 "trainers": list(range(p.first_trainer, p.first_trainer + p.trainers))}
        if p.trainable:
            entry["parameter"] = parameter_endpoint(p.tag)
        else:
            entry["weights"] = p.weights
        return entry


def write_graph(cfg: Any, run_dir: str, kinds: Iterable[Any] | None = None) -> str:
    """Write :meth:`Graph.to_dict` of ``cfg`` (``kinds``: default every registered kind) to
    ``<run_dir>/graph.json`` atomically; returns the path."""
    path = os.path.join(run_dir, GRAPH_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(Graph.from_config(cfg, kinds).to_dict(), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


def worker_device(device: str, index: int) -> str:
    """The torch device of worker ``index`` of a kind configured with ``device``.

    ``"cuda"`` (no index) spreads the workers of a kind over the visible GPUs: worker ``i``
    gets ``cuda:<i mod GPUs>``; any other value (``cpu``, ``cuda:N``, ``mps``) is used as is
    by every worker of the kind. Imports torch only for ``"cuda"``.
    """
    if device != "cuda":
        return device
    import torch

    count = torch.cuda.device_count()
    return f"cuda:{index % count}" if count else device
