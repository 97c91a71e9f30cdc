"""Signal handling of the controller and the CLI entry point (zoo.core.stopping, zoo.__main__)."""
import os
import signal
import subprocess
import sys

from zoo.core.stopping import StopRequested, checkpoint_on_disk, kept_checkpoint, signals_stop_the_run


def test_sighup_ignored_at_start_stays_ignored_and_sigterm_still_stops():
    # nohup starts the process with SIGHUP ignored: a closed terminal must not stop the run.
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_stop_the_run():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing raised
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                raise AssertionError("SIGTERM did not stop")
            except StopRequested as stop:
                assert stop.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_sighup_stops_when_not_ignored():
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with signals_stop_the_run():
            try:
                os.kill(os.getpid(), signal.SIGHUP)
                raise AssertionError("SIGHUP did not stop")
            except StopRequested as stop:
                assert stop.signum == signal.SIGHUP
    finally:
        signal.signal(signal.SIGHUP, before)


def test_the_entry_point_takes_sigint_back_when_started_with_it_ignored():
    # zoo.__main__.run installs its handler (Python's KeyboardInterrupt + a record) before anything
    # else; `zoo.cli.main` replaced here by a report of the disposition it runs under.
    code = ("import signal, sys, types; import zoo.__main__ as m; import zoo.core.stopping as st; "
            "sys.modules['zoo.cli'] = types.SimpleNamespace(main=lambda: print(signal.getsignal(signal.SIGINT) "
            "is st.ctrl_c_handler)); m.run()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert (out.returncode, out.stdout.strip()) == (0, "True"), out.stderr


def test_stop_all_kills_a_busy_trainer_at_once_when_asked_to_stop_now():
    from tests.unit.fakes import all_beat, beat, make_supervisor

    s, launcher, clock = make_supervisor(stop_timeout_s=600.0)
    all_beat(s)
    polls = []

    def poll(timeout):  # the trainer heartbeats from inside a 600-s update; Ctrl-C again at the 3rd poll
        clock.t += 1.0
        polls.append(clock.t)
        beat(s, "trainer", 0, busy="update", busy_s=float(len(polls)))

    told = []
    assert s.stop_all(poll, told.append, now=lambda: len(polls) >= 3) is True
    assert len(polls) == 3 and told == []  # no further wait once asked to stop now
    assert [h.calls for h in launcher.handles] == [["stop", "kill"], ["stop", "kill"], ["stop", "kill"],
                                                   ["stop", "kill"]]
    assert launcher.closed


def test_stop_all_without_stop_now_reports_no_abandon():
    from tests.unit.fakes import all_beat, make_supervisor

    s, launcher, clock = make_supervisor()
    all_beat(s)
    s.workers[("trainer", 0)].handle.code = 0  # finished by itself
    assert s.stop_all(lambda timeout: None, lambda limit_s: None, now=lambda: False) is False


def test_a_run_without_a_checkpoint_is_worded_for_both_ctrl_c_messages(tmp_path):
    # Before: "Ctrl-C again to stop now (keeps no checkpoint (none written yet))" and, after the second
    # Ctrl-C, "kept the last no checkpoint (none written yet)".
    assert f"Ctrl-C again to stop now (keeps {checkpoint_on_disk(str(tmp_path))})" == (
        "Ctrl-C again to stop now (keeps no checkpoint: none written yet)")
    assert kept_checkpoint(str(tmp_path)) == "kept no checkpoint: none written yet"


def test_a_run_with_a_checkpoint_keeps_the_last_one(tmp_path):
    import torch

    (tmp_path / "checkpoints").mkdir()
    torch.save({"policy_version": 3, "env_steps": 1280}, tmp_path / "checkpoints" / "latest.pt")
    path = tmp_path / "checkpoints" / "latest.pt"
    assert kept_checkpoint(str(tmp_path)) == f"kept the last checkpoint {path} (policy version 3, 1,280 env steps)"


def test_a_run_with_named_policies_names_each_policys_checkpoint(tmp_path):
    """Named policies checkpoint under checkpoints/<policy>/ (the message read only
    checkpoints/latest.pt and said "none written yet"); a frozen policy has none to keep."""
    import json

    import torch

    (tmp_path / "config.json").write_text(json.dumps(
        {"policies": {"lead": {"algo": "mappo"}, "rest": {}, "fixed": {"trainable": False}}}))
    (tmp_path / "checkpoints" / "lead").mkdir(parents=True)
    lead = tmp_path / "checkpoints" / "lead" / "latest.pt"
    torch.save({"policy_version": 4, "env_steps": 2048}, lead)
    assert kept_checkpoint(str(tmp_path)) == (
        f"kept the last checkpoint of each policy: policy lead: checkpoint {lead} (policy version 4, 2,048 env "
        "steps); policy rest: no checkpoint: none written yet")
