"""A running server survives a flood of malformed messages (hypothesis), keeps answering and
loses no job. DIFFREC_FUZZ_MESSAGES sets how many (default 10,000)."""

from __future__ import annotations

import json
import os
import time

import zmq
from helpers.servers import fit_spec, target_images
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffrec.protocol import PROTOCOL_VERSION, REQUESTS, SERVER_MESSAGES, decode
from diffrec.protocol.limits import MAX_FRAME_BYTES

FUZZ_MESSAGES = int(os.environ.get("DIFFREC_FUZZ_MESSAGES", "10000"))
PER_EXAMPLE = 20
KEPT_JOB = "precious-job"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=12)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8,
)
tricky_ids = st.sampled_from(["..", "../jobs/x", "/etc/passwd", "x/../..", "a\x00b", "%2e%2e",
                              "x" * 65, "", " ", "job-1", "NUL", "blobs"]) | st.text(max_size=70)
sizes = st.integers(-2, 2**41) | json_values
descriptors = st.fixed_dictionaries({
    "name": st.sampled_from(["images", "data", "cameras", "x", "../x", ""]) | st.text(max_size=5),
    "dtype": st.sampled_from(["float32", "uint8", "float64", ">f4", "<U4", "M8", "object", "O",
                              "bool", "f4", "V8"]) | json_values,
    "shape": st.lists(st.integers(-2, 2**40), max_size=7) | json_values,
})
blob_refs = st.dictionaries(  # blob references: the shapes that once ended as ``internal``
    st.sampled_from(["images", "cameras", "faces", "x"]),
    st.fixed_dictionaries({
        "blob": st.sampled_from(["0" * 64, "f" * 64]),
        "dtype": st.sampled_from(["float32", "uint8", "int32", ">f4", "object"]) | json_values,
        "shape": st.lists(st.integers(-2, 10**20) | st.sampled_from([2**31, 2**63, "3", 1.5]),
                          max_size=8) | json_values,
    }),
    max_size=2,
)
headers = st.fixed_dictionaries(
    {"op": st.sampled_from([*REQUESTS, "", "PING", "reply", "event", "__init__"])
     | st.text(max_size=10)},
    optional={
        "id": st.integers(-5, 2**60) | json_values, "job": tricky_ids | json_values,
        "spec": json_values | st.just({"task": "fit_texture"}), "file": tricky_ids,
        "blob": st.text("0123456789abcdef./", min_size=60, max_size=66), "size": sizes,
        "offset": sizes, "length": sizes, "inputs": json_values | blob_refs,
        "arrays": st.lists(descriptors, max_size=3) | json_values,
    },
)
structured = st.tuples(headers, st.lists(st.binary(max_size=48), max_size=3)).map(
    lambda pair: [json.dumps(pair[0]).encode(), *pair[1]])
garbage = st.lists(st.binary(max_size=128), min_size=1, max_size=4)
not_json = st.sampled_from([[b'{"op":"ping","id":NaN}'], [b'{"op":"ping","id":1e999}'],
                            [b"[" * 50_000], [b"\xff\xfe"], [b""]])
messages = st.one_of(structured, garbage, not_json)


def drain(socket: zmq.Socket, wait_s: float = 0.0) -> int:
    """Receive every pending reply, checking each is a well-formed server message and none is
    an ``internal`` error (a malformed message must be refused as such, not crash a handler)."""
    received = 0
    while socket.poll(wait_s * 1000):
        answer = decode(socket.recv_multipart(), SERVER_MESSAGES)
        assert answer.fields.get("code") != "internal", answer.fields
        received += 1
    return received


def test_fuzzed_server_still_answers_and_keeps_its_jobs(server, connect, tmp_path):
    client = connect(server)
    client.submit(KEPT_JOB, fit_spec(iterations=50), {"images": target_images()})
    assert client.wait(KEPT_JOB)["kind"] == "done"
    before = client.fetch(KEPT_JOB, tmp_path / "before")

    context = zmq.Context.instance()
    fuzzer = context.socket(zmq.DEALER)
    fuzzer.linger = 0
    fuzzer.connect(server.address)
    counts = {"sent": 0, "answered": 0}

    @settings(max_examples=max(1, FUZZ_MESSAGES // PER_EXAMPLE), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(messages, min_size=PER_EXAMPLE, max_size=PER_EXAMPLE))
    def flood(batch):
        for frames in batch:
            fuzzer.send_multipart(frames)
        counts["sent"] += len(batch)
        counts["answered"] += drain(fuzzer)

    started = time.monotonic()
    try:
        flood()
        deadline = time.monotonic() + 10
        while counts["answered"] < counts["sent"] and time.monotonic() < deadline:
            counts["answered"] += drain(fuzzer, 0.2)
        # frames over the size limit: the server drops that connection, and only that one
        for frames in ([b"x" * (MAX_FRAME_BYTES + 1)],
                       [json.dumps({"op": "ping", "id": 1}).encode(), bytes(MAX_FRAME_BYTES + 1)]):
            oversize = context.socket(zmq.DEALER)
            oversize.linger = 0
            oversize.connect(server.address)
            oversize.send_multipart(frames)
            assert not oversize.poll(300)
            oversize.close()
    finally:
        fuzzer.close()
    print(f"{counts['sent']} malformed messages in {time.monotonic() - started:.1f} s")

    assert counts["sent"] >= FUZZ_MESSAGES
    assert counts["answered"] == counts["sent"]  # every one got an error (or a reply)
    assert client.ping()["protocol"] == PROTOCOL_VERSION
    assert client.status(KEPT_JOB)["state"] == "done"
    after = client.fetch(KEPT_JOB, tmp_path / "after")
    assert [p.read_bytes() for p in after] == [p.read_bytes() for p in before]
