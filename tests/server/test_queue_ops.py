"""What a front end's job queue needs from the server: resume a cancelled or failed job,
one upload percentage over all the arrays, and each job's label in the listing."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.servers import fit_spec, target_images

from diffrec.protocol import ServerError
from diffrec.protocol.limits import CHUNK_BYTES


def test_a_cancelled_job_resumes_from_its_checkpoint(server, connect):
    client = connect(server)
    client.submit("paused", fit_spec(iterations=1_000_000, checkpoint_every=100,
                                     preview_every=10**6), {"images": target_images()})
    client.attach("paused")
    progress = next(e for e in client.events(idle_timeout=30)
                    if e["kind"] == "progress" and e["iteration"] >= 200)
    client.cancel("paused")
    ended = next(e for e in client.events(idle_timeout=5) if e["kind"] in ("cancelled", "done"))
    assert ended["kind"] == "cancelled"
    # where it stopped, as the optimize task's messages say it (it said "its checkpoint kept")
    assert re.search(r"checkpoint kept at iteration \d+00 of 1000000: Resume", ended["message"])
    with pytest.raises(ServerError) as info:
        client.fetch("paused", "unused")
    assert info.value.code == "not_ready"

    reply = client.resume("paused")
    assert reply["state"] == "queued"
    assert re.fullmatch(r"resuming from its checkpoint at iteration \d+00 of 1000000",
                        reply["message"]), reply["message"]
    resumed = next(e for e in client.events(idle_timeout=30)
                   if e["kind"] == "log" and "resumed_from" in e)["resumed_from"]
    # from the last checkpoint (every 100 iterations) before the cancel, not from the start
    assert 100 <= resumed and resumed % 100 == 0, resumed
    assert resumed > progress["iteration"] - 100, (resumed, progress["iteration"])
    assert client.status("paused")["attempts"] == 2
    client.delete("paused")


def test_a_done_job_is_not_resumed(server, connect):
    client = connect(server)
    client.submit("finished", fit_spec(iterations=5), {"images": target_images()})
    assert client.wait("finished")["kind"] == "done"
    with pytest.raises(ServerError) as info:
        client.resume("finished")
    assert info.value.code == "conflict"


def test_a_job_still_queued_or_running_is_not_resumed(server, connect):
    client = connect(server)
    client.submit("busy", fit_spec(iterations=1_000_000), {"images": target_images()})
    with pytest.raises(ServerError) as info:
        client.resume("busy")
    assert info.value.code == "not_ready"
    client.delete("busy")


def test_the_upload_percentage_only_grows_over_all_the_arrays(server, connect):
    client = connect(server)
    rng = np.random.default_rng(5)
    arrays = {"images": rng.random((3, 300, 300, 4), dtype=np.float32),  # 4.3 MB each:
              "envmap": rng.random((500, 1000, 3), dtype=np.float32)}   # blobs, not inline
    assert all(array.nbytes > CHUNK_BYTES for array in arrays.values())
    seen = []
    with pytest.raises(ServerError, match="exactly one input"):  # refused after the uploads
        client.submit("two-blobs", fit_spec(iterations=1, texture_size=4), arrays,
                      on_progress=lambda done, total: seen.append((done, total)))
    total = sum(array.nbytes for array in arrays.values())
    assert {t for _, t in seen} == {total}
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == total, done


def test_the_listing_names_each_job_by_its_label(server, connect):
    client = connect(server)
    client.submit("labelled", {**fit_spec(iterations=1), "label": "Suzanne"},
                  {"images": target_images()})
    listed = {job["job"]: job for job in client.list_jobs()}
    assert listed["labelled"]["label"] == "Suzanne"
    assert "label" not in client.submit("unlabelled", fit_spec(iterations=1),
                                        {"images": target_images()})
