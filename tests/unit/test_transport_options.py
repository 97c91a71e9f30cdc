"""A stream's transport options set in the experiment config: parsed by the transport's
``Options`` types, refused with a message naming the field before anything starts, and
passed to the transport the workers build."""
from __future__ import annotations

import uuid

import pytest

from zoo.core.config import ConfigError, ExperimentConfig, apply_override, load_config_file, validate
from zoo.core.plugins import get_registry
from zoo.core.streams import transport_for, transport_options
from zoo.transports.sockets.engine import default_max_connections


@pytest.fixture(scope="module")
def reg():
    return get_registry()


def cfg_with(*overrides: str) -> ExperimentConfig:
    cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", env_steps=10, name="r")
    for override in overrides:
        apply_override(cfg, override)
    return cfg


def test_set_options_are_typed_by_the_transport(reg):
    cfg = cfg_with("streams.inference.transport=shm", "streams.inference.options.slots=16",
                   "streams.inference.options.slot_bytes=65536", "streams.sample.transport=tcp",
                   "streams.sample.options.host=127.0.0.1", "streams.sample.options.token=s3cret")
    assert cfg.streams.inference.options == {"slots": "16", "slot_bytes": "65536"}  # as given, until checked
    validate(cfg, reg)
    assert transport_options(reg, cfg, "inference") == {"slots": 16, "slot_bytes": 65536}
    assert transport_options(reg, cfg, "sample") == {"host": "127.0.0.1", "token": "s3cret"}
    assert transport_options(reg, cfg, "parameter") == {}
    assert transport_options(reg, cfg, "control") == {}


def test_the_resolved_slot_count_reaches_the_transport(reg, monkeypatch):
    monkeypatch.setenv("ZOO_SHM_SLOTS", "4")  # the config wins over the environment variable
    monkeypatch.setenv("ZOO_SHM_GRANTS", "3")
    cfg = cfg_with("streams.inference.transport=shm", "streams.inference.options.slots=16")
    run_id = f"opts-{uuid.uuid4().hex[:8]}"
    transport = transport_for(reg, cfg, "inference", run_id, create=True)
    try:
        assert (transport.slots, transport.max_lent, transport.slot_bytes) == (16, 3, 1 << 20)
        server = transport.reply_server("inference")
        assert server.ring.slots == 16
        server.close()
    finally:
        transport.cleanup()


def test_tcp_options_reach_the_transport(reg):
    cfg = cfg_with("streams.sample.transport=tcp", "streams.sample.options.token=s3cret",
                   "streams.sample.options.max_frame_bytes=1_000_000")
    transport = transport_for(reg, cfg, "sample", f"opts-{uuid.uuid4().hex[:8]}")
    assert (transport.token, transport.max_frame_bytes, transport.host) == ("s3cret", 1_000_000, "127.0.0.1")


def test_options_from_a_toml_table(reg, tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text('[streams.sample]\ntransport = "shm"\n[streams.sample.options]\nslots = 12\nmax_lent = 3\n')
    from zoo.core.config import apply_mapping

    cfg = cfg_with()
    apply_mapping(cfg, load_config_file(conf), source=f"--config {conf}")
    validate(cfg, reg)
    assert transport_options(reg, cfg, "sample") == {"slots": 12, "max_lent": 3}


def test_an_unknown_option_is_refused_naming_it(reg):
    cfg = cfg_with("streams.inference.transport=shm", "streams.inference.options.slotz=16")
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.field == "streams.inference.options.slotz"
    assert str(info.value) == (
        "streams.inference.options.slotz: transport 'shm' has no option 'slotz'; did you mean 'slots'? "
        "its options: slots, slot_bytes, max_slot_bytes, max_lent, max_frame_bytes, spin_us")


def test_bad_values_are_refused_naming_the_field(reg):
    cfg = cfg_with("streams.inference.transport=shm", "streams.inference.options.slots=many",
                   "streams.sample.transport=shm", "streams.sample.options.max_lent=0")
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.field == "streams.inference.options.slots"
    assert info.value.problems == [
        "streams.inference.options.slots expects an int, got 'many'",
        "streams.sample.options.max_lent must be >= 1, got 0",
    ]


def test_a_slot_larger_than_the_default_largest_slot_is_refused(reg, monkeypatch):
    monkeypatch.delenv("ZOO_SHM_MAX_SLOT_BYTES", raising=False)
    cfg = cfg_with("streams.sample.options.slot_bytes=1000000000000")  # shm by default; max 256 MiB
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.problems == ["streams.sample.options: slot_bytes=1000000000000 exceeds "
                                   "max_slot_bytes=268435456; raise max_slot_bytes or lower slot_bytes"]


def test_an_option_of_another_transport_is_refused_listing_the_right_ones(reg):
    cfg = cfg_with("streams.parameter.transport=nng", "streams.parameter.options.slots=16")
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert str(info.value) == ("streams.parameter.options.slots: transport 'nng' has no option 'slots'; "
                               "its options: spin_us, scheme, host, connect_host, token")


def test_options_of_a_transport_without_options_are_refused():
    from zoo.core.streams import check_options

    class PlainTransport:  # a third-party factory that declares no Options
        pass

    with pytest.raises(ConfigError) as info:
        check_options(PlainTransport, "plain", {"slots": "16"}, "streams.parameter.options")
    assert str(info.value) == ("streams.parameter.options.slots: transport 'plain' has no options; "
                               "remove streams.parameter.options.slots")


@pytest.mark.parametrize("transport", ["shm", "tcp", "nng"])
def test_spin_us_is_checked_and_reaches_every_endpoint(reg, transport):
    cfg = cfg_with(f"streams.sample.transport={transport}", "streams.sample.options.spin_us=-5")
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.problems == ["streams.sample.options.spin_us must be >= 0 (microseconds; 0 disables "
                                   "spinning), got -5"]
    cfg = cfg_with(f"streams.sample.transport={transport}", "streams.sample.options.spin_us=0")
    validate(cfg, reg)
    assert transport_options(reg, cfg, "sample") == {"spin_us": 0}
    tr = transport_for(reg, cfg, "sample", f"spin{uuid.uuid4().hex[:8]}", create=True)
    try:
        puller = tr.puller("sample")
        assert puller._spin.budget_s == 0.0
        puller.close()
    finally:
        tr.cleanup()


def test_options_are_flat_names(reg):
    with pytest.raises(ConfigError, match=r"streams.sample.options is a table of name=value entries: "
                                          r"set streams.sample.options.<name>=value"):
        cfg_with("streams.sample.options.ring.slots=3")


def test_build_config_refuses_before_anything_starts_and_stores_typed_values(reg, tmp_path):
    from zoo.core.config import build_config, config_to_dict

    with pytest.raises(ConfigError, match="streams.sample.options.slotz: transport 'shm' has no option"):
        build_config(reg, "ppo", "CartPole-v1", steps=256, name="r",
                     overrides=["streams.sample.transport=shm", "streams.sample.options.slotz=3"])
    cfg = build_config(reg, "ppo", "CartPole-v1", steps=256, name="r",
                       overrides=["streams.sample.transport=shm", "streams.sample.options.slots=3"])
    assert config_to_dict(cfg)["streams"]["sample"] == {"transport": "shm", "options": {"slots": 3}}


def test_a_bad_environment_variable_is_refused_with_the_config_naming_the_stream(reg, monkeypatch):
    monkeypatch.setenv("ZOO_SHM_SLOTS", "abc")
    cfg = cfg_with("streams.inference.transport=nng", "streams.parameter.transport=nng")  # sample: auto (shm here)
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.problems == ["streams.sample.transport='auto': ZOO_SHM_SLOTS='abc' is not an integer"]


def test_spin_us_in_the_config_wins_over_a_bad_variable_and_control_never_reads_it(reg, monkeypatch):
    monkeypatch.setenv("ZOO_SPIN_US", "abc")
    cfg = cfg_with(*(f"streams.{s}.options.spin_us=0" for s in ("inference", "sample", "parameter")))
    validate(cfg, reg)  # no error: every stream sets spin_us, and the control stream uses 0
    control = transport_for(reg, cfg, "control", "r")
    assert control.spin_us == 0
    with pytest.raises(ConfigError, match=r"^streams.inference.transport='auto': ZOO_SPIN_US='abc' must be an integer"):
        validate(cfg_with("streams.sample.options.spin_us=0", "streams.parameter.options.spin_us=0"), reg)


@pytest.mark.parametrize("transport, extra", [("tcp", ()), ("nng", ("streams.sample.options.scheme=tcp",))])
@pytest.mark.parametrize("option", ["host", "connect_host"])
def test_a_host_that_does_not_resolve_is_refused_before_anything_starts(reg, transport, extra, option):
    # .invalid never resolves (RFC 2606): a listener would crash in its worker, a dialer retry forever.
    cfg = cfg_with(f"streams.sample.transport={transport}", *extra,
                   f"streams.sample.options.{option}=no-such-host.invalid")
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    (problem,) = info.value.problems
    assert problem.startswith(f"streams.sample.transport='{transport}': {option}='no-such-host.invalid' "
                              "does not resolve to an address (")
    assert problem.endswith("); give an IP address or a host name this machine can resolve")


def test_tcp_handshake_timeout_and_connection_cap_reach_every_listener(reg):
    cfg = cfg_with("streams.sample.transport=tcp", "streams.sample.options.handshake_timeout_s=2.5",
                   "streams.sample.options.max_connections=7")
    validate(cfg, reg)
    assert transport_options(reg, cfg, "sample") == {"handshake_timeout_s": 2.5, "max_connections": 7}
    tr = transport_for(reg, cfg, "sample", f"hs{uuid.uuid4().hex[:8]}", create=True)
    try:
        listeners = [tr.puller("a"), tr.reply_server("b"), tr.publisher("c")]
        assert [(e.handshake_timeout_s, e.max_connections) for e in listeners] == [(2.5, 7)] * 3
        for endpoint in listeners:
            endpoint.close()
    finally:
        tr.cleanup()
    tr = transport_for(reg, cfg_with("streams.sample.transport=tcp"), "sample", f"hs{uuid.uuid4().hex[:8]}")
    assert (tr.handshake_timeout_s, tr.max_connections) == (10.0, default_max_connections())  # the defaults


def test_the_default_connection_cap_follows_the_file_descriptor_limit():
    # A quarter of the soft limit (ulimit -n) where that is below 1024, never under 16.
    assert [default_max_connections(n) for n in (20000, 4096, 1024, 40)] == [1024, 1024, 256, 16]


@pytest.mark.parametrize("option, value, problem", [
    ("handshake_timeout_s", "0", "handshake_timeout_s must be > 0 and finite (seconds), got 0.0"),
    ("handshake_timeout_s", "inf", "handshake_timeout_s must be > 0 and finite (seconds), got inf"),
    ("max_connections", "0", "max_connections must be >= 1, got 0"),
    ("token", "x" * 1025, "token must be at most 1024 bytes (it travels in a HELLO of at most 4096), got 1025"),
])
def test_bad_tcp_listener_limits_are_refused_naming_the_option(reg, option, value, problem):
    cfg = cfg_with("streams.sample.transport=tcp", f"streams.sample.options.{option}={value}")
    with pytest.raises(ConfigError) as info:
        validate(cfg, reg)
    assert info.value.field == f"streams.sample.options.{option}"
    assert info.value.problems == [f"streams.sample.options.{problem}"]
