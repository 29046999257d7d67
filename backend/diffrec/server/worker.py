"""The queue: one worker thread per device runs jobs one at a time, in submission order.

The worker never touches job records; it reports to the server's main thread through
``report(job_id, kind, fields, arrays)`` (thread-safe), with kinds ``started``, ``progress``,
``preview``, ``log`` and ``finished`` (fields ``outcome``: done|failed|cancelled, ``message``,
``results``). A job interrupted by ``close`` reports nothing, so it is still "running" on disk
and resumes from its checkpoint when the server starts again.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from diffrec.protocol.schema import FILE_NAME_RE
from diffrec.protocol.transfer import content_hash_file

from .runner import JobContext, JobFailed, Runner

log = logging.getLogger(__name__)
Report = Callable[[str, str, dict, "Mapping[str, np.ndarray] | None"], None]


@dataclass
class Ticket:
    """A queued job: what its runner needs."""

    job_id: str
    runner: Runner
    spec: Mapping
    inputs: Mapping[str, np.ndarray]
    work_dir: Path
    results_dir: Path


def result_manifest(results_dir: Path) -> list[dict]:
    """[{name, size, content_hash}] of the plain files in ``results_dir`` with wire-safe names."""
    return [
        {"name": path.name, "size": path.stat().st_size, "content_hash": content_hash_file(path)}
        for path in sorted(results_dir.iterdir())
        if path.is_file() and FILE_NAME_RE.match(path.name) and not path.name.endswith(".part")
    ]


def failure_message(exc: BaseException) -> str:
    """A sentence for a job that raised ``exc``."""
    if isinstance(exc, JobFailed):
        return str(exc)
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return ("the GPU ran out of memory: lower the image or texture resolution, or free the "
                "GPU of other work, then submit again")
    return f"internal error ({type(exc).__name__}: {exc}); the server log has the details"


class Worker:
    """Runs tickets one at a time on ``device`` in a daemon thread."""

    def __init__(self, device: str, report: Report):
        self.device = device
        self._report = report
        self._queue: deque[Ticket] = deque()
        self._cond = threading.Condition()
        self._current: tuple[str, threading.Event] | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="diffrec-worker", daemon=True)
        self._thread.start()

    def enqueue(self, ticket: Ticket) -> None:
        with self._cond:
            self._queue.append(ticket)
            self._cond.notify()

    def dequeue(self, job_id: str) -> bool:
        """Remove a job that has not started; whether it was queued."""
        with self._cond:
            for ticket in self._queue:
                if ticket.job_id == job_id:
                    self._queue.remove(ticket)
                    return True
        return False

    def stop(self, job_id: str) -> bool:
        """Ask the running job to stop (it ends as cancelled); whether it was running."""
        with self._cond:
            if self._current and self._current[0] == job_id:
                self._current[1].set()
                return True
        return False

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the running job without a verdict (it resumes on restart) and end the thread."""
        with self._cond:
            self._closing = True
            if self._current:
                self._current[1].set()
            self._cond.notify()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                ticket = self._queue.popleft()
                stop = threading.Event()
                self._current = (ticket.job_id, stop)
            self._run(ticket, stop)
            with self._cond:
                self._current = None

    def _run(self, ticket: Ticket, stop: threading.Event) -> None:
        job_id = ticket.job_id
        self._report(job_id, "started", {}, None)

        def emit(kind, fields, arrays=None):
            self._report(job_id, kind, fields, arrays)

        ctx = JobContext(job_id, ticket.spec, ticket.inputs, ticket.work_dir, ticket.results_dir,
                         self.device, emit, stop)
        outcome, message, results = "done", "", []
        try:
            ticket.runner.run(ctx)
            if stop.is_set():
                if self._closing:
                    return  # no verdict: the job resumes when the server starts again
                outcome, message = "cancelled", "the job was cancelled"
            else:
                results = result_manifest(ticket.results_dir)
        except Exception as exc:
            if not isinstance(exc, JobFailed):
                log.exception("job %s failed", job_id)
            outcome, message = "failed", failure_message(exc)
        self._report(job_id, "finished",
                     {"outcome": outcome, "message": message, "results": results}, None)
