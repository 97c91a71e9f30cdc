"""`zoo train --config` with named policies, end to end (docs/policies.md): two policies on
mpe2's simple_spread_v3 by agent name both update, each with its own checkpoint folder and
per-policy returns; then one of them frozen at the first run's weights serves them unchanged."""
from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import finish, leftovers, marked_processes, read_metrics, start, zoo
from zoo.runinfo import run_info

pytestmark = pytest.mark.integration

ENV = "pettingzoo:mpe2.simple_spread_v3"
TEAMS = """
sample_length = 25
[actors]
count = 1
envs_per_actor = 4
ring_size = 2
[trainer]
batch_samples = 8
[policies.lead]
algo = "mappo"
{lead}
[policies.rest]
algo_name = "mappo"
algo.epochs = 2
[[agents]]
match = "agent_0"
policy = "lead"
[[agents]]
match = "*"
policy = "rest"
"""


def _train(tmp_path, name, lead, steps, mark):
    config = tmp_path / f"{name}.toml"
    config.write_text(TEAMS.format(lead=lead))
    proc = start("train", "mappo", "--env", ENV, "--config", str(config), "--steps", str(steps), "--name", name,
                 "--set", f"runs_dir={tmp_path / 'runs'}", env=subprocess_env(ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    return tmp_path / "runs" / name, out


def test_two_policies_train_by_agent_name_and_a_frozen_one_serves_its_weights_unchanged(tmp_path):
    mark = uuid.uuid4().hex
    run, out = _train(tmp_path, "teams", "", 600, mark)
    assert "policies lead (1 agent, 1 policy worker, 1 trainer), rest (2 agents, 1 policy worker, 1 trainer)" in out
    assert "checkpoints/lead/latest.pt, checkpoints/rest/latest.pt" in out
    rows = read_metrics(run)
    for policy in ("lead", "rest"):
        updates = [r for r in rows if r["type"] == "update" and r.get("policy") == policy]
        assert [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1)) and updates
        ends = [r for r in rows if r["type"] == "end" and r.get("policy") == policy]
        assert len(ends) == 1 and ends[0]["env_steps"] >= 600
        assert (run / "checkpoints" / policy / "latest.pt").is_file()
    assert not (run / "checkpoints" / "latest.pt").exists()
    episodes = [r for r in rows if r["type"] == "episode"]
    assert episodes and all({"return", "lead_return", "rest_return"} <= set(e) for e in episodes)
    graph = json.loads((run / "graph.json").read_text())
    assert graph["counts"] == {"trainer": 2, "policy": 2, "actor": 1, "eval": 0, "pbt": 0}
    assert graph["policies"]["rest"]["agents"] == ["agent_1", "agent_2"]
    actor = next(w for w in graph["workers"] if w["role"] == "actor")
    assert (actor["requests"], actor["pushes"]) == ({"lead": "inference-lead-0", "rest": "inference-rest-0"},
                                                    {"lead": "sample-lead-0", "rest": "sample-rest-0"})
    saved = json.loads((run / "config.json").read_text())
    assert list(saved["policies"]) == ["lead", "rest"] and saved["policies"]["rest"]["algo"]["epochs"] == 2
    # the display (plain: stdout is a pipe), live.json and zoo runs: one row per policy
    ends = {r["policy"]: r for r in rows if r["type"] == "end"}
    status = json.loads((run / "live.json").read_text())["status"]
    assert list(status["policies"]) == ["lead", "rest"] and "policy_version" not in status
    assert {p: e["policy_version"] for p, e in status["policies"].items()} == {
        p: ends[p]["policy_version"] for p in ("lead", "rest")}
    lines = out.splitlines()
    assert any(line.startswith("policy lead: version=") for line in lines), out
    assert any(line.startswith("policy rest: version=") for line in lines), out
    for p in ("lead", "rest"):  # each policy's own version and trained env steps, from its end row
        assert (f"{p} version={ends[p]['policy_version']} trained={ends[p]['trained_env_steps']:,} return="
                in lines[-1]), lines[-1]
    # the run's env steps: the most any policy received, on the done line and in zoo runs alike
    most = max(ends[p]["env_steps"] for p in ("lead", "rest"))
    assert lines[-1].startswith(f"done: {most:,} env steps ({most:,} frames) in "), lines[-1]
    assert run_info(run).env_steps == most
    info = run_info(run)
    assert [(p.name, p.trainable, p.version, p.env_steps) for p in info.policies] == [
        (p, True, ends[p]["policy_version"], ends[p]["env_steps"]) for p in ("lead", "rest")]

    # lead frozen at the first run's weights (a run folder: its policy of the same name)
    weights = run / "checkpoints" / "lead" / "latest.pt"
    before = hashlib.sha256(weights.read_bytes()).hexdigest()
    frozen, out = _train(tmp_path, "frozen", f'trainable = false\nweights = "{run}"', 300, mark)
    assert "lead (1 agent, 1 policy worker, frozen)" in out
    rows = read_metrics(frozen)
    assert {r.get("policy") for r in rows if r["type"] in ("update", "end")} == {"rest"}
    assert [r for r in rows if r["type"] == "update"]
    assert not (frozen / "checkpoints" / "lead").exists() and (frozen / "checkpoints" / "rest" / "latest.pt").is_file()
    assert json.loads((frozen / "live.json").read_text())["status"]["policies"]["lead"]["frozen"] is True
    assert any(line.startswith("policy lead: frozen") for line in out.splitlines()), out
    assert [(p.name, p.trainable, p.version) for p in run_info(frozen).policies][0] == ("lead", False, None)
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == before
    graph = json.loads((frozen / "graph.json").read_text())
    lead = graph["policies"]["lead"]
    assert (lead["weights"], lead["trainers"], lead["trainable"]) == (str(weights.resolve()), [], False)
    served = next(w for w in graph["workers"] if w["role"] == "policy" and w["policy"] == "lead")
    assert served["loads"] == str(weights.resolve()) and "subscribes" not in served
    actor = next(w for w in graph["workers"] if w["role"] == "actor")
    assert actor["pushes"] == {"rest": "sample-rest-0"}
    assert [p.name for p in (tmp_path / "runs").iterdir()] and marked_processes(mark) == []


ADVERSARY = """
sample_length = 25
[actors]
count = 1
envs_per_actor = 4
ring_size = 2
[trainer]
batch_samples = 8
[policies.adversary]
algo = "mappo"
[policies.good]
algo = "mappo"
[[agents]]
match = "adversary_*"
policy = "adversary"
[[agents]]
match = "agent_*"
policy = "good"
"""


def test_teams_whose_observations_differ_each_train_their_own_network(tmp_path):
    """simple_adversary_v3: the adversary sees 8 numbers, the good agents 10 (PaddedSpaces)."""
    mark = uuid.uuid4().hex
    config = tmp_path / "adv.toml"
    config.write_text(ADVERSARY)
    proc = start("train", "mappo", "--env", "pettingzoo:mpe2.simple_adversary_v3", "--config", str(config),
                 "--steps", "300", "--name", "adv", "--set", f"runs_dir={tmp_path}",
                 env=subprocess_env(ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    run = tmp_path / "adv"
    rows = read_metrics(run)
    assert {r["policy"] for r in rows if r["type"] == "update"} == {"adversary", "good"}
    episodes = [r for r in rows if r["type"] == "episode"]
    assert episodes and all({"adversary_return", "good_return"} <= set(e) for e in episodes)
    saved = json.loads((run / "config.json").read_text())
    assert saved["env"]["mixed_spaces"] is True
    spaces = saved["env_spec"]["agent_spaces"]
    assert spaces["adversary_0"]["observation_space"]["obs"] == "Box(-inf, inf, (8,), float32)"
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []

    # zoo eval: each policy plays its agents with its own network (observations of 8 and 10 numbers)
    out = tmp_path / "adv.jsonl"
    result = zoo("eval", str(run), "-n", "2", "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        agents = row["agent_returns"]
        assert row["policy_returns"] == {"adversary": agents["adversary_0"],
                                         "good": (agents["agent_0"] + agents["agent_1"]) / 2}
    assert "policy adversary return  " in result.stdout and "policy good return  " in result.stdout
    adversary = run / "checkpoints" / "adversary" / "latest.pt"
    result = zoo("eval", str(run), "--policy", f"good={adversary}", timeout=600)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: --policy good={adversary}: {str(adversary)!r} does not fit policy good "
                                    "(mappo for agents agent_0, agent_1): Error(s) in loading state_dict"), \
        result.stderr


def test_a_team_frozen_at_its_initial_weights_plays_them_and_zoo_eval_plays_the_same(tmp_path):
    """weights = "init" (docs/policies.md): the good team keeps the seeded weights it would start
    from; its policy worker builds them, nothing trains it (benchmarks/two_teams.py's baseline)."""
    import torch

    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry
    from zoo.core.policies import policy_view
    from zoo.core.workers.trainer import initial_policy_state
    from zoo.evaluate import load_evaluation

    mark = uuid.uuid4().hex
    config = tmp_path / "init.toml"
    config.write_text(ADVERSARY.replace('[policies.good]\nalgo = "mappo"\n',
                                        '[policies.good]\nalgo = "mappo"\ntrainable = false\nweights = "init"\n'))
    proc = start("train", "mappo", "--env", "pettingzoo:mpe2.simple_adversary_v3", "--config", str(config),
                 "--steps", "300", "--seed", "4", "--name", "init", "--set", f"runs_dir={tmp_path}",
                 env=subprocess_env(ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    run = tmp_path / "init"
    assert "good (2 agents, 1 policy worker, frozen)" in out
    rows = read_metrics(run)
    assert {r["policy"] for r in rows if r["type"] in ("update", "end")} == {"adversary"}
    assert all("good_return" in r for r in rows if r["type"] == "episode")
    assert json.loads((run / "config.json").read_text())["policies"]["good"]["weights"] == "init"
    graph = json.loads((run / "graph.json").read_text())
    served = next(w for w in graph["workers"] if w["role"] == "policy" and w["policy"] == "good")
    assert served["loads"] == "init" and not (run / "checkpoints" / "good").exists()
    status = json.loads((run / "live.json").read_text())["status"]
    assert status["policies"]["good"]["frozen"] is True and status["policies"]["good"]["policy_version"] == 0
    # zoo eval plays the same initial weights: those a trainable good of this run (seed 4) starts from
    ev = load_evaluation(run)
    good = next(s for s in ev.seats if s.name == "good")
    assert good.checkpoint is None and good.counters == {"policy_version": 0}

    registry = get_registry()
    (tmp_path / "trainable.toml").write_text(ADVERSARY)  # the same run with the good team trainable
    trainable = build_config(registry, "mappo", "pettingzoo:mpe2.simple_adversary_v3", seed=4, name="x", steps=300,
                             config_file=tmp_path / "trainable.toml", overrides=[f"runs_dir={tmp_path}"])
    view = policy_view(trainable, trainable.policies, "good")
    start_weights = initial_policy_state(registry, view, view.spec, "good")
    mine = good.policy.state_dict()
    assert [k for k in start_weights if not torch.equal(mine[k], start_weights[k])] == []


SPEAKER_LISTENER = """
sample_length = 25
[actors]
count = 1
envs_per_actor = 4
ring_size = 2
[trainer]
batch_samples = 8
[policies.speaker]
algo = "mappo"
[policies.listener]
algo = "mappo"
[[agents]]
match = "speaker_*"
policy = "speaker"
[[agents]]
match = "listener_*"
policy = "listener"
"""


def test_agents_whose_action_spaces_differ_each_act_and_train_with_their_own_policy(tmp_path):
    """simple_speaker_listener_v4: the speaker says Discrete(3) seeing 3 numbers, the listener
    moves with Discrete(5) seeing 11; one policy each, and one policy for both is refused."""
    import torch

    one = tmp_path / "one.toml"
    one.write_text('[policies.both]\nalgo = "mappo"\n')
    result = zoo("train", "mappo", "--env", "pettingzoo:mpe2.simple_speaker_listener_v4", "--config", str(one),
                 "--steps", "1000", "--set", f"runs_dir={tmp_path}", timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "error: policies.both: its agents (speaker_0, listener_0) must share one observation and one action space "
        "(one network acts for all of them), but agents 'speaker_0' and 'listener_0' of env "
        "'mpe2.simple_speaker_listener_v4' have different spaces: observation 'obs' Box(3,) float32 (speaker_0) vs "
        "Box(11,) float32 (listener_0); action space Discrete(3) (speaker_0) vs Discrete(5) (listener_0); map agents "
        "with different spaces to different policies"), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.toml"]

    mark = uuid.uuid4().hex
    config = tmp_path / "sl.toml"
    config.write_text(SPEAKER_LISTENER)
    proc = start("train", "mappo", "--env", "pettingzoo:mpe2.simple_speaker_listener_v4", "--config", str(config),
                 "--steps", "300", "--name", "sl", "--set", f"runs_dir={tmp_path}",
                 env=subprocess_env(ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    run = tmp_path / "sl"
    rows = read_metrics(run)
    for policy in ("speaker", "listener"):
        updates = [r for r in rows if r["type"] == "update" and r.get("policy") == policy]
        assert updates and updates[-1]["policy_version"] >= 1, (policy, updates)
    saved = json.loads((run / "config.json").read_text())
    spaces = saved["env_spec"]["agent_spaces"]
    assert (spaces["speaker_0"]["action_space"], spaces["listener_0"]["action_space"]) == ("Discrete(3)", "Discrete(5)")
    for policy, n_actions, n_obs in (("speaker", 3, 3), ("listener", 5, 11)):
        ckpt = torch.load(run / "checkpoints" / policy / "latest.pt", map_location="cpu", weights_only=False)
        state = ckpt["algorithm"]["policy"]
        assert tuple(state["actor_out.weight"].shape) == (n_actions, 64) and ckpt["updates"] >= 1
        assert tuple(state["actor_encoder.mlp.0.weight"].shape) == (64, n_obs)

    # zoo eval: each policy plays its agent with its own action space
    out = tmp_path / "sl.jsonl"
    result = zoo("eval", str(run), "-n", "2", "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(set(r["policy_returns"]) == {"speaker", "listener"} for r in rows)


def test_eval_swaps_one_policy_and_plot_draws_one(tmp_path):
    """`zoo eval --policy lead=CHECKPOINT` plays rest's weights for lead; `zoo plot --policy lead`."""
    mark = uuid.uuid4().hex
    run, _ = _train(tmp_path, "teams", "", 300, mark)
    rest = run / "checkpoints" / "rest" / "latest.pt"
    out = tmp_path / "eval.jsonl"
    result = zoo("eval", str(run), "-n", "2", "--policy", f"lead={rest}", "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"lead (agent_0): {rest.resolve()} (" in result.stdout and "from --policy" in result.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["checkpoints"] for r in rows] == [{"lead": str(rest.resolve()), "rest": str(rest)}] * 2
    assert all(r["policy_returns"]["lead"] == r["agent_returns"]["agent_0"] for r in rows)
    result = zoo("eval", str(run), "--policy", "leader=x.pt", timeout=600)
    assert result.returncode == 2 and result.stderr.strip() == (
        f"error: --policy leader=x.pt: run {str(run)!r} has no policy 'leader'; it names policies lead, rest: give "
        "--policy lead=CHECKPOINT"), result.stderr
    png = tmp_path / "lead.png"
    result = zoo("plot", str(run), "--policy", "lead", "--out", str(png), timeout=600)
    assert result.returncode == 0 and png.read_bytes()[:4] == b"\x89PNG", result.stderr
    result = zoo("plot", str(run), "--policy", "leader", "--out", str(png), timeout=600)
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: --policy leader: run 'teams' has no policy 'leader'; its policies: lead, rest"), result.stderr
    assert marked_processes(mark) == []
