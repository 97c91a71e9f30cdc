"""The built-in worker kinds' declarations: actor, policy worker, trainer (SRL's three).

They register through ``register_worker_kinds`` like any plugin's kind
(:mod:`zoo.core.workers.plugin`, :mod:`zoo.core.kinds`); this module holds what their
registrations point to: how many workers the config asks for, which streams they use, and
their entries in ``graph.json`` (the actor -> policy worker / trainer assignment of
:class:`zoo.core.graph.Graph`). Imports nothing heavy.
"""
from __future__ import annotations

from typing import Any

from zoo.core.graph import PARAMETER_ENDPOINT, endpoint, parameter_endpoint

ACTOR, POLICY, TRAINER = "actor", "policy", "trainer"
PLUGIN = "zoo.workers"
"""The built-in plugin that registers them (:mod:`zoo.core.workers.plugin`)."""


def _named(cfg: Any) -> bool:
    policies = getattr(cfg, "policies", None)
    return policies is not None and not policies.implicit


def actor_count(cfg: Any) -> int:
    """``actors.count``."""
    return int(cfg.actors.count)


def policy_count(cfg: Any) -> int:
    """``policy.count``; 0 with ``policy.inline`` (the actors run the policy). Named policies:
    the sum of every policy's (docs/policies.md)."""
    if _named(cfg):
        from zoo.core.graph import policy_layout

        return sum(p.policy_workers for p in policy_layout(cfg))
    return 0 if bool(getattr(cfg.policy, "inline", False)) else int(cfg.policy.count)


def trainer_count(cfg: Any) -> int:
    """``trainer.count``. Named policies: the sum of every trainable policy's."""
    if _named(cfg):
        from zoo.core.graph import policy_layout

        return sum(p.trainers for p in policy_layout(cfg))
    return int(cfg.trainer.count)


def actor_connects(graph: Any) -> tuple[str, ...]:
    """inference (to its policy workers) and sample (to its trainers); parameter when a policy
    runs inline (implicit inline policy: sample and parameter)."""
    inline = any(p.inline for p in graph.layout)
    served = any(p.policy_workers for p in graph.layout)
    return (("inference",) if served else ()) + ("sample",) + (("parameter",) if inline else ())


def describe_trainer(graph: Any, index: int) -> dict[str, Any]:
    found = graph.policy_of_worker(TRAINER, index)
    if found is None or not graph.named:
        return {"rank": index, "pulls": endpoint("sample", index),
                "publishes": PARAMETER_ENDPOINT if index == 0 else None, "actors": graph.actors_of_trainer(index)}
    p, k = found
    return {"policy": p.name, "rank": k, "pulls": endpoint("sample", k, p.tag),
            "publishes": parameter_endpoint(p.tag) if k == 0 else None, "actors": graph.actors_of_trainer(index)}


def describe_policy(graph: Any, index: int) -> dict[str, Any]:
    found = graph.policy_of_worker(POLICY, index)
    if found is None or not graph.named:
        return {"serves": endpoint("inference", index), "subscribes": PARAMETER_ENDPOINT,
                "actors": graph.actors_of_policy(index)}
    p, m = found
    source = {"subscribes": parameter_endpoint(p.tag)} if p.trainable else {"loads": p.weights}
    return {"policy": p.name, "local": m, "serves": endpoint("inference", m, p.tag), **source,
            "actors": graph.actors_of_policy(index)}


def describe_actor(graph: Any, index: int) -> dict[str, Any]:
    if graph.named:
        requests: dict[str, str] = {}
        pushes: dict[str, str] = {}
        for p in graph.layout:
            m = graph.policy_worker_for(index, p.name)
            requests[p.name] = "inline" if m is None else endpoint("inference", m, p.tag)
            k = graph.trainer_for(index, p.name)
            if k is not None:
                pushes[p.name] = endpoint("sample", k, p.tag)
        return {"requests": requests, "pushes": pushes}
    policy = graph.policy_of(index)
    inference: dict[str, Any]
    if policy is None:  # inline: the policy runs in the actor, which pulls the parameters itself
        inference = {"policy": None, "inference": "inline", "subscribes": PARAMETER_ENDPOINT}
    else:
        inference = {"policy": policy, "requests": endpoint("inference", policy)}
    return {**inference, "trainer": graph.trainer_of(index), "pushes": endpoint("sample", graph.trainer_of(index))}


_HERE = __name__
BUILTIN: dict[str, dict[str, Any]] = {
    TRAINER: dict(entry="zoo.core.workers.trainer:run", count=f"{_HERE}:trainer_count",
                  listens=("sample", "parameter"), device="algo.device", restart="from-checkpoint", lead=True,
                  order=0, describe=f"{_HERE}:describe_trainer",
                  summary="trainer: pulls samples, updates the policy, publishes parameters (trainer.count, one "
                          "torch.distributed group; rank 0 writes metrics and checkpoints)"),
    POLICY: dict(entry="zoo.core.workers.policy:run", count=f"{_HERE}:policy_count", listens=("inference",),
                 connects=("parameter",), device="policy.device", order=10, describe=f"{_HERE}:describe_policy",
                 summary="policy worker: batched inference for its actors (policy.count; none with policy.inline)"),
    ACTOR: dict(entry="zoo.core.workers.actor:run", count=f"{_HERE}:actor_count", connects=f"{_HERE}:actor_connects",
                order=20, describe=f"{_HERE}:describe_actor",
                summary="actor: steps environments, asks for actions, pushes samples (actors.count)"),
}
"""The three built-in kinds' registrations, ``{name: keywords of register}``."""


def builtin_kinds() -> list[Any]:
    """The built-in kinds as :class:`~zoo.core.kinds.WorkerKind` objects, in start order, without
    building the plugin registry (tests, and a :class:`~zoo.core.graph.Graph` given counts)."""
    from zoo.core.kinds import WorkerKind, in_order

    return in_order(WorkerKind(name=name, plugin=PLUGIN, **decl) for name, decl in BUILTIN.items())
