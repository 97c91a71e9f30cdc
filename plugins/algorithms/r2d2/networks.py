"""R2D2's recurrent dueling Q-network and its epsilon-greedy ``act``.

Torso as apex-dqn's (:mod:`zoo.plugins.algorithms.apex.networks`): the Nature CNN on image
leaves, two ReLU layers of ``hidden`` units on vector leaves; then an LSTM cell of ``lstm``
units (Hochreiter and Schmidhuber 1997; torch's ``LSTMCell``), then a dueling head (Wang et al.
2016, eq. 9: ``Q = V + A - mean_a A``; linear streams on vectors, one hidden layer of 512 on
images), as in R2D2 (Kapturowski et al. 2019, section 2.3).

Recurrent state (the policy worker's protocol, :class:`zoo.core.workers.policy.RecurrentStates`):
``state_shape = (2, lstm)``, rows ``h`` and ``c``; zeros at an episode start. The policy worker
stores the state it fed at each step in the sample (``rnn_state``), which R2D2 stores with
each sequence.
"""
from __future__ import annotations

import torch
from torch import nn

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.apex.networks import apex_epsilons
from zoo.plugins.algorithms.encoders import ObsEncoder

Obs = dict[str, torch.Tensor]


class RecurrentQNetwork(nn.Module):
    """``step(obs, state) -> (q float32 [N, |A|], state' [N, 2, H])``; ``unroll`` over time;
    ``act`` picks epsilon-greedy actions (``wants_env_index``: per-env epsilons as apex-dqn)."""

    wants_env_index = True

    def __init__(self, spec: EnvSpec, hidden: int = 128, lstm: int = 512, epsilon_base: float = 0.4,
                 epsilon_alpha: float = 7.0, eval_epsilon: float = 0.0) -> None:
        super().__init__()
        self.n_actions = int(spec.action_space.n)
        self.epsilon_base, self.epsilon_alpha, self.eval_epsilon = epsilon_base, epsilon_alpha, eval_epsilon
        encoder = ObsEncoder(spec.observation_space)
        if encoder.has_images:
            self.torso: nn.Module = encoder
            width = encoder.out_dim
        else:
            self.torso = nn.Sequential(encoder, nn.Linear(encoder.out_dim, hidden), nn.ReLU(),
                                       nn.Linear(hidden, hidden), nn.ReLU())
            width = hidden
        self.lstm_units = lstm
        self.cell = nn.LSTMCell(width, lstm)
        head = 512 if encoder.has_images else 0

        def stream(out: int) -> nn.Module:
            if head:
                return nn.Sequential(nn.Linear(lstm, head), nn.ReLU(), nn.Linear(head, out))
            return nn.Linear(lstm, out)

        self.advantage = stream(self.n_actions)
        self.value = stream(1)

    @property
    def state_shape(self) -> tuple[int, int]:
        """``(2, lstm)``: the LSTM's ``h`` and ``c``."""
        return (2, self.lstm_units)

    def zero_state(self, rows: int) -> torch.Tensor:
        """The initial state, float32 zeros ``[rows, 2, lstm]``."""
        return torch.zeros(rows, 2, self.lstm_units, device=next(self.parameters()).device)

    def _head(self, y: torch.Tensor) -> torch.Tensor:
        adv = self.advantage(y).float()
        return self.value(y).float() + adv - adv.mean(dim=-1, keepdim=True)

    def step(self, obs: Obs, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``obs [N, ...]``, ``state [N, 2, H]`` -> ``(q [N, |A|], new state [N, 2, H])``."""
        h, c = self.cell(self.torso(obs), (state[:, 0], state[:, 1]))
        return self._head(h), torch.stack([h, c], dim=1)

    def unroll(self, obs: Obs, state0: torch.Tensor, reset: torch.Tensor,
               active: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``L`` steps as the acting policy did: the state is zeroed in the rows where
        ``reset[t]`` before step ``t`` (``on_reset``: the observation starts an episode), and held
        where ``active[t]`` is False (no request was sent for an inactive agent).

        Args:
            obs: dict of ``[L, M, ...]``; state0: float32 ``[M, 2, H]``, fed at step 0 (before its
                reset); reset: bool ``[L, M]``; active: bool ``[L, M]`` or None (all active).

        Returns:
            ``(q float32 [L, M, |A|], after float32 [L, M, 2, H])``: the Q-values and the state
            after each step.
        """
        L, M = reset.shape
        feats = self.torso({k: v.reshape(L * M, *v.shape[2:]) for k, v in obs.items()}).reshape(L, M, -1)
        state = state0
        hs, afters = [], []
        for t in range(L):
            s = torch.where(reset[t].reshape(M, 1, 1), torch.zeros_like(state), state)
            h, c = self.cell(feats[t], (s[:, 0], s[:, 1]))
            new = torch.stack([h, c], dim=1)
            if active is not None:
                new = torch.where(active[t].reshape(M, 1, 1), new, s)
            hs.append(new[:, 0])
            afters.append(new)
            state = new
        return self._head(torch.stack(hs)), torch.stack(afters)

    def act(self, obs: Obs, deterministic: bool = False, state: torch.Tensor | None = None,
            env_index: torch.Tensor | None = None, num_envs: int | None = None) -> dict[str, torch.Tensor]:
        """Epsilon-greedy actions from one step.

        Args:
            obs: dict of ``[N, ...]``; state: float32 ``[N, 2, H]`` (None: zeros, an episode start);
            env_index, num_envs: each row's global env index (int64 ``[N]``) and the run's env
                count: the row's epsilon is :func:`apex_epsilons`; without them ``eval_epsilon``;
                0 when ``deterministic``.

        Returns:
            ``{"action": int64 [N], "state": float32 [N, 2, H]}`` (the state after this step).
        """
        with torch.no_grad():
            first = next(iter(obs.values()))
            n = first.shape[0]
            if state is None:
                state = self.zero_state(n)
            q, new_state = self.step(obs, state.to(next(self.parameters()).dtype))
            greedy = q.argmax(dim=1)
            if deterministic:
                return {"action": greedy, "state": new_state}
            if env_index is not None:
                eps = apex_epsilons(env_index.to(greedy.device), int(num_envs or 1), self.epsilon_base,
                                    self.epsilon_alpha)
            else:
                eps = torch.full((n,), float(self.eval_epsilon), device=greedy.device)
            explore = torch.rand(n, device=greedy.device) < eps
            random = torch.randint(self.n_actions, (n,), device=greedy.device)
            return {"action": torch.where(explore, random, greedy), "state": new_state}
