"""The wire format and its validation, without sockets."""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.servers import HASH_BLOCK_BYTES, reference_content_hash

from diffrec import protocol
from diffrec.protocol import (
    DTYPES,
    INPUTS,
    REQUESTS,
    ProtocolError,
    decode,
    encode,
    pairing_string,
    parse_pairing,
    read_keypair,
    transfer,
    write_keypair,
)
from diffrec.protocol.limits import MAX_HEADER_BYTES
from diffrec.protocol.transfer import (
    ContentHash,
    ResumableFile,
    chunk_ranges,
    content_hash,
    content_hash_file,
)


def frames_of(header: dict | str | bytes, *raw: bytes) -> list[bytes]:
    if isinstance(header, dict):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    return [header, *raw]


def code_of(frames) -> str:
    with pytest.raises(ProtocolError) as info:
        decode(frames, REQUESTS)
    return info.value.code


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4)])
def test_round_trip_every_dtype(dtype, shape):
    rng = np.random.default_rng(1)
    array = (rng.random(shape) * 100).astype(dtype)
    big_endian_strided = array.astype(array.dtype.newbyteorder(">")).T  # not C order, not LE
    frames = encode("submit", {"id": 1, "job": "j", "spec": {}}, {"images": big_endian_strided})
    message = decode([bytes(f) for f in frames], REQUESTS)
    got = message.arrays["images"]
    assert got.dtype == DTYPES[dtype] and got.shape == array.T.shape
    np.testing.assert_array_equal(got, array.T)


def test_arrays_are_zero_copy_when_aligned_and_copied_when_not():
    values = np.arange(6, dtype="<f4")
    header = encode("submit", {"id": 1, "job": "j", "spec": {}}, {"images": values})[0]
    aligned = np.zeros(6, np.float32)
    assert np.shares_memory(decode([header, aligned], REQUESTS).arrays["images"], aligned)
    storage = bytearray(values.nbytes + 1)
    storage[1:] = values.tobytes()
    unaligned = decode([header, memoryview(storage)[1:]], REQUESTS).arrays["images"]
    assert unaligned.ctypes.data % 4 == 0
    np.testing.assert_array_equal(unaligned, values)


@pytest.mark.parametrize("dtype", [">f4", "<U4", "M8", "object", "float128", "f4", 7, None])
def test_dtypes_outside_the_whitelist_are_refused(dtype):
    header = {"op": "submit", "id": 1, "job": "j", "spec": {},
              "arrays": [{"name": "images", "dtype": dtype, "shape": [1]}]}
    assert code_of(frames_of(header, b"\0" * 4)) == "bad_dtype"


def test_lying_and_overflowing_shapes_are_refused():
    def header(shape):
        return {"op": "submit", "id": 1, "job": "j", "spec": {},
                "arrays": [{"name": "images", "dtype": "float32", "shape": shape}]}

    assert code_of(frames_of(header([3]), b"\0" * 8)) == "bad_message"
    # np.prod of these dims wraps to 0 in int64; math.prod does not, so an empty frame fails
    assert np.prod([2**31 - 1] * 6, dtype=np.int64) != (2**31 - 1) ** 6
    assert code_of(frames_of(header([2**31 - 1] * 6), b"")) == "too_large"
    assert code_of(frames_of(header([-1]), b"")) == "bad_message"
    assert code_of(frames_of(header([1.0]), b"\0" * 4)) == "bad_message"
    assert code_of(frames_of(header([True]), b"\0" * 4)) == "bad_message"


def test_frame_count_must_match_the_descriptors():
    header = {"op": "submit", "id": 1, "job": "j", "spec": {},
              "arrays": [{"name": "images", "dtype": "uint8", "shape": [1]}]}
    assert code_of(frames_of(header)) == "bad_message"
    assert code_of(frames_of(header, b"\0", b"\0")) == "bad_message"
    assert code_of(frames_of({"op": "ping", "id": 1}, b"extra")) == "bad_message"


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (b"\xff\xfe", "bad_message"),
        ('{"op": "ping", "id": NaN}', "bad_message"),
        ('{"op": "submit", "id": 1, "job": "j", "spec": {"lr": 1e999}}', "bad_message"),
        ("[1, 2]", "bad_message"),
        ('{"op": "ping", "id": 5, "op": "status"}', "bad_message"),  # read as its last key
        ('{"op": "submit", "id": 1, "job": "j", "spec": {"a": 1, "a": 2}}', "bad_message"),
        ("[" * 100_000, "too_large"),
        ("[" * 60_000, "bad_message"),
        ({"id": 1}, "bad_message"),
        ({"op": "rm -rf", "id": 1}, "unknown_op"),
        ({"op": "ping"}, "bad_request"),
        ({"op": "ping", "id": True}, "bad_request"),
        ({"op": "ping", "id": -1}, "bad_request"),
        ({"op": "ping", "id": 1, "extra": 1}, "bad_request"),
        ({"op": "status", "id": 1, "job": "../../etc"}, "bad_request"),
        ({"op": "status", "id": 1, "job": "a/b"}, "bad_request"),
        ({"op": "status", "id": 1, "job": "x" * 65}, "bad_request"),
        ({"op": "read", "id": 1, "job": "j", "file": "../state.json", "offset": 0, "length": 1},
         "bad_request"),
        ({"op": "read", "id": 1, "job": "j", "file": "a", "offset": 0, "length": 2**40},
         "bad_request"),
        ({"op": "upload", "id": 1, "blob": "../" + "0" * 61, "size": 1}, "bad_request"),
        ({"op": "chunk", "id": 1, "blob": "0" * 64, "size": 1, "offset": 0}, "bad_request"),
    ],
)
def test_malformed_headers_are_refused(header, code):
    assert code_of(frames_of(header)) == code


def test_a_key_given_twice_is_named():
    with pytest.raises(ProtocolError, match="header gives the key 'op' twice"):
        decode(frames_of('{"op": "ping", "id": 5, "op": "status"}'), REQUESTS)


def test_header_size_is_capped_and_request_id_is_reported():
    big = {"op": "submit", "id": 42, "job": "j", "spec": {"pad": "x" * MAX_HEADER_BYTES}}
    with pytest.raises(ProtocolError) as info:
        encode(big["op"], big)
    assert info.value.code == "too_large"
    with pytest.raises(ProtocolError) as info:
        decode(frames_of({"op": "status", "id": 42, "job": ".."}), REQUESTS)
    assert info.value.request_id == 42


def test_input_specs_reject_bad_values():
    cameras = np.tile(np.eye(4, dtype=np.float32), (2, 1, 1))
    INPUTS["cameras"].check("cameras", cameras)
    cameras[1, 0, 3] = np.nan
    for name, array, why in [
        ("cameras", cameras, "NaN"),
        ("cameras", np.zeros((2, 3, 4), np.float32), "axis 1"),
        ("images", np.zeros((1, 4, 4, 5), np.float32), "axis 3"),
        ("images", np.zeros((0, 4, 4, 3), np.float32), "empty"),
        ("faces", np.zeros((4, 3), np.float32), "dtype"),
    ]:
        with pytest.raises(ProtocolError, match=why):
            INPUTS[name].check(name, array)


def test_resumable_file_resumes_verifies_and_refuses_gaps(tmp_path):
    payload = np.random.default_rng(2).bytes(10_000)
    target = ResumableFile(tmp_path / "blob", len(payload), content_hash(payload))
    target.write(0, payload[:4000])
    target.close()  # a crash: the part file stays
    resumed = ResumableFile(tmp_path / "blob", len(payload), content_hash(payload))
    assert resumed.offset == 4000
    assert resumed.write(1000, payload[1000:3000]) == 4000  # a chunk it already has is ignored
    with pytest.raises(ProtocolError, match="offset"):
        resumed.write(5000, payload[5000:6000])
    resumed.write(4000, payload[4000:])
    assert resumed.finish().read_bytes() == payload
    assert not resumed.part.exists()

    liar = ResumableFile(tmp_path / "liar", len(payload), content_hash(b"something else"))
    liar.write(0, payload)
    with pytest.raises(ProtocolError) as info:
        liar.finish()
    assert info.value.code == "hash_mismatch"
    assert not liar.part.exists() and not liar.final.exists()


def test_content_hash_matches_a_serial_reference_however_the_bytes_are_split():
    block = HASH_BLOCK_BYTES
    payload = np.random.default_rng(6).bytes(3 * block + 12_345)
    expected = reference_content_hash(payload)
    assert expected != hashlib.sha256(payload).hexdigest()  # a tree, not one stream
    assert content_hash(payload) == expected
    for sizes in ([block] * 4, [1, block - 1, block + 1, 5, block - 6],
                  [0, 70_000, 2 * block, 0, 3], [len(payload)]):
        stream = ContentHash(backlog=1)  # the smallest backlog makes updates wait on the pool
        pieces = np.cumsum([0, *sizes])
        for start, end in itertools.pairwise(pieces):
            stream.update(payload[start:end])
        stream.update(payload[pieces[-1]:])
        assert stream.hexdigest() == expected, sizes


def test_content_hash_of_short_and_empty_payloads():
    assert content_hash(b"") == hashlib.sha256(b"").hexdigest()  # no blocks
    digest = hashlib.sha256(b"abc").digest()
    assert content_hash(b"abc") == hashlib.sha256(digest).hexdigest()
    corrupt = bytearray(np.random.default_rng(7).bytes(2 * HASH_BLOCK_BYTES + 1))
    clean = content_hash(bytes(corrupt))
    for where in (0, HASH_BLOCK_BYTES + 17, len(corrupt) - 1):  # any block, the tail too
        corrupt[where] ^= 1
        assert content_hash(bytes(corrupt)) != clean
        corrupt[where] ^= 1


def test_resumable_file_writes_behind_and_resumes_past_the_writeback_points(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(transfer, "WRITEBACK_BYTES", 64 * 1024)  # many write-behind hints
    payload = np.random.default_rng(3).bytes(1_000_000)
    target = ResumableFile(tmp_path / "blob", len(payload), content_hash(payload))
    for start, end in chunk_ranges(600_000, 0, 100_000):
        target.write(start, payload[start:end])
    target.close()  # a crash: the part file keeps what was written, dropped from cache or not
    resumed = ResumableFile(tmp_path / "blob", len(payload), content_hash(payload))
    assert resumed.offset == 600_000
    for start, end in chunk_ranges(len(payload), resumed.offset, 100_000):
        resumed.write(start, payload[start:end])
    assert resumed.finish().read_bytes() == payload
    assert content_hash_file(tmp_path / "blob") == content_hash(payload)


def test_resumable_file_resumes_mid_block_and_verifies_every_block(tmp_path):
    payload = np.random.default_rng(8).bytes(2 * HASH_BLOCK_BYTES + 999)
    expected = reference_content_hash(payload)
    target = ResumableFile(tmp_path / "blob", len(payload), expected)
    crash_at = HASH_BLOCK_BYTES + 4321  # a part file that ends inside the second block
    for start, end in chunk_ranges(crash_at, 0, 1_000_000):
        target.write(start, payload[start:end])
    target.close()
    resumed = ResumableFile(tmp_path / "blob", len(payload), expected)
    assert resumed.offset == crash_at
    for start, end in chunk_ranges(len(payload), crash_at, 3_000_000):
        resumed.write(start, payload[start:end])
    assert resumed.finish().read_bytes() == payload

    first_block_wrong = bytearray(payload)
    first_block_wrong[5] ^= 1
    liar = ResumableFile(tmp_path / "liar", len(payload), expected)
    liar.write(0, bytes(first_block_wrong))
    with pytest.raises(ProtocolError, match="content hash"):
        liar.finish()


def test_key_files_and_pairing_strings(tmp_path):
    public, secret = write_keypair(tmp_path / "keys", "server")
    tmp_path = tmp_path / "keys"
    assert stat.S_IMODE(os.stat(tmp_path / "server.key_secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700, "the keys' folder, its user's alone"
    assert read_keypair(tmp_path, "server") == (public, secret)
    for host in ("gpu-box.example", "10.0.0.7", "::1"):
        address, key = parse_pairing(pairing_string(host, 5557, public))
        assert key == public
        assert address == (f"tcp://[{host}]:5557" if ":" in host else f"tcp://{host}:5557")
    for bad in ("", "tcp://host:1", "diffrec://host:1?key=00", "diffrec://host?key=" + "0" * 64):
        with pytest.raises(ProtocolError):
            parse_pairing(bad)
    os.chmod(tmp_path / "server.key_secret", 0o644)
    with pytest.raises(PermissionError):
        read_keypair(tmp_path, "server")


def test_the_protocol_package_stands_alone():
    """The add-on vendors diffrec/protocol: only relative imports, the standard library,
    numpy and zmq; importing it must not pull in torch or the rest of diffrec."""
    package = Path(protocol.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in sys.stdlib_module_names or root in ("numpy", "zmq", "__future__"), (
                    f"{path.name} imports {root}")
    code = ("import sys; import diffrec.protocol; "
            "extra = [m for m in sys.modules if m == 'torch' or m.startswith('diffrec.') "
            "and not m.startswith('diffrec.protocol')]; print(extra)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
