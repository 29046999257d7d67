"""A followed job's results are fetched until they read whole (issue 56.7): a fetch that
meets a half-written manifest (another follower of the job writing the same folder, as after
File > New and reopening mid-job) is tried again instead of ending the follow in an error; one
that never reads whole raises that error after FETCH_TRIES tries. No bpy."""

from __future__ import annotations

import pytest

from addon.core import job_session
from addon.core.wire import protocol

MANIFEST = protocol().manifest


class HalfWrittenFirst:
    """A client whose first ``bad`` fetches leave the folder's manifest written twice over
    (as two writers of one part file leave it) and whose later ones leave it whole."""

    def __init__(self, folder, bad: int):
        self.folder, self.bad, self.fetches = folder, bad, 0

    def fetch(self, job, directory, only=None):
        self.fetches += 1
        (self.folder / "mesh.glb").write_bytes(b"glTF")
        MANIFEST.write_manifest(self.folder, {"mesh.glb": "mesh"})
        manifest = self.folder / MANIFEST.MANIFEST_NAME
        if self.fetches <= self.bad:
            manifest.write_text(manifest.read_text() * 2)
        return [self.folder / "mesh.glb", manifest]


def fetched(client, folder, monkeypatch) -> list:
    monkeypatch.setattr(job_session, "FETCH_RETRY_S", 0.0)
    return job_session.JobSession(lambda: client, "j", folder)._fetch_complete(client)


def test_a_half_written_manifest_is_fetched_again(tmp_path, monkeypatch):
    client = HalfWrittenFirst(tmp_path, bad=job_session.FETCH_TRIES - 1)
    files = fetched(client, tmp_path, monkeypatch)
    assert client.fetches == job_session.FETCH_TRIES
    assert [path.name for path in files] == ["mesh.glb", "manifest.json"]
    MANIFEST.verify(tmp_path, MANIFEST.read_manifest(tmp_path))


def test_a_manifest_that_never_reads_whole_raises_its_error(tmp_path, monkeypatch):
    client = HalfWrittenFirst(tmp_path, bad=job_session.FETCH_TRIES)
    with pytest.raises(MANIFEST.ManifestError, match="Extra data"):
        fetched(client, tmp_path, monkeypatch)
    assert client.fetches == job_session.FETCH_TRIES
