"""Faults: the server killed (SIGKILL) mid-upload and mid-job, then started again; a job
that runs out of GPU memory; a second server on a data directory in use."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.servers import (
    blob_path,
    fit_spec,
    free_port,
    reference_content_hash,
    resume_after_kill,
    server_in_process,
    target_images,
)

from diffrec.errors import UserError
from diffrec.protocol import Client, ServerError
from diffrec.protocol.limits import MIB
from diffrec.server.app import Server
from diffrec.server.texture_fit import TextureFitRunner


def test_upload_resumes_after_the_server_is_killed(start_server, connect):
    server = start_server()
    client = connect(server, timeout=1.0)
    upload_replies = []
    call = client.call

    def spy(op, fields=None, arrays=None):
        reply = call(op, fields, arrays)
        if op == "upload":
            upload_replies.append(reply)
        return reply

    client.call = spy
    payload = np.random.default_rng(5).bytes(64 * MIB)
    killed_at = []

    def on_progress(done, total):
        if not killed_at and done >= 24 * MIB:
            killed_at.append(done)
            server.kill()
            server.start(wait=False)  # same port, same data directory

    blob_id = client.upload(payload, on_progress=on_progress)
    assert blob_id == reference_content_hash(payload)
    assert upload_replies[0]["offset"] == 0
    resumed = upload_replies[-1]["offset"]
    assert len(upload_replies) >= 2 and resumed >= killed_at[0]  # not sent again from 0
    blob = blob_path(server.data_dir, blob_id)
    assert blob.read_bytes() == payload
    assert not list(blob.parent.glob(f"{blob_id}.*part"))


def test_job_resumes_from_its_checkpoint_after_the_server_is_killed(start_server, connect,
                                                                  tmp_path):
    server = start_server()
    client = connect(server)
    images = target_images(size=16, seed=7)
    client.submit("survivor", fit_spec(iterations=2000, checkpoint_every=100), {"images": images})
    client.submit("waiting", fit_spec(iterations=20), {"images": images})
    checkpoint = server.job_dir("survivor") / "checkpoint" / "fit.pt"
    client.attach("survivor")
    for event in client.events(idle_timeout=30):
        if event["kind"] == "progress" and checkpoint.exists():
            assert event["iteration"] < 2000
            break
    again, final, resumed = resume_after_kill(server, client, connect, "survivor")
    assert final["kind"] == "done", final.fields
    assert resumed and resumed[0] >= 100 and resumed[0] % 100 == 0
    assert again.status("survivor")["attempts"] == 2
    assert again.wait("waiting")["kind"] == "done"  # it stayed queued across the crash
    assert again.status("waiting")["attempts"] == 1
    again.fetch("survivor", tmp_path / "out")
    np.testing.assert_allclose(np.load(tmp_path / "out" / "texture.npy"), images.mean(0),
                               atol=2e-3)


def test_finished_jobs_expire_after_the_retention_time(start_server, connect):
    server = start_server()
    client = connect(server)
    client.submit("old", fit_spec(iterations=5), {"images": target_images()})
    assert client.wait("old")["kind"] == "done"
    client.close()
    server.stop()
    server.extra = ("--retention-days", "0")
    server.start()
    with pytest.raises(ServerError) as info:
        connect(server).status("old")
    assert info.value.code == "not_found"
    assert not server.job_dir("old").exists()
    assert list((server.data_dir / "blobs").rglob("*"))  # blobs go only when an hour old


class OutOfMemoryRunner(TextureFitRunner):
    """fit_texture's checks, then what torch raises when a CUDA allocation fails."""

    task = "out_of_memory"

    def run(self, ctx):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_a_job_out_of_gpu_memory_fails_alone_with_a_clear_message(tmp_path):
    images = target_images()
    with server_in_process(tmp_path / "data", [OutOfMemoryRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("before", fit_spec(iterations=20), {"images": images})
        client.submit("greedy", fit_spec(task="out_of_memory"), {"images": images})
        client.submit("after", fit_spec(iterations=20), {"images": images})
        failed = client.wait("greedy")
        assert failed["kind"] == "failed"
        assert failed["message"].startswith("the GPU ran out of memory: lower the image")
        assert client.ping()["queued"] <= 1  # the server still answers
        status = client.status("greedy")
        assert status["state"] == "failed" and status["message"] == failed["message"]
        assert client.wait("before")["kind"] == "done"
        assert client.wait("after")["kind"] == "done"
        assert [job["state"] for job in client.list_jobs()] == ["done", "failed", "done"]


def test_an_unexpected_failure_is_worded_without_a_class_name(tmp_path):
    """Issue 24: the failed event reaches the artist; it says what happened, not the class."""
    from diffrec.server.job_process import failure_message

    message = failure_message(KeyError("albedo texture"), tmp_path, 0)
    assert "albedo texture" in message and "server log" in message
    assert "KeyError" not in message and "internal error (" not in message


def test_a_second_server_on_a_data_directory_in_use_refuses_to_start(start_server, connect):
    """Before, it ran the first one's running jobs again (issue: two servers, one data dir)."""
    first = start_server()
    gateway = ("--cluster", f"127.0.0.1:{free_port()}")  # the gateway's path too, with Ray
    for cluster in ((), gateway) if importlib.util.find_spec("ray") else ((),):
        command = [sys.executable, "-m", "diffrec", "serve", "--bind",
                   f"tcp://127.0.0.1:{free_port()}", "--data-dir", str(first.data_dir),
                   "--device", "cpu", *cluster]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        said = done.stderr
        assert f"is using the data directory {first.data_dir}" in said, said
        assert f"process {first.process.pid} " in said and first.address in said, said
    connect(first).ping()  # the first one goes on
    first.kill()  # a killed server leaves no lock behind
    start_server(data_dir=first.data_dir)


def test_a_closed_server_lets_the_next_one_have_its_data_directory(tmp_path):
    with server_in_process(tmp_path / "data"):
        with pytest.raises(UserError, match="another diffrec server"):
            Server(f"tcp://127.0.0.1:{free_port()}", tmp_path / "data")
    with server_in_process(tmp_path / "data"):
        pass


def test_a_server_that_fails_to_start_lets_go_of_its_data_directory(tmp_path, monkeypatch):
    """A start that fails after the lock is taken (the blob store, the bind) leaves the
    directory to the next server in the same process."""
    from diffrec.server import app

    def failing(*_args):
        raise OSError("no space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(app, "BlobStore", failing)
        with pytest.raises(OSError):
            Server(f"tcp://127.0.0.1:{free_port()}", tmp_path / "data")
    with server_in_process(tmp_path / "data"):
        pass


def test_a_server_on_a_port_in_use_leaves_no_data_directory_behind(tmp_path):
    """A server on a busy port made its new data directory (blobs/, server.lock), then
    refused to start; the folders it made go again, a directory that was there stays."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        bind = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(UserError, match="cannot listen on"):
            Server(bind, tmp_path / "new" / "data")
        assert not (tmp_path / "new").exists()
        (tmp_path / "kept").mkdir()
        with pytest.raises(UserError, match="cannot listen on"):
            Server(bind, tmp_path / "kept")
        assert (tmp_path / "kept").is_dir()
