"""The local executor (``executor``): one worker thread per device runs jobs one at a time, in
the order the job table hands them over (keys taking turns), each in a child process of its
own (``job_process``), for at most its ticket's wall time.

Stopping always wins: a job asked to stop (cancel, delete, or the server closing) gets
STOP_GRACE_S plus the time it measured a stop takes (``executor.StopGrace``: an iteration and
a checkpoint's write) to return by itself, then its process is killed. A job interrupted by
``close`` reports nothing, so it is still "running" on disk and resumes from its last
checkpoint when the server starts again (checkpoints are replaced atomically, so a kill
never tears one). A job that fails has its partial files (results and checkpoints) removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections import deque

import torch

from diffrec.protocol.events import Finished, Outcome, Started

from . import job_process, lifeline
from .executor import Executor, Report, StopGrace, Ticket, conclude, no_room

log = logging.getLogger(__name__)
STOP_GRACE_S = 0.5
"""How long a job asked to stop may take to return by itself before its process is killed,
besides the time it measured a stop takes (``executor.StopGrace``)."""
POLL_S = 0.05


def death_message(exitcode: int | None) -> str:
    """A sentence for a job whose process ended without a verdict."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        cause = (" (the system does this when memory runs out)" if name == "SIGKILL" else "")
        return (f"the job's process was killed by {name}{cause}: lower the image, texture or "
                "grid sizes, then submit again")
    return f"the job's process ended unexpectedly (exit code {exitcode}); the server log has " \
           "the details"


def overtime_message(wall_time_s: float) -> str:
    """A sentence for a job stopped at the server's wall-time limit."""
    return (f"the job ran past this server's limit of {wall_time_s:g} s per job and was "
            "stopped: lower its iterations or sizes (its operator sets the limit with diffrec "
            "serve --max-wall-time-s)")


class Worker(Executor):
    """Runs tickets one at a time on ``device``, from a daemon thread, each in a child process."""

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
        """Ask the running job to stop (it ends as cancelled within its ``StopGrace`` and a
        poll); whether it was running."""
        with self._cond:
            if self._current and self._current[0] == job_id:
                self._current[1].set()
                return True
        return False

    def recovered(self) -> None:
        """Nothing to let go of: a local job's processes never outlive their server
        (``lifeline``)."""

    def engine(self) -> dict:
        """The CUDA device's name and free memory, or "CPU"."""
        engine, free = "CPU", None
        if self.device.startswith("cuda") and torch.cuda.is_available():
            engine = torch.cuda.get_device_name(self.device)
            free = torch.cuda.mem_get_info(self.device)[0]
        return {"engine": engine, "device": self.device, "gpu_free_bytes": free}

    def close(self, timeout: float = 10.0) -> None:
        """Stop the running job without a verdict (it resumes on restart) and end the thread;
        returns within the job's ``StopGrace`` (at most ``timeout``) and a little more."""
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
            try:
                self._run(ticket, stop)
            except Exception as exc:  # the worker itself failed (cannot start a process...)
                log.exception("job %s: the worker failed", ticket.job_id)
                self._report(ticket.job_id, Finished(Outcome.FAILED,
                                                     job_process.unexpected_failure(exc)))
            with self._cond:
                self._current = None

    def _run(self, ticket: Ticket, stop: threading.Event) -> None:
        job_id = ticket.job_id
        self._report(job_id, Started())
        verdict = no_room(ticket) or (
            self._in_child(ticket, stop)
            if lifeline.wait_for_release(ticket.state_dir, stop.is_set, job_id) else None)
        if stop.is_set() and self._closing:
            return  # no verdict: the job resumes when the server starts again
        self._report(job_id, conclude(ticket, verdict, stop.is_set()))

    def _in_child(self, ticket: Ticket, stop: threading.Event) -> Finished | None:
        """Run ``ticket`` in a child process, forwarding its events; its verdict, or None if
        it was stopped (killed when late)."""
        context = job_process.context()
        receiver, sender = context.Pipe(duplex=False)
        child_stop = context.Event()
        order = job_process.JobOrder(ticket.job_id, ticket.runner, ticket.settings,
                                     job_process.JobOrder.portable(ticket.inputs),
                                     ticket.state_dir, ticket.results_dir, self.device)
        process = context.Process(target=job_process.main, args=(order, sender, child_stop),
                                  name=f"diffrec-job-{ticket.job_id}", daemon=True)
        process.start()
        sender.close()
        verdict, stop_asked, overtime, grace = None, None, False, StopGrace(STOP_GRACE_S)
        deadline = time.monotonic() + (ticket.wall_time_s or float("inf"))
        try:
            while True:
                if stop_asked is None and time.monotonic() > deadline:
                    overtime = True
                if (stop.is_set() or overtime) and stop_asked is None:
                    child_stop.set()
                    stop_asked = time.monotonic()
                if stop_asked is not None and time.monotonic() - stop_asked > grace.seconds:
                    log.info("job %s did not stop within %.1f s; killing its processes",
                             ticket.job_id, grace.seconds)
                    with contextlib.suppress(ProcessLookupError):  # its group: it and its ranks
                        os.killpg(process.pid, signal.SIGKILL)
                    process.kill()
                    break
                if not receiver.poll(POLL_S):
                    continue
                try:
                    message = receiver.recv()
                except (EOFError, OSError):
                    break  # the process has ended
                if isinstance(message, Finished):
                    verdict = message
                elif not grace.heard(message):
                    self._report(ticket.job_id, message)
        finally:
            receiver.close()
            process.join()
        if overtime and not stop.is_set():
            verdict = Finished(Outcome.FAILED, overtime_message(ticket.wall_time_s))
        if verdict is None and not stop.is_set():
            verdict = Finished(Outcome.FAILED, death_message(process.exitcode))
        return verdict
