"""Two fetches of one result into one folder at once (two followers of one job, as after
File > New and reopening mid-job, issue 56.7) take turns: neither reads a half-written
manifest, neither loses its ``.part`` file to the other, and both return the complete,
verified files."""

from __future__ import annotations

import threading

from helpers.servers import fit_spec, server_in_process, target_images

from diffrec.protocol import Client, client_transfers
from diffrec.protocol.manifest import read_manifest, verify
from diffrec.protocol.transfer import ResumableFile


class MeetingFile(ResumableFile):
    """A ResumableFile whose opening waits (up to a second) for the other fetch to open its
    own: without turns, both then write the same part file."""

    meeting = threading.Barrier(2, timeout=1.0)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:
            self.meeting.wait()
        except threading.BrokenBarrierError:  # the other fetch waits its turn
            pass


def test_two_fetches_into_one_folder_take_turns(tmp_path, monkeypatch):
    monkeypatch.setattr(client_transfers, "ResumableFile", MeetingFile)
    folder, outcomes = tmp_path / "results", {}
    with server_in_process(tmp_path / "data") as server:
        with Client(server.endpoint, timeout=10.0, retry_for=30.0) as client:
            client.submit("j", fit_spec(iterations=5), {"images": target_images()})
            assert client.wait("j")["kind"] == "done"

        def fetch(name: str) -> None:
            try:
                with Client(server.endpoint, timeout=10.0, retry_for=30.0) as client:
                    outcomes[name] = client.fetch("j", folder)
            except Exception as exc:  # the test reports it below
                outcomes[name] = exc

        threads = [threading.Thread(target=fetch, args=(name,)) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not [o for o in outcomes.values() if isinstance(o, Exception)], outcomes
    assert outcomes["a"] == outcomes["b"]
    entries = read_manifest(folder)
    verify(folder, entries)
    assert {path.name for path in outcomes["a"]} == {e.name for e in entries} | {"manifest.json"}
    assert not list(folder.glob("*.part")) and not list(folder.glob(".*"))
