"""A population member's trainer (``pbt.members``, docs/pbt.md): it follows the population
manager's orders at each update point (:meth:`PopulationMember.follow_order`) and checkpoints at
each ``pbt.interval_env_steps`` (:meth:`PopulationMember.member_checkpoint_due`), so the manager
sees every member's ``latest.pt`` at most one update older than the round.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zoo.core.workers.accounting import TrainerState
    from zoo.core.workers.base import WorkerContext


class PopulationMember:
    """The part of :class:`~zoo.core.workers.trainer.Trainer` that follows the population
    manager (a base class of it). The attributes below are the trainer's, set by its
    ``__init__``; ``orders`` is :meth:`member_orders`' (None: not a population member)."""

    ctx: WorkerContext
    cfg: Any
    lead: bool
    algo: Any
    state: TrainerState
    orders: Any
    pbt_passed: int  # the multiples of pbt.interval_env_steps passed
    env_share: int  # P: the member acts in 1/P of the run's envs
    log: Callable[[dict[str, Any]], None]
    counters: Callable[[], dict[str, int]]

    def member_orders(self) -> Any:
        """The :class:`~zoo.core.pbt.MemberOrders` of a population member's trainer (None for any
        other), continuing from the checkpoint's last applied order, whose hyperparameters it sets
        again (an algorithm's checkpoint does not restore its config)."""
        pbt = getattr(self.cfg, "pbt", None)
        if pbt is None or not pbt.members or not self.lead:
            return None
        from zoo.core.pbt import MemberOrders, member_names, set_hyperparameters

        if self.ctx.policy not in member_names(pbt.policy, pbt.members):
            return None
        if self.state.pbt_hyperparameters:
            set_hyperparameters(self.algo, self.state.pbt_hyperparameters)
        self.pbt_passed = self.state.env_steps // int(pbt.interval_env_steps)
        self.env_share = int(pbt.members)
        return MemberOrders(self.ctx.run_dir, self.ctx.policy, self.state.pbt_seq)

    def follow_order(self) -> None:
        """At an update point, before the update: apply the population manager's new order, if any
        (exploit: the source member's checkpointed weights and optimiser state; explore: its new
        hyperparameters), counted in the checkpoint (``pbt_seq``) so it is applied once, and an
        ``applied`` row (``type: "pbt"``: the source checkpoint's counters and the SHA-256 of the
        weights the member continues from, :func:`~zoo.core.pbt.weights_digest`). An order whose
        source has no checkpoint yet, or one being replaced, stays for the next update point."""
        if self.orders is None:
            return
        order = self.orders.poll()
        if order is None:
            return
        from zoo.core.checkpoint import CheckpointError
        from zoo.core.pbt import source_ready

        if not source_ready(self.ctx.run_dir, order):
            return
        from zoo.core.pbt import weights_digest

        try:
            with self.ctx.busy("pbt"):
                source = self.orders.apply(self.algo, order)
        except CheckpointError as exc:  # being replaced: try again at the next update point
            self.ctx.send_control("warning", timeout=0.05, key="pbt", message=f"{self.ctx.policy}: {exc}")
            return
        self.state.pbt_seq = self.orders.seq
        self.state.pbt_hyperparameters = {k: float(v) for k, v in order["hyperparameters"].items()}
        self.log({"type": "pbt", "event": "applied", "member_policy": self.ctx.policy,
                  "from_policy": str(order["from_member"]), "seq": self.orders.seq,
                  "round_env_steps": int(order["env_steps"]), "hyperparameters": self.state.pbt_hyperparameters,
                  **{f"source_{k}": v for k, v in source.items()}, **self.counters(),
                  "weights_sha256": weights_digest(self.algo.policy.state_dict())})

    def member_checkpoint_due(self) -> bool:
        """A population member checkpoints at the first update at or past each multiple of
        ``pbt.interval_env_steps`` (before that update's row, which the population manager waits
        for), so a member exploiting it at that round copies weights at most one update old."""
        if self.orders is None:
            return False
        passed = self.state.env_steps // int(self.cfg.pbt.interval_env_steps)
        due = passed > self.pbt_passed
        self.pbt_passed = passed
        return due

