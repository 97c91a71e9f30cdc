"""The plugin host: built-ins and third-party plugins through the same hooks, failure
isolation, strict mode, duplicate and misspelt-hook errors, lazy registration, and the
example third-party package installed with pip.

Anything that needs extra distributions on the path runs in a subprocess whose
PYTHONPATH holds ``tests/plugins/<name>`` (hand-made dist-info) or a ``pip install
--target`` directory, so the main environment is never changed.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import zoo
from zoo.core import plugins as zoo_plugins
from zoo.core.plugins import PluginHost, PluginInfo, PluginLoadError
from zoo.core.registry import Component, DuplicateComponentError, Registry
from zoo.core.testing import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
TEST_PLUGINS = ROOT / "tests" / "plugins"
EXAMPLE = ROOT / "examples" / "zoo-corridor"
HEAVY = ("torch", "ale_py", "mujoco")
HAS_CLI = (ROOT / "zoo" / "cli.py").exists()


def run_py(script: str, *paths: Path | str, **env: str | None) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter with ``paths`` on PYTHONPATH."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=subprocess_env(*paths, PYTHONDONTWRITEBYTECODE="1", **env),
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )


def run_json(script: str, *paths: Path | str, **env: str | None):
    """Run ``script`` (which prints one JSON document last) and parse that output."""
    proc = run_py(script, *paths, **env)
    assert proc.returncode == 0, f"subprocess failed:\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plugin_dir(name: str) -> Path:
    return TEST_PLUGINS / name


@pytest.fixture(scope="module")
def zoo_version() -> str:
    return zoo_plugins._zoo_version()


# -- built-ins go through the same hooks ----------------------------------------------------
def test_builtins_are_plugins_registered_through_the_hooks(zoo_version):
    host = PluginHost(strict=False, entry_points=False)
    gym_module = sys.modules["zoo.plugins.envs.gym.plugin"]
    assert host.plugins["zoo.gym"] == PluginInfo("zoo.gym", "zoo-rl", zoo_version, True, ["register_envs"], None)
    assert host.pm.get_plugin("zoo.gym") is gym_module
    assert [impl.plugin_name for impl in host.pm.hook.register_envs.get_hookimpls() if impl.plugin is gym_module] \
        == ["zoo.gym"]
    gym = host.registry.get("env", "gym")
    assert (gym.kind, gym.name, gym.plugin, gym.distribution, gym.version) \
        == ("env", "gym", "zoo.gym", "zoo-rl", zoo_version)
    assert gym.factory == "zoo.plugins.envs.gym.env:make"  # a path: nothing imported at registration
    local = host.registry.get("launcher", "local")  # the default launcher is a plugin like any other
    assert (local.plugin, local.factory) == ("zoo.local", "zoo.plugins.launchers.local.launcher:LocalLauncher")
    assert host.plugins["zoo.local"].hooks == ["register_launchers"]
    for info in host.plugins.values():
        assert info.builtin and info.distribution == "zoo-rl" and info.name.startswith("zoo.")
        if info.error is None:
            assert info.hooks, f"built-in {info.name} implements no register_* hook"
    for component in host.registry.all():
        assert host.plugins[component.plugin].builtin


def test_loading_is_idempotent():
    names = lambda h: [(c.kind, c.name, c.plugin) for c in h.registry.all()]  # noqa: E731
    first, second = PluginHost(strict=False, entry_points=False), PluginHost(strict=False, entry_points=False)
    assert names(first) == names(second) and ("env", "gym", "zoo.gym") in names(first)
    assert zoo_plugins.get_host() is zoo_plugins.get_host()


# -- the plugin host's API, in process (no distributions needed) ------------------------------
def _plugin(**hooks) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{name: zoo.hookimpl(fn) for name, fn in hooks.items()})


def test_register_plugin_after_construction_collects_its_components():
    host = PluginHost(strict=False, entry_points=False)

    def register_envs(register):
        register("fake-counting", "zoo.core.testing.fake_envs:make_counting", summary="s",
                 config="zoo.core.testing.fake_envs:CountingConfig", aliases="counting")

    host.register_plugin(_plugin(register_envs=register_envs), "mine", "my-dist", "1.2.3", False)
    component = host.registry.get("env", "counting")  # the alias, given as a plain str
    assert (component.name, component.plugin, component.distribution, component.version) \
        == ("fake-counting", "mine", "my-dist", "1.2.3")
    assert host.plugins["mine"] == PluginInfo("mine", "my-dist", "1.2.3", False, ["register_envs"], None)
    env = component.load()(None, component.option("config")(episode_length=2), 0)
    assert env.reset(seed=0)[0]["obs"].tolist() == [[0.0]]
    with pytest.raises(ValueError, match="'mine' is already registered"):
        host.register_plugin(_plugin(), "mine", "my-dist", "1.2.3", False)


def test_a_failing_hook_fails_only_its_plugin_and_registers_none_of_its_components():
    host = PluginHost(strict=False, entry_points=False)

    def register_envs(register):
        register("half-done", "x:y", summary="registered before the crash")
        raise KeyError("oops")

    host.register_plugin(_plugin(register_envs=register_envs), "flaky", "flaky-dist", "0.1", False)
    assert host.plugins["flaky"].error == "KeyError: 'oops'"
    assert host.plugins["flaky"] in host.failures
    assert "half-done" not in host.registry.names("env")
    assert "gym" in host.registry.names("env")


def test_a_failing_hook_is_fatal_in_strict_mode():
    host = PluginHost(strict=False, entry_points=False)
    host.strict = True

    def register_envs(register):
        raise KeyError("oops")

    with pytest.raises(PluginLoadError, match=r"plugin 'flaky' \(flaky-dist 0.1\) failed: KeyError: 'oops'"):
        host.register_plugin(_plugin(register_envs=register_envs), "flaky", "flaky-dist", "0.1", False)


@pytest.mark.parametrize("bad", ["", "a:b", "two words", 3])
def test_bad_component_names_fail_the_plugin(bad):
    host = PluginHost(strict=False, entry_points=False)
    host.register_plugin(_plugin(register_envs=lambda register: register(bad, "x:y")), "bad", "d", "1", False)
    assert host.plugins["bad"].error == (f"ValueError: env name {bad!r} from plugin 'bad' must be a non-empty "
                                         "str without ':' or whitespace")


def test_misspelt_hook_raises_in_process():
    host = PluginHost(strict=False, entry_points=False)
    with pytest.raises(PluginLoadError) as err:
        host.register_plugin(_plugin(register_algorithm=lambda register: None), "typo", "typo-dist", "2.0", False)
    assert str(err.value).startswith(
        "plugin 'typo' (typo-dist 2.0) implements unknown hook 'register_algorithm' "
        "(did you mean 'register_algorithms'?); known hooks: ")


def test_optional_unknown_hook_is_allowed():
    host = PluginHost(strict=False, entry_points=False)
    plugin = types.SimpleNamespace(register_launchers=zoo.hookimpl(optionalhook=True)(lambda register: None))
    host.register_plugin(plugin, "future", "future-dist", "9.0", False)
    assert host.plugins["future"].error is None


def test_hook_with_wrong_arguments_fails_loudly():
    host = PluginHost(strict=False, entry_points=False)
    with pytest.raises(PluginLoadError, match=r"plugin 'args' \(args-dist 1\).*register_envs"):
        host.register_plugin(_plugin(register_envs=lambda reg, extra: None), "args", "args-dist", "1", False)


def test_duplicate_in_process_names_both_plugins_and_distributions(zoo_version):
    host = PluginHost(strict=False, entry_points=False)
    with pytest.raises(DuplicateComponentError) as err:
        host.register_plugin(_plugin(register_envs=lambda register: register("gym", "x:y")),
                             "other", "other-dist", "0.2", False)
    assert str(err.value) == (
        f"env 'gym' is registered by both plugin 'zoo.gym' (zoo-rl {zoo_version}) and plugin 'other' "
        "(other-dist 0.2); uninstall one of them or rename the component")



def _entry_point(name: str, dist: str, version: str, obj) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, dist=types.SimpleNamespace(name=dist, version=version),
                                 load=lambda: obj)


def test_entry_points_with_the_same_name_from_two_distributions_both_load(monkeypatch):
    def make(env_name):
        return _plugin(register_envs=lambda register: register(env_name, "x:y"))

    eps = [_entry_point("shared", "dist-a", "1.0", make("env-a")),
           _entry_point("shared", "dist-a", "1.0", make("env-a-again")),  # the same dist twice on sys.path
           _entry_point("shared", "dist-b", "2.0", make("env-b"))]
    monkeypatch.setattr(zoo_plugins.md, "entry_points", lambda group: eps if group == "zoo.plugins" else [])
    host = PluginHost(strict=False)
    rows = [(p.name, p.distribution, p.version) for p in host.plugins.values() if not p.builtin]
    assert rows == [("shared", "dist-a", "1.0"), ("dist-b.shared", "dist-b", "2.0")]
    assert [(c.name, c.plugin) for c in host.registry.all("env") if c.name.startswith("env-")] \
        == [("env-a", "shared"), ("env-b", "dist-b.shared")]

def test_registry_duplicate_alias_and_unknown_name():
    reg = Registry()
    reg.add(Component("env", "a", "m:f", "", "p1", "1", distribution="d1"), ("alpha",))
    with pytest.raises(DuplicateComponentError, match=r"env 'alpha' is registered by both plugin 'p1' \(d1 1\) "
                                                      r"and plugin 'p2' \(d2 2\)"):
        reg.add(Component("env", "b", "m:f", "", "p2", "2", distribution="d2"), ("alpha",))
    assert reg.names("env") == ["a"]  # nothing of the rejected component was added
    assert reg.get("env", "alpha").name == "a"
    with pytest.raises(LookupError) as err:
        reg.get("env", "alpah")
    assert err.value.suggestions == ["alpha"]
    # one component with one alias: "1 installed" (was "2 installed", the alias counted; `zoo list` shows 1)
    assert str(err.value) == ("unknown env 'alpah'. Did you mean: alpha? Run `zoo list envs` to see all "
                              "(1 installed).")


# -- third-party distributions, in subprocesses -------------------------------------------
LIST_HOST = """
    import json
    from zoo.core.plugins import get_host
    host = get_host()
    print(json.dumps({
        "plugins": {n: vars(p) for n, p in host.plugins.items()},
        "components": [[c.kind, c.name, c.plugin, c.distribution, c.version] for c in host.registry.all()],
    }))
"""


def test_broken_plugin_is_listed_as_failed_and_the_others_keep_working():
    out = run_json(LIST_HOST + """
    from zoo.core.testing import check_env
    gym = host.registry.get("env", "gym")
    env = gym.load()("CartPole-v1", gym.option("config")(), 0)
    report = check_env(env, max_steps=100)
    print(json.dumps({"resolves": gym.option("resolves")("CartPole-v1"), "steps": report.steps > 0}))
    """, plugin_dir("zoo-broken"), ZOO_STRICT_PLUGINS=None)
    assert out == {"resolves": True, "steps": True}
    proc = run_py(LIST_HOST, plugin_dir("zoo-broken"), ZOO_STRICT_PLUGINS="0")
    listing = json.loads(proc.stdout.strip().splitlines()[-1])
    assert listing["plugins"]["broken"] == {
        "name": "broken", "distribution": "zoo-broken", "version": "0.1.0", "builtin": False,
        "hooks": [], "error": "ImportError: missing dep xyz"}
    assert ["env", "gym", "zoo.gym", "zoo-rl"] == listing["components"][
        [c[1] for c in listing["components"]].index("gym")][:4]


def test_strict_mode_fails_naming_the_broken_plugin():
    proc = run_py("""
        from zoo.core.plugins import PluginLoadError, get_host
        try:
            get_host()
        except PluginLoadError as exc:
            print("PluginLoadError:", exc)
            raise SystemExit(3)
    """, plugin_dir("zoo-broken"), ZOO_STRICT_PLUGINS="1")
    assert proc.returncode == 3, proc.stderr
    assert "plugin 'broken' (zoo-broken 0.1.0): ImportError: missing dep xyz" in proc.stdout
    assert "ZOO_STRICT_PLUGINS=1 makes this fatal" in proc.stdout


def test_duplicate_component_name_is_an_error_naming_both_plugins(zoo_version):
    proc = run_py(LIST_HOST, plugin_dir("zoo-dup"), ZOO_STRICT_PLUGINS=None)
    assert proc.returncode != 0
    assert (f"zoo.core.registry.DuplicateComponentError: env 'gym' is registered by both plugin 'zoo.gym' "
            f"(zoo-rl {zoo_version}) and plugin 'dup' (zoo-dup 0.1.0)") in proc.stderr


def test_misspelt_hook_fails_loudly_naming_the_hook():
    proc = run_py(LIST_HOST, plugin_dir("zoo-misspelt"), ZOO_STRICT_PLUGINS=None)
    assert proc.returncode != 0
    assert ("zoo.core.plugins.PluginLoadError: plugin 'misspelt' (zoo-misspelt 0.1.0) implements unknown hook "
            "'register_env' (did you mean 'register_envs'?)") in proc.stderr


def test_boom_plugin_registers_an_env_that_crashes_at_step_5():
    out = run_json(LIST_HOST + """
    import numpy as np
    boom = host.registry.get("env", "boom")
    env = boom.load()(None, boom.option("config")(), 0)
    env.reset(seed=0)
    seen = []
    try:
        for _ in range(10):
            seen.append(float(env.step(np.zeros(1, dtype=np.int64))[0]["obs"][0, 0]))
    except RuntimeError as exc:
        seen.append(repr(exc))
    print(json.dumps(seen))
    """, plugin_dir("zoo-boom"), plugin_dir("zoo-fakes"))
    assert out == [1.0, 2.0, 3.0, 4.0, "RuntimeError('boom')"]


def test_fakes_plugin_and_boom_are_listed_with_their_distributions():
    out = run_json(LIST_HOST, plugin_dir("zoo-boom"), plugin_dir("zoo-fakes"))
    comps = {c[1]: c for c in out["components"]}
    assert comps["boom"] == ["env", "boom", "boom", "zoo-boom", "0.1.0"]
    assert [comps[n] for n in ("fake-counting", "fake-crashing", "fake-slow")] == [
        ["env", n, "fakes", "zoo-fakes", "0.1.0"] for n in ("fake-counting", "fake-crashing", "fake-slow")]
    assert out["plugins"]["boom"]["hooks"] == ["register_envs"]


def test_listing_does_not_import_heavy_libraries():
    out = run_json(LIST_HOST + f"""
    import sys
    rows = [(c.name, c.kind, c.plugin, c.distribution, c.version, c.summary) for c in host.registry.all()]
    print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
    """, plugin_dir("zoo-boom"), plugin_dir("zoo-fakes"), plugin_dir("zoo-broken"), ZOO_STRICT_PLUGINS=None)
    assert out == []


# -- the example third-party package, installed with pip ------------------------------------
@pytest.fixture(scope="module")
def corridor_target(tmp_path_factory) -> Path:
    """``pip install --no-deps --target TMP examples/zoo-corridor`` (from a copy, offline)."""
    pytest.importorskip("setuptools", reason="building the example needs setuptools")
    tmp = tmp_path_factory.mktemp("corridor")
    src, target = tmp / "src", tmp / "site"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--quiet", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    return target


def test_example_installed_with_pip_is_listed_with_its_version(corridor_target):
    out = run_json(LIST_HOST + """
    import sys
    from importlib.metadata import version
    print(json.dumps({"listing": {"plugins": {n: vars(p) for n, p in host.plugins.items()},
                                   "components": [[c.kind, c.name, c.plugin, c.distribution, c.version]
                                                  for c in host.registry.all()]},
                      "version": version("zoo-corridor"),
                      "env_module_imported": "zoo_corridor.env" in sys.modules}))
    """, corridor_target)
    assert out["version"] == "0.3.0"
    assert out["env_module_imported"] is False  # registration is lazy
    assert ["env", "corridor", "corridor", "zoo-corridor", "0.3.0"] in out["listing"]["components"]
    assert out["listing"]["plugins"]["corridor"] == {
        "name": "corridor", "distribution": "zoo-corridor", "version": "0.3.0", "builtin": False,
        "hooks": ["register_envs"], "error": None}


def test_example_tests_fail_loudly_without_the_package_and_pass_with_it(corridor_target, tmp_path):
    # Before: the copied test module skipped itself (importorskip) and pytest exited 0, checking nothing.
    tests = EXAMPLE / "tests"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tests)]
    missing = subprocess.run(args, capture_output=True, text=True, timeout=300, env=subprocess_env(), cwd=tmp_path)
    assert missing.returncode != 0, missing.stdout
    assert 'zoo_corridor is not installed: run pip install -e ".[test]"' in missing.stdout
    installed = subprocess.run(args, capture_output=True, text=True, timeout=300,
                               env=subprocess_env(corridor_target), cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert " passed" in installed.stdout and "skipped" not in installed.stdout


def test_example_env_builds_passes_the_contract_and_has_the_known_optimal_return(corridor_target):
    out = run_json("""
    import json
    import numpy as np
    from zoo.core.plugins import get_registry
    from zoo.core.testing import check_env
    comp = get_registry().get("env", "corridor")
    config = comp.option("config")()
    report = check_env(comp.load()(None, config, 0))
    env = comp.load()("5", config, 0)
    obs, _ = env.reset(seed=0)
    rewards, flags = [], []
    while not flags or not (flags[-1][0] or flags[-1][1]):
        obs, r, term, trunc, _ = env.step(np.array([1]))
        rewards.append(float(r[0])); flags.append((bool(term[0]), bool(trunc[0])))
    from zoo_corridor.env import optimal_return
    print(json.dumps({"episodes": report.episodes, "n": len(rewards), "ret": sum(rewards), "last": flags[-1],
                      "opt": optimal_return(5), "spec": [env.spec.env_id, env.spec.resolved],
                      "budget": comp.option("default_budget"), "obs": obs["obs"].tolist()}))
    """, corridor_target)
    assert out["episodes"] == 2
    assert out["n"] == 4 and out["last"] == [True, False]
    assert out["opt"] == pytest.approx(0.96)
    assert out["ret"] == pytest.approx(0.96, abs=1e-6)
    assert out["spec"] == ["corridor:5", {"length": 5, "max_steps": 100}]
    assert out["budget"] == ["env_steps", 20000]
    assert out["obs"] == [[0.0, 0.0, 0.0, 0.0, 1.0]]


def test_example_packages_own_tests_pass(corridor_target):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        env=subprocess_env(corridor_target, PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True, text=True, timeout=300, cwd=EXAMPLE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout


@pytest.mark.skipif(not HAS_CLI, reason="zoo/cli.py not written yet")
def test_cli_lists_the_installed_example_with_its_version(corridor_target):
    proc = subprocess.run([sys.executable, "-m", "zoo", "list", "envs"],
                          env=subprocess_env(corridor_target, COLUMNS="200", PYTHONDONTWRITEBYTECODE="1"),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next((ln for ln in proc.stdout.splitlines() if "corridor" in ln), "")
    assert "0.3.0" in line, proc.stdout


@pytest.mark.skipif(not HAS_CLI, reason="zoo/cli.py not written yet")
def test_cli_strict_mode_fails_naming_the_broken_plugin():
    proc = subprocess.run([sys.executable, "-m", "zoo", "list"],
                          env=subprocess_env(plugin_dir("zoo-broken"), ZOO_STRICT_PLUGINS="1", COLUMNS="200"),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    assert "broken" in proc.stdout + proc.stderr and "missing dep xyz" in proc.stdout + proc.stderr

