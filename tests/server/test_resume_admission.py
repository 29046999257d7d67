"""Resuming a job passes the same admission as submitting one (issue 55.5): the key's queue
quota, and the bounds of the server as it is now (``--max-iterations``, and what the task
checks of its inputs against this server: ranks, memory); a job queued when the server
stopped is held to the new server's bounds when it starts again."""

from __future__ import annotations

from helpers.servers import error_of, fit_spec, server_in_process, target_images

from diffrec.protocol import Client
from diffrec.server.quotas import Quotas
from diffrec.server.runner import JobFailed
from diffrec.server.texture_fit import TextureFitRunner

LONG = fit_spec(iterations=1_000_000)


class FussyFit(TextureFitRunner):
    """fit_texture whose input check this test can turn down, as a server with fewer GPUs or
    less memory turns down a job's ranks or size."""

    task = "fussy_fit"
    accepts = True

    def check_inputs(self, settings, inputs) -> None:
        super().check_inputs(settings, inputs)
        if not FussyFit.accepts:
            raise JobFailed("ranks 4 needs 4 GPUs and this server has 1")


def client_of(server) -> Client:
    return Client(server.endpoint, timeout=10.0, retry_for=60.0)


def test_resume_counts_against_the_queue_quota(tmp_path):
    with server_in_process(tmp_path / "data", quotas=Quotas(queued_jobs=2)) as server, \
            client_of(server) as client:
        for job in ("a", "b"):
            client.submit(job, LONG, {"images": target_images()})
        client.cancel("b")
        assert client.wait("b")["kind"] == "cancelled"
        client.submit("c", LONG, {"images": target_images()})
        error = error_of(lambda: client.resume("b"))
        assert error.code == "quota_exceeded" and "queued_jobs of 2" in error.message, error
        assert client.status("b")["state"] == "cancelled"  # left as it was
        client.cancel("c")
        assert client.wait("c")["kind"] == "cancelled"
        assert client.resume("b")["state"] == "queued"  # room again
        for job in ("a", "b"):
            client.cancel(job)


def cancelled_job(data, runners=(), spec=LONG) -> None:
    """Job 'j' submitted and cancelled on a server of ``data`` that then stops."""
    with server_in_process(data, runners) as server, client_of(server) as client:
        client.submit("j", spec, {"images": target_images()})
        client.cancel("j")
        assert client.wait("j")["kind"] == "cancelled"


def test_resume_is_held_to_the_current_iteration_bound(tmp_path):
    cancelled_job(tmp_path / "data")
    with server_in_process(tmp_path / "data", quotas=Quotas(iterations=100)) as server, \
            client_of(server) as client:
        error = error_of(lambda: client.resume("j"))
        assert error.code == "invalid_input", error
        assert "iterations 1000000 is over this server's limit of 100" in error.message
        assert "--max-iterations" in error.message
        assert client.status("j")["state"] == "cancelled"


def test_resume_is_held_to_the_current_servers_input_checks(tmp_path, monkeypatch):
    cancelled_job(tmp_path / "data", [FussyFit()], {**LONG, "task": "fussy_fit"})
    monkeypatch.setattr(FussyFit, "accepts", False)
    with server_in_process(tmp_path / "data", [FussyFit()]) as server, \
            client_of(server) as client:
        error = error_of(lambda: client.resume("j"))
        assert error.code == "invalid_input" and "ranks 4 needs 4 GPUs" in error.message
        assert client.status("j")["state"] == "cancelled"


def test_a_queued_job_is_held_to_the_bounds_of_the_server_that_restarts(tmp_path):
    with server_in_process(tmp_path / "data", quotas=Quotas(running_jobs=1)) as server, \
            client_of(server) as client:
        for job in ("first", "waiting"):
            client.submit(job, LONG, {"images": target_images()})
        assert client.status("waiting")["state"] == "queued"
    with server_in_process(tmp_path / "data", quotas=Quotas(iterations=100)) as server, \
            client_of(server) as client:
        for job in ("first", "waiting"):
            status = client.status(job)
            assert status["state"] == "failed", status
            assert "over this server's limit of 100" in status["message"]


def test_a_resumed_job_runs_under_the_current_wall_time_limit(tmp_path):
    cancelled_job(tmp_path / "data")
    with server_in_process(tmp_path / "data", quotas=Quotas(wall_time_s=1.0)) as server, \
            client_of(server) as client:
        client.resume("j")
        final = client.wait("j")
        assert final["kind"] == "failed" and "limit of 1 s per job" in final["message"], final

