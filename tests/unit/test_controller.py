"""Controller bookkeeping that needs no worker processes."""
import os
import signal

from zoo.core.controller import Controller, _ignoring_stop_signals


def supervisor(trainer_exit, errors=()):
    from tests.unit.fakes import make_supervisor

    s, launcher, _ = make_supervisor()
    s.workers[("trainer", 0)].handle.code = trainer_exit
    for role, index in errors:
        s.on_message({"type": "error", "role": role, "index": index, "traceback": "Traceback ..."})
    return s


def test_a_trainer_that_exited_0_ends_the_run_even_without_its_done_message():
    # The trainer's `done` control message can be lost (nng drops what is queued when the
    # sender closes at once): its exit code 0 alone must end the run, not a hang.
    assert supervisor(trainer_exit=0).trainer_finished() is True
    assert supervisor(trainer_exit=None).trainer_finished() is False
    assert supervisor(trainer_exit=1).trainer_finished() is False
    assert supervisor(trainer_exit=0, errors=[("trainer", 0)]).trainer_finished() is False
    crash = supervisor(trainer_exit=1, errors=[("trainer", 0)]).crashed()
    assert (crash.role, crash.index, crash.detail) == ("trainer", 0, "Traceback ...")


def test_ctrl_c_cannot_interrupt_the_clean_up_block_and_the_handler_comes_back():
    before = signal.getsignal(signal.SIGINT)
    before_term = signal.getsignal(signal.SIGTERM)
    with _ignoring_stop_signals():
        os.kill(os.getpid(), signal.SIGINT)  # ignored: no KeyboardInterrupt here
        os.kill(os.getpid(), signal.SIGTERM)  # ignored too (it would end this process)
        inside = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    assert inside == (signal.SIG_IGN, signal.SIG_IGN, signal.SIG_IGN)
    assert signal.getsignal(signal.SIGINT) is before and signal.getsignal(signal.SIGTERM) is before_term


def test_a_transport_that_refuses_its_settings_leaves_no_run_directory(tmp_path, monkeypatch):
    import shutil
    import tempfile

    import pytest

    from zoo.core.config import ExperimentConfig, apply_override
    from zoo.core.transport import TransportError

    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=10, name="r")
    apply_override(cfg, "streams.inference.transport=nng")  # built first, then removed again
    apply_override(cfg, "streams.sample.transport=shm")
    monkeypatch.setenv("ZOO_SHM_SLOTS", "many")
    # the streams' folder (zoo-<run id>) goes under a temporary folder of this test's own: a glob of
    # zoo-* in the shared /tmp also saw other runs' folders come and go (failed beside another suite)
    private = tempfile.mkdtemp(prefix="zt-", dir="/tmp")  # short: nng's ipc paths have a length limit
    monkeypatch.setattr(tempfile, "tempdir", private)
    try:
        with pytest.raises(TransportError, match=r"^ZOO_SHM_SLOTS='many' is not an integer$"):
            Controller(cfg, None, str(tmp_path))
        assert os.listdir(private) == []
    finally:
        monkeypatch.undo()
        shutil.rmtree(private, ignore_errors=True)


def test_a_status_is_shown_once_with_the_rate_between_step_counts():
    from zoo.core.controller import StatusPacer

    pacer = StatusPacer(interval_s=5.0, frame_skip=4)
    assert pacer.due(0.0) is None  # nothing came yet
    pacer.offer({"env_steps": 1000})
    first = pacer.due(10.0)
    assert first == {"env_steps": 1000}  # no rate before a second step count
    assert pacer.due(16.0) is None  # nothing new: no repeated line
    pacer.offer({"env_steps": 1000})  # a status without progress
    assert pacer.due(17.0) == {"env_steps": 1000}  # shown, but no rate of 0
    pacer.offer({"env_steps": 3000})
    assert pacer.due(21.0) is None  # only 4 s after the last line
    # 2000 env steps since the first count of 1000 (at 10 s) over 20 s; x 4 frames per env step
    assert pacer.due(30.0) == {"env_steps": 3000, "env_steps_per_s": 100.0, "frames_per_s": 400.0}
    pacer.offer({"env_steps": 3500})  # the final status, 1 s later: shown at once, with the last rate, not 500/s
    assert pacer.due(31.0, done=True) == {"env_steps": 3500, "env_steps_per_s": 100.0, "frames_per_s": 400.0}
    pacer.offer({"env_steps": 3600})
    # the window is 30 s and no shown count is that old at 36 s: since the oldest, 1000 at 10 s: 2600 / 26 s
    assert pacer.due(36.0) == {"env_steps": 3600, "env_steps_per_s": 100.0, "frames_per_s": 400.0}
    pacer.offer({"env_steps": 9000})
    # at 60 s the newest count at least 30 s old is 3000 at 30 s: 6000 / 30 s
    assert pacer.due(60.0) == {"env_steps": 9000, "env_steps_per_s": 200.0, "frames_per_s": 800.0}
    assert [p[:2] for p in pacer.points] == [(30.0, 3000), (36.0, 3600), (60.0, 9000)]  # older ones dropped


def test_the_rate_of_whole_updates_is_not_quantised_by_the_interval():
    """Pong: 1,024 env steps per update every 2.5 s, statuses shown every 5 s. Over one interval
    the rate read 2 updates (409.6) or, when a status came just before an update landed, 1
    (204.8); over the 30 s window it stays near the true 409.6."""
    from zoo.core.controller import StatusPacer

    pacer = StatusPacer(interval_s=5.0, frame_skip=4)
    rates = []
    for k in range(2, 26):  # statuses at 5 s, 10 s, ... 120 s, but the one at 40 s saw an update late
        now = 5.0 * k
        updates = int(now // 2.5) - (1 if now == 40.0 else 0)
        pacer.offer({"env_steps": 1024 * updates})
        rates.append(pacer.due(now).get("env_steps_per_s"))
    # at 45 s: 18 updates since 10 s (4 updates): 14,336 / 35 s = 409.6; at 40 s: 15 - 4 = 11 updates / 30 s
    assert rates[:2] == [None, 409.6] and rates[6] == 11 * 1024 / 30 and rates[7] == 409.6
    # the late update moves the rate by one update over the window (1,024 / 30 s) each way, never more:
    # over one 5 s interval it moved by one update over 5 s (204.8: 204.8 and 614.4 against 409.6)
    assert all(abs(r - 409.6) <= 1024 / 30 + 1e-9 for r in rates[1:])
    assert max(rates[1:]) == 13 * 1024 / 30 and min(rates[1:]) == 11 * 1024 / 30  # 443.7 and 375.5


def test_a_run_whose_launch_fails_says_so_in_status_json(tmp_path, monkeypatch):
    import json

    import pytest

    from zoo.core import controller
    from zoo.core.config import ExperimentConfig
    from zoo.core.launcher import LaunchError

    def failing(error):
        def init(self, *args):
            raise error
        return init

    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=10, name="r")
    monkeypatch.setattr(Controller, "__init__", failing(RuntimeError("placement group removed\nmore")))
    with pytest.raises(RuntimeError):
        controller.run(cfg, None, print, str(tmp_path))
    status = json.loads((tmp_path / "status.json").read_text())
    assert (status["status"], status["exit_code"], status["reason"]) == (
        "crashed", 1, "the launch failed: RuntimeError: placement group removed")
    # a refusal of a new run writes nothing: the CLI removes its folder
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.setattr(Controller, "__init__", failing(LaunchError("too small")))
    with pytest.raises(LaunchError):
        controller.run(cfg, None, print, str(fresh))
    assert not (fresh / "status.json").exists()
    # ... nor of a resumed run: its status.json stays as it was (nothing ran)
    before = (tmp_path / "status.json").read_bytes()
    with pytest.raises(LaunchError):
        controller.run(cfg, None, print, str(tmp_path))
    assert (tmp_path / "status.json").read_bytes() == before


def test_a_ctrl_c_swallowed_while_the_workers_start_still_stops_the_run(tmp_path, monkeypatch):
    """Seen under load (test_interrupt[workers-starting]): a Ctrl-C that landed while ``zoo train``
    started its workers was lost, and the run went on to its budget and exit 0. zoo's handlers
    record every stop signal; the controller's loop raises a recorded one it never saw."""
    import json
    import types

    from zoo.core import controller
    from zoo.core.config import ExperimentConfig
    from zoo.core.stopping import RECEIVED, ctrl_c_handler

    calls = []

    class Swallowing:
        """A controller whose worker start swallows the KeyboardInterrupt of a Ctrl-C, as code it
        interrupts may; its workers never finish (the run would otherwise go on to its budget)."""

        def __init__(self, cfg, spec, run_dir):
            self.graph = types.SimpleNamespace(workers=lambda: [("trainer", 0)])
            self.graph_file = types.SimpleNamespace(complete=lambda handles: None)
            self.supervisor = types.SimpleNamespace(handles={})

        def start(self):
            try:
                ctrl_c_handler(signal.SIGINT, None)  # Ctrl-C now, inside the start...
            except KeyboardInterrupt:
                calls.append("swallowed")  # ...lost in it

        def done_policies(self):
            return {""}

        def poll(self, timeout):
            calls.append("poll")
            assert calls.count("poll") < 50, "the recorded Ctrl-C was never raised"
            return []

        def trainer_finished(self):
            return False

        def supervise(self):
            return []

        def restore_restart_rows(self):
            pass

        def stop(self, now=None):
            calls.append("stop")
            return False

    monkeypatch.setattr(controller, "Controller", Swallowing)
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=10, name="r")
    spec = types.SimpleNamespace(frame_skip=1)
    try:
        code = controller.run(cfg, spec, lambda status: None, str(tmp_path))
    finally:
        RECEIVED.clear()
    assert code == 130
    assert set(calls) == {"swallowed", "stop"} and calls[0] == "swallowed"  # raised before the first poll
    status = json.loads((tmp_path / "status.json").read_text())
    assert (status["status"], status["exit_code"], status["reason"]) == ("stopped", 130, "Ctrl-C")


def test_a_lost_sigterm_is_raised_as_sigterm():
    import pytest

    from zoo.core.stopping import RECEIVED, STOPS, StopRequested, raise_lost_stop

    raise_lost_stop()  # nothing received: nothing raised
    RECEIVED.append(signal.SIGTERM)
    try:
        with pytest.raises(StopRequested) as stop:
            raise_lost_stop()
    finally:
        RECEIVED.clear()
    assert STOPS[stop.value.signum] == ("SIGTERM", 143)


def test_a_run_whose_done_message_was_lost_takes_its_stop_reason_from_the_end_row(tmp_path, monkeypatch):
    """Seen under load (test_train's PPO CartPole with stop_when): the trainer exited 0 before the
    controller read its ``done`` message, and status.json said "budget reached" although
    stop_when had ended the run, so `zoo train` printed no "stopped early" line."""
    import json
    import types

    from zoo.core import controller
    from zoo.core.config import ExperimentConfig

    reason = "stop_when 'mean_return >= 450' held: 464.7 over the last 20 episodes at 17,662 env steps"
    rows = [{"type": "end", "env_steps": 5000},  # an earlier segment, ended by its budget
            {"type": "update", "env_steps": 17664},
            {"type": "end", "env_steps": 17664, "stop_when": "mean_return >= 450", "stop_value": 464.7,
             "reason": reason}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    class LostDone:
        """The trainer has exited 0; its done message never arrives."""

        def __init__(self, cfg, spec, run_dir):
            self.graph = types.SimpleNamespace(workers=lambda: [("trainer", 0)])
            self.graph_file = types.SimpleNamespace(complete=lambda handles: None)
            self.supervisor = types.SimpleNamespace(handles={})

        def start(self):
            pass

        def done_policies(self):
            return {""}

        def poll(self, timeout):
            return []

        def trainer_finished(self):
            return True

        def stop(self, now=None):
            return False

    monkeypatch.setattr(controller, "Controller", LostDone)
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=10, name="r")
    assert controller.run(cfg, types.SimpleNamespace(frame_skip=1), lambda status: None, str(tmp_path)) == 0
    status = json.loads((tmp_path / "status.json").read_text())
    assert (status["status"], status["exit_code"], status["reason"]) == ("finished", 0, reason)
