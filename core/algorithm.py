"""What an algorithm plugin provides, and the sample batch it trains on.

An algorithm is a class registered through ``register_algorithms`` with:

- ``Config``: a dataclass of hyperparameters (every field settable with ``--set algo.X=``);
- ``build_policy(config, spec) -> torch.nn.Module`` (classmethod): the network the policy
  worker runs. Its ``act(obs, deterministic=False)`` takes ``dict[str, Tensor [N, ...]]``
  and returns ``dict[str, Tensor]`` with ``"action"`` ``[N, *action_shape]`` and any
  extras the algorithm needs back in its samples (for PPO ``"logp"``, float32 ``[N]``; its
  ``"value"`` extra travels too but the update recomputes every value with its current
  network, see :meth:`zoo.plugins.algorithms.ppo.ppo.PPO.update`).
  A policy class may set ``wants_env_index = True``: the policy worker (and inline inference)
  then calls ``act(obs, env_index=..., num_envs=...)`` with each row's global env index, int64
  ``[N]`` in ``[0, num_envs)``, ``num_envs = actors.count x actors.envs_per_actor``
  (:class:`zoo.core.workers.policy.EnvIndex`; Ape-X's per-env epsilon). Callers outside the
  run (``zoo eval``, ``zoo watch``) do not pass them, so ``act`` must work without;
- ``presets(spec) -> dict[str, Any]`` (classmethod): dotted experiment-config overrides
  suited to the environment (applied before the user's ``--set``); optionally
  ``explain_presets(spec) -> str`` (classmethod): what the presets chose and why, plain
  text without a heading (``zoo train`` prints it after ``<algo> presets: ``);
- optionally ``explain_precision(config, spec) -> str`` (classmethod): the arithmetic the
  trainer will run for ``config.precision`` on this machine and why, e.g. ``"bfloat16 (auto:
  ...)"``; ``zoo train`` prints it after ``training precision: `` when ``algo.precision`` is
  set to other than ``float32`` (PPO, IMPALA, MAPPO: :mod:`zoo.plugins.algorithms.precision`);
- optionally ``Config.check_batch(agent_steps, text)``: called by config validation, before
  anything starts, with the agent steps of one trainer's batch and that arithmetic in words
  (:func:`zoo.core.config.batch_agent_steps`); raises ``ValueError`` with a one-line message
  naming the option and the fix when the algorithm cannot train on such a batch (PPO:
  ``algo.minibatches`` larger than the batch would leave minibatches empty);
- optionally ``Config.check_experiment(cfg)``: called by config validation, before anything
  starts, with the resolved experiment config (``cfg.spec`` set); raises ``ValueError`` with a
  one-line message starting with the option (``algo.capacity=...``) when the experiment
  cannot run (apex-dqn: replays larger than the memory available, one per data-parallel trainer);
- ``__init__(config, spec, seed)``: builds ``self.policy`` and the optimiser;
- ``update(batch) -> dict[str, float]``: one training step on a :data:`Batch` (any number of
  gradient steps: a replay algorithm keeps the batches in its state and takes as many steps
  as its rate limiter grants, e.g. :mod:`zoo.plugins.algorithms.apex.apex`; its presets set
  ``trainer.max_policy_lag`` high, as off-policy data is never too old). It is
  all-or-nothing: when a loss, a gradient or the resulting weights are not finite it takes
  no (further) optimiser step, puts back every piece of state it changed (weights,
  optimiser state, statistics, RNG, buffers) and raises :class:`NonFiniteUpdate`; the
  trainer counts and logs the skipped update (``trainer.max_nonfinite_updates``);
- ``state_dict()`` / ``load_state_dict()``: everything a checkpoint needs for an exact
  resume: policy weights, optimiser state, counters, RNG state, any kept batches (sample
  reuse); ``state_dict()["policy"]`` is the policy's own state dict;
- optionally a class attribute ``rate_limited = True``: the algorithm replays stored data at a
  samples-per-insert ratio (apex-dqn, sac, r2d2: :mod:`zoo.plugins.algorithms.rate_limiter`) and
  keeps int attributes ``gradient_steps``, ``replayed`` (samples drawn for them) and
  ``inserted`` (samples put in its replay), cumulative over the run. The trainer then adds the
  rate limiter's waits to every ``update`` row (``rate_limit_waits`` [batches],
  ``rate_limit_wait_s``, ``rate_limit_held_s`` [s]: :mod:`zoo.core.workers.accounting`) and
  those counters and waits to its status messages (``zoo bench`` reads them);
- optionally ``replicated`` (an ``nn.Module``): what data-parallel trainers copy from rank 0 when
  they join (default ``policy``; a replay algorithm adds its target networks, SAC its Q networks
  and temperature), so every rank starts identical, fresh or resumed;
- optionally ``rank_state_dict()`` / ``load_rank_state_dict(state | None)``: the part of the
  state that is the data-parallel rank's own (a replay shard, its sampling RNG); ranks >= 1
  checkpoint it beside ``latest.pt`` and load it on a resume (None: none was found, start
  it empty; :mod:`zoo.core.workers.checkpointing`, "Rank shards");
- optionally an attribute ``policy_changed`` (bool), set by each ``update``: False when the
  update left the policy's state dict exactly as it was (a replay algorithm's warm-up before
  ``learning_starts``, or a batch for which the rate limiter granted no gradient step). The
  trainer then counts the update (``updates``, trained env steps) but keeps the policy version
  and publishes nothing, so versions count parameter changes: the policy lag of samples acted
  with unchanged weights does not grow, ``trainer.history`` keeps no version twice and opponents
  pick among different weights. Absent: every update changes the policy. apex-dqn, sac and
  r2d2 set it (sac also when it clears its ``warmup`` flag, which the policy's actions depend on);
- optionally an attribute ``progress``: the trainer sets it before each update to the
  fraction of the run's env-step budget that the updates already done stand for, in
  [0, 1] (0 at the first update; :func:`zoo.core.workers.building.schedule_progress`), for
  schedules such as a learning rate annealed over the run.

**Batch layout** (time-major, ``T`` = sample length, ``B`` = agent-slots in the batch):

==================  ====================  ==========================================
key                 shape, dtype          meaning
==================  ====================  ==========================================
``obs``             dict of [T+1, B, ...] observations; row T is the bootstrap observation
``action``          [T, B, ...]           actions taken
``reward``          [T, B] float32        rewards received for ``action``
``terminated``      [T, B] bool           the episode ended by the MDP: do not bootstrap
``truncated``       [T, B] bool           cut by a time limit: bootstrap from ``final_obs``
``active``          [T, B] bool           the agent acted at this step
``on_reset``        [T, B] bool           ``obs[t]`` starts an episode for this agent: True from
                                          the reset until the agent's first active step
``policy_version``  [T, B] int64          version of the weights that chose ``action``
``<extra>``         [T, B] float32        what ``act`` returned besides ``action`` (logp, value)
``disc_return``     [T, B] float32        only with ``algo.norm_reward``: running discounted return
``final_obs``       dict of [K, ...]      the real last observation of each truncated step
``final_index``     [K, 2] int64          (t, b) of each truncated step, row order of ``final_obs``
==================  ====================  ==========================================

After an episode ends at step t, ``obs[t + 1]`` is the reset observation of the next
episode; the value of ``final_obs`` (never of the reset observation) is what a truncated
step bootstraps from. Termination wins when both flags are set.
"""
from __future__ import annotations

from typing import Any

Batch = dict[str, Any]


class NonFiniteUpdate(FloatingPointError):
    """An update met a NaN or an infinity and was skipped; the algorithm's state is as before it.

    Attributes:
        what: which quantity was not finite, e.g. ``"loss"``, ``"grad_norm"``, ``"weights"``.
        step: the gradient step of the update (0-based) where it was found.
        value: the offending value (a float; ``nan`` for weights).
    """

    def __init__(self, what: str, step: int = 0, value: float = float("nan")) -> None:
        self.what, self.step, self.value = what, step, value
        super().__init__(f"non-finite {what} ({value}) at gradient step {step} of the update; update skipped")
