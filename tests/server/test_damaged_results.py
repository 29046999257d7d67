"""Results on the server's disk are checked against the job's listing and its manifest on
every ``fetch`` (size and SHA-256), and each ``read`` against the listed size (issue 55.8): a
result file cut short, emptied, missing or edited, or an edited manifest, is one ``damaged``
sentence naming the file, and the job is marked failed with that sentence (resume runs it
again), never ``internal error (ValueError/FileNotFoundError)``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.servers import error_of, fit_spec, server_in_process, target_images

from diffrec import cli
from diffrec.protocol import Client
from diffrec.protocol.manifest import write_manifest
from diffrec.server import result_check
from diffrec.server.executor import result_files
from diffrec.server.result_check import ResultCheck

RESULT = ["texture.npy", "render.npy", "metrics.json", "manifest.json"]


def damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "emptied":
        path.write_bytes(b"")
    elif how == "missing":
        path.unlink()
    else:  # edited: one byte changed, the size kept
        path.write_bytes(data[:-2] + bytes([data[-2] ^ 0x01]) + data[-1:])


@pytest.fixture
def results(tmp_path):
    """A result folder as a job leaves it, and its ``results`` listing."""
    np.save(tmp_path / "texture.npy", np.arange(64, dtype=np.float32))
    np.save(tmp_path / "render.npy", np.ones((4, 4), np.float32))
    (tmp_path / "metrics.json").write_text('{"psnr": 30.0}')
    write_manifest(tmp_path, {"texture.npy": "data", "render.npy": "data",
                              "metrics.json": "metrics"})
    (tmp_path / "log.txt").write_text("a file the manifest does not describe")
    return tmp_path, result_files(tmp_path)


@pytest.mark.parametrize("name, how, said", [
    ("texture.npy", "truncated", "texture.npy has 192 bytes; the job listed 384"),
    ("render.npy", "emptied", "render.npy has 0 bytes"),
    ("metrics.json", "missing", "metrics.json is missing"),
    ("manifest.json", "edited", "manifest.json was edited after the job ended"),
    ("texture.npy", "edited", "texture.npy does not match the manifest's sha256"),
    ("log.txt", "edited", "log.txt does not match the content hash the job listed"),
])
def test_each_damage_is_a_sentence_naming_its_file(results, name, how, said):
    folder, listing = results
    check = ResultCheck()
    assert check.problems("job", folder, listing) == []
    damage(folder / name, how)
    problems = check.problems("job", folder, listing)
    assert len(problems) == 1 and said in problems[0], problems


def test_files_found_whole_are_hashed_again_only_once_they_change(results, monkeypatch):
    folder, listing = results
    hashed = []
    real = result_check.content_hash_file
    monkeypatch.setattr(result_check, "content_hash_file",
                        lambda path: hashed.append(path.name) or real(path))
    check = ResultCheck()
    assert check.problems("job", folder, listing) == [] and hashed
    hashed.clear()
    assert check.problems("job", folder, listing) == [] and hashed == []
    damage(folder / "log.txt", "edited")
    assert check.problems("job", folder, listing) != [] and "log.txt" in hashed


@pytest.fixture(scope="module")
def done_jobs(tmp_path_factory):
    """A server with two done fit_texture jobs, job0 and job1: (server, client)."""
    with server_in_process(tmp_path_factory.mktemp("damaged") / "data") as server, \
            Client(server.endpoint, timeout=10.0, retry_for=60.0) as client:
        for job in ("job0", "job1"):
            client.submit(job, fit_spec(iterations=10, checkpoint_every=5),
                          {"images": target_images()})
        for job in ("job0", "job1"):
            assert client.wait(job)["kind"] == "done"
        yield server, client


def test_a_damaged_result_fails_its_job_with_the_sentence(done_jobs, tmp_path):
    server, client = done_jobs
    (server.jobs.store.results_dir("job0") / "render.npy").write_bytes(b"")
    error = error_of(lambda: client.fetch("job0", tmp_path))
    assert error.code == "damaged", error
    assert "render.npy has 0 bytes" in error.message and "resume it" in error.message
    assert error.message.startswith("the results of job 'job0' on the server's disk are damaged")
    status = client.status("job0")
    assert status["state"] == "failed" and "render.npy has 0 bytes" in status["message"]
    assert error_of(lambda: client.fetch("job0", tmp_path)).code == "not_ready"
    client.resume("job0")  # runs it again: whole results
    with Client(server.endpoint, timeout=10.0, retry_for=60.0) as again:  # not the old events
        assert again.wait("job0")["kind"] == "done"
        assert [path.name for path in again.fetch("job0", tmp_path / "again")] == RESULT


def test_a_file_cut_short_after_fetch_listed_it_is_refused_on_read(done_jobs, tmp_path, capsys):
    server, client = done_jobs
    listing = client.call("fetch", {"job": "job1"})["files"]
    entry = next(entry for entry in listing if entry["name"] == "texture.npy")
    path = server.jobs.store.results_dir("job1") / "texture.npy"
    path.write_bytes(path.read_bytes()[:100])
    error = error_of(lambda: client.call("read", {"job": "job1", "file": "texture.npy",
                                                  "offset": 0, "length": entry["size"]}))
    assert error.code == "damaged" and "texture.npy has 100 bytes" in error.message, error
    assert cli.main(["fetch", "job1", "--out", str(tmp_path), "--server", server.endpoint,
                     "--timeout", "10"]) == 2
    assert "not done" in capsys.readouterr().err  # failed now, with the sentence
    assert "texture.npy has 100 bytes" in client.status("job1")["message"]
