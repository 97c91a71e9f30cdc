"""PBT (issue 23 item 4, core/pbt.py): the exploit/explore decision worked by hand from a seeded
RNG, the population state round trip, per-env member routing, a member trainer's exploit and
explore on a live PPO, and the refusals with their exact messages."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.core.options import ConfigError
from zoo.core.pbt import (
    PBTOptions,
    Population,
    Range,
    check_pbt,
    exploit,
    hyperparameter_ranges,
    member_names,
    member_of_env,
    pbt_problems,
    set_hyperparameters,
)
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig

HP = {"algo.epochs": [1, 10], "algo.lr": [1e-5, 1e-3]}


def population(seed=3, **kw):
    opts = PBTOptions(members=4, interval_env_steps=1000, hyperparameters=HP, **kw)
    return Population(opts, hyperparameter_ranges(PPOConfig, HP), {"algo.epochs": 4, "algo.lr": 2.5e-4}, seed)


# -- the decision ------------------------------------------------------------------------------

def test_a_round_worked_by_hand_from_random_random_0():
    pop = population(resample_probability=0.5)
    pop.rng.seed(0)  # the draws of random.Random(0), in the documented order (docs/pbt.md, "The decision"):
    # randrange(1) -> 0 (the only top member); epochs: random() 0.7579544029403025 >= 0.5 -> perturb,
    # randrange(2) -> 1 (x1.2); lr: random() 0.04048437818077755 < 0.5 -> resample log-uniform,
    # uniform(log 1e-5, log 1e-3) -> -7.0667953546779465, exp -> 0.000852962175231496.
    for m, (epochs, lr) in zip(pop.members, [(4, 2.5e-4), (5, 1e-4), (8, 5e-4), (2, 1e-5)], strict=True):
        m.hyperparameters = {"algo.epochs": float(epochs), "algo.lr": lr}
    # ranked by objective: member 1 (3.0), 2 (2.0), 0 (1.0), 3 (0.5); cut = max(1, floor(0.25 x 4)) = 1
    rows = pop.round([1.0, 3.0, 2.0, 0.5], env_steps=1024)
    assert [r["event"] for r in rows] == ["exploit", "explore"]
    exploit_row, explore_row = rows
    assert exploit_row == {"type": "pbt", "event": "exploit", "env_steps": 1024, "member": 3, "from_member": 1,
                           "objective": 0.5, "from_objective": 3.0, "objective_name": "return",
                           "old_hyperparameters": {"algo.epochs": 2.0, "algo.lr": 1e-5},
                           "new_hyperparameters": {"algo.epochs": 5.0, "algo.lr": 1e-4}}
    assert explore_row["old_hyperparameters"] == {"algo.epochs": 5.0, "algo.lr": 1e-4}
    assert explore_row["new_hyperparameters"] == {"algo.epochs": 6.0, "algo.lr": 0.000852962175231496}
    assert pop.members[3].hyperparameters == explore_row["new_hyperparameters"]
    assert pop.members[3].lineage == [(1024, 1)]
    assert [m.lineage for m in pop.members[:3]] == [[], [], []]
    assert pop.next_at == 2000 and not pop.due(1999) and pop.due(2000)


def test_perturbation_is_clamped_to_the_range_and_ties_rank_by_member_index():
    pop = population(resample_probability=0.0, perturb=[1.2])
    for m in pop.members:
        m.hyperparameters = {"algo.epochs": 10.0, "algo.lr": 9e-4}
    rows = pop.round([1.0, 1.0, 1.0, 1.0], env_steps=1000)  # all tied: member 0 top, member 3 bottom
    assert (rows[0]["member"], rows[0]["from_member"]) == (3, 0)
    assert rows[1]["new_hyperparameters"] == {"algo.epochs": 10.0, "algo.lr": 1e-3}  # 12 and 1.08e-3 clamped


def test_half_the_population_exploits_with_fraction_one_half_worst_first():
    pop = population(fraction=0.5, resample_probability=0.0)
    rows = pop.round([4.0, 3.0, 2.0, 1.0], env_steps=1000)
    exploits = [(r["member"], r["from_member"]) for r in rows if r["event"] == "exploit"]
    assert [m for m, _ in exploits] == [3, 2] and all(j in (0, 1) for _, j in exploits)


def test_no_round_until_every_member_has_an_objective():
    pop = population()
    assert pop.round([1.0, None, 2.0, 3.0], env_steps=5000) == []
    assert pop.next_at == 1000 and all(m.lineage == [] for m in pop.members)
    assert pop.round([1.0, 0.0, 2.0, 3.0], env_steps=5000) != []
    assert pop.next_at == 6000


def test_initial_members_member_0_configured_others_resampled_in_range():
    pop = population()
    assert pop.members[0].hyperparameters == {"algo.epochs": 4.0, "algo.lr": 2.5e-4}
    for m in pop.members[1:]:
        assert 1 <= m.hyperparameters["algo.epochs"] <= 10 and float(m.hyperparameters["algo.epochs"]).is_integer()
        assert 1e-5 <= m.hyperparameters["algo.lr"] <= 1e-3
    assert population().state_dict() == pop.state_dict()  # the same seed, the same population


def test_population_state_round_trips_through_json_and_continues_identically():
    a = population(resample_probability=0.5)
    a.round([1.0, 3.0, 2.0, 0.5], env_steps=1000)
    saved = json.loads(json.dumps(a.state_dict()))
    b = population(seed=99, resample_probability=0.5)
    b.load_state_dict(saved)
    assert b.state_dict() == a.state_dict()
    assert b.members[3].lineage == a.members[3].lineage == [(1000, 1)]
    objectives = [0.1, 0.2, 0.3, 0.4]
    assert b.round(objectives, env_steps=2000) == a.round(objectives, env_steps=2000)


def test_restoring_a_population_of_another_size_is_refused_with_the_fix():
    saved = population().state_dict()
    opts = PBTOptions(members=2, hyperparameters=HP)
    other = Population(opts, hyperparameter_ranges(PPOConfig, HP), {"algo.epochs": 4, "algo.lr": 2.5e-4}, 0)
    with pytest.raises(ValueError) as err:
        other.load_state_dict(saved)
    assert str(err.value) == ("the checkpoint's population has 4 members, pbt.members is 2; resume with "
                              "pbt.members=4")


def test_range_resamples_log_uniformly_over_a_decade_or_more():
    assert Range(1e-5, 1e-3).log and not Range(0.0, 1.0).log and not Range(0.1, 0.5).log
    assert Range(1.0, 10.0, integer=True).clamp(6.6) == 7.0


# -- per-env routing ---------------------------------------------------------------------------

def test_members_are_named_policies_and_env_i_acts_with_member_i_mod_p():
    assert member_names("default", 3) == ["default_0", "default_1", "default_2"]
    assert [member_of_env(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


# -- a member trainer applying a decision --------------------------------------------------------

def box_spec():
    obs = {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)}
    return EnvSpec("Toy-v0", ("agent_0",), obs, spaces.Box(-1, 1, (2,), np.float32))


def stepped_ppo(seed):
    algo = PPO(PPOConfig(), box_spec(), seed)
    torch.manual_seed(seed)
    for _ in range(2):  # fill Adam's moments with a loss of the weights
        algo.optimizer.zero_grad()
        sum((p * torch.randn_like(p)).sum() for p in algo.policy.parameters()).backward()
        algo.optimizer.step()
    algo.updates, algo.agent_steps = 10 + seed, 100 + seed
    return algo


def test_exploit_copies_weights_and_optimiser_state_bit_for_bit_and_keeps_own_counters():
    source, member = stepped_ppo(1), stepped_ppo(2)
    assert not all(torch.equal(a, b) for a, b in zip(source.policy.state_dict().values(),
                                                     member.policy.state_dict().values(), strict=True))
    exploit(member, source.state_dict())
    for key, value in source.policy.state_dict().items():
        assert torch.equal(member.policy.state_dict()[key], value), key
    src_opt, got_opt = source.optimizer.state_dict(), member.optimizer.state_dict()
    assert src_opt["state"].keys() == got_opt["state"].keys()
    for k, st in src_opt["state"].items():
        for name, tensor in st.items():
            assert torch.equal(got_opt["state"][k][name], tensor), (k, name)
    assert (member.updates, member.agent_steps) == (12, 102)


def test_set_hyperparameters_sets_the_config_and_the_live_optimiser_lr():
    algo = stepped_ppo(1)
    set_hyperparameters(algo, {"algo.lr": 7.5e-4, "algo.epochs": 6.0})
    assert algo.config.lr == 7.5e-4 and algo.config.epochs == 6 and isinstance(algo.config.epochs, int)
    assert [g["lr"] for g in algo.optimizer.param_groups] == [7.5e-4]
    assert algo.current_lr() == 7.5e-4  # what the next update sets on the optimiser
    with pytest.raises(ValueError) as err:
        set_hyperparameters(algo, {"algo.nope": 1.0})
    assert str(err.value) == "algo.nope: PPOConfig has no option 'nope'"


# -- refusals -----------------------------------------------------------------------------------

def problems(**kw):
    kw.setdefault("members", 4)
    kw.setdefault("hyperparameters", HP)
    return pbt_problems(PBTOptions(**kw), PPOConfig, PPO)


def test_valid_options_and_pbt_off_have_no_problems():
    assert problems() == []
    assert problems(members=0, hyperparameters={}) == []


def test_too_few_members_and_fraction_outside_zero_to_half_are_refused():
    assert problems(members=1) == ["pbt.members must be >= 2 (a population), got 1; set pbt.members=0 to "
                                   "train without PBT"]
    assert problems(fraction=0.6) == ["pbt.fraction must be in (0, 0.5], got 0.6: the bottom and top fractions "
                                      "may not overlap"]
    assert problems(fraction=0.0)[0].startswith("pbt.fraction must be in (0, 0.5], got 0.0")


def test_ranges_outside_the_declared_bound_name_the_option_and_its_bound():
    assert problems(hyperparameters={"algo.gamma": [0.9, 1.5]}) == [
        "pbt.hyperparameters.algo.gamma: 1.5 is outside algo.gamma's declared bound (in [0, 1]); give a range "
        "inside it"]
    assert problems(hyperparameters={"algo.lr": [0.0, 1e-3]}) == [
        "pbt.hyperparameters.algo.lr: 0.0 is outside algo.lr's declared bound (finite and > 0); give a range "
        "inside it"]


def test_declared_bounds_serve_as_the_range_only_when_they_have_two_ends():
    assert hyperparameter_ranges(PPOConfig, {"algo.gamma": []}) == {"algo.gamma": Range(0.0, 1.0)}
    assert problems(hyperparameters={"algo.lr": []}) == [
        "pbt.hyperparameters.algo.lr: algo.lr is declared finite and > 0, which has no upper end; give a range, "
        "algo.lr = [low, high]"]


def test_unknown_names_non_numbers_and_bad_ranges_are_refused_each_in_one_line():
    assert problems(hyperparameters={"algo.lrr": [1e-5, 1e-3], "trainer.batch_samples": [8, 16],
                                     "algo.anneal_lr": [0, 1], "algo.ent_coef": [0.1, 0.01]}) == [
        "pbt.hyperparameters.algo.anneal_lr: algo.anneal_lr is bool, not a number; PBT explores int and float "
        "options only",
        "pbt.hyperparameters.algo.ent_coef must be [low, high] with low < high, got [0.1, 0.01]",
        "pbt.hyperparameters.algo.lrr: PPOConfig has no option 'lrr'; did you mean algo.lr?",
        "pbt.hyperparameters.trainer.batch_samples: PBT explores the algorithm's options; name one as algo.OPTION "
        "(e.g. algo.lr)"]
    assert problems(hyperparameters={"algo.epochs": [1.5, 8]}) == [
        "pbt.hyperparameters.algo.epochs: algo.epochs is an int option; give whole-number ends, got [1.5, 8]"]
    assert problems(hyperparameters={}) == [
        "pbt.hyperparameters is empty: name the algo options to explore, e.g. --set "
        "'pbt.hyperparameters={\"algo.lr\": [1e-5, 1e-3]}'"]


def test_an_objective_no_row_logs_and_an_unknown_policy_are_refused():
    got = problems(objective="retrun", policy="hiders")
    assert got[0] == "pbt.policy names no policy: 'hiders'; policies: default"
    assert got[1].startswith("pbt.objective: no row logs 'retrun'; did you mean 'return'? (logged: ")
    assert "approx_kl" in got[1] and "episode_return_mean" in got[1]
    assert problems(objective="approx_kl") == []


def test_check_pbt_raises_every_problem_at_once():
    with pytest.raises(ConfigError) as err:
        check_pbt(PBTOptions(members=1, fraction=0.75, hyperparameters=HP), PPOConfig, PPO)
    assert len(err.value.problems) == 2 and err.value.field == "pbt"
    assert math.isclose(PBTOptions().fraction, 0.25)


# -- orders from the manager to a member's trainer ---------------------------------------------

def test_an_order_makes_a_member_continue_from_the_source_checkpoint_with_new_hyperparameters(tmp_path):
    from zoo.core.checkpoint import checkpoint_dir, latest_path
    from zoo.core.pbt import MemberOrders, write_order
    from zoo.core.workers.checkpointing import save_checkpoint

    run = str(tmp_path)
    source, member = stepped_ppo(1), stepped_ppo(2)
    os.makedirs(checkpoint_dir(run, "default_1"))
    save_checkpoint(latest_path(run, "default_1"), source, {"version": 3})
    orders = MemberOrders(run, "default_0")
    assert orders.poll() is None  # no order yet
    write_order(run, "default_0", 1, "default_1", {"algo.lr": 4e-4}, env_steps=2048)
    order = orders.poll()
    assert order == {"seq": 1, "from_member": "default_1", "hyperparameters": {"algo.lr": 4e-4}, "env_steps": 2048}
    orders.apply(member, order)
    for key, value in source.policy.state_dict().items():
        assert torch.equal(member.policy.state_dict()[key], value), key
    assert member.optimizer.param_groups[0]["lr"] == 4e-4 and member.config.lr == 4e-4
    assert orders.seq == 1 and orders.poll() is None  # applied once
    assert MemberOrders(run, "default_0", seq=1).poll() is None  # a resumed member does not apply it again


def test_member_objectives_read_each_members_last_update_row(tmp_path):
    from zoo.core.pbt import member_objectives

    rows = [{"type": "update", "policy": "p_0", "episode_return_mean": 10.0, "approx_kl": 0.01},
            {"type": "episode", "policy": "p_1", "return": 99.0},
            {"type": "update", "policy": "p_1", "episode_return_mean": None},
            {"type": "update", "policy": "p_0", "episode_return_mean": 12.5, "approx_kl": 0.02},
            {"type": "update", "policy": "other", "episode_return_mean": 50.0}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"type": "upd')  # a row being appended
    assert member_objectives(str(path), ["p_0", "p_1"], "return") == [12.5, None]
    assert member_objectives(str(path), ["p_0", "p_1"], "approx_kl") == [0.02, None]
    assert member_objectives(str(tmp_path / "none.jsonl"), ["p_0"], "return") == [None]


def test_the_manager_writes_rows_orders_and_state_and_a_new_one_continues_from_them(tmp_path):
    from zoo.core.pbt import POPULATION_FILE, MemberOrders, PopulationManager, member_names

    run = str(tmp_path)
    names = member_names("default", 4)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"type": "update", "policy": n, "episode_return_mean": r}) + "\n"
                               for n, r in zip(names, [1.0, 3.0, 2.0, 0.5], strict=True)))
    manager = PopulationManager(run, population(resample_probability=0.5), names)
    assert manager.tick(999) == [] and not (tmp_path / "pbt").exists()  # not due before 1000 env steps
    rows = manager.tick(1000)
    assert [(r["event"], r["member"], r["from_member"]) for r in rows] == [("exploit", 3, 1), ("explore", 3, 1)]
    written = [json.loads(line) for line in metrics.read_text().splitlines()][4:]
    assert [(r["type"], r["event"], r["member_policy"], r["from_policy"]) for r in written] == [
        ("pbt", "exploit", "default_3", "default_1"), ("pbt", "explore", "default_3", "default_1")]
    order = MemberOrders(run, "default_3").poll()
    assert order is not None and (order["seq"], order["from_member"]) == (1, "default_1")
    assert order["hyperparameters"] == rows[1]["new_hyperparameters"]
    assert MemberOrders(run, "default_0").poll() is None
    resumed = PopulationManager(run, population(seed=42, resample_probability=0.5), names)
    assert resumed.population.state_dict() == manager.population.state_dict()
    assert resumed.seq == [0, 0, 0, 1]
    assert json.loads((tmp_path / POPULATION_FILE).read_text())["seq"] == [0, 0, 0, 1]
    assert resumed.tick(1999) == []  # the next round is at 2000
