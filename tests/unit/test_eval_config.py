"""zoo eval's load_evaluation refuses a run whose config.json names no algorithm or env with
one RunError line naming the key (it raised TypeError: 'NoneType' object is not iterable)."""
import json

import pytest

from zoo.evaluate import load_evaluation
from zoo.runinfo import RunError


@pytest.mark.parametrize("config, key, got", [
    ({"env_name": "CartPole-v1"}, "algo_name", "None"),
    ({"algo_name": "ppo", "env_name": 3}, "env_name", "3"),
])
def test_a_config_without_algo_or_env_name_is_refused_naming_the_key(tmp_path, config, key, got):
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest.pt").write_bytes(b"")
    with pytest.raises(RunError) as err:
        load_evaluation(tmp_path)
    assert str(err.value) == (f"run {str(tmp_path)!r} cannot be rebuilt: its config.json has no {key} (a name, got "
                              f"{got}); take the config from a run that zoo train wrote with --run RUN")


def test_a_run_of_named_policies_without_a_policys_checkpoint_is_refused_naming_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"algo_name": "mappo", "env_name": "hide-and-seek",
                                                      "policies": {"hiders": {}, "seekers": {}}}))
    with pytest.raises(RunError) as err:
        load_evaluation(tmp_path)
    own = tmp_path / "checkpoints" / "hiders" / "latest.pt"
    assert str(err.value) == (f"run {str(tmp_path)!r} has no checkpoint of policy hiders yet ({own} does not exist); "
                              "the trainer writes one every trainer.checkpoint_interval updates and at the end, or "
                              "play one with --policy hiders=CHECKPOINT")
