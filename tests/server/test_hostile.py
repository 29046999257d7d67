"""The server against clients that try to harm each other or it (docs/protocol.md, sections 4,
6 and 10): uploads and blobs belong to their client key, quotas per key, a full or read-only
disk, and shapes that once ended as ``internal`` errors. Each case was found by probing a real
server from outside (issue 15)."""

from __future__ import annotations

import errno
import json
import os
import re
import time

import numpy as np
import pytest
from helpers.servers import (
    blob_path,
    error_of,
    fit_spec,
    open_client,
    reference_content_hash,
    server_in_process,
    target_images,
)

from diffrec.protocol import Client
from diffrec.protocol.events import FINAL_STATES, Log
from diffrec.protocol.limits import CHUNK_BYTES, MIB
from diffrec.protocol.transfer import ResumableFile
from diffrec.server import blobs as blob_module
from diffrec.server import disk, job_store
from diffrec.server.quotas import Quotas
from diffrec.server.texture_fit import TextureFitRunner


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
    monkeypatch.setattr(disk, "free_bytes", lambda path: 100 * MIB)
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


class DiskFillingRunner(TextureFitRunner):
    """Writes part of a result, then finds the disk full."""

    task = "fills_disk"

    def run(self, ctx):
        (ctx.results_dir / "partial.bin").write_bytes(bytes(4096))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_job_whose_results_fill_the_disk_fails_cleanly_and_stays_failed(tmp_path,
                                                                         monkeypatch):
    """Issue 15.2: no final event reached the client, state.json said running while status
    said failed, the partial result kept the disk full, and a restart ran the job again."""
    data = tmp_path / "data"
    reserve = data / "jobs" / ".reserve"
    real_writer = job_store.write_json_atomic

    def full_disk_writer(path, record):  # the disk is full until the partial result is gone
        ending = path.name == "state.json" and record["state"] in FINAL_STATES
        if (ending and reserve.exists()) or list(data.glob("jobs/*/results/partial.bin")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_writer(path, record)

    monkeypatch.setattr(job_store, "write_json_atomic", full_disk_writer)
    with server_in_process(data, [DiskFillingRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("filler", fit_spec(task="fills_disk"), {"images": target_images()})
        final = client.wait("filler")
        assert final["kind"] == "failed"
        assert re.match(r"the server's disk is full: \d+ bytes free, \d+ needed; ",
                        final["message"]), final["message"]
        on_disk = json.loads((data / "jobs" / "filler" / "state.json").read_text())
        assert on_disk["state"] == client.status("filler")["state"] == "failed"
        assert on_disk["message"] == final["message"]
        assert not list((data / "jobs" / "filler").rglob("*.*[!n]"))  # only state.json left
        client.submit("after", fit_spec(iterations=5), {"images": target_images()})
        assert client.wait("after")["kind"] == "done"
    monkeypatch.setattr(job_store, "write_json_atomic", real_writer)
    with server_in_process(data) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        status = client.status("filler")
        assert (status["state"], status["attempts"]) == ("failed", 1)  # not run again
        deadline = time.monotonic() + 5
        while not reserve.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reserve.exists()  # put back once the disk had room


def test_a_state_that_cannot_be_written_is_written_when_the_disk_allows(tmp_path, monkeypatch):
    data = tmp_path / "data"
    real_writer = job_store.write_json_atomic
    read_only = {"on": True}

    def writer(path, record):
        if read_only["on"] and record["state"] in FINAL_STATES:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_writer(path, record)

    monkeypatch.setattr(job_store, "write_json_atomic", writer)
    with server_in_process(data) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("stuck", fit_spec(iterations=5), {"images": target_images()})
        assert client.wait("stuck")["kind"] == "done"  # the client hears the end regardless
        state = data / "jobs" / "stuck" / "state.json"
        assert json.loads(state.read_text())["state"] == "running"
        read_only["on"] = False
        deadline = time.monotonic() + 5
        while json.loads(state.read_text())["state"] != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert json.loads(state.read_text())["state"] == "done"


class StubbornRunner(TextureFitRunner):
    """Never looks at should_stop: a step that cannot be interrupted."""

    task = "stubborn"

    def run(self, ctx):
        ctx.emit(Log("started"))
        time.sleep(600)


def test_cancel_wins_over_a_step_that_never_checks(tmp_path):
    """Issue 15.3: a cancel had not taken effect 40 s later (the protocol promises 1 s)."""
    with server_in_process(tmp_path / "data", [StubbornRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("stubborn", fit_spec(task="stubborn"), {"images": target_images()})
        client.submit("next", fit_spec(iterations=5), {"images": target_images()})
        client.attach("stubborn")
        next(e for e in client.events(idle_timeout=30) if e["kind"] == "log")
        asked = time.monotonic()
        assert client.cancel("stubborn")["state"] == "cancelling"
        final = next(e for e in client.events(idle_timeout=5) if e["job"] == "stubborn"
                     and e["kind"] in ("done", "failed", "cancelled"))
        assert final["kind"] == "cancelled" and time.monotonic() - asked < 1.0
        assert client.wait("next")["kind"] == "done"


def test_closing_stops_a_stubborn_job_in_time_and_a_restart_resumes_it(tmp_path):
    """Issue 15.3: SIGTERM did not stop the server within 10 s. ``Server.close`` is what
    SIGTERM runs (test_sigterm_... checks the signal itself)."""
    data = tmp_path / "data"
    with server_in_process(data, [StubbornRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("stubborn", fit_spec(task="stubborn"), {"images": target_images()})
        client.attach("stubborn")
        next(e for e in client.events(idle_timeout=30) if e["kind"] == "log")
        began = time.monotonic()
        server.jobs.executor.close()
        assert time.monotonic() - began < 1.5
    assert json.loads((data / "jobs" / "stubborn" / "state.json").read_text())["state"] \
        == "running"  # no verdict: it resumes when the server starts again
    with server_in_process(data, [StubbornRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.attach("stubborn")
        next(e for e in client.events(idle_timeout=30) if e["kind"] == "log")
        assert client.status("stubborn")["attempts"] == 2
        client.cancel("stubborn")


def test_sigterm_stops_the_server_within_seconds_and_the_job_resumes(start_server, connect):
    server = start_server()
    client = connect(server)
    client.submit("long", fit_spec(iterations=100_000, checkpoint_every=20),
                  {"images": target_images()})
    client.attach("long")
    checkpoint = server.job_dir("long") / "checkpoint" / "fit.pt"
    next(e for e in client.events(idle_timeout=30)
         if e["kind"] == "progress" and checkpoint.exists())
    began = time.monotonic()
    server.process.terminate()
    assert server.process.wait(10) == 0
    assert time.monotonic() - began < 3.0
    client.close()
    server.start()
    again = connect(server)
    again.attach("long")
    resumed = next(e for e in again.events(idle_timeout=30) if e["kind"] == "log")
    assert resumed["resumed_from"] >= 20 and again.status("long")["attempts"] == 2
    again.cancel("long")
