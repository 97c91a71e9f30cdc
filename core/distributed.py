"""Data-parallel trainers: ``trainer.count`` = K processes in one ``torch.distributed`` group.

Each trainer (rank ``k`` = its index) pulls the samples of its own actors, builds its own
batch of ``trainer.batch_samples`` samples, computes gradients on it, and the gradients
are combined across ranks (:func:`reduce_gradients`) between ``backward()`` and the
optimiser step, so every rank applies the same update and all K hold identical weights
(synchronous data parallelism, as in SRL's trainer workers: arXiv 2306.16688, section 3,
and PyTorch DDP: Li et al., arXiv 2006.15704). One update thus trains on the global batch
of ``K x trainer.batch_samples`` samples.

Rendezvous (:meth:`TrainerGroup.join`): rank 0 opens a ``TCPStore`` on loopback (or on the
address in ``ZOO_ADVERTISE_HOST``, which the ``ray`` launcher sets to the node's IP) at a port
the OS picks and publishes ``{host, port, world_size}`` through the run's resolver
(:mod:`zoo.core.resolver`) under the key ``<run_id>/trainers.store``; the others look it up
there, and rank 0 removes it when it leaves (the controller also clears the run's keys). Backend:
NCCL when every rank's device (``algo.device``, see :func:`zoo.core.graph.worker_device`)
is a distinct physical CUDA GPU, gloo otherwise (CUDA tensors then travel through host memory).
The ranks tell each other their device and its physical GPU (:func:`gpu_identity`) through the
store before choosing: under Ray every trainer may see its own GPU as ``cuda:0``.

Coordinated stop. Waits of unbounded length — for a slower peer's batch — happen outside
collectives, in :meth:`TrainerGroup.wait_for_peers`, which polls the store, sends
heartbeats and honours a stop request. Collectives start only once every rank has
arrived, so ``trainer.collective_timeout_s`` bounds only real work differences (and a
hung peer). At each such sync point the ranks exchange their counters and stop flags
(:meth:`TrainerGroup.exchange`), so the budget and stop decisions are made on the same
numbers by all ranks together: no rank is left inside a collective that another never
enters. A rank asked to stop still waits at the sync point for the others (asked at the same
time), so a stop ends every rank at the same point and rank 0 writes the final checkpoint
and ``end`` row, as with one trainer; it gives the point up only ``collective_timeout_s``
after the stop request, and the ranks agree atomically whether a point was given up. A peer
that dies breaks its connections; the others' next collective or store call raises
:class:`PeerLost` at once.

Outside a group (K = 1) every helper here is a no-op or the local value, so the
algorithms call them unconditionally.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

STORE_KEY = "trainers.store"
"""The resolver key name (under the run id) of rank 0's rendezvous store."""
HOST = os.environ.get("ZOO_ADVERTISE_HOST") or "127.0.0.1"
JOIN_TIMEOUT_S = 300.0
"""Longest wait for rank 0's address and for every rank to arrive at the start (spawning K
processes and importing torch on a loaded machine can take a minute)."""

LEAVE_TIMEOUT_S = 30.0
"""Longest wait, in :meth:`TrainerGroup.close`, for every rank to have left the process group."""

_GROUP: TrainerGroup | None = None


class PeerLost(RuntimeError):
    """A collective or the rendezvous store failed: a peer trainer died, hung or closed."""


# ----------------------------------------------------------------------------- module-level helpers
def world_size() -> int:
    """Number of trainers in this process's group; 1 outside a group."""
    return _GROUP.world if _GROUP is not None else 1


def rank() -> int:
    """This trainer's rank; 0 outside a group."""
    return _GROUP.rank if _GROUP is not None else 0


def _all_reduce(group: TrainerGroup, t: torch.Tensor) -> None:
    """In-place sum over ``group``'s ranks (through host memory when gloo meets a CUDA tensor)."""
    import torch.distributed as dist

    try:
        if t.is_cuda and group.backend != "nccl":
            host = t.cpu()
            dist.all_reduce(host)
            t.copy_(host)
        else:
            dist.all_reduce(t)
    except RuntimeError as exc:
        raise PeerLost(f"trainer rank {group.rank}: all-reduce with the other trainers failed: {exc}") from exc


def reduce_gradients(parameters: Iterable[torch.nn.Parameter], weight: float | None = None,
                     loss: torch.Tensor | float | None = None) -> None:
    """Combine every parameter's gradient across the trainers, in place (no-op for K = 1).

    Call it between ``loss.backward()`` and gradient clipping / ``optimizer.step()``, on
    every rank the same number of times.

    - ``weight=None`` (losses that are *sums* over samples, e.g. IMPALA's):
      ``g <- sum_r g_r``, the gradient of the loss summed over the global batch.
    - ``weight=w_r`` (losses that are *means* over ``w_r`` samples, e.g. PPO's):
      ``g <- sum_r w_r g_r / sum_r w_r``, the gradient of the mean over the global batch;
      a rank with no sample in this step passes ``0`` (its gradient is ignored). With
      equal ``w_r`` this is the plain average.

    Either way the result is the gradient one trainer would get on the K shares
    concatenated. One all-reduce carries all gradients, one flag per parameter (whether
    any rank has a gradient for it: parameters no rank used keep ``grad = None``), the
    weight, and whether ``loss`` (this rank's loss, when given) is finite: if it is not on
    some rank, every rank's gradients become NaN, so a non-finite check after this call
    (:class:`~zoo.plugins.algorithms.tensors.UpdateGuard`) skips the update on all ranks alike.

    Raises:
        PeerLost: the all-reduce failed.
    """
    group = _GROUP
    if group is None:
        return
    params = [p for p in parameters]
    if not params:
        return
    w = 1.0 if weight is None else float(weight)
    device = params[0].device
    parts = [(p.grad.detach().reshape(-1).to(torch.float64) * w if p.grad is not None
              else torch.zeros(p.numel(), dtype=torch.float64, device=device)) for p in params]
    if isinstance(loss, torch.Tensor):
        loss = float(loss.detach())
    bad_loss = loss is not None and not math.isfinite(loss)
    flags = torch.tensor([p.grad is not None for p in params] + [bad_loss, w], dtype=torch.float64, device=device)
    flat = torch.cat(parts + [flags])
    _all_reduce(group, flat)
    tail = flat[-2 - len(params):].cpu()  # one device-to-host copy: the flags, bad losses, total weight
    total_w = float(tail[-1])
    scale = 1.0 if weight is None else (1.0 / total_w if total_w > 0 else 0.0)
    if float(tail[-2]) > 0:
        scale = math.nan
    offset = 0
    for i, p in enumerate(params):
        n = p.numel()
        if float(tail[i]) > 0:
            g = (flat[offset:offset + n] * scale).reshape(p.shape).to(p.dtype)
            if p.grad is None:
                p.grad = g
            else:
                p.grad.copy_(g)
        offset += n


def global_sum(values: Iterable[float] | torch.Tensor) -> torch.Tensor:
    """The element-wise sum over ranks of a small vector, float64 on the CPU (local values for K = 1)."""
    t = torch.as_tensor(values if isinstance(values, torch.Tensor) else list(values), dtype=torch.float64)
    t = t.detach().cpu().clone()
    if _GROUP is not None:
        _GROUP.all_reduce_cpu(t)
    return t


def global_count(n: int) -> int:
    """``n`` summed over ranks (e.g. agent steps trained on)."""
    return int(global_sum([n])[0])


def global_moments(x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(count, mean, mean of squares)`` of ``x`` over every rank's entries (where ``mask``).

    ``x [N, *F]`` (statistics per feature ``F`` over the leading axis) or with ``mask``
    (bool, ``x``'s shape) a tensor of any shape reduced to a scalar. float64 results on
    ``x``'s device; ``mean`` and ``mean of squares`` are 0 when the count is 0. One
    all-reduce of ``[count, sum, sum of squares]`` — the pooled moments of the
    concatenated shares (Chan, Golub and LeVeque, "Algorithms for computing the sample
    variance", 1983: pairwise combination of sums).
    """
    x64 = x.detach().to(torch.float64)
    if mask is not None:
        x64 = torch.where(mask, x64, torch.zeros_like(x64))
        count, s1, s2 = mask.sum(), x64.sum(), (x64 * x64).sum()
        feat: tuple[int, ...] = ()
    else:
        count, s1, s2 = torch.tensor(x64.shape[0]), x64.sum(0), (x64 * x64).sum(0)
        feat = tuple(x64.shape[1:])
    packed = torch.cat([count.reshape(1).to(torch.float64).cpu(), s1.reshape(-1).cpu(), s2.reshape(-1).cpu()])
    if _GROUP is not None:
        _GROUP.all_reduce_cpu(packed)
    n = int(packed[0])
    k = (packed.numel() - 1) // 2
    s1, s2 = packed[1:1 + k].reshape(feat).to(x.device), packed[1 + k:].reshape(feat).to(x.device)
    if n == 0:
        return 0, torch.zeros_like(s1), torch.zeros_like(s2)
    return n, s1 / n, s2 / n


def pooled_mean_var(x: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(count, mean, variance)`` of the rows of ``x [N, *F]`` concatenated over every rank.

    float64 results per feature ``F`` on ``x``'s device; the variance is the population
    (biased) one, ``M2 / count``; mean and variance are 0 when the count is 0 (a rank with
    ``N = 0`` takes part and contributes nothing). For K = 1: ``x.mean(0)``,
    ``x.var(0, unbiased=False)``. Across ranks it merges the shares' sufficient moments with
    the parallel-variance formula of Chan, Golub and LeVeque ("Updating formulae and a
    pairwise algorithm for computing sample variances", Stanford STAN-CS-79-773, 1979, eq.
    2.1; "Algorithms for computing the sample variance", The American Statistician 37(3),
    1983): ``n = sum_r n_r``, ``mean = sum_r n_r mean_r / n``,
    ``M2 = sum_r (M2_r + n_r (mean_r - mean)^2)``, in two all-reduces (``[n_r, n_r mean_r]``,
    then the ``M2`` terms), never from ``sum x^2 - n mean^2`` (which cancels catastrophically).
    Every rank receives the same sums, so the results are bitwise identical on all ranks;
    they equal one trainer's on the concatenated rows up to float64 rounding (the sums are
    taken in another order).

    Raises:
        PeerLost: an all-reduce failed.
    """
    x64 = x.detach().to(torch.float64)
    n, feat = int(x64.shape[0]), tuple(x64.shape[1:])
    if _GROUP is None:
        if n == 0:
            zero = torch.zeros(feat, dtype=torch.float64, device=x.device)
            return 0, zero, zero.clone()
        return n, x64.mean(0), x64.var(0, unbiased=False)
    local_mean = x64.mean(0) if n else torch.zeros(feat, dtype=torch.float64, device=x.device)
    packed = torch.cat([torch.tensor([float(n)], dtype=torch.float64), (local_mean * n).reshape(-1).cpu()])
    _GROUP.all_reduce_cpu(packed)
    total = int(packed[0])
    if total == 0:
        zero = torch.zeros(feat, dtype=torch.float64, device=x.device)
        return 0, zero, zero.clone()
    mean = (packed[1:] / total).reshape(feat).to(x.device)
    if n:
        m2 = x64.var(0, unbiased=False) * n + n * (local_mean - mean) ** 2
    else:
        m2 = torch.zeros(feat, dtype=torch.float64, device=x.device)
    m2 = m2.reshape(-1).cpu().clone()
    _GROUP.all_reduce_cpu(m2)
    return total, mean, (m2 / total).reshape(feat).to(x.device)


def global_any(flag: bool) -> bool:
    """True when ``flag`` is True on any rank."""
    return bool(global_sum([1.0 if flag else 0.0])[0] > 0)


# ----------------------------------------------------------------------------- the group
def loopback_interface() -> str | None:
    """The name of the network interface holding 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    names = [name for _, name in socket.if_nameindex()]
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return next((n for n in names if n.startswith("lo")), None)


NODE_ENV = "ZOO_NODE_ID"
"""Environment variable naming the node a worker runs on where the host name does not tell
nodes apart (the ``ray`` launcher sets the Ray node id); default: the host name."""


def gpu_identity(device: str, env: Mapping[str, str] | None = None, uuid_of: Callable[[int], str | None] | None = None
                 ) -> str | None:
    """Which physical GPU ``device`` is in this process, as a string equal across processes
    exactly when they use the same GPU; None for a device that is not CUDA.

    ``cuda:i`` (``cuda``: ``i`` = 0) is the ``i``-th visible device. Its identity is the GPU's
    UUID when ``uuid_of(i)`` gives one (default: torch's device properties, where CUDA is
    available), else ``"<node>/<id>"``: ``<node>`` from :data:`NODE_ENV` (else the host name),
    ``<id>`` the ``i``-th entry of ``CUDA_VISIBLE_DEVICES`` when that is set (Ray sets it per
    actor: each of two trainers may see its own GPU as ``cuda:0``), else ``i``. ``env``
    defaults to ``os.environ``.
    """
    if not device.startswith("cuda"):
        return None
    if env is None:
        env = os.environ
    index = torch.device(device).index or 0
    if uuid_of is None:
        uuid_of = _cuda_uuid
    found = uuid_of(index)
    if found:
        return f"uuid:{found}"
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    physical = visible[index] if "CUDA_VISIBLE_DEVICES" in env and index < len(visible) else str(index)
    return f"{env.get(NODE_ENV) or socket.gethostname()}/{physical}"


def _cuda_uuid(index: int) -> str | None:
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    found = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return str(found) if found else None


def choose_backend(devices: list[str], gpus: list[str | None] | None = None) -> str:
    """``"nccl"`` when every rank has its own CUDA GPU and NCCL is built in, else ``"gloo"``.

    ``devices``: each rank's torch device; ``gpus``: each rank's :func:`gpu_identity` (as the
    ranks exchange them at the rendezvous), which decides whether the GPUs are distinct;
    without it, the devices' indices do (every rank on one host, all GPUs visible).
    """
    import torch.distributed as dist

    cuda = all(d.startswith("cuda") for d in devices)
    if gpus is not None:
        distinct = None not in gpus and len(set(gpus)) == len(gpus)
    else:
        distinct = len({torch.device(d).index or 0 for d in devices}) == len(devices)
    return "nccl" if cuda and distinct and dist.is_nccl_available() else "gloo"


class TrainerGroup:
    """This trainer's membership of the group (see the module doc); built by :meth:`join`."""

    def __init__(self, rank: int, world: int, store: Any, backend: str, resolver: Any, key: str,
                 stop: Callable[[], bool], heartbeat: Callable[[], None], timeout_s: float = 30.0) -> None:
        self.rank, self.world, self.store, self.backend, self.timeout_s = rank, world, store, backend, timeout_s
        self.resolver, self.key, self.stop, self.heartbeat = resolver, key, stop, heartbeat
        self.cpu_group = None
        self.rounds = 0
        self.devices: list[str] = []
        """Every rank's torch device, as each rank resolved it (exchanged at the rendezvous)."""
        self.gpus: list[str | None] = []
        """Every rank's :func:`gpu_identity` (None: not CUDA); NCCL when all are distinct GPUs."""

    @classmethod
    def join(cls, rank: int, world: int, device: str, devices: list[str], run_id: str, resolver: Any,
             timeout_s: float, stop: Callable[[], bool], heartbeat: Callable[[], None],
             store_key: str = STORE_KEY) -> TrainerGroup | None:
        """Rendezvous with the other trainers and initialise the process group.

        ``device``: this rank's torch device; ``devices``: every rank's as this rank resolves
        them (unused: the ranks exchange their own devices and physical GPUs, which choose the
        backend, :func:`choose_backend`; kept in :attr:`devices` and :attr:`gpus`);
        ``resolver``: the run's :class:`~zoo.core.resolver.Resolver`; ``store_key``: the
        resolver key of rank 0's store under the run (a named policy's group:
        ``trainers.<policy>.store``).
        Returns None when a stop was requested before every rank arrived (and they gave the
        start up: :meth:`wait_for_peers`).

        Raises:
            PeerLost: rank 0's address did not appear, or the peers did not all arrive,
                within :data:`JOIN_TIMEOUT_S`; or the store failed.
        """
        global _GROUP
        import torch.distributed as dist

        iface = loopback_interface() if HOST.startswith("127.") else None
        if iface:  # every trainer is on this host (ZOO_ADVERTISE_HOST unset): keep gloo/NCCL on loopback
            os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
            os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)
        from zoo.core.resolver import run_key

        timeout = datetime.timedelta(seconds=timeout_s)
        key = run_key(run_id, store_key)
        if rank == 0:
            store = dist.TCPStore(HOST, 0, world, True, timeout=timeout, wait_for_workers=False)
            resolver.publish(key, {"host": HOST, "port": int(store.port), "world_size": world})
        else:
            address = _wait_for_address(resolver, key, stop, heartbeat)
            if address is None:
                return None
            try:
                store = dist.TCPStore(address[0], address[1], world, False, timeout=timeout)
            except RuntimeError as exc:
                raise PeerLost(f"trainer rank {rank}: cannot reach rank 0's store at "
                               f"{address[0]}:{address[1]}: {exc}") from exc
        group = cls(rank, world, store, "gloo", resolver, key, stop, heartbeat, timeout_s)
        try:  # each rank's device and physical GPU, for the backend (Ray: every rank may see its GPU as cuda:0)
            store.set(f"device/{rank}", json.dumps({"device": device, "gpu": gpu_identity(device)}))
        except RuntimeError as exc:
            raise PeerLost(f"trainer rank {rank}: the trainers' rendezvous store (rank 0) is gone: {exc}") from exc
        if not group.wait_for_peers("start", JOIN_TIMEOUT_S):
            return None
        try:
            found = [json.loads(store.get(f"device/{r}")) for r in range(world)]
        except RuntimeError as exc:
            raise PeerLost(f"trainer rank {rank}: the trainers' rendezvous store (rank 0) is gone: {exc}") from exc
        group.devices, group.gpus = [f["device"] for f in found], [f["gpu"] for f in found]
        backend = group.backend = choose_backend(group.devices, group.gpus)
        if backend == "nccl":
            torch.cuda.set_device(torch.device(device))
        try:
            dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=world,
                                    timeout=timeout)
            group.cpu_group = dist.new_group(backend="gloo") if backend == "nccl" else None
        except RuntimeError as exc:
            raise PeerLost(f"trainer rank {rank}: joining the {backend} group failed: {exc}") from exc
        _GROUP = group
        return group

    def wait_for_peers(self, name: str, deadline_s: float | None = None) -> bool:
        """Arrive at sync point ``name`` and wait until all ranks have arrived (True), or the
        ranks decided to give it up (False). Polls the store; sends heartbeats while waiting.

        A stop request does not end the wait at once: every trainer is asked to stop at the same
        time and arrives here within its current wait for samples (updates are collective: no
        peer is in one while this rank waits here), and the stop flags exchanged at this point
        then end every rank's loop together, rank 0 writing the final checkpoint and ``end`` row.
        Only when ``trainer.collective_timeout_s`` passes after the stop request (a peer gone)
        does this rank give the point up. The store's key ``sync/<name>/go`` decides atomically
        (``compare_set``): ``"1"``, set by the last rank to arrive, sends every rank on to the
        exchange; ``"gone"``, set by a rank giving up first, sends every rank away. So no rank
        is left in an exchange that another never enters.

        Raises:
            PeerLost: the store failed (rank 0 is gone), or ``deadline_s`` passed.
        """
        key = f"sync/{name}"
        gate = key + "/go"
        start = time.monotonic()
        stop_since = None
        nap = 0.0005
        try:
            if self.store.add(key, 1) == self.world:
                return self.store.compare_set(gate, "", "1") == b"1"
            while not self.store.check([gate]):
                if stop_since is None and self.stop():
                    stop_since = time.monotonic()
                if stop_since is not None and time.monotonic() - stop_since > self.timeout_s:
                    return self.store.compare_set(gate, "", "gone") == b"1"
                if deadline_s is not None and time.monotonic() - start > deadline_s:
                    arrived = self.store.add(key, 0)
                    raise PeerLost(f"trainer rank {self.rank}: only {arrived} of {self.world} trainers arrived "
                                   f"within {deadline_s:.0f} s")
                self.heartbeat()
                time.sleep(nap)
                nap = min(0.02, nap * 2)
            return self.store.get(gate) == b"1"
        except PeerLost:
            raise
        except RuntimeError as exc:
            raise PeerLost(f"trainer rank {self.rank}: the trainers' rendezvous store (rank 0) is gone: {exc}") from exc

    def all_reduce_cpu(self, t: torch.Tensor) -> None:
        """In-place sum over ranks of a CPU tensor (on the gloo side group under NCCL)."""
        import torch.distributed as dist

        try:
            dist.all_reduce(t, group=self.cpu_group)
        except RuntimeError as exc:
            raise PeerLost(f"trainer rank {self.rank}: all-reduce with the other trainers failed: {exc}") from exc

    def exchange(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank's ``record`` (JSON-serialisable), in rank order: two all-gathers of JSON
        bytes (lengths, then the padded bytes). Nothing is unpickled.

        Raises:
            PeerLost: a collective failed.
        """
        import torch.distributed as dist

        data = json.dumps(record).encode()
        group = self.cpu_group
        try:
            size = torch.tensor([len(data)], dtype=torch.int64)
            sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
            dist.all_gather(sizes, size, group=group)
            longest = max(int(s) for s in sizes)
            buf = torch.zeros(longest, dtype=torch.uint8)
            buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world)]
            dist.all_gather(bufs, buf, group=group)
        except RuntimeError as exc:
            raise PeerLost(f"trainer rank {self.rank}: exchanging counters with the other trainers failed: "
                           f"{exc}") from exc
        return [json.loads(bytes(b[:int(s)].numpy())) for b, s in zip(bufs, sizes, strict=True)]

    def sync(self, record: dict[str, Any]) -> list[dict[str, Any]] | None:
        """One sync point: :meth:`wait_for_peers`, then :meth:`exchange`; None when a stop came first."""
        self.rounds += 1
        if not self.wait_for_peers(str(self.rounds)):
            return None
        return self.exchange(record)

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers into ``module`` on every rank."""
        import torch.distributed as dist

        try:
            for t in list(module.parameters()) + list(module.buffers()):
                if t.is_cuda and self.backend != "nccl":
                    host = t.detach().cpu()
                    dist.broadcast(host, 0)
                    t.data.copy_(host)
                else:
                    dist.broadcast(t.data, 0)
        except RuntimeError as exc:
            raise PeerLost(f"trainer rank {self.rank}: receiving rank 0's initial weights failed: {exc}") from exc

    def close(self, leave: bool = True, leave_timeout_s: float = LEAVE_TIMEOUT_S) -> None:
        """Leave the group (this process's side; idempotent). Rank 0 removes its address.

        ``leave``: the ranks are ending together (the run finished or stopped at a sync point),
        so after destroying its side of the process group each rank waits at the sync point
        ``leave`` (:meth:`wait_for_peers`) until every rank has destroyed its side, for at most
        ``leave_timeout_s`` seconds. Rank 0 hosts the rendezvous store: without this wait it could
        exit, taking the store with it, while another rank is still tearing its gloo pairs down,
        and that rank then died with SIGABRT ("terminate called without an active exception")
        after its work was done. False (a peer was lost, an exception is on its way out): leave
        at once. A peer that never arrives costs at most ``leave_timeout_s``; nothing is raised.
        """
        global _GROUP
        import torch.distributed as dist

        if _GROUP is self:
            _GROUP = None
            try:
                dist.destroy_process_group()
            except (RuntimeError, ValueError, AssertionError):
                pass
            if leave:
                try:
                    self.wait_for_peers("leave", leave_timeout_s)
                except PeerLost:  # rank 0 left first (after every rank arrived), or a peer never came
                    pass
        if self.rank == 0:
            try:
                self.resolver.remove(self.key)
            except Exception:  # noqa: BLE001 - best effort on the way out; the controller clears the run's keys
                pass


def _wait_for_address(resolver: Any, key: str, stop: Callable[[], bool],
                      heartbeat: Callable[[], None]) -> tuple[str, int] | None:
    """``(host, port)`` rank 0 published under ``key``; None on a stop request.

    Raises:
        PeerLost: nothing within :data:`JOIN_TIMEOUT_S`.
    """
    start = time.monotonic()
    while not stop():
        address = resolver.get(key)
        if address is not None:
            return str(address["host"]), int(address["port"])
        if time.monotonic() - start > JOIN_TIMEOUT_S:
            raise PeerLost(f"trainer rank 0 did not publish its address under {key!r} within {JOIN_TIMEOUT_S:.0f} s")
        heartbeat()
        time.sleep(0.05)
    return None
