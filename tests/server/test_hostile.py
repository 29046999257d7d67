"""The server against clients that try to harm each other or it (docs/protocol.md, sections 4,
6 and 10): uploads and blobs belong to their client key, quotas per key, a full or read-only
disk, and shapes that once ended as ``internal`` errors. Each case was found by probing a real
server from outside (issue 15)."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from server_helpers import (
    blob_path,
    fit_spec,
    open_client,
    reference_content_hash,
    server_in_process,
    target_images,
)

from diffrec.protocol import Client, ServerError
from diffrec.protocol.limits import CHUNK_BYTES, MIB
from diffrec.protocol.transfer import ResumableFile
from diffrec.server import blobs as blob_module
from diffrec.server import storage
from diffrec.server.quotas import Quotas


def send_chunks(client: Client, payload: bytes, blob: str, count: int) -> dict:
    """Begin an upload of ``payload`` and send only its first ``count`` chunks."""
    client.call("upload", {"blob": blob, "size": len(payload)})
    ack = {}
    for index in range(count):
        start = index * CHUNK_BYTES
        data = np.frombuffer(payload[start:start + CHUNK_BYTES], np.uint8)
        ack = client.call("chunk", {"blob": blob, "size": len(payload), "offset": start},
                          {"data": data})
    return ack


def error_of(call) -> ServerError:
    with pytest.raises(ServerError) as info:
        call()
    return info.value


def test_another_key_cannot_truncate_or_resume_an_unfinished_upload(secured):
    """Issue 15.1: bob pushed alice's upload out of the open uploads, then declared her blob
    1 byte long; the server cut her part file to 1 byte, failed its hash and deleted it."""
    server, server_key, keys = secured
    payload = np.random.default_rng(15).bytes(20 * MIB)
    blob = reference_content_hash(payload)
    with open_client(server, server_key, keys["alice"]) as alice, \
            open_client(server, server_key, keys["bob"]) as bob:
        assert send_chunks(alice, payload, blob, 2)["offset"] == 2 * CHUNK_BYTES
        for index in range(blob_module.MAX_OPEN_UPLOADS + 1):
            bob.call("upload", {"blob": f"{index:064x}", "size": 10})
        reply = bob.call("upload", {"blob": blob, "size": 1})
        assert (reply["offset"], reply["complete"]) == (0, False)  # bob's own, empty upload
        assert error_of(lambda: bob.call("chunk", {"blob": blob, "size": 1, "offset": 0},
                                         {"data": np.zeros(1, np.uint8)})).code == "hash_mismatch"
        resumed = alice.call("upload", {"blob": blob, "size": len(payload)})
        assert resumed["offset"] == 2 * CHUNK_BYTES  # alice's bytes are untouched
        assert alice.upload(payload) == blob
    assert blob_path(server.data_dir, blob, keys["alice"][0]).read_bytes() == payload


def test_another_key_can_neither_probe_nor_use_a_blob(secured):
    """Issue 15.5: bob's upload of alice's hash answered complete, and bob could submit a job
    naming her blob. Now he gets what any unknown hash gets, and must send the bytes himself."""
    server, server_key, keys = secured
    images = target_images(count=2, size=8, seed=55)
    blob = reference_content_hash(images.tobytes())
    unknown = reference_content_hash(b"nobody sent this")
    ref = {"dtype": "float32", "shape": list(images.shape)}
    with open_client(server, server_key, keys["alice"]) as alice, \
            open_client(server, server_key, keys["bob"]) as bob:
        assert alice.upload(images) == blob
        assert alice.call("upload", {"blob": blob, "size": images.nbytes})["complete"] is True
        probes = [bob.call("upload", {"blob": name, "size": images.nbytes})
                  for name in (blob, unknown)]
        assert [(p["offset"], p["complete"]) for p in probes] == [(0, False), (0, False)]
        refused = [error_of(lambda name=name: bob.call(
            "submit", {"job": f"bob-{name[:8]}", "spec": fit_spec(iterations=2),
                       "inputs": {"images": {"blob": name, **ref}}}))
            for name in (blob, unknown)]
        assert [e.code for e in refused] == ["invalid_input", "invalid_input"]
        assert refused[0].message.replace(blob, unknown) == refused[1].message  # no leak
        assert bob.upload(images) == blob  # with the bytes, bob may use the same hash
        bob.call("submit", {"job": "bob-own", "spec": fit_spec(iterations=2),
                            "inputs": {"images": {"blob": blob, **ref}}})
        assert bob.wait("bob-own")["kind"] == "done"


QUOTAS = Quotas(pending_uploads=3, pending_bytes=64 * MIB, stored_bytes=8 * MIB, queued_jobs=2)


def test_quotas_per_key_refuse_with_the_limit_named(tmp_path):
    """Issue 15.4: one client opened 3000 uploads of 64 GiB each in 0.9 s."""
    with server_in_process(tmp_path / "data", quotas=QUOTAS) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        for index in range(QUOTAS.pending_uploads):
            client.call("upload", {"blob": f"{index:064x}", "size": MIB})
        again = client.call("upload", {"blob": f"{0:064x}", "size": MIB})  # resuming is free
        assert again["offset"] == 0
        error = error_of(lambda: client.call("upload", {"blob": f"{9:064x}", "size": MIB}))
        assert error.code == "quota_exceeded" and "pending_uploads of 3" in error.message
        assert len(list((tmp_path / "data" / "blobs").rglob("*.part"))) == 3

    with server_in_process(tmp_path / "more", quotas=QUOTAS) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        error = error_of(lambda: client.call("upload", {"blob": f"{1:064x}", "size": 65 * MIB}))
        assert error.code == "quota_exceeded" and "pending_bytes" in error.message
        error = error_of(lambda: client.upload(np.zeros(9 * MIB, np.uint8)))
        assert error.code == "quota_exceeded" and "stored_bytes" in error.message
        client.upload(np.ones(5 * MIB, np.uint8))
        error = error_of(lambda: client.upload(np.full(5 * MIB, 2, np.uint8)))
        assert error.code == "quota_exceeded" and f"{5 * MIB} held" in error.message
        images = target_images()
        client.submit("one", fit_spec(iterations=10**6), {"images": images})
        client.submit("two", fit_spec(iterations=10), {"images": images})
        error = error_of(lambda: client.submit("three", fit_spec(), {"images": images}))
        assert error.code == "quota_exceeded" and "queued_jobs of 2" in error.message
        client.cancel("one")
        assert client.wait("two")["kind"] == "done"
        client.submit("three", fit_spec(iterations=10), {"images": images})  # room again


def test_an_upload_bigger_than_the_free_disk_is_refused_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "free_bytes", lambda path: 100 * MIB)
    with server_in_process(tmp_path / "data") as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        error = error_of(lambda: client.call("upload", {"blob": f"{1:064x}", "size": 64 * MIB}))
        assert error.code == "disk_full"
        assert error.message.startswith(f"the server's disk is full: {100 * MIB} bytes free, "
                                        f"{64 * MIB} needed")
        assert not list((tmp_path / "data" / "blobs").rglob("*.part"))
        assert client.call("upload", {"blob": f"{1:064x}", "size": MIB})["offset"] == 0


def test_disk_full_or_read_only_mid_request_get_their_own_codes(tmp_path, monkeypatch):
    """Issue 15.6: these were ``internal error (OSError)``."""
    write = ResumableFile.write
    failure = {}

    def failing_write(self, offset, data):
        if failure:
            raise OSError(failure["errno"], os.strerror(failure["errno"]))
        return write(self, offset, data)

    monkeypatch.setattr(ResumableFile, "write", failing_write)
    payload = np.random.default_rng(6).bytes(3 * CHUNK_BYTES)
    blob = reference_content_hash(payload)
    with server_in_process(tmp_path / "data") as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        send_chunks(client, payload, blob, 1)
        for code, number in (("disk_full", errno.ENOSPC), ("read_only", errno.EROFS)):
            failure["errno"] = number
            error = error_of(lambda: send_chunks(client, payload, blob, 2))
            assert error.code == code, error
            assert "data directory" in error.message
        failure.clear()  # space again: the upload goes on from the bytes held
        assert client.call("upload", {"blob": blob, "size": len(payload)})["offset"] == CHUNK_BYTES
        assert client.upload(payload) == blob


@pytest.mark.parametrize("shape", [[0, 10**20, 1, 3], [2, 8, 8, "3"], [2, -1, 8, 3],
                                   [1] * 7, [2**31, 1, 1, 3]])
def test_impossible_blob_shapes_are_bad_requests(server, connect, shape):
    """Issue 15.6: ``[0, 10**20, 1, 3]`` was ``internal (ValueError)``."""
    client = connect(server)
    error = error_of(lambda: client.call("submit", {
        "job": "shapes", "spec": fit_spec(),
        "inputs": {"images": {"blob": "0" * 64, "dtype": "float32", "shape": shape}}}))
    assert error.code == "bad_request" and "shape" in error.message
