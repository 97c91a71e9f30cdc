"""``zoo eval`` of a run of named policies (docs/policies.md): every policy plays its agents,
``--policy NAME=CHECKPOINT`` swaps one policy's weights, bad ``--policy`` input is one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from typer.testing import CliRunner

import zoo.cli as cli
from zoo.core.env import EnvSpec
from zoo.core.plugins import get_host, get_registry
from zoo.evaluate import Seat, load_evaluation, parse_policy_swaps, play
from zoo.runinfo import RunError

ENV = "pettingzoo:mpe2.simple_spread_v3"


# ----------------------------------------------------------------------------- play
class Spread:
    """Three agents ``a_0``, ``b_0``, ``b_1``; agent k observes ``x = [10 (k + 1) + t]`` at step t and
    is rewarded its action; every episode is 3 steps. ``b_1`` is inactive at step 1."""

    def __init__(self) -> None:
        self.spec = EnvSpec("spread", ("a_0", "b_0", "b_1"), {"x": spaces.Box(-1e3, 1e3, (1,), np.float32)},
                            spaces.Discrete(5))
        self.t = 0

    def _obs(self):
        return {"x": np.array([[10.0 + self.t], [20.0 + self.t], [30.0 + self.t]], np.float32)}

    def reset(self, seed=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = np.asarray(action, np.float32).reshape(3)
        done = np.full(3, self.t == 3)
        active = np.array([True, True, self.t != 1])
        return self._obs(), reward, done, np.zeros(3, bool), {"active": active}

    def close(self):
        pass


class Constant(torch.nn.Module):
    """Acts ``value`` for every row; records each batch's ``x`` column."""

    def __init__(self, value: int) -> None:
        super().__init__()
        self.value, self.seen = value, []

    def act(self, obs, deterministic=False):
        self.seen.append(obs["x"][:, 0].tolist())
        return {"action": torch.full((obs["x"].shape[0],), self.value, dtype=torch.int64)}


def test_each_policy_acts_for_its_own_agents_and_results_hold_per_policy_returns():
    a, b = Constant(1), Constant(2)
    seats = [Seat("a", "stub", a, np.array([0], np.int64)), Seat("b", "stub", b, np.array([1, 2], np.int64))]
    rows = play(seats, [Spread()], episodes=1, seed=0)
    # a acts for a_0 only (x = 10 + t); b for b_0 and b_1 (20 + t, 30 + t), without b_1 at step 1 (inactive)
    assert a.seen == [[10.0], [11.0], [12.0]]
    assert b.seen == [[20.0, 30.0], [21.0], [22.0, 32.0]]
    # rewards are the actions: a_0 gets 1 x 3 steps, b_0 and b_1 2 x 3 (b_1's action at step 1 was 0: inactive)
    assert rows == [{"episode": 0, "seed": 0, "return": (3 + 6 + 4) / 3, "length": 3,
                     "agent_returns": {"a_0": 3.0, "b_0": 6.0, "b_1": 4.0},
                     "team_returns": {"a": 3.0, "b": 5.0}, "policy_returns": {"a": 3.0, "b": 5.0}}]


def test_one_network_plays_every_agent_without_policy_returns():
    one = Constant(2)
    rows = play(one, [Spread(), Spread()], episodes=2, seed=0)
    assert one.seen[0] == [10.0, 20.0, 30.0, 10.0, 20.0, 30.0]  # both envs' agents in one batch
    assert [r["agent_returns"] for r in rows] == [{"a_0": 6.0, "b_0": 6.0, "b_1": 4.0}] * 2
    assert all("policy_returns" not in r for r in rows)


# ----------------------------------------------------------------------------- load_evaluation, --policy
def _checkpoint(path: Path, net: torch.nn.Module, version: int, **config) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"algorithm": {"policy": net.state_dict(), "config": config}, "policy_version": version,
                "env_steps": 100 * version}, path)
    return path


def _net(spec, seed: int, hidden: int = 8):
    from zoo.core.config import algorithm_config_class

    algo = get_registry().get("algorithm", "mappo")
    config = algorithm_config_class(algo)(hidden=hidden, layers=1)
    torch.manual_seed(seed)
    return algo.load().build_policy(config, spec)


@pytest.fixture(scope="module")
def spread_spec():
    from zoo.core.config import env_config_class, resolve_env

    component, arg = resolve_env(get_registry(), ENV)
    env = component.load()(arg, env_config_class(component)(), 0)
    try:
        return env.spec
    finally:
        env.close()


@pytest.fixture
def teams(tmp_path, spread_spec):
    """A run folder of policies lead (agent_0) and rest (agent_1, agent_2), written by hand, with a
    checkpoint of each (policy versions 3 and 5)."""
    run = tmp_path / "teams"
    run.mkdir()
    algo = {"hidden": 8, "layers": 1}
    config = {"algo_name": "mappo", "env_name": ENV, "env": {"kwargs": "", "mixed_spaces": True},
              "runs_dir": str(tmp_path), "seed": 0,
              "policies": {"lead": {"algo_name": "mappo", "algo": algo, "trainable": True, "weights": "",
                                    "agents": ["agent_0"]},
                           "rest": {"algo_name": "mappo", "algo": algo, "trainable": True, "weights": "",
                                    "agents": ["agent_1", "agent_2"]}},
              "agents": [{"match": "agent_0", "policy": "lead"}, {"match": "*", "policy": "rest"}]}
    (run / "config.json").write_text(json.dumps(config))
    _checkpoint(run / "checkpoints" / "lead" / "latest.pt", _net(spread_spec.subset(("agent_0",)), 1), 3)
    _checkpoint(run / "checkpoints" / "rest" / "latest.pt", _net(spread_spec.subset(("agent_1", "agent_2")), 2), 5)
    return run


def _state(path: Path) -> dict:
    return torch.load(path, weights_only=False)["algorithm"]["policy"]


def _same(net, state) -> bool:
    mine = net.state_dict()
    return mine.keys() == state.keys() and all(torch.equal(mine[k], state[k]) for k in mine)


def test_every_policy_plays_its_agents_from_its_own_checkpoint(teams):
    ev = load_evaluation(teams)
    assert [(s.name, s.agents.tolist(), s.checkpoint, s.counters, s.swapped) for s in ev.seats] == [
        ("lead", [0], teams / "checkpoints" / "lead" / "latest.pt", {"policy_version": 3, "env_steps": 300}, False),
        ("rest", [1, 2], teams / "checkpoints" / "rest" / "latest.pt", {"policy_version": 5, "env_steps": 500}, False)]
    assert _same(ev.seats[0].policy, _state(teams / "checkpoints" / "lead" / "latest.pt"))
    assert _same(ev.seats[1].policy, _state(teams / "checkpoints" / "rest" / "latest.pt"))
    assert ev.players is ev.seats


def test_policy_swap_changes_only_that_policys_weights_with_the_checkpoints_own_options(teams, spread_spec, tmp_path):
    # another run's lead, with a wider network (hidden 16): built with the options stored in the checkpoint
    other = _checkpoint(tmp_path / "other" / "lead.pt", _net(spread_spec.subset(("agent_0",)), 7, hidden=16), 9,
                        hidden=16, layers=1)
    ev = load_evaluation(teams, swaps={"lead": str(other)})
    lead, rest = ev.seats
    assert (lead.checkpoint, lead.counters, lead.swapped) == (other, {"policy_version": 9, "env_steps": 900}, True)
    assert _same(lead.policy, _state(other))
    assert _same(rest.policy, _state(teams / "checkpoints" / "rest" / "latest.pt"))
    # a run folder: its policy of the same name
    ev = load_evaluation(teams, swaps={"rest": str(teams)})
    assert ev.seats[1].checkpoint == (teams / "checkpoints" / "rest" / "latest.pt").resolve()


def test_a_file_in_a_policys_checkpoint_folder_is_that_policys(teams, spread_spec):
    kept = _checkpoint(teams / "checkpoints" / "rest" / "policy-v00000002.pt",
                       _net(spread_spec.subset(("agent_1", "agent_2")), 4), 2)
    ev = load_evaluation(kept)
    assert ev.run_dir == teams and [s.checkpoint for s in ev.seats] == [teams / "checkpoints" / "lead" / "latest.pt",
                                                                        kept]
    assert _same(ev.seats[1].policy, _state(kept))
    ev = load_evaluation(teams, swaps={"rest": "rest@2"})  # POLICY@VERSION: this run's kept version
    assert ev.seats[1].checkpoint == kept.resolve()


def test_a_frozen_policy_plays_its_weights_and_missing_ones_are_named(teams, spread_spec, tmp_path):
    weights = _checkpoint(tmp_path / "frozen" / "rest.pt", _net(spread_spec.subset(("agent_1", "agent_2")), 6), 11)
    config = json.loads((teams / "config.json").read_text())
    config["policies"]["rest"].update(trainable=False, weights=str(weights))
    (teams / "config.json").write_text(json.dumps(config))
    (teams / "checkpoints" / "rest" / "latest.pt").unlink()  # a frozen policy writes none
    ev = load_evaluation(teams)
    assert (ev.seats[1].checkpoint, ev.seats[1].counters) == (weights, {"policy_version": 11, "env_steps": 1100})
    assert _same(ev.seats[1].policy, _state(weights))
    weights.unlink()
    with pytest.raises(RunError) as err:
        load_evaluation(teams)
    assert str(err.value) == (f"frozen policy rest's weights ({str(weights)!r} in {teams / 'config.json'}) do not "
                              "exist; play a checkpoint in their place with --policy rest=CHECKPOINT")
    other = teams / "checkpoints" / "lead" / "latest.pt"  # lead's network fits rest's agents (equal spaces)
    assert load_evaluation(teams, swaps={"rest": str(other)}).seats[1].checkpoint == other.resolve()


def test_bad_policy_swaps_are_one_line_naming_the_option(teams, spread_spec, tmp_path):
    for value in ("lead", "=x.pt", "lead="):
        with pytest.raises(RunError) as err:
            parse_policy_swaps([value])
        assert str(err.value) == (f"--policy {value!r}: give NAME=CHECKPOINT, a policy of the run and a checkpoint "
                                  "file, a run folder or POLICY@VERSION to play in place of its weights (e.g. "
                                  "--policy lead=runs/other/checkpoints/lead/latest.pt)")
    with pytest.raises(RunError) as err:
        parse_policy_swaps(["lead=a.pt", "lead=b.pt"])
    assert str(err.value) == "--policy lead= is given twice ('a.pt' and 'b.pt'); give each policy's checkpoint once"
    assert parse_policy_swaps(["lead=a=b.pt", " rest = x "]) == {"lead": "a=b.pt", "rest": "x"}

    def refused(swaps):
        with pytest.raises(RunError) as err:
            load_evaluation(teams, swaps=swaps)
        return str(err.value)

    assert refused({"leader": "x.pt"}) == (f"--policy leader=x.pt: run {str(teams)!r} has no policy 'leader'; it "
                                           "names policies lead, rest: give --policy lead=CHECKPOINT")
    missing = tmp_path / "nope.pt"
    assert refused({"lead": str(missing)}) == (f"--policy lead={missing} does not exist; give a checkpoint file "
                                               "(.pt), a run folder, or POLICY@VERSION (docs/policies.md)")
    wrong = _checkpoint(tmp_path / "wrong.pt", _net(spread_spec.subset(("agent_1", "agent_2")), 3), 1)
    assert refused({"lead": "rest@4"}) == (
        f"--policy lead=rest@4: policy rest kept no version 4 "
        f"({teams / 'checkpoints' / 'rest' / 'policy-v00000004.pt'} "
        f"does not exist, nor {teams / 'history' / 'rest' / 'v00000004.pt'}): versions are kept with "
        "policies.rest.trainer.keep_checkpoints = true or policies.rest.trainer.history.every_updates = N; give a "
        "version it kept")
    ok = refused({"lead": str(wrong), "rest": str(missing)})  # every name and file is checked before any load
    assert ok.startswith(f"--policy rest={missing} does not exist")
    wide = _checkpoint(tmp_path / "wide.pt", _net(spread_spec.subset(("agent_0",)), 3, hidden=16), 1)  # no options
    assert refused({"lead": str(wide)}).startswith(
        f"--policy lead={wide}: {str(wide)!r} does not fit policy lead (mappo for agents agent_0): Error(s) in loading "
        "state_dict for ")
    assert refused({"lead": str(wide)}).endswith("; give a checkpoint of a policy for these agents' spaces")
    (tmp_path / "text.pt").write_text("not a checkpoint")
    assert refused({"lead": str(tmp_path / "text.pt")}).startswith(
        f"--policy lead={tmp_path / 'text.pt'}: cannot read the checkpoint {tmp_path / 'text.pt'}: UnpicklingError")


def test_a_run_without_named_policies_has_one_called_default(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"algo_name": "ppo", "env_name": "CartPole-v1"}))
    with pytest.raises(RunError) as err:
        load_evaluation(tmp_path, swaps={"lead": "x.pt"})
    assert str(err.value) == (f"--policy lead=x.pt: run {str(tmp_path)!r} has no policy 'lead'; it names no policies "
                              "(its one policy is 'default'): give --policy default=CHECKPOINT")


def test_zoo_eval_refuses_a_malformed_policy_in_one_line(tmp_path):
    result = CliRunner().invoke(cli.build_app(get_host()), ["eval", str(tmp_path), "--policy", "lead"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("error: --policy 'lead': give NAME=CHECKPOINT, a policy of the run and a "
                                     "checkpoint file, a run folder or POLICY@VERSION to play in place of its weights "
                                     "(e.g. --policy lead=runs/other/checkpoints/lead/latest.pt)")


def test_output_files_of_different_weights_have_different_readable_names(teams, spread_spec, tmp_path):
    import hashlib

    from zoo.evaluate import checkpoint_label, output_stem

    def digest(path: Path) -> str:
        return hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:6]

    # two other runs' lead: both files are checkpoints/lead/latest.pt, so both stems were "latest" and
    # both evaluations wrote eval/policies-lead=latest-seed0.jsonl
    others = []
    for name, seed in (("run-a", 7), ("run-b", 8)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        others.append(_checkpoint(tmp_path / name / "checkpoints" / "lead" / "latest.pt",
                                  _net(spread_spec.subset(("agent_0",)), seed), 9, hidden=8, layers=1))
    stems = [output_stem(load_evaluation(teams, swaps={"lead": str(o)})) for o in others]
    assert stems == [f"policies-lead=run-a.lead.latest.{digest(others[0])}",
                     f"policies-lead=run-b.lead.latest.{digest(others[1])}"]
    assert output_stem(load_evaluation(teams)) == "policies"  # every policy its own weights
    # a kept version given as the target is named too (it read "policies", as the run's own latest)
    kept = _checkpoint(teams / "checkpoints" / "rest" / "policy-v00000002.pt",
                       _net(spread_spec.subset(("agent_1", "agent_2")), 4), 2)
    assert output_stem(load_evaluation(kept)) == f"policies-rest=teams.rest.policy-v00000002.{digest(kept)}"
    loose = _checkpoint(tmp_path / "loose" / "lead.pt", _net(spread_spec.subset(("agent_0",)), 3), 1)
    assert checkpoint_label(loose) == f"loose.lead.{digest(loose)}"


def test_a_policy_plays_its_initial_weights_as_the_run_would_start_it(teams, spread_spec):
    from types import SimpleNamespace

    from zoo.core.config import algorithm_config_class
    from zoo.core.workers.trainer import initial_policy_state
    from zoo.evaluate import output_stem

    registry = get_registry()
    algo = algorithm_config_class(registry.get("algorithm", "mappo"))(hidden=8, layers=1)
    # the run's seed 0, lead declared first: what lead's trainer builds before its first update
    view = SimpleNamespace(policies=SimpleNamespace(named={"lead": None, "rest": None}), seed=0, algo=algo,
                           algo_name="mappo")
    start = initial_policy_state(registry, view, spread_spec.subset(("agent_0",)), "lead")
    ev = load_evaluation(teams, swaps={"lead": "init"})  # --policy lead=init
    lead = ev.seats[0]
    assert (lead.checkpoint, lead.counters, lead.swapped) == (None, {"policy_version": 0}, True)
    assert _same(lead.policy, start)
    assert output_stem(ev) == "policies-lead=init"
    # a policy frozen at "init" in the run's config plays the same, under the run's own file name
    config = json.loads((teams / "config.json").read_text())
    config["policies"]["lead"].update(trainable=False, weights="init")
    (teams / "config.json").write_text(json.dumps(config))
    ev = load_evaluation(teams)
    assert ev.seats[0].checkpoint is None and _same(ev.seats[0].policy, start)
    assert output_stem(ev) == "policies"
