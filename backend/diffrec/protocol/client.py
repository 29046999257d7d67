"""The client side: ``Client``, the protocol's operations over a ``Channel`` (the request
loop: timeouts, reconnection with backoff, event streaming with heartbeats), with resumable
chunked uploads and downloads (``client_transfers``).

Every operation is idempotent, so after a timeout the client reconnects and repeats the
request; uploads and downloads continue from the byte offset the receiver holds.
``ServerUnavailable`` is raised when the server stays silent for ``retry_for`` seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from . import client_transfers, events
from .channel import Channel
from .client_transfers import Progress
from .errors import ServerUnavailable
from .keys import parse_pairing
from .message import Message


class Client(Channel):
    """A connection to a diffrec server and its operations (``Channel`` for the connection's
    arguments). Not thread-safe: use one per thread."""

    @classmethod
    def from_pairing(cls, pairing: str, client_keypair: tuple[str, str], **kwargs) -> Client:
        address, server_key = parse_pairing(pairing)
        return cls(address, server_key=server_key, client_keypair=client_keypair, **kwargs)

    # -- operations ------------------------------------------------------------------------

    def ping(self) -> dict:
        return self.call("ping")

    def status(self, job: str) -> dict:
        return self.call("status", {"job": job})

    def list_jobs(self) -> list[dict]:
        """The statuses of this client key's jobs, in submission order (every page)."""
        jobs, fields = [], {}
        while True:
            reply = self.call("list", fields)
            jobs += reply["jobs"]
            if reply.get("cursor") is None:
                return jobs
            fields = {"cursor": reply["cursor"]}

    def cancel(self, job: str) -> dict:
        return self.call("cancel", {"job": job})

    def resume(self, job: str) -> dict:
        """Queue a cancelled or failed job again (from its checkpoint when it kept one)."""
        return self.call("resume", {"job": job})

    def delete(self, job: str) -> dict:
        self.detach(job)
        return self.call("delete", {"job": job})

    def submit(
        self, job: str, spec: Mapping, arrays: Mapping[str, np.ndarray], on_progress=None
    ) -> dict:
        """Submit a job. Arrays up to CHUNK_BYTES go inline; larger ones are uploaded as blobs
        first (skipped when the server has them). Resubmitting the same ``job`` id returns the
        existing job (its reply has ``existing: true``). ``on_progress(done, total)``: bytes of
        all the uploads together, so the fraction only grows."""
        inline, inputs = client_transfers.upload_inputs(self, arrays, on_progress)
        return self.call("submit", {"job": job, "spec": dict(spec), "inputs": inputs}, inline)

    def upload(self, data, blob: str | None = None, on_progress: Progress | None = None) -> str:
        """Store ``data`` (bytes-like or array) on the server as a blob; returns its content
        hash, the blob's name (``blob``, when the caller knows it already). Resumes from the
        server's offset after any interruption, server restarts included."""
        return client_transfers.upload(self, data, blob, on_progress)

    def fetch(self, job: str, directory: Path, on_progress: Progress | None = None,
              only: Iterable[str] | None = None) -> list[Path]:
        """Download a finished job's results into ``directory``: its ``manifest.json`` first,
        then the files ``only`` selects from it (file names or roles, see
        ``manifest.select``; every listed file when None). Each file is verified by its
        transfer content hash (resumed from any ``.part`` file left by an earlier attempt, and
        not downloaded again when already held), then against the manifest's size and sha256.
        Returns the selected files' paths in manifest order, then the manifest's.

        Raises ManifestError when the results have no valid manifest, ``only`` names something
        the result does not hold (nothing is written then, not even ``directory``), or files do
        not match the manifest (those files are removed, and the error names each one);
        ProtocolError or ServerError for transfer failures."""
        return client_transfers.fetch(self, job, Path(directory), on_progress, only)

    # -- events ----------------------------------------------------------------------------

    def wait(self, job: str, on_event: Callable[[Message], None] | None = None,
             on_link: Callable[[str], None] | None = None) -> Message | dict:
        """Attach and follow ``job`` to its end; returns the final event (its ``event`` an
        ``events.Finished``; or, if it had already ended, the final event replayed by the
        server). ``on_link``: told when the server
        stops answering, and when it is back or restarted (``events``; attached again then).
        Raises JobLost when a restarted server no longer knows ``job``."""
        self.attach(job)
        for event in self.events(on_link=on_link):
            if event["job"] != job:
                continue
            if on_event:
                on_event(event)
            if isinstance(event.event, events.Finished):
                self.detach(job)
                return event
        raise ServerUnavailable("the event stream ended")
