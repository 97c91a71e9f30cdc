"""A run's socket folder must leave room for its endpoints' Unix socket paths (107 bytes)."""
from __future__ import annotations

import os

import pytest

from zoo.core.transport import TransportError
from zoo.transports.sockets.rundir import check_socket_dir

RUN_ID = "1-abcdefgh"  # folder name "zoo-1-abcdefgh": 14 bytes


def _base(size: int) -> str:
    """A folder path ``size`` bytes long that does not exist (never created by these tests)."""
    return "/zoo-socket-dir-test-" + "d" * (size - 21)


def test_a_folder_that_leaves_24_bytes_passes_and_one_byte_more_is_refused():
    ok = _base(68)  # 68 + "/" + 14 = 83 bytes; 83 + 24 = 107, the limit
    assert check_socket_dir(RUN_ID, ok) == os.path.join(ok, "zoo-" + RUN_ID)
    long = _base(69)
    with pytest.raises(TransportError) as err:
        check_socket_dir(RUN_ID, long)
    text = str(err.value)
    assert "is 84 bytes long" in text and "107-byte limit" in text
    assert "set base_dir to a folder of at most 68 bytes" in text  # 107 - 24 - 14 - 1


def test_the_temporary_folder_is_named_when_no_base_dir_is_given(monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", _base(80))
    with pytest.raises(TransportError, match=r"set TMPDIR \(the temporary folder\) to a folder of at most 68 bytes"):
        check_socket_dir(RUN_ID)


@pytest.mark.parametrize("name", ["nng", "shm"])
def test_the_controller_side_transport_refuses_a_long_folder_before_creating_it(name):
    from zoo.core.plugins import get_registry

    base = _base(90)
    factory = get_registry().get("transport", name).load()
    with pytest.raises(TransportError, match="passes the 107-byte limit"):
        factory(RUN_ID, create=True, base_dir=base)
    assert not os.path.exists(base)  # nothing made, nothing to clean up
