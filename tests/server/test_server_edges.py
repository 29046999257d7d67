"""A server at its edges: events over the protocol's limits, listings longer than one reply,
repeated deletes, deleting a queued job someone follows, and stop requests that outlive the
server. In-process servers with test-only runners, over real sockets."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch
from helpers.servers import fit_spec, server_in_process, target_images

from diffrec.pipeline.reporter import PreviewFrame
from diffrec.protocol import Client, events
from diffrec.protocol.limits import MAX_INLINE_BYTES, MAX_MESSAGE_CHARS
from diffrec.server import job_table
from diffrec.server.job_store import JobStore
from diffrec.server.optimize_runner import _preview_arrays
from diffrec.server.runner import JobFailed
from diffrec.server.texture_fit import TextureFitRunner


class OversizedRunner(TextureFitRunner):
    """Emits a preview frame over the frame limit and a huge log line, then fails with a huge
    message: what a buggy runner might do."""

    task = "oversized"

    def run(self, ctx):
        side = int((MAX_INLINE_BYTES / 4) ** 0.5) + 8
        ctx.emit(events.Preview("fit", 1, images={"render": np.zeros((side, side), np.float32)}))
        ctx.emit(events.Log("x" * 100_000))
        raise JobFailed("y" * 100_000)


class BlockingRunner(TextureFitRunner):
    """Runs until it is asked to stop."""

    task = "blocking"

    def run(self, ctx):
        while not ctx.should_stop():
            time.sleep(0.01)


def events_of(client: Client, job: str, until: str, timeout: float = 20.0) -> list:
    events = []
    for event in client.events(idle_timeout=timeout):
        if event["job"] == job:
            events.append(event)
            if event["kind"] == until:
                return events
    raise AssertionError(f"no {until} event for {job}: {[e['kind'] for e in events]}")


def test_events_over_the_limits_are_cut_or_dropped_and_the_server_goes_on(tmp_path):
    with server_in_process(tmp_path / "data", [OversizedRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("big", fit_spec(task="oversized"), {"images": target_images()})
        events = []
        final = client.wait("big", on_event=events.append)
        assert final["kind"] == "failed"
        assert len(final["message"]) == MAX_MESSAGE_CHARS and final["message"].endswith("…")
        (log_event,) = [e for e in events if e["kind"] == "log"]
        assert len(log_event["message"]) == MAX_MESSAGE_CHARS
        assert not [e for e in events if e["kind"] == "preview"]  # dropped, not sent broken
        assert client.status("big")["message"] == final["message"]
        client.submit("after", fit_spec(iterations=10), {"images": target_images()})
        assert client.wait("after")["kind"] == "done"


def test_previews_leave_out_a_mesh_too_big_for_one_frame():
    image = torch.rand(16, 16, 3)
    small = PreviewFrame(events.Preview("pass2", 10), image, image,
                    vertices=torch.rand(10, 3), faces=torch.randint(0, 10, (8, 3)))
    arrays = _preview_arrays(small)
    assert np.array_equal(arrays["vertices"], small.vertices.numpy())
    assert np.array_equal(arrays["faces"], small.faces.numpy())
    count = MAX_INLINE_BYTES // 12 + 1  # float32 xyz: one vertex more than a frame holds
    huge = dataclasses.replace(small, vertices=torch.zeros(count, 3),
                               faces=torch.zeros(8, 3).long())
    assert set(_preview_arrays(huge)) == {"render", "target"}


def test_a_long_listing_comes_in_pages(tmp_path, monkeypatch):
    monkeypatch.setattr(job_table, "LIST_REPLY_BYTES", 700)  # two or three statuses per reply
    with server_in_process(tmp_path / "data") as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        names = [f"job{i}" for i in range(7)]
        for name in names:
            client.submit(name, fit_spec(iterations=1), {"images": target_images()})
        first = client.call("list")
        assert 1 <= len(first["jobs"]) < len(names) and first["cursor"] is not None
        assert [job["job"] for job in client.list_jobs()] == names


def test_delete_of_a_followed_queued_job_ends_its_stream_and_can_be_repeated(tmp_path):
    with server_in_process(tmp_path / "data", [BlockingRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("busy", fit_spec(task="blocking"), {"images": target_images()})
        client.submit("waiting", fit_spec(), {"images": target_images()})
        assert client.attach("waiting")["state"] == "queued"
        assert client.delete("waiting")["deleted"] is True
        final = events_of(client, "waiting", "cancelled")[-1]
        assert final["message"] == "the job was deleted"
        assert client.delete("waiting")["deleted"] is True  # a retried delete
        with pytest.raises(Exception, match="no job"):
            client.status("waiting")
        client.submit("waiting", fit_spec(iterations=5), {"images": target_images()})
        assert client.cancel("busy")["state"] == "cancelling"
        assert client.wait("busy")["kind"] == "cancelled"
        assert client.wait("waiting")["kind"] == "done"  # the id is usable again


@pytest.mark.parametrize("stop", ["cancel", "delete"])
def test_a_stop_asked_before_the_server_died_is_honoured_when_it_starts(tmp_path, stop):
    """The server was killed after a client asked a running job to stop, before it stopped:
    the state file says so, and the job must not resume."""
    data = tmp_path / "data"
    record = {"id": "stopped", "owner": "local", "task": "fit_texture", "spec": fit_spec(),
              "inputs": {}, "state": "running", "seq": 1, "created": time.time(),
              "finished": None, "attempts": 1, "progress": None, "message": "",
              "results": [], "stop": stop}
    JobStore(data).create(record)
    with server_in_process(data) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        if stop == "cancel":
            assert client.status("stopped")["state"] == "cancelled"
        else:
            assert client.list_jobs() == []
            assert not (data / "jobs" / "stopped").exists()
