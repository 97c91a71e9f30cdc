"""The Q-network of Ape-X DQN and its epsilon-greedy ``act``.

Torso by observation (:mod:`zoo.plugins.algorithms.encoders`): image leaves (``[C, H, W]``,
e.g. 4 stacked 84x84 frames) go through the Nature CNN (512 ReLU features; Mnih et al. 2015),
vector leaves are flattened and go through two ReLU layers of ``hidden`` units. Head: dueling
(Wang et al., "Dueling Network Architectures for Deep Reinforcement Learning", ICML 2016, eq.
9: ``Q = V + A - mean_a A``), each stream one hidden layer of 512 units on images, a linear
layer on vectors; or a plain linear layer of ``|A|`` outputs.
"""
from __future__ import annotations

import torch
from torch import nn

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.encoders import ObsEncoder

Obs = dict[str, torch.Tensor]


def apex_epsilons(env_index: torch.Tensor, num_envs: int, base: float = 0.4, alpha: float = 7.0) -> torch.Tensor:
    """Ape-X's per-env exploration (arXiv 1803.00933, section 4.1): ``eps_i = base ** (1 + alpha
    * i / (N - 1))`` for global env index ``i`` of ``N`` envs (``N = 1``: ``base``). float32 ``[rows]``."""
    frac = env_index.double() / (num_envs - 1) if num_envs > 1 else torch.zeros_like(env_index, dtype=torch.float64)
    return (base ** (1.0 + alpha * frac)).float()


def linear_epsilon(progress: torch.Tensor | float, start: float = 1.0, end: float = 0.05,
                   fraction: float = 0.5) -> float:
    """DQN's annealed exploration (Mnih et al., Nature 2015; CleanRL ``dqn.py``'s ``linear_schedule``):
    ``start + (end - start) * min(1, progress / fraction)`` for ``progress`` the fraction of the
    run's env-step budget done, in [0, 1]; ``fraction`` 0 gives ``end``. Examples (1.0 -> 0.05 over
    0.5): progress 0 -> 1.0, 0.1 -> 0.81, 0.25 -> 0.525, 0.5 and after -> 0.05."""
    done = 1.0 if fraction <= 0 else min(1.0, max(0.0, float(progress)) / fraction)
    return float(end) if done >= 1.0 else float(start + (end - start) * done)


class QNetwork(nn.Module):
    """``q(obs) -> float32 [N, |A|]``; ``act`` picks epsilon-greedy actions.

    ``wants_env_index``: the policy worker passes each row's global env index to ``act``
    (:func:`zoo.core.workers.policy.infer`), from which the row's epsilon follows.

    With ``exploration = "linear"`` the network holds a buffer ``progress`` (float32 scalar, the
    fraction of the run's env-step budget its trainer had reached when it last changed the
    weights): it travels with the published parameters and the checkpoints, so every policy
    worker and inline actor acts with the trainer's epsilon (:func:`linear_epsilon`).
    """

    wants_env_index = True

    def __init__(self, spec: EnvSpec, hidden: int = 128, dueling: bool = True, epsilon_base: float = 0.4,
                 epsilon_alpha: float = 7.0, eval_epsilon: float = 0.0, exploration: str = "per-env",
                 start_epsilon: float = 1.0, end_epsilon: float = 0.05, exploration_fraction: float = 0.5) -> None:
        super().__init__()
        self.n_actions = int(spec.action_space.n)
        self.epsilon_base, self.epsilon_alpha, self.eval_epsilon = epsilon_base, epsilon_alpha, eval_epsilon
        self.exploration = exploration
        self.schedule = (start_epsilon, end_epsilon, exploration_fraction)
        if exploration == "linear":
            self.register_buffer("progress", torch.zeros((), dtype=torch.float32))
        encoder = ObsEncoder(spec.observation_space)
        self.dueling = dueling
        head_hidden = 512 if encoder.has_images else 0
        if encoder.has_images:
            self.torso: nn.Module = encoder
            width = encoder.out_dim
        else:
            self.torso = nn.Sequential(encoder, nn.Linear(encoder.out_dim, hidden), nn.ReLU(),
                                       nn.Linear(hidden, hidden), nn.ReLU())
            width = hidden

        def stream(out: int) -> nn.Module:
            if head_hidden:
                return nn.Sequential(nn.Linear(width, head_hidden), nn.ReLU(), nn.Linear(head_hidden, out))
            return nn.Linear(width, out)

        self.advantage = stream(self.n_actions)
        self.value = stream(1) if dueling else None

    def q(self, obs: Obs) -> torch.Tensor:
        """Action values, float32 ``[N, |A|]``."""
        x = self.torso(obs)
        adv = self.advantage(x).float()
        if self.value is None:
            return adv
        return self.value(x).float() + adv - adv.mean(dim=1, keepdim=True)

    def act(self, obs: Obs, deterministic: bool = False, env_index: torch.Tensor | None = None,
            num_envs: int | None = None) -> dict[str, torch.Tensor]:
        """Epsilon-greedy actions ``{"action": int64 [N]}``.

        Each row's epsilon: 0 if ``deterministic``; when ``env_index`` is given (int64 ``[N]``,
        global env indices of the run's ``num_envs`` envs: a training actor's rows),
        :func:`apex_epsilons` of it, or with ``exploration = "linear"`` :func:`linear_epsilon` of
        the ``progress`` buffer for every row; else ``eval_epsilon``. Random actions come from
        torch's generator. Runs without a graph.
        """
        with torch.no_grad():
            greedy = self.q(obs).argmax(dim=1)
            n = greedy.shape[0]
            if deterministic:
                return {"action": greedy}
            if env_index is not None and self.exploration == "linear":
                progress = self.get_buffer("progress")
                eps = torch.full((n,), linear_epsilon(progress, *self.schedule), device=greedy.device)
            elif env_index is not None:
                eps = apex_epsilons(env_index.to(greedy.device), int(num_envs or 1), self.epsilon_base,
                                    self.epsilon_alpha)
            else:
                eps = torch.full((n,), float(self.eval_epsilon), device=greedy.device)
            explore = torch.rand(n, device=greedy.device) < eps
            random = torch.randint(self.n_actions, (n,), device=greedy.device)
            return {"action": torch.where(explore, random, greedy)}
