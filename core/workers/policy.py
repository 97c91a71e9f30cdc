"""Policy (inference) worker: batches requests from its actors and answers each one.

Policy worker ``m`` of ``policy.count`` serves the actors assigned to it
(:mod:`zoo.core.graph`: actor i -> worker i mod M) on its own endpoint ``inference-<m>``,
and pulls parameters by itself from the one ``parameter`` endpoint trainer 0 publishes on.
A named policy P's worker m serves ``inference-P-<m>`` and pulls ``parameter-P``; a frozen
policy's loads its weights file once at start (:meth:`Inference.load_frozen`) and pulls
nothing (docs/policies.md). An opponent policy's (``opponent = {source = S, ...}``) pulls
``parameter-S`` and acts each row with the version of S picked for its env
(:class:`OpponentVersions`, docs/history.md).

Loop: take the first pending request (waiting up to 0.2 s), then keep collecting until
``policy.max_batch`` agent-slots are gathered or ``policy.max_wait_ms`` has passed;
run the network once on the concatenated observations; split the outputs by request
and reply to each client. Between batches it pulls the newest parameters from the
parameter stream; every reply carries the ``policy_version`` of the weights that
produced it. The network, its parameters and the sampling of actions (:class:`Inference`,
:func:`infer`) are shared with actors that run the policy themselves (``policy.inline``,
:mod:`zoo.core.workers.inline`).

If no newer version arrives for ``policy.stall_warning_s`` seconds while the worker keeps
answering with the weights it has (:class:`StallWatch`), it sends one ``warning`` control
message (key ``parameter-stall``) per stall, which the controller prints: actors then act
with stale weights, the policy lag grows and the trainer drops what is too old. No warning
is sent when ``trainer.learn`` is false (the weights never change by design).

Its heartbeats carry its load (:class:`zoo.core.health.Meter`): ``busy`` seconds (forward
passes, replies, loading parameters), ``latency`` seconds summed over batches (from a
batch's first request received to its last reply sent: gathering included), and the
``batches`` and ``rows`` (agent-slots) answered.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from zoo.core.arrays import concat
from zoo.core.health import Meter
from zoo.core.seeding import derive_seed
from zoo.core.workers.base import WorkerContext

POLL_S = 0.2


class StallWatch:
    """Notices that parameters stopped arriving while inference goes on.

    Call :meth:`served` after each answered batch and :meth:`new_version` when newer
    weights are loaded (this re-arms the watch). :meth:`due` is True once per stall: the
    trainer has published at least one update (a version after the first one received: the
    first update of a slow run may take longer than ``threshold_s`` to sample its batch, and
    that is no stall), at least one batch was served with the current weights and
    ``threshold_s`` seconds (monotonic clock) have passed since they arrived; :meth:`warned`
    records that the warning went out.
    """

    def __init__(self, threshold_s: float, now: float) -> None:
        self.threshold_s = threshold_s
        self.since = now
        self.batches = 0
        self.versions = 0  # versions received (the first: the initial or resumed weights)
        self._warned = False

    def served(self) -> None:
        self.batches += 1

    def new_version(self, now: float) -> None:
        self.since, self.batches, self._warned = now, 0, False
        self.versions += 1

    def due(self, now: float) -> bool:
        return (not self._warned and self.versions > 1 and self.batches > 0
                and now - self.since >= self.threshold_s)

    def warned(self) -> None:
        self._warned = True


def load_parameters(policy, bundle: dict[str, np.ndarray]) -> None:
    """Copy a parameter bundle (flat state dict of arrays) into ``policy`` (converted to the
    dtype of each of its tensors: bfloat16 where :func:`cast_for_precision` put it)."""
    import torch

    state = {k: torch.from_numpy(np.array(v)) for k, v in bundle.items()}
    policy.load_state_dict(state)


def cast_for_precision(policy, precision: str) -> None:
    """For ``bfloat16``: store the weights of the layers autocast runs in bfloat16
    (``nn.Linear``, ``nn.Conv1d/2d/3d``) in bfloat16, once, instead of autocast casting them
    on every forward pass. The results are the same bit for bit (autocast would cast the
    very same float32 weights); :func:`load_parameters` converts each new version on load.
    The Nature CNN's 1.6 M-weight dense layer made that cast a fifth of the pass: 170 ->
    130 us per observation in batches of 32 (``benchmarks/inference_bench.py``).
    Other layers (LSTM, LayerNorm, embeddings) keep float32 weights.
    """
    import torch
    from torch import nn

    if precision == "bfloat16":
        for module in policy.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
                module.to(torch.bfloat16)


def inference_autocast(precision: str, device: str):
    """The context the forward pass runs in: ``torch.autocast`` for ``bfloat16``, else a no-op.

    Raises:
        ValueError: an unknown ``precision`` (the config validates it first).
    """
    import contextlib

    import torch

    if precision == "float32":
        return contextlib.nullcontext()
    if precision == "bfloat16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"policy.precision must be 'float32' or 'bfloat16', got {precision!r}")


class Inference:
    """The policy network one process acts with, kept at the newest parameters it was sent.

    Built the same way wherever inference runs: in a policy worker, and in an actor with
    ``policy.inline`` (:mod:`zoo.core.workers.inline`), so both sample the same actions from
    the same weights (module doc of :mod:`zoo.core.workers.inline`). Building it sets this
    process's torch CPU threads (``policy.threads``) and seeds torch's generator, from which
    actions are sampled, with ``derive_seed(seed, "policy", index, resume, attempt)``
    (:mod:`zoo.core.seeding`); ``index`` and ``attempt`` (``ctx.attempt``: 0, then 1, 2...
    after restarts) are the policy worker's, or the inline actor's.

    Attributes:
        policy: the algorithm's network (``build_policy``), in eval mode, on ``device``
            (:func:`zoo.core.graph.worker_device` of ``policy.device``), weights cast for
            ``policy.precision`` (:func:`cast_for_precision`).
        version: the policy version of the loaded weights, -1 before the first.
        attempt: the attempt of the trainer that made them (a restarted trainer's versions
            start again at its checkpoint's).
        stage: the run's curriculum stage that came with them (``curriculum_stage`` of the
            parameters' meta, docs/curriculum.md), passed on in every reply; None without one.
        states: the recurrent states of every (client, ring group, agent-slot)
            (:class:`RecurrentStates`), or None for a feed-forward policy.
    """

    def __init__(self, ctx: WorkerContext, index: int, cfg: Any = None, spec: Any = None) -> None:
        import torch

        from zoo.core.devices import choose_precision, use_device
        from zoo.core.graph import worker_device

        cfg = ctx.cfg if cfg is None else cfg  # an inline actor's named policy: that policy's view
        spec = ctx.spec if spec is None else spec
        torch.set_num_threads(cfg.policy.threads)
        # Sampled actions come from torch's generator: seeded per policy worker (zoo.core.seeding).
        torch.manual_seed(derive_seed(cfg.seed, "policy", index, resume=int(getattr(cfg, "resume", 0) or 0),
                                      attempt=ctx.attempt))
        self.device = worker_device(cfg.policy.device, index)
        use_device(self.device)  # before any tensor on cuda:N: no stray context on GPU 0
        self.precision = choose_precision(cfg.policy.precision, self.device)
        algo_cls = ctx.registry.get("algorithm", cfg.algo_name).load()
        self.policy = algo_cls.build_policy(cfg.algo, spec).to(self.device)
        self.policy.eval()
        cast_for_precision(self.policy, self.precision)
        state_shape = getattr(self.policy, "state_shape", None)
        self.states = RecurrentStates(state_shape) if state_shape else None
        self.autocast = inference_autocast(self.precision, self.device)
        self.version, self.attempt = -1, 0
        self.registry, self.cfg, self.spec = ctx.registry, cfg, spec  # a frozen policy's initial weights
        self.stage: int | None = None  # the run's curriculum stage, from the parameters' meta (None: no curriculum)
        # policies that act per env (Ape-X's per-env epsilon) get each row's global env index
        self.env_index = EnvIndex.from_config(cfg, spec) if getattr(self.policy, "wants_env_index", False) else None

    def load_frozen(self, path: str, policy: str = "") -> None:
        """Load a frozen policy's weights once from checkpoint file ``path`` (its
        ``["algorithm"]["policy"]`` state dict, the same ``load_state_dict`` path as parameters;
        converted to the dtype of each tensor); :attr:`version` becomes the checkpoint's
        ``policy_version`` (0 when it has none). ``path`` = ``"init"``
        (:data:`zoo.core.policies.INIT_WEIGHTS`): named policy ``policy``'s initial weights,
        those its trainer would start from (:func:`zoo.core.workers.building.initial_policy_state`),
        version 0.

        Raises:
            CheckpointError: the file cannot be read.
        """
        from zoo.core.checkpoint import load_checkpoint
        from zoo.core.policies import INIT_WEIGHTS

        if path == INIT_WEIGHTS:
            from zoo.core.workers.building import initial_policy_state

            self.policy.load_state_dict(initial_policy_state(self.registry, self.cfg, self.spec, policy))
            self.version, self.attempt = 0, 0
            return
        ckpt = load_checkpoint(path)
        self.policy.load_state_dict(ckpt["algorithm"]["policy"])
        self.version, self.attempt = int(ckpt.get("policy_version", 0) or 0), 0

    def refresh(self, params, timeout: float) -> bool:
        """Load the newest value of the parameter subscriber ``params`` (waiting up to
        ``timeout`` s) if it is newer than the loaded weights, or the first of a restarted
        trainer (whose version restarts at its checkpoint's); True if weights were loaded."""
        msg = params.latest(timeout)
        if msg is None:
            return False
        if msg[1].get("curriculum_stage") is not None:  # passed on to the actors with every reply
            self.stage = int(msg[1]["curriculum_stage"])
        key = (int(msg[1].get("trainer_attempt", 0)), int(msg[1]["policy_version"]))
        if key <= (self.attempt, self.version):
            return False
        load_parameters(self.policy, msg[0])
        self.attempt, self.version = key
        return True

    def act(self, batch: list) -> list[dict[str, np.ndarray]]:
        """One forward pass over every request of ``batch`` (:func:`infer`) under
        ``policy.precision``'s autocast; the outputs of each request, in order."""
        with self.autocast:
            return infer(self.policy, batch, self.device, self.states, self.env_index)


def gather(server, first: tuple, max_rows: int, max_wait_s: float) -> tuple[list, int]:
    """One inference batch: the request ``first``, then those that arrive on ``server`` within
    ``max_wait_s`` seconds, until the batch holds ``max_rows`` rows (``policy.max_batch``; the
    request that reaches it is kept whole). Returns the requests, in order, and their rows."""
    batch = [first]
    rows = first[2]["rows"]
    deadline = time.monotonic() + max_wait_s
    while rows < max_rows:
        nxt = server.recv(max(0.0, deadline - time.monotonic()))
        if nxt is None:
            break
        batch.append(nxt)
        rows += nxt[2]["rows"]
    return batch, rows


def stall_message(watch: StallWatch, now: float, version: int, max_policy_lag: int) -> str:
    """The ``parameter-stall`` warning: no new parameters since ``watch.since`` (``now``: monotonic s)."""
    return (f"no new parameters for {now - watch.since:.0f} s: still serving policy version "
            f"{version} ({watch.batches} inference batches since it arrived); actors act with "
            "stale weights and the policy lag grows (samples older than "
            f"trainer.max_policy_lag={max_policy_lag} versions are dropped). "
            "Is the trainer stalled, or much slower than sampling?")


def run(ctx: WorkerContext) -> None:
    """The policy worker's loop (module docstring): wait for the first parameters, then receive
    inference requests, batch them (:func:`gather`), act, reply, load newer parameters, warn
    when they stop arriving."""
    from zoo.core.graph import endpoint, parameter_endpoint

    cfg = ctx.cfg
    net = Inference(ctx, ctx.index)
    server = ctx.transport("inference").reply_server(endpoint("inference", ctx.rank, ctx.policy))
    weights = frozen_weights(cfg, ctx.policy)
    opp = opponent_of(cfg, ctx.policy)
    if weights is not None:  # a frozen policy: its weights, once; it subscribes to nothing
        net.load_frozen(weights, ctx.policy)
        params = None
    else:  # an opponent follows its source's current weights (played until a version is kept)
        params = ctx.transport("parameter").subscriber(parameter_endpoint(opp.source if opp else ctx.policy))
    acts = opponent_versions(ctx, net, opp).act if opp is not None else net.act
    max_wait = cfg.policy.max_wait_ms / 1000
    watch = StallWatch(cfg.policy.stall_warning_s, time.monotonic())
    if ctx.meter is None:
        ctx.meter = Meter("policy")
    meter, counts = ctx.meter, ctx.meter.counts  # busy time, batch sizes, latency: sent with the heartbeats
    try:
        while net.version < 0 and not ctx.stop:  # serve nothing before the trainer's first weights
            ctx.heartbeat(waiting_for="parameters")
            if net.refresh(params, POLL_S):
                watch.new_version(time.monotonic())
        while not ctx.stop:
            ctx.heartbeat(policy_version=net.version)
            first = server.recv(POLL_S)
            if first is not None:
                received = time.perf_counter()
                batch, rows = gather(server, first, cfg.policy.max_batch, max_wait)
                start = time.perf_counter()
                _reply(server, batch, acts(batch), net.version, ctx.index, net.stage)
                answered = meter.lap("busy", start)
                meter.time_s["latency"] += answered - received
                counts["batches"] += 1
                counts["rows"] += rows
                watch.served()
            if params is None:
                continue
            start = time.perf_counter()
            if net.refresh(params, 0):  # newer weights, or the first of a restarted trainer
                meter.lap("busy", start)
                watch.new_version(time.monotonic())
            elif opp is None and cfg.trainer.learn and watch.due(now := time.monotonic()):
                message = stall_message(watch, now, net.version, cfg.trainer.max_policy_lag)
                if ctx.send_control("warning", timeout=0.05, key="parameter-stall", message=message):
                    watch.warned()
    finally:
        server.close()
        if params is not None:
            params.close()


def frozen_weights(cfg: Any, policy: str) -> str | None:
    """The weights file a frozen named policy ``policy`` serves (resolved when the config was
    built), or None for a trainable, an opponent (:func:`opponent_of`) or the implicit ("") policy."""
    policies = getattr(cfg, "policies", None)
    if not policy or policies is None:
        return None
    pol = policies.named[policy]
    return None if pol.trainable or pol.opponent.source else pol.weights


def opponent_of(cfg: Any, policy: str) -> Any:
    """Named policy ``policy``'s :class:`~zoo.core.policies.OpponentConfig` when it is served
    from another policy's history, else None."""
    policies = getattr(cfg, "policies", None)
    if not policy or policies is None or policies.implicit:
        return None
    opp = policies.named[policy].opponent
    return opp if opp.source else None


PLAYED_VERSION = "played_version"
"""The key of an opponent policy's replies that holds, per row, the source's policy version
that acted (int64 ``[rows]``); the actor writes it to episode rows as ``<P>_version``."""
LIVE = -1
"""An env assigned the source's current (published) weights rather than a kept version."""


class OpponentVersions:
    """Acts each request row with the version of the source policy picked for that row's env
    (docs/history.md, "Opponents from the history").

    An env is ``(client_id, group, slot // agents)`` (``agents``: the opponent policy's agents
    per env; ``slot`` numbers its agent-slots of the group). A row with ``on_reset`` set starts
    an episode: its env gets a new pick (once per env per batch), which it keeps until the next.
    ``pick()`` returns a kept version, or None (no version kept yet): the env plays the
    source's current weights, ``live.policy`` (version ``live.version``, which follows the
    source's parameter stream). Kept versions are loaded with ``load(version, into)`` (a network in
    eval mode, or None when its file is gone: the env then plays the current weights) into an
    LRU cache of ``cache`` networks; once the cache is full, a miss evicts the least recently
    used network and passes it as ``into``, to take the new version's weights in place (every
    version has the source's architecture: building a network, with its orthogonal initialisation,
    cost as much as the inference itself when pfsp drew from more versions than the cache holds).
    Rows of one version run through its network together.

    Attributes:
        assigned: ``{env: version}`` (:data:`LIVE` for the current weights).
        nets: the loaded versions, least recently used first.
    """

    def __init__(self, live: Any, pick: Any, load: Any, agents: int, cache: int) -> None:
        from collections import OrderedDict

        self.live, self.pick, self.load = live, pick, load
        self.agents, self.cache = int(agents), int(cache)
        self.assigned: dict[tuple[int, int, int], int] = {}
        self.nets: OrderedDict[int, Any] = OrderedDict()

    def _net(self, version: int) -> Any:
        """The network of kept ``version`` (loaded on a miss; None when it cannot be)."""
        if version in self.nets:
            self.nets.move_to_end(version)
            return self.nets[version]
        spare = self.nets.popitem(last=False)[1] if len(self.nets) >= self.cache else None
        net = self.load(version, spare)
        if net is not None:
            self.nets[version] = net
        return net

    def versions(self, batch: list) -> list[np.ndarray]:
        """Each request's row versions, int64 ``[rows]`` (:data:`LIVE`: the current weights),
        picking for the envs whose episode starts in ``batch``."""
        out, picked = [], set()
        for client_id, request, meta in batch:
            group = int(meta.get("group", 0))
            rows = np.empty(meta["rows"], np.int64)
            for i, (slot, reset) in enumerate(zip(np.asarray(request["slot"]), np.asarray(request["on_reset"]),
                                                  strict=True)):
                env = (int(client_id), group, int(slot) // self.agents)
                if (reset and env not in picked) or env not in self.assigned:
                    got = self.pick()
                    self.assigned[env] = LIVE if got is None else int(got)
                    picked.add(env)
                version = self.assigned[env]
                if version != LIVE and self._net(version) is None:  # its file is gone: the current weights
                    self.assigned[env] = version = LIVE
                rows[i] = version
            out.append(rows)
        return out

    def act(self, batch: list) -> list[dict[str, np.ndarray]]:
        """The outputs of each request of ``batch``, every row from its env's version, plus
        :data:`PLAYED_VERSION` (the version number that acted; the current weights' is
        ``live.version``)."""
        versions = self.versions(batch)
        replies: list[dict[str, np.ndarray]] = [{} for _ in batch]
        for version in sorted({int(v) for rows in versions for v in rows}):
            net = self.live.policy if version == LIVE else self._net(version)
            sub, where = [], []
            for j, ((client_id, request, meta), rows) in enumerate(zip(batch, versions, strict=True)):
                idx = np.flatnonzero(rows == version)
                if idx.size:
                    part = {"obs": {k: v[idx] for k, v in request["obs"].items()}, "slot": request["slot"][idx],
                            "on_reset": request["on_reset"][idx]}
                    sub.append((client_id, part, {**meta, "rows": int(idx.size)}))
                    where.append((j, idx))
            with self.live.autocast:
                outs = infer(net, sub, self.live.device, self.live.states, self.live.env_index)
            for (j, idx), got in zip(where, outs, strict=True):
                for k, v in got.items():
                    if k not in replies[j]:
                        replies[j][k] = np.zeros((len(versions[j]), *v.shape[1:]), v.dtype)
                    replies[j][k][idx] = v
        for j, rows in enumerate(versions):
            replies[j][PLAYED_VERSION] = np.where(rows == LIVE, self.live.version, rows).astype(np.int64)
        return replies


def opponent_versions(ctx: WorkerContext, net: Inference, opp: Any) -> OpponentVersions:
    """The :class:`OpponentVersions` of a policy worker of an opponent policy: picks by
    ``opp.pick`` from ``opp.source``'s kept versions in the run's store (read-only; it may not
    exist yet), seeded per worker, and loads a version's weights file into a network built as
    ``net.policy`` was, or into the network the full cache evicted."""
    from zoo.core.checkpoint import CheckpointError, load_checkpoint
    from zoo.core.history import Picker, VersionStore, log, parse_query

    cfg = ctx.cfg
    store = VersionStore(ctx.run_dir, readonly=True)
    seed = derive_seed(cfg.seed, "policy", ctx.index, slot=1, resume=int(getattr(cfg, "resume", 0) or 0),
                       attempt=ctx.attempt)
    picker = Picker(store, np.random.default_rng(seed))
    query = parse_query(opp.pick)
    algo_cls = ctx.registry.get("algorithm", cfg.algo_name).load()

    def pick() -> int | None:
        got = picker.pick(opp.source, query)
        return None if got.version is None else got.version.version

    def load(version: int, into: Any = None) -> Any:
        row = store.get(opp.source, version)
        try:
            if row is None or not row.kept:
                raise CheckpointError(f"version {version} of policy {opp.source} is no longer kept")
            ckpt = load_checkpoint(store.file(row))
        except (CheckpointError, OSError) as exc:
            log.warning("opponent %s: cannot load version %d of policy %s (%s); playing its current weights",
                        ctx.policy, version, opp.source, exc)
            return None
        policy = into
        if policy is None:  # the cache is not full yet: a new network (else the evicted one takes the weights)
            policy = algo_cls.build_policy(cfg.algo, ctx.spec).to(net.device)
            policy.eval()
            cast_for_precision(policy, net.precision)
        policy.load_state_dict(ckpt["algorithm"]["policy"])
        return policy

    return OpponentVersions(net, pick, load, ctx.spec.num_agents, opp.cache)


class EnvIndex:
    """Each request row's global env index, for policies with ``wants_env_index = True``.

    A row is agent-slot ``slot`` of ring group ``group`` of actor ``client_id`` (the inference
    client id is the actor's index, policy worker and inline alike). Env ``e`` of actor ``i``
    is global env ``i x actors.envs_per_actor + e``; the group's first env is ``group x
    (envs_per_actor / ring_size)`` and slot ``s`` is its env ``s // agents``. Global indices
    run over ``num_envs = actors.count x actors.envs_per_actor``.
    """

    def __init__(self, envs_per_actor: int, ring_size: int, agents: int, num_envs: int) -> None:
        self.envs_per_actor, self.per_group = int(envs_per_actor), int(envs_per_actor) // int(ring_size)
        self.agents, self.num_envs = int(agents), int(num_envs)

    @classmethod
    def from_config(cls, cfg, spec) -> EnvIndex:
        a = cfg.actors
        return cls(a.envs_per_actor, a.ring_size, spec.num_agents, a.count * a.envs_per_actor)

    def of(self, client_id: int, group: int, slot: np.ndarray) -> np.ndarray:
        """Global env indices of ``slot`` (int ``[rows]``), int64 ``[rows]``."""
        return int(client_id) * self.envs_per_actor + int(group) * self.per_group + np.asarray(slot) // self.agents


class RecurrentStates:
    """Each agent-slot's recurrent state, kept per (actor, ring group).

    A group has at most one request in flight, so keying by ``(client_id, group)`` and the
    slot index keeps states apart between actors, groups and agents, also when replies go
    out in another order than requests came in. The initial state is zeros; a slot whose
    request row has ``on_reset`` set starts again from zeros (a new episode).
    """

    def __init__(self, state_shape: tuple[int, ...]) -> None:
        self.state_shape = tuple(state_shape)
        self.table: dict[tuple[int, int], np.ndarray] = {}

    def _rows(self, key: tuple[int, int], slots: np.ndarray) -> np.ndarray:
        need = int(slots.max()) + 1 if slots.size else 0
        table = self.table.get(key)
        if table is None or table.shape[0] < need:
            grown = np.zeros((need, *self.state_shape), np.float32)
            if table is not None:
                grown[:table.shape[0]] = table
            self.table[key] = table = grown
        return table

    def gather(self, key: tuple[int, int], slots: np.ndarray, on_reset: np.ndarray) -> np.ndarray:
        """The states to feed, ``float32 [rows, *state_shape]`` (zeros where ``on_reset``)."""
        state = self._rows(key, slots)[slots]
        state[on_reset] = 0.0
        return state

    def scatter(self, key: tuple[int, int], slots: np.ndarray, new_state: np.ndarray) -> None:
        self._rows(key, slots)[slots] = new_state


def infer(policy, batch: list, device: str, states: RecurrentStates | None = None,
          env_index: EnvIndex | None = None) -> list[dict[str, np.ndarray]]:
    """Run ``policy`` once on every request of ``batch``; the outputs of each request, in order.

    This is the one place where actions are sampled, for a policy worker and for an actor
    with ``policy.inline`` alike (action masks are applied inside ``policy.act``; Box
    actions are returned unclipped, clipped later by the actor for the env only).

    Args:
        batch: ``[(client_id, request, meta)]``: ``request`` holds ``obs`` (nested arrays,
            ``[rows, ...]`` per key), ``slot`` int64 ``[rows]`` (the agent-slots of the
            client's ring group) and ``on_reset`` bool ``[rows]``; ``meta`` holds ``rows``
            and ``group`` (the ring group; 0 when absent).
        device: the torch device the observations go to (the network's).
        states: the recurrent states (for a policy with ``state_shape``), or None.
        env_index: for a policy with ``wants_env_index``: ``act`` then also gets
            ``env_index=`` int64 ``[rows]`` (each row's global env index, :class:`EnvIndex`)
            and ``num_envs=`` (the run's env count). None: neither is passed.

    Returns:
        per request, ``{"action": [rows, ...], <extras>: [rows, ...]}`` as numpy arrays
        (reduced-precision outputs as float32). Recurrent policies get each slot's state from
        ``states`` (zeros where ``on_reset``), the new states are stored back, and the outputs
        also carry ``rnn_state``, the state fed at this step (``float32 [rows, *state_shape]``),
        which the actor stores in its sample.
    """
    import torch

    obs = concat([b[1]["obs"] for b in batch])
    tensors = {k: torch.as_tensor(v, device=device) for k, v in obs.items()}
    state_in = None
    if states is not None:
        state_in = np.concatenate([states.gather((c, m.get("group", 0)), b["slot"], b["on_reset"])
                                   for c, b, m in batch])
    kwargs = {}
    if env_index is not None:
        rows = np.concatenate([env_index.of(c, m.get("group", 0), b["slot"]) for c, b, m in batch]).astype(np.int64)
        kwargs = {"env_index": torch.as_tensor(rows, device=device), "num_envs": env_index.num_envs}
    with torch.no_grad():
        if state_in is None:
            out = policy.act(tensors, **kwargs)
        else:
            out = policy.act(tensors, state=torch.as_tensor(state_in, device=device), **kwargs)
    # reduced-precision outputs (policy.precision) travel as float32: numpy has no bfloat16
    out = {k: (v.float() if v.dtype in (torch.bfloat16, torch.float16) else v).cpu().numpy() for k, v in out.items()}
    if state_in is not None:
        new_state = out.pop("state").astype(np.float32)
        out["rnn_state"] = state_in
    replies, start = [], 0
    for client_id, bundle, meta in batch:
        end = start + meta["rows"]
        if states is not None:  # (then state_in is not None either)
            states.scatter((client_id, meta.get("group", 0)), bundle["slot"], new_state[start:end])
        replies.append({k: v[start:end] for k, v in out.items()})
        start = end
    return replies


def _reply(server, batch, replies: list[dict[str, np.ndarray]], version: int, worker: int,
           stage: int | None = None) -> None:
    """Send each request of ``batch`` its outputs; meta ``{request_id, policy_version, policy}``,
    and ``curriculum_stage`` when the run has a curriculum (``stage`` not None)."""
    extra = {} if stage is None else {"curriculum_stage": stage}
    for (client_id, _, meta), reply in zip(batch, replies, strict=True):
        server.reply(client_id, reply, {"request_id": meta["request_id"], "policy_version": version, "policy": worker,
                                        **extra}, timeout=1.0)


def _answer(policy, server, batch, version: int, device: str, states: RecurrentStates | None = None,
            worker: int = 0) -> None:
    """Run ``policy`` once on every request of ``batch`` (:func:`infer`) and reply to each client;
    the reply's meta is ``{request_id, policy_version, policy}`` (``policy``: this worker's index
    ``worker``)."""
    _reply(server, batch, infer(policy, batch, device, states), version, worker)
