"""Jobs over real sockets: submit, progress, fetch, dedup, idempotency, cancel, re-attach."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from helpers.servers import blob_path, fit_spec, reference_content_hash, target_images

from diffrec.protocol import PROTOCOL_VERSION, ServerError
from diffrec.protocol.limits import CHUNK_BYTES


def test_submit_progress_fetch_byte_identical(server, connect, tmp_path):
    client = connect(server)
    assert client.ping()["protocol"] == PROTOCOL_VERSION
    images = target_images()
    reply = client.submit("job-1", fit_spec(iterations=400), {"images": images})
    assert reply["state"] == "queued" and reply["existing"] is False
    events = []
    final = client.wait("job-1", on_event=events.append)
    assert final["kind"] == "done", final.fields
    progress = [e for e in events if e["kind"] == "progress"]
    assert progress and progress[-1]["iteration"] == 400
    assert all(a["iteration"] < b["iteration"] for a, b in itertools.pairwise(progress))
    previews = [e for e in events if e["kind"] == "preview"]
    assert previews and previews[-1].arrays["target"].shape == (16, 16, 3)
    np.testing.assert_array_equal(previews[-1].arrays["target"], images[0])

    paths = client.fetch("job-1", tmp_path / "out")
    assert [p.name for p in paths] == ["texture.npy", "render.npy", "metrics.json",
                                      "manifest.json"]  # manifest order, the manifest last
    for path in paths:
        assert path.read_bytes() == (server.job_dir("job-1") / "results" / path.name).read_bytes()
    # the least-squares texture for an identity resampling is the per-pixel mean of the targets
    texture = np.load(tmp_path / "out" / "texture.npy")
    np.testing.assert_allclose(texture, images.mean(0), atol=2e-3)
    best_mse = float(((images - images.mean(0)) ** 2).mean())
    assert progress[-1]["psnr"] == pytest.approx(-10 * np.log10(best_mse), abs=0.05)


def test_large_inputs_are_uploaded_once_then_deduplicated(server, connect):
    client = connect(server)
    images = target_images(count=6, size=256, seed=3)  # 4.7 MB: over one chunk, so a blob
    assert images.nbytes > CHUNK_BYTES
    uploads = []
    client.submit("big-a", fit_spec(iterations=1, texture_size=4), {"images": images},
                  on_progress=lambda done, total: uploads.append(done))
    assert uploads[-1] == images.nbytes
    uploads.clear()
    client.submit("big-b", fit_spec(iterations=1, texture_size=4), {"images": images},
                  on_progress=lambda done, total: uploads.append(done))
    assert uploads == []  # the server had the blob already
    blob = blob_path(server.data_dir, reference_content_hash(images.tobytes()))
    assert blob.read_bytes() == images.tobytes()
    for job in ("big-a", "big-b"):
        assert client.wait(job)["kind"] == "done"


def test_a_blob_that_does_not_match_its_content_hash_is_refused_then_sent_again(server,
                                                                              connect):
    client = connect(server)
    payload = np.random.default_rng(4).bytes(3 * CHUNK_BYTES + 12345)  # hashed in the background
    blob_id = reference_content_hash(payload)
    corrupt = bytearray(payload)
    corrupt[-1] ^= 1  # only the last chunk differs
    with pytest.raises(ServerError) as info:
        client.upload(bytes(corrupt), blob=blob_id)
    assert info.value.code == "hash_mismatch"
    blob = blob_path(server.data_dir, blob_id)
    assert not blob.exists() and not list(blob.parent.glob(f"{blob_id}.*part"))
    assert client.call("upload", {"blob": blob_id, "size": len(payload)})["offset"] == 0
    assert client.upload(payload) == blob_id  # the whole blob again, now verified
    assert blob.read_bytes() == payload


def test_resubmitting_a_job_id_returns_the_existing_job(server, connect):
    client = connect(server)
    first = client.submit("same", fit_spec(), {"images": target_images()})
    again = client.submit("same", fit_spec(iterations=5), {"images": target_images(seed=9)})
    assert again["existing"] is True and again["created"] == first["created"]
    assert [job["job"] for job in client.list_jobs()].count("same") == 1
    assert client.wait("same")["kind"] == "done"
    assert client.status("same")["progress"]["iterations"] == 200  # the first spec ran


def test_cancel_is_honoured_within_a_second(server, connect):
    client = connect(server)
    client.submit("long", fit_spec(iterations=1_000_000), {"images": target_images()})
    client.submit("next", fit_spec(iterations=10), {"images": target_images()})
    client.attach("long")
    first = next(e for e in client.events(idle_timeout=30) if e["kind"] == "progress")
    assert first["iteration"] < 1_000_000
    started = time.monotonic()
    assert client.cancel("long")["state"] == "cancelling"
    final = next(e for e in client.events(idle_timeout=5) if e["kind"] in ("cancelled", "done"))
    assert final["kind"] == "cancelled"
    assert time.monotonic() - started < 1.0
    assert client.status("long")["state"] == "cancelled"
    assert client.wait("next")["kind"] == "done"  # the queue moves on
    with pytest.raises(ServerError) as info:
        client.fetch("long", "unused")
    assert info.value.code == "not_ready"


def test_a_new_client_reattaches_and_fetches(server, connect, tmp_path):
    first = connect(server)
    images = target_images()
    first.submit("detached", fit_spec(iterations=3000), {"images": images})
    first.attach("detached")
    next(e for e in first.events(idle_timeout=30) if e["kind"] == "progress")
    first.close()  # Blender closed mid-job

    second = connect(server)
    assert second.status("detached")["state"] in ("running", "done")
    assert second.wait("detached")["kind"] == "done"
    second.fetch("detached", tmp_path / "out")
    np.testing.assert_allclose(np.load(tmp_path / "out" / "texture.npy"), images.mean(0),
                               atol=2e-3)


def test_bad_inputs_get_clear_errors_and_a_failing_job_fails_alone(server, connect):
    client = connect(server)
    images = target_images()
    bad = images.copy()
    bad[0, 0, 0, 0] = np.nan
    cases = [
        ({"images": bad}, fit_spec(), "NaN"),
        ({"images": images[..., :2]}, fit_spec(), "axis 3"),
        ({"images": images, "meshes": images}, fit_spec(), "unknown input"),
        ({"images": images}, fit_spec(iterations=0), "iterations"),
        ({"images": images}, {"task": "nope"}, "task"),
        ({"images": images}, {"task": ["fit_texture"]}, "task"),
        ({"images": images}, {"task": "optimize", "settings": [1]}, "settings"),
        ({"images": (images * 255).astype(np.uint8)}, fit_spec(), "float images"),
    ]
    for arrays, spec, why in cases:
        with pytest.raises(ServerError, match=why) as info:
            client.submit("bad", spec, arrays)
        assert info.value.code == "invalid_input"
    huge = np.full_like(images, 1e30)  # finite, but its squared error overflows float32
    client.submit("overflow", fit_spec(), {"images": huge})
    failed = client.wait("overflow")
    assert failed["kind"] == "failed" and "NaN or infinite" in failed["message"]
    client.submit("fine", fit_spec(iterations=20), {"images": images})
    assert client.wait("fine")["kind"] == "done"


def test_delete_removes_finished_and_running_jobs(server, connect):
    client = connect(server)
    client.submit("finished", fit_spec(iterations=5), {"images": target_images()})
    assert client.wait("finished")["kind"] == "done"
    client.submit("busy", fit_spec(iterations=1_000_000), {"images": target_images()})
    client.attach("busy")
    events = client.events(idle_timeout=30)
    next(e for e in events if e["kind"] == "progress")
    for job in ("finished", "busy"):
        assert client.delete(job)["deleted"] is True
    final = next(e for e in events if e["kind"] not in ("progress", "log", "preview"))
    assert (final["kind"], final["message"]) == ("cancelled", "the job was deleted"), (
        "not 'Resume continues': a deleted job cannot be resumed")
    deadline = time.monotonic() + 5
    while server.job_dir("busy").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for job in ("finished", "busy"):
        assert not server.job_dir(job).exists()
        with pytest.raises(ServerError) as info:
            client.status(job)
        assert info.value.code == "not_found"
