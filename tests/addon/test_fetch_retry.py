"""A followed job's results are fetched until they read whole (issue 56.7): a fetch that
meets a half-written manifest (another follower of the job writing the same folder, as after
File > New and reopening mid-job) is tried again instead of ending the follow in an error; one
that never reads whole ends in that error, after FETCH_TRIES tries. No bpy."""

from __future__ import annotations

from test_job_session import ScriptedClient, _event

from addon import job_session
from addon.wire import protocol

MANIFEST = protocol().manifest


class HalfWrittenFirst(ScriptedClient):
    """A done job whose first ``bad`` fetches leave the folder's manifest written twice over
    (as two writers of one part file leave it) and whose later ones leave it whole."""

    def __init__(self, folder, bad: int):
        super().__init__([[_event("done", results=[])]])
        self.folder, self.bad, self.fetches = folder, bad, 0

    def fetch(self, job, directory, only=None):
        self.fetches += 1
        (self.folder / "mesh.glb").write_bytes(b"glTF")
        MANIFEST.write_manifest(self.folder, {"mesh.glb": "mesh"})
        manifest = self.folder / MANIFEST.MANIFEST_NAME
        if self.fetches <= self.bad:
            manifest.write_text(manifest.read_text() * 2)
        return [self.folder / "mesh.glb", manifest]


def session_updates(client, folder, monkeypatch) -> list:
    monkeypatch.setattr(job_session, "FETCH_RETRY_S", 0.0)
    session = job_session.JobSession(lambda: client, "j", folder)
    session.run()
    updates = []
    while not session.updates.empty():
        updates.append(session.updates.get())
    return updates


def test_a_half_written_manifest_is_fetched_again(tmp_path, monkeypatch):
    client = HalfWrittenFirst(tmp_path, bad=job_session.FETCH_TRIES - 1)
    updates = session_updates(client, tmp_path, monkeypatch)
    assert [u.kind for u in updates] == ["done", "fetched"], [(u.kind, u.fields) for u in updates]
    assert client.fetches == job_session.FETCH_TRIES
    assert updates[-1].fields["files"][0].endswith("mesh.glb")


def test_a_manifest_that_never_reads_whole_ends_in_its_error(tmp_path, monkeypatch):
    client = HalfWrittenFirst(tmp_path, bad=job_session.FETCH_TRIES)
    updates = session_updates(client, tmp_path, monkeypatch)
    assert [u.kind for u in updates] == ["done", "error"]
    assert client.fetches == job_session.FETCH_TRIES
    assert "Extra data" in updates[-1].fields["message"], updates[-1].fields
