"""Policy (inference) worker: batches requests from all actors and answers each one.

Loop: take the first pending request (waiting up to 0.2 s), then keep collecting until
``policy.max_batch`` agent-slots are gathered or ``policy.max_wait_ms`` has passed;
run the network once on the concatenated observations; split the outputs by request
and reply to each client. Between batches it pulls the newest parameters from the
parameter stream; every reply carries the ``policy_version`` of the weights that
produced it.
"""
from __future__ import annotations

import time

import numpy as np

from zoo.core.arrays import concat
from zoo.core.workers.base import WorkerContext

POLL_S = 0.2


def load_parameters(policy, bundle: dict[str, np.ndarray]) -> None:
    """Copy a parameter bundle (flat state dict of arrays) into ``policy``."""
    import torch

    state = {k: torch.from_numpy(np.array(v)) for k, v in bundle.items()}
    policy.load_state_dict(state)


def run(ctx: WorkerContext) -> None:
    import torch

    torch.set_num_threads(ctx.cfg.policy.threads)
    cfg = ctx.cfg
    algo_cls = ctx.registry.get("algorithm", cfg.algo_name).load()
    policy = algo_cls.build_policy(cfg.algo, ctx.spec).to(cfg.policy.device)
    policy.eval()
    server = ctx.transport("inference").reply_server("inference")
    params = ctx.transport("parameter").subscriber("parameter")
    version = -1
    max_wait = cfg.policy.max_wait_ms / 1000
    try:
        while version < 0 and not ctx.stop:  # serve nothing before the trainer's first weights
            ctx.heartbeat(waiting_for="parameters")
            msg = params.latest(POLL_S)
            if msg is not None:
                load_parameters(policy, msg[0])
                version = int(msg[1]["policy_version"])
        while not ctx.stop:
            ctx.heartbeat(policy_version=version)
            first = server.recv(POLL_S)
            if first is not None:
                batch = [first]
                rows = first[2]["rows"]
                deadline = time.monotonic() + max_wait
                while rows < cfg.policy.max_batch:
                    nxt = server.recv(max(0.0, deadline - time.monotonic()))
                    if nxt is None:
                        break
                    batch.append(nxt)
                    rows += nxt[2]["rows"]
                _answer(policy, server, batch, version, cfg.policy.device)
            msg = params.latest(0)
            if msg is not None and int(msg[1]["policy_version"]) > version:
                load_parameters(policy, msg[0])
                version = int(msg[1]["policy_version"])
    finally:
        server.close()
        params.close()


def _answer(policy, server, batch, version: int, device: str) -> None:
    import torch

    obs = concat([b[1]["obs"] for b in batch])
    with torch.no_grad():
        out = policy.act({k: torch.as_tensor(v, device=device) for k, v in obs.items()})
    out = {k: v.cpu().numpy() for k, v in out.items()}
    start = 0
    for client_id, _, meta in batch:
        end = start + meta["rows"]
        server.reply(client_id, {k: v[start:end] for k, v in out.items()},
                     {"request_id": meta["request_id"], "policy_version": version}, timeout=1.0)
        start = end
