"""Following one backend job, without bpy: submit (or re-attach), stream events, fetch.

``JobSession.run()`` does the network work and reports through ``updates``, a queue that the
main thread applies to the scene: the job's events as the client's channel typed them
(``diffrec.protocol.events``: progress, preview, log, and how the job finished) and the
session's own ``Update``s. It runs on a worker thread (``start``) whether the main thread
drains the queue on the one timer of every followed job (``job_controller``) or in a blocking
loop (``blender --background``); both go through ``follow.JobRun.tick``.

A followed job outlives its server's outages: the client's silence clock
(``diffrec.protocol.liveness``) says when the server stopped and when it is back or restarted
('link' updates), the session goes on waiting meanwhile and attaches again, and a restarted
server that no longer knows the job ends it as 'lost'. A server that does not answer when the
session attaches (a reopened file, Attach) is waited for the same way. ``detach`` stops
following without cancelling: the job goes on on the server (its .blend was closed).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import messages
from .wire import protocol


@dataclass
class Submission:
    """What ``submit`` sends: the job spec and its input arrays (docs/protocol.md, "Inputs")."""

    spec: dict
    arrays: Mapping[str, np.ndarray]


@dataclass
class Update:
    """One word of the session's own from the worker to the main thread (the job's events go
    as they are).

    kind: 'uploading' (fields done/total bytes of all the uploads together), 'submitted' (the
    job's status), 'link' (fields['change']: the server 'stopped', is 'back' or 'restarted',
    ``liveness.SAID``), 'fetched' (fields['files']: local paths), 'lost' or 'error'
    (fields['message']).
    """

    kind: str
    fields: dict = field(default_factory=dict)


FINAL = ("fetched", "error", "lost")
"""The session's updates that end it; so does a job that finished other than done
(``ends``)."""
FETCH_TRIES = 3
FETCH_RETRY_S = 1.0
LOST = ("the job was lost: the server restarted without it. Resume optimizes its object "
        "again")
NOT_CANCELLED = ("The server is not answering, so the job was not cancelled: it goes on when "
                 "the server is back. Re-attach it then, and cancel it again.")



def ends(update) -> bool:
    """Whether ``update`` (a job event or an ``Update``) is the last of its session: a job
    that finished other than done (a done one is fetched next), or a ``FINAL`` update."""
    events = protocol().events
    if isinstance(update, events.Finished):
        return update.outcome is not events.Outcome.DONE
    return isinstance(update, Update) and update.kind in FINAL

class JobSession:
    """One job followed to its end. ``connect`` makes a protocol Client (called on the thread
    that runs the session: a Client is not thread-safe). ``only`` limits the fetch to these
    file names or manifest roles (``Client.fetch``); every result file when None."""

    def __init__(
        self,
        connect: Callable[[], object],
        job: str,
        results_dir: Path,
        submission: Submission | None = None,
        poll_s: float = 0.25,
        only: tuple[str, ...] | None = None,
    ):
        self.connect = connect
        self.only = only
        self.job = job
        self.results_dir = Path(results_dir)
        self.submission = submission
        self.poll_s = poll_s
        self.updates: queue.Queue = queue.Queue()
        """Job events (``diffrec.protocol.events``) and ``Update``s, in order."""
        self._cancel = threading.Event()
        self._detach = threading.Event()
        self._thread: threading.Thread | None = None

    def cancel(self) -> None:
        """Ask the server to cancel the job (honoured within a second by the server)."""
        self._cancel.set()

    def detach(self) -> None:
        """Stop following within ``poll_s``, posting nothing more; the job goes on on the
        server and nothing is fetched (an upload under way still ends in its submit)."""
        self._detach.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"diffrec {self.job}", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _post(self, kind: str, fields: dict | None = None) -> None:
        self.updates.put(Update(kind, dict(fields or {})))

    def run(self) -> None:
        """Submit (if there is a submission), follow the events, fetch the results. Never
        raises: failures end as an 'error' update."""
        sent = self.submission is None  # a job to follow is on the server already
        try:
            with self.connect() as client:
                if self.submission is not None:
                    reply = client.submit(
                        self.job,
                        self.submission.spec,
                        self.submission.arrays,
                        on_progress=lambda done, total: self._post(
                            "uploading", {"done": done, "total": total}
                        ),
                    )
                    self._post("submitted", reply)
                    sent = True
                if self._follow(client) == protocol().events.Outcome.DONE:
                    files = self._fetch_complete(client)
                    self._post("fetched", {"files": [str(path) for path in files]})
        except Exception as exc:  # reported to the user; the worker must not die silently
            messages.log(exc)
            self._post("error", {"message": messages.sentence(exc, sent)})

    def _fetch_complete(self, client) -> list[Path]:
        """The results, fetched until the folder's manifest reads whole and every file of
        ``only`` matches it: another follower of this job (a reopened file's) may fetch into
        the same folder, so a fetch that finds it half-written is tried again, FETCH_TRIES
        times FETCH_RETRY_S apart, before its error stands."""
        manifest = protocol().manifest
        for _ in range(FETCH_TRIES - 1):
            try:
                return self._fetch_whole(client)
            except (manifest.ManifestError, FileNotFoundError):
                time.sleep(FETCH_RETRY_S)
        return self._fetch_whole(client)

    def _fetch_whole(self, client) -> list[Path]:
        """One fetch, then the files it brought checked against the folder's manifest as it
        reads now."""
        manifest = protocol().manifest
        files = client.fetch(self.job, self.results_dir, only=self.only)
        if files:
            fetched = {Path(path).name for path in files}
            manifest.verify(self.results_dir, [entry for entry in
                                               manifest.read_manifest(self.results_dir)
                                               if entry.name in fetched])
        return files

    def _follow(self, client) -> str:
        """Stream events until the job ends, through the server's outages; returns the final
        event's kind (its ``Outcome``), 'lost' or 'error' once posted, or 'detached'."""
        if self.submission is None:  # attaching only: a submit found the server answering
            ended = self._await_server(client)
            if ended is not None:
                return ended
        client.attach(self.job)
        cancel_sent = False
        while True:
            if self._detach.is_set():
                return "detached"
            if self._cancel.is_set() and not cancel_sent:
                if client.liveness.stopped:  # it would wait for the server's return
                    self._post("error", {"message": NOT_CANCELLED})
                    return "error"
                client.cancel(self.job)
                cancel_sent = True
            try:
                kind = self._follow_slice(client, cancel_sent)
            except protocol().JobLost:
                self._post("lost", {"message": LOST})
                return "lost"
            if kind is not None:
                return kind

    def _await_server(self, client) -> str | None:
        """Wait until the server answers (at once when it is up): one that does not is said
        'stopped' by the silence clock within seconds and 'back' when it answers, as in an
        outage mid-job, instead of failing after the client's retry time. None once it
        answered, else how the wait ended: 'detached', or 'error' once a cancel is posted as
        one (the job could not be cancelled)."""
        liveness = client.liveness
        while liveness.session is None or liveness.stopped:
            if self._detach.is_set():
                return "detached"
            if self._cancel.is_set():
                self._post("error", {"message": NOT_CANCELLED})
                return "error"
            for _ in client.events(idle_timeout=self.poll_s, give_up=False,
                                   on_link=self._post_link):
                pass  # nothing is attached yet: no event comes
        return None

    def _post_link(self, change: str) -> None:
        self._post("link", {"change": change})

    def _follow_slice(self, client, cancel_sent: bool) -> str | None:
        """The events of one ``poll_s`` without any (or until a cancel is asked); the final
        event's kind when the job ended, else None."""
        for message in client.events(idle_timeout=self.poll_s, give_up=False,
                                     on_link=self._post_link):
            if message["job"] != self.job:
                continue
            self.updates.put(message.event)
            if isinstance(message.event, protocol().events.Finished):
                return message.event.outcome
            if self._cancel.is_set() and not cancel_sent:
                return None
        return None

