"""Wire format: byte-exact round trips and rejection of bad frames."""
import json
import struct

import numpy as np
import pytest

from zoo.core.arrays import ALLOWED_DTYPES, WireError
from zoo.core.arrays import concat, decode, encode, flatten, unflatten


def test_round_trip_nested_every_dtype_byte_exact():
    rng = np.random.default_rng(0)
    bundle = {"obs": {"image": rng.integers(0, 255, (64, 4, 84, 84), dtype=np.uint8),
                      "vec": rng.standard_normal((3, 5)).astype(np.float32)},
              "scalar": np.array(7, np.int64),
              "empty": np.zeros((0, 3), np.float32),
              "noncontig": np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2]}
    for dt in sorted(ALLOWED_DTYPES):
        bundle[f"d_{dt}"] = (np.arange(6) % 2).astype(dt).reshape(2, 3)
    decoded, meta = decode(encode(bundle, {"request_id": 3, "name": "x"}))
    assert meta == {"request_id": 3, "name": "x"}
    flat_in, flat_out = dict(flatten(bundle)), dict(flatten(decoded))
    assert list(flat_in) == list(flat_out)
    for k in flat_in:
        assert flat_out[k].dtype == flat_in[k].dtype and flat_out[k].shape == flat_in[k].shape
        assert flat_out[k].tobytes() == np.ascontiguousarray(flat_in[k]).tobytes()


def test_buffers_are_64_byte_aligned():
    frame = encode({"a": np.ones(3, np.uint8), "b": np.ones(5, np.float64)})
    decoded, _ = decode(frame)
    base = np.frombuffer(frame, np.uint8).ctypes.data
    assert [(v.ctypes.data - base) % 64 for v in decoded.values()] == [0, 0]


def test_forbidden_dtype_rejected_on_encode_and_decode():
    with pytest.raises(WireError, match="object"):
        encode({"x": np.array([None], dtype=object)})
    frame = encode({"x": np.zeros(2, np.int32)})
    header_len = struct.unpack_from("<I", frame, 4)[0]
    header = json.loads(bytes(frame[8:8 + header_len]))
    header["arrays"][0][1] = "complex128"
    bad = json.dumps(header).encode()
    forged = bytes(frame[:4]) + struct.pack("<I", len(bad)) + bad + b"\0" * 64
    with pytest.raises(WireError, match="complex128"):
        decode(forged)


@pytest.mark.parametrize("frame, message", [
    (b"", "shorter"),
    (b"random bytes that are not a frame", "bad magic"),
    (b"ZOO\x01" + struct.pack("<I", 10**9) + b"{}", "header length"),
    (b"ZOO\x01" + struct.pack("<I", 2) + b"{]", "not valid JSON"),
    (b"ZOO\x01" + struct.pack("<I", 14) + b'{"version":99}', "version 99"),
])
def test_malformed_frames_rejected(frame, message):
    with pytest.raises(WireError, match=message):
        decode(frame)


def test_truncated_frame_and_size_limit():
    frame = encode({"x": np.zeros(1000, np.float32)})
    with pytest.raises(WireError, match="truncated"):
        decode(frame[:-100])
    with pytest.raises(WireError, match="exceeds the limit of 100 bytes"):
        decode(frame, max_bytes=100)


def test_shape_must_match_declared_bytes():
    frame = bytearray(encode({"x": np.zeros(4, np.float32)}))
    header_len = struct.unpack_from("<I", frame, 4)[0]
    header = json.loads(bytes(frame[8:8 + header_len]))
    header["arrays"][0][2] = [5]
    bad = json.dumps(header).encode()
    with pytest.raises(WireError, match=r"shape \(5,\) x 4 bytes != declared 16"):
        decode(b"ZOO\x01" + struct.pack("<I", len(bad)) + bad + b"\0" * 128)


def test_flatten_unflatten_and_concat():
    b = {"a": {"x": np.array([1]), "y": np.array([2])}, "z": np.array([3])}
    assert [k for k, _ in flatten(b)] == ["a/x", "a/y", "z"]
    assert unflatten(dict(flatten(b)))["a"]["y"][0] == 2
    c = concat([b, b])
    assert c["a"]["x"].tolist() == [1, 1] and c["z"].tolist() == [3, 3]


def test_big_endian_arrays_decode_to_the_same_numbers():
    big = np.arange(4, dtype=">i4")
    decoded, _ = decode(encode({"x": big}))
    assert decoded["x"].tolist() == [0, 1, 2, 3] and decoded["x"].dtype == np.dtype("int32")
