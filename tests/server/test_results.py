"""Fetching results by their manifest: the whole result, a subset by name or role (API and
``diffrec fetch --only``), and a file that does not match the manifest refused by name."""

from __future__ import annotations

import hashlib
import json
from unittest import mock

import numpy as np
import pytest
from helpers.servers import error_of, fit_spec, server_in_process, target_images

from diffrec import cli
from diffrec.protocol import Client, ManifestError
from diffrec.server.texture_fit import TextureFitRunner

RESULT = ["texture.npy", "render.npy", "metrics.json", "manifest.json"]


@pytest.fixture(scope="module")
def finished(server):
    """A done fit_texture job on the module's server: (server, job id)."""
    with Client(server.address, timeout=2.0, retry_for=30.0) as client:
        client.submit("fit", fit_spec(iterations=20), {"images": target_images()})
        assert client.wait("fit")["kind"] == "done"
    return server, "fit"


def test_the_manifest_describes_every_result_file(finished, connect, tmp_path):
    server, job = finished
    paths = connect(server).fetch(job, tmp_path)
    assert [path.name for path in paths] == RESULT
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format"] == 1
    for entry, path in zip(manifest["files"], paths, strict=False):
        data = path.read_bytes()
        assert (entry["name"], entry["size"], entry["sha256"]) == (
            path.name, len(data), hashlib.sha256(data).hexdigest())
    assert [entry["role"] for entry in manifest["files"]] == ["data", "data", "metrics"]


@pytest.mark.parametrize("only, expected", [
    (["render.npy"], ["render.npy"]),
    (["metrics"], ["metrics.json"]),  # a role
    (["data", "metrics.json"], ["texture.npy", "render.npy", "metrics.json"]),
    (["mesh", "light"], []),  # roles this result does not have: only the manifest
])
def test_a_subset_fetches_only_those_files(finished, connect, tmp_path, only, expected):
    server, job = finished
    paths = connect(server).fetch(job, tmp_path, only=only)
    assert [path.name for path in paths] == [*expected, "manifest.json"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*expected,
                                                                       "manifest.json"])


def test_a_subset_naming_nothing_in_the_result_is_refused(finished, connect, tmp_path):
    server, job = finished
    with pytest.raises(ManifestError, match=r"no file or role mesh\.obj.*texture\.npy"):
        connect(server).fetch(job, tmp_path, only=["mesh.obj"])
    assert list(tmp_path.iterdir()) == [], "a refused subset writes nothing, the manifest too"


def test_fetch_only_on_the_command_line(finished, tmp_path, capsys):
    server, job = finished
    where = ["--server", server.address, "--timeout", "2"]
    assert cli.main(["fetch", job, "--out", str(tmp_path), "--only", "texture.npy", "metrics",
                     *where]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / name) for name in ("texture.npy", "metrics.json",
                                                         "manifest.json")]
    assert cli.main(["fetch", job, "--out", str(tmp_path), "--only", "nothing.bin",
                     *where]) == 2
    assert "no file or role nothing.bin" in capsys.readouterr().err


class CorruptingRunner(TextureFitRunner):
    """fit_texture, then one byte of texture.npy flipped after the manifest was written (what
    a failing disk or a buggy task does): the transfer's hash, taken from the file as it is
    when the job ends, cannot notice; the manifest can."""

    task = "corrupting_fit"

    def run(self, ctx):
        super().run(ctx)
        path = ctx.results_dir / "texture.npy"
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))


def test_a_file_that_does_not_match_the_manifest_is_refused(tmp_path, capsys):
    """By the client, from a server that does not check its results (an older one), and by
    the server itself, which then marks the job failed (``damaged``)."""
    with server_in_process(tmp_path / "data", [CorruptingRunner()]) as server, \
            Client(server.endpoint, timeout=2.0, retry_for=30.0) as client:
        client.submit("bad", fit_spec(task="corrupting_fit", iterations=20),
                      {"images": target_images()})
        assert client.wait("bad")["kind"] == "done"
        with mock.patch.object(server.jobs.result_check, "problems", lambda *args: []):
            with pytest.raises(ManifestError, match=r"texture\.npy does not match the manifest"):
                client.fetch("bad", tmp_path / "out")
            held = sorted(path.name for path in (tmp_path / "out").iterdir())
            assert held == ["manifest.json", "metrics.json", "render.npy"], "the bad file is gone"
            # a subset without the bad file is fine
            paths = client.fetch("bad", tmp_path / "part", only=["render.npy"])
            assert [path.name for path in paths] == ["render.npy", "manifest.json"]
        assert cli.main(["fetch", "bad", "--out", str(tmp_path / "cli"), "--server",
                         server.endpoint, "--timeout", "2"]) == 2
        assert "texture.npy does not match the manifest" in capsys.readouterr().err
        assert client.status("bad")["state"] == "failed"


def test_a_fetch_over_an_earlier_result_leaves_none_of_its_files(finished, connect, tmp_path):
    server, job = finished
    (tmp_path / "mesh.obj").write_text("an earlier job's")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1, "files": [
        {"name": "mesh.obj", "size": 16, "sha256": "0" * 64, "role": "obj"}]}))
    connect(server).fetch(job, tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*RESULT, "notes.txt"])


def test_a_partial_fetch_over_an_earlier_result_keeps_only_this_results_files(
        finished, connect, tmp_path):
    """``--only`` over another job's result: that result's files go, those the new manifest
    lists too included (they are another job's, by their hashes); over a part of this job's
    result fetched before, that part stays."""
    server, job = finished
    client = connect(server)
    (tmp_path / "render.npy").write_bytes(b"an earlier job's")
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1, "files": [
        {"name": "render.npy", "size": 16, "sha256": "0" * 64, "role": "data"}]}))
    client.fetch(job, tmp_path, only=["metrics"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["manifest.json", "metrics.json"]
    client.fetch(job, tmp_path, only=["render.npy"])
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "manifest.json", "metrics.json", "render.npy"]


def test_read_says_a_job_not_done_and_an_offset_past_the_end(finished, connect):
    """``read`` answered ``not_found`` for a job not done (``fetch``: ``not_ready``) and an
    empty frame for an offset past the file's end, which a client reading to the size
    could ask for again and again."""
    server, job = finished
    client = connect(server)
    size = next(f["size"] for f in client.call("fetch", {"job": job})["files"]
                if f["name"] == "texture.npy")
    read = {"job": job, "file": "texture.npy", "length": 16}
    assert client.call("read", {**read, "offset": size})["arrays"]["data"].size == 0
    past = error_of(lambda: client.call("read", {**read, "offset": size + 1}))
    assert past.code == "bad_request" and f"past the end of texture.npy ({size} bytes)" \
        in past.message, past
    client.submit("long", fit_spec(iterations=10**6), {"images": target_images()})
    running = error_of(lambda: client.call("read", {**read, "job": "long", "offset": 0}))
    assert running.code == "not_ready" and (
        "is queued, not done" in running.message or "is running, not done" in running.message
    ), running
    client.delete("long")


def test_a_blob_named_with_a_shape_it_does_not_hold_says_both_sizes(server, connect):
    """The owner of a 1000-byte blob, naming it with a shape of 3072 bytes, was told the blob
    was missing and to upload it."""
    client = connect(server)
    blob = client.upload(np.zeros(250, np.float32))
    refused = error_of(lambda: client.call("submit", {
        "job": "wrong-shape", "spec": fit_spec(iterations=2),
        "inputs": {"images": {"blob": blob, "dtype": "float32", "shape": [4, 8, 8, 3]}}}))
    assert refused.code == "invalid_input" and refused.message == (
        f"blob {blob} holds 1000 bytes, but float32 [4, 8, 8, 3] needs 3072: give the array's "
        "own dtype and shape"), refused
