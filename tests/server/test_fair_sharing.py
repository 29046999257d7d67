"""Issue 26.3 and 26.6: keys share the server fairly. Keys take turns (round robin) with at
most ``--max-running-jobs`` each handed to the worker; a job stops at ``--max-wall-time-s``;
iterations over ``--max-iterations`` are refused at submit; ``ping.queued`` counts the
caller's own jobs only. Before, the worker ran every job first in, first out, unbounded."""

from __future__ import annotations

import time

import pytest
from helpers.server_fixtures import curve_server
from helpers.servers import error_of, fit_spec, open_client, target_images

WALL_TIME_S = 8.0
START_SLACK_S = 30.0
"""B's job must start within one A job's wall time and this (process starts on a loaded
2-core machine, polling)."""


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    server, server_key, keys = curve_server(
        tmp_path_factory.mktemp("fair"), "--max-wall-time-s", str(WALL_TIME_S),
        "--max-iterations", "200000")
    yield server, server_key, keys
    server.kill()


def test_a_small_job_of_key_b_starts_while_key_a_has_long_jobs_queued(shared):
    server, server_key, keys = shared
    images = target_images(size=16)
    with open_client(server, server_key, keys["alice"]) as alice, \
            open_client(server, server_key, keys["bob"]) as bob:
        for index in range(3):  # each would run for minutes: stopped at the wall time
            alice.submit(f"long-{index}", fit_spec(iterations=200000, checkpoint_every=100000),
                         {"images": images})
        assert alice.ping()["queued"] >= 2 and bob.ping()["queued"] == 0
        submitted = time.monotonic()
        bob.submit("small", fit_spec(iterations=5), {"images": images})
        assert bob.ping()["queued"] == 1
        final = bob.wait("small")
        waited = time.monotonic() - submitted
        assert final["kind"] == "done", final.fields
        assert waited < WALL_TIME_S + START_SLACK_S, waited
        # bob's job went before alice's second and third: they are still waiting or running
        assert {alice.status(f"long-{i}")["state"] for i in (1, 2)} <= {"queued", "running"}
        first = alice.wait("long-0")
        assert first["kind"] == "failed"
        assert f"limit of {WALL_TIME_S:g} s per job" in first["message"]
        for index in (1, 2):
            alice.cancel(f"long-{index}")


def test_iterations_over_the_server_limit_are_refused_at_submit(shared):
    server, server_key, keys = shared
    with open_client(server, server_key, keys["bob"]) as bob:
        error = error_of(lambda: bob.submit("huge", fit_spec(iterations=500000),
                                            {"images": target_images()}))
        assert error.code == "invalid_input"
        assert error.message.startswith("iterations 500000 is over this server's limit of "
                                        "200000 per job")
        assert "--max-iterations" in error.message
