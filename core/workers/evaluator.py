"""The eval manager: the worker kind ``eval`` (issue 23, item 3; docs/history.md, "The eval manager").

One ``eval`` worker (``workers.eval.count = 1``) plays the kept versions of one trainable
policy (``workers.eval.policy``; the run's only trainable one by default) on envs of its own,
built with the env plugin's factory as the actors build theirs, against fixed baselines
(plugins through the registry, hook ``register_baselines``: ``random`` built in) and against
the policy's earlier kept versions, and writes every game and the Elo ratings to the run's
history store (:meth:`zoo.core.history.VersionStore.record_eval`: tables ``eval_games`` and
``eval_ratings``, apart from the training games' columns of ``versions``).

**What it plays.** It polls the store for kept versions (every 0.5 s). A version is
evaluated when ``every_versions`` (N > 0) new kept versions have appeared since the last one
it evaluated (N = 1: every kept version, oldest first), or when ``every_minutes`` (M > 0)
have passed since its last evaluation (then the newest kept version not evaluated yet). A
version that played as the player is never evaluated again (resumes included: the store
says which were; a version that had no opponent to play, such as the first with no
baselines, counts as evaluated by this worker). An evaluation of version v is one match per
opponent: each baseline, then the ``past_versions`` newest kept versions older than v, newest first; a match is
``episodes`` games, in a two-player env the first ``ceil(episodes / 2)`` with v as the env's
first agent and the rest as its second. Actions are sampled, or the distribution's mode with
``deterministic = true``. In a one-agent env a game is an episode of the version alone (its
return; no opponent, no rating), and each baseline plays its episodes once, alone.

**Scores and ratings.** A game's score is the player's: 1 when its return (its agent's
summed reward) is higher than the opponent's, 0.5 when equal, 0 when lower (a zero-sum game's
win, draw, loss). Each game with an opponent is one Elo update
(:func:`zoo.core.ratings.elo_update`) of both players' ratings with K = ``elo_k``; a player never
rated starts at ``initial_rating``. Baselines are players of the pool like versions (rated,
not fixed). A match is written in one short transaction after it is played.

**Seeds.** Each match, and each baseline player built for one, takes the next seed ``s_m``
(m counted from 0 in this worker process): :func:`zoo.core.seeding.derive_seed` of the run's
seed, role ``eval``, slot m, modulo 2**31 (a resumed run or a restarted worker gets other
seeds). A match's games reset their envs with seeds ``s_m + k`` (k = the game: in a
two-player match ``s_m + n + k`` for the second half's, n = ``episodes``) with torch's
generator seeded likewise.

**A curriculum driven by it** (``curriculum.source = "eval"``, docs/curriculum.md): it plays
every match at the run's current curriculum stage, which it learns as the actors do: it starts
at the stage the controller gives every worker (``ctx.curriculum_stage``), then follows the
``curriculum_stage`` that the lead trainer's parameters carry (it subscribes to the
``parameter`` stream, :func:`connects`, reading only their meta, between matches). Before a
match it tells each of its envs a new stage (``set_curriculum_stage``, between episodes: a
match's games start with a reset), and each game of a version is written with the stage it was
played at and its other numeric fields (``curriculum_stage``, ``stats``), which the lead
trainer, the owner of the curriculum, reads from the store.

**Refused before any worker starts** (:func:`check`): a baseline that names no installed
baseline plugin, a policy that is not a trainable policy of the run or keeps no history, an
env of more than two agents or of two agents with different spaces, a baseline that cannot
play the env's action space, no schedule (``every_versions = 0`` and ``every_minutes =
0``), and a two-player game with no baseline and ``past_versions = 0``; bounds of the
options (:class:`EvalOptions`) are checked with every kind's.
"""
from __future__ import annotations

import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from zoo.core.options import bounded

log = logging.getLogger("zoo.eval")
KIND = "eval"
POLL_S = 0.5


@dataclass
class EvalOptions:
    """``workers.eval.*`` (``[workers.eval]`` in a config file): the eval manager's options."""

    count: int = field(default=0, metadata=bounded(ge=0, le=1, hint="one eval manager writes a policy's ratings"))
    """Eval managers (0: none, the default; 1: one)."""
    policy: str = ""
    """The trainable policy whose kept versions it plays; "" : the run's only trainable one
    (``default`` for a run that names no policies)."""
    episodes: int = field(default=10, metadata=bounded(ge=1, le=100_000))
    """Games per match (half as the env's first agent, half as its second)."""
    every_versions: int = field(default=1, metadata=bounded(ge=0, le=1_000_000))
    """Evaluate a version each time this many new versions were kept (1: every one); 0: not by versions."""
    every_minutes: float = field(default=0.0, metadata=bounded(ge=0, le=1e6))
    """Also evaluate the newest kept version when this many minutes passed since the last evaluation; 0: not by time."""
    past_versions: int = field(default=2, metadata=bounded(ge=0, le=1000))
    """Earlier kept versions each evaluated version plays (the newest ones older than it)."""
    baselines: list[str] = field(default_factory=lambda: ["random"])
    """Baselines every evaluated version plays (installed baseline plugins: ``zoo list baselines``)."""
    deterministic: bool = False
    """Act with the mode of each action distribution (argmax) instead of sampling."""
    elo_k: float = field(default=32.0, metadata=bounded(gt=0, le=400))
    """The Elo K-factor: the most rating points one game moves."""
    initial_rating: float = field(default=1000.0, metadata=bounded(ge=0, le=10_000))
    """The rating of a player (version or baseline) before its first game, Elo points."""
    envs: int = field(default=2, metadata=bounded(ge=1, le=64))
    """Envs it plays a match's games on in lock-step."""


def _history_on(trainer: Any) -> bool:
    h = getattr(trainer, "history", None)
    return h is not None and (h.every_updates > 0 or h.every_minutes > 0)


def _named(cfg: Any) -> dict[str, Any]:
    policies = getattr(cfg, "policies", None)
    return {} if policies is None or policies.implicit else dict(policies.named)


def chosen_policy(cfg: Any, opts: EvalOptions) -> tuple[str, str | None]:
    """``(policy, problem)``: the policy the eval manager plays (its name in the store) and
    why it cannot, or None."""
    from zoo.core.policies import DEFAULT_POLICY

    named = _named(cfg)
    key = f"workers.{KIND}.policy"
    if not named:
        if opts.policy not in ("", DEFAULT_POLICY):
            return opts.policy, (f"{key} = {opts.policy!r}: the run names no policies (its one policy is "
                                 f"{DEFAULT_POLICY!r}); leave {key} out")
        if not _history_on(cfg.trainer):
            return DEFAULT_POLICY, (f"{key}: policy {DEFAULT_POLICY} keeps no history, so the eval manager has no "
                                    "version to play; set trainer.history.every_updates=N (or every_minutes=M; "
                                    "docs/history.md)")
        return DEFAULT_POLICY, None
    trainable = [n for n, p in named.items() if p.trainable]
    if not opts.policy:
        if len(trainable) != 1:
            return "", (f"{key}: the run trains {len(trainable)} policies ({', '.join(trainable) or 'none'}); "
                        f"name the one to evaluate: set {key}=NAME")
        name = trainable[0]
    else:
        name = opts.policy
        if name not in named or not named[name].trainable:
            return name, (f"{key} = {name!r} is not a trainable policy of this run; trainable policies: "
                          f"{', '.join(trainable) or 'none'}")
    if not _history_on(named[name].trainer):
        return name, (f"{key}: policy {name} keeps no history, so the eval manager has no version to play; set "
                      f"policies.{name}.trainer.history.every_updates=N (or every_minutes=M; docs/history.md)")
    return name, None


def check(cfg: Any, registry: Any) -> list[tuple[str, str]]:
    """The problems of a run's eval manager (the module docstring's list), ``[(field, message)]``."""
    import difflib

    from zoo.core.kinds import by_name, worker_kinds

    opts = by_name(worker_kinds(registry))[KIND].option_values(cfg)
    out: list[tuple[str, str]] = []
    name, problem = chosen_policy(cfg, opts)
    if problem:
        out.append((f"workers.{KIND}.policy", problem))
    if opts.every_versions == 0 and opts.every_minutes == 0:
        out.append((f"workers.{KIND}.every_versions", f"workers.{KIND}.every_versions = 0 and workers.{KIND}."
                    "every_minutes = 0: nothing schedules an evaluation; set every_versions=1 (each kept version) "
                    "or every_minutes=M"))
    spec = getattr(cfg, "spec", None)
    if spec is not None and (spec.num_agents > 2 or (spec.num_agents == 2 and spec.mixed)):
        why = f"{spec.num_agents} agents" if spec.num_agents > 2 else "two agents of different spaces"
        out.append((f"workers.{KIND}", f"workers.{KIND}: env {spec.env_id!r} has {why}; the eval manager plays "
                    "one-agent envs and two-player games whose players share their spaces"))
        spec = None
    if spec is not None and spec.num_agents == 2 and not opts.baselines and opts.past_versions == 0:
        out.append((f"workers.{KIND}.baselines", f"workers.{KIND}.baselines = [] and workers.{KIND}.past_versions = "
                    "0: a version has no opponent to play; name a baseline (random) or set past_versions=N"))
    installed = registry.names("baseline")
    key = f"workers.{KIND}.baselines"
    if len(set(opts.baselines)) != len(opts.baselines):
        out.append((key, f"{key} = {opts.baselines!r} names a baseline twice; name each once"))
    for b in opts.baselines:
        if b not in installed:
            close = difflib.get_close_matches(b, installed, n=2, cutoff=0.6)
            out.append((key, f"{key}: no baseline {b!r} is installed; "
                        + (f"did you mean {' or '.join(map(repr, close))}? " if close else "")
                        + f"baselines: {', '.join(installed) or 'none'} (see `zoo list baselines`)"))
        elif re.fullmatch(r"v\d+", b):
            out.append((key, f"{key}: baseline {b!r} has the name of a version (v<N>); rename the plugin's baseline"))
        elif spec is not None:
            try:
                registry.get("baseline", b).load()(spec.subset([spec.agents[0]]), 0)
            except ValueError as exc:
                out.append((key, f"{key}: {exc}"))
    return out


def drives_curriculum(cfg: Any) -> bool:
    """Whether the run's curriculum is driven by the eval manager (``curriculum.source = "eval"``)."""
    cc = getattr(cfg, "curriculum", None)
    return bool(cc is not None and getattr(cc, "from_eval", False))


def connects(graph: Any) -> tuple[str, ...]:
    """The streams the eval worker connects to: ``parameter`` (the stage its meta carries) when
    it drives the run's curriculum, else none."""
    return ("parameter",) if drives_curriculum(graph.cfg) else ()


def describe(graph: Any, index: int) -> dict[str, Any]:
    """``graph.json``'s entry of the eval worker: the policy it plays, its baselines, its streams
    (``parameter``, subscribed to for the curriculum stage, when it drives the curriculum)."""
    opts = EvalOptions(**((getattr(graph.cfg, "workers", None) or {}).get(KIND) or {})) if graph.cfg else EvalOptions()
    policy = chosen_policy(graph.cfg, opts)[0] if graph.cfg is not None else opts.policy
    entry = {"policy": policy, "baselines": list(opts.baselines), "listens": [], "connects": list(connects(graph))}
    if entry["connects"]:
        from zoo.core.graph import PARAMETER_ENDPOINT

        entry["subscribes"] = PARAMETER_ENDPOINT
    return entry


# ----------------------------------------------------------------------------- the worker
class Evaluator:
    """The eval manager's state in its worker: store, networks, envs, schedule (module docstring)."""

    def __init__(self, ctx: Any, opts: EvalOptions, clock: Any = time.monotonic) -> None:
        import torch

        from zoo.core.policies import policy_view
        from zoo.core.workers.base import make_env

        self.ctx, self.opts, self.clock = ctx, opts, clock
        self.policy = chosen_policy(ctx.cfg, opts)[0]
        named = _named(ctx.cfg)
        view = policy_view(ctx.cfg, ctx.cfg.policies, self.policy) if named else ctx.cfg
        self.view = view
        spec = ctx.spec
        self.seat_spec = spec.subset([spec.agents[0]]) if spec.num_agents == 2 else spec  # one player's spaces
        self.net_spec = (getattr(view, "spec", None) or spec) if named else spec  # as its trainer built it
        self.algo_cls = ctx.registry.get("algorithm", view.algo_name).load()
        torch.set_num_threads(1)
        self.envs = [make_env(ctx, i, seated=True) for i in range(opts.envs)]
        self.two = spec.num_agents == 2
        self.baselines = {b: ctx.registry.get("baseline", b).load() for b in opts.baselines}
        self.nets: dict[int, Any] = {}
        self.loaded: dict[int, float] = {}
        self.store: Any = None
        self.matches = 0
        self.seen = -1  # the newest kept version seen
        self.new_since = 0  # kept versions seen since the last evaluation
        self.last_eval = clock()
        self.alone_done: set[str] = set()
        self.tried: set[int] = set()  # versions evaluated here (also those that had no opponent to play)
        # a curriculum it drives (module docstring): the run's stage, each env's (-1: never told), the parameters
        self.stage = int(getattr(ctx, "curriculum_stage", -1)) if drives_curriculum(ctx.cfg) else -1
        self.env_stage = [-1] * len(self.envs)
        self.params: Any = None
        if self.stage >= 0:
            from zoo.core.graph import parameter_endpoint

            self.params = ctx.transport("parameter").subscriber(parameter_endpoint(ctx.policy))

    def follow_stage(self) -> int:
        """The run's curriculum stage (-1: it drives none), from the newest parameters' meta
        when new ones came (no wait); each env is told it before its next match's first reset."""
        if self.params is not None:
            msg = self.params.latest(0.0)
            stage = None if msg is None else msg[1].get("curriculum_stage")
            if stage is not None:
                self.stage = int(stage)
        if self.stage >= 0:
            for i, env in enumerate(self.envs):
                if self.env_stage[i] != self.stage:
                    env.set_curriculum_stage(self.stage)
                    self.env_stage[i] = self.stage
        return self.stage

    def close(self) -> None:
        if self.params is not None:
            try:
                self.params.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.exception("closing the eval manager's parameter subscriber failed")
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.exception("closing an eval env failed")
        if self.store is not None:
            self.store.close()

    def open_store(self) -> bool:
        from zoo.core.history import VersionStore, db_path

        if self.store is None and os.path.exists(db_path(self.ctx.run_dir)):
            self.store = VersionStore(self.ctx.run_dir)
        return self.store is not None

    def due(self) -> Any:
        """The kept version to evaluate now, or None (the schedule of the module docstring)."""
        kept = self.store.versions(self.policy)
        done = self.store.evaluated(self.policy) | self.tried
        fresh = [v for v in kept if v.version > self.seen]
        if fresh:
            self.new_since += len(fresh)
            self.seen = fresh[-1].version
        todo = [v for v in kept if v.version not in done]
        if not todo:
            return None
        n, minutes = self.opts.every_versions, self.opts.every_minutes
        if n > 0 and self.new_since >= n:
            self.new_since -= n
            return todo[0] if n == 1 else todo[-1]
        if minutes > 0 and self.clock() - self.last_eval >= 60.0 * minutes:
            return todo[-1]
        return None

    def net(self, row: Any) -> Any:
        """The network of kept version ``row`` (loaded once; None when its file is gone)."""
        from zoo.core.checkpoint import CheckpointError, load_checkpoint

        if row.version in self.nets:
            return self.nets[row.version]
        try:
            ckpt = load_checkpoint(self.store.file(row))
        except (CheckpointError, OSError) as exc:
            log.warning("eval: cannot load version %d of policy %s (%s); skipping it", row.version, self.policy, exc)
            return None
        net = self.algo_cls.build_policy(self.view.algo, self.net_spec)
        net.load_state_dict(ckpt["algorithm"]["policy"])
        net.eval()
        self.nets[row.version] = net
        self.loaded[row.version] = row.time_s
        while len(self.nets) > self.opts.past_versions + 2:
            del self.nets[min(self.nets)]
        return net

    def _seed(self) -> int:
        from zoo.core.seeding import derive_seed

        cfg = self.ctx.cfg
        seed = derive_seed(cfg.seed, KIND, self.ctx.index, slot=self.matches,
                           resume=int(getattr(cfg, "resume", 0) or 0), attempt=self.ctx.attempt)
        self.matches += 1
        return seed % (2 ** 31)

    def match(self, player: tuple[str, Any, int | None], opponent: tuple[str, Any, int | None] | None) -> list[Any]:
        """``episodes`` games of ``player`` against ``opponent`` (``(name, actor, version)``;
        None: alone), as :class:`zoo.core.history.EvalGame` rows in play order."""
        import numpy as np

        from zoo.core.history import EvalGame
        from zoo.core.ratings import learner_score
        from zoo.play import Seat, play

        n = self.opts.episodes
        seed = self._seed()
        envs = self.envs[:max(1, min(len(self.envs), n))]
        name, actor, version = player
        stage = self.follow_stage()
        at = None if stage < 0 or version is None else stage  # a version's games, for the curriculum

        def stats(row: dict[str, Any]) -> dict[str, float] | None:
            return None if at is None else episode_stats(row)

        if opponent is None:
            rows = play(actor, envs, n, seed, deterministic=self.opts.deterministic)
            return [EvalGame(name, None, 0, None, float(r["return"]), None, version, curriculum_stage=at,
                             stats=stats(r)) for r in rows]
        oname, oactor, oversion = opponent
        games = []
        first = math.ceil(n / 2)
        for seat, count in ((0, first), (1, n - first)):
            if count == 0:
                continue
            seats = [Seat("player", "", actor, np.array([seat], np.int64)),
                     Seat("opponent", "", oactor, np.array([1 - seat], np.int64))]
            rows = play(seats, envs[:min(len(envs), count)], count, seed + seat * n,
                        deterministic=self.opts.deterministic)
            for r in rows:
                mine, theirs = r["policy_returns"].get("player", 0.0), r["policy_returns"].get("opponent", 0.0)
                games.append(EvalGame(name, oname, seat, learner_score(mine, theirs), float(mine), float(theirs),
                                      version, oversion, curriculum_stage=at, stats=stats(r)))
        return games

    def evaluate(self, row: Any) -> int:
        """Play version ``row``'s matches and write each; the games written."""
        from zoo.core.history import player_name

        self.tried.add(row.version)
        net = self.net(row)
        if net is None:
            return 0
        me = (player_name(row.version), net, row.version)
        written = 0
        for b, factory in self.baselines.items():
            if self.ctx.stop:
                return written
            baseline = factory(self.seat_spec, self._seed())
            if self.two:
                written += self.record(self.match(me, (b, baseline, None)))
            elif b not in self.alone_done:
                self.alone_done.add(b)
                written += self.record(self.match((b, baseline, None), None))
        if not self.two:
            return written + self.record(self.match(me, None))
        older = [v for v in self.store.versions(self.policy) if v.version < row.version][::-1]
        for past in older[:self.opts.past_versions]:
            if self.ctx.stop:
                break
            other = self.net(past)
            if other is not None:
                written += self.record(self.match(me, (player_name(past.version), other, past.version)))
        return written

    def record(self, games: list[Any]) -> int:
        n = self.store.record_eval(self.policy, games, k=self.opts.elo_k, initial=self.opts.initial_rating,
                                   deterministic=self.opts.deterministic, loaded=self.loaded)
        if n < len(games):
            log.warning("eval: %d of %d games not written: a version that played was cut back (a resume)",
                        len(games) - n, len(games))
        return n


def episode_stats(row: dict[str, Any]) -> dict[str, float]:
    """A played episode's numeric fields besides its return (:func:`zoo.play.play`'s row:
    ``length`` and the env's ``info["stats"]``), as a curriculum condition reads them."""
    return {k: float(v) for k, v in row.items() if k not in ("episode", "seed", "return")
            and isinstance(v, (int, float)) and not isinstance(v, bool)}


def run(ctx: Any) -> None:
    """The ``eval`` worker's entry: poll the store, evaluate versions as scheduled, until stopped."""
    from zoo.core.kinds import options_of

    opts = options_of(ctx)
    ev = Evaluator(ctx, opts)
    try:
        while not ctx.stop:
            ctx.heartbeat()
            row = ev.due() if ev.open_store() else None
            if row is None:
                time.sleep(POLL_S)
                continue
            ev.last_eval = ev.clock()
            with ctx.busy("evaluate"):
                n = ev.evaluate(row)
            log.info("eval: version %d of policy %s: %d games written", row.version, ev.policy, n)
    finally:
        ev.close()
