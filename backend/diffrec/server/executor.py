"""The executor contract: what runs a server's jobs, apart from the job table that owns them.

``JobTable`` (``jobs``) hands an executor ``Ticket``s and applies what it reports; two
executors keep the same contract:

- ``worker.Worker`` (the default): one job at a time on this machine, each in a child process.
- ``cluster.RayExecutor`` (``diffrec serve --cluster``): each job in a Ray actor on whichever
  cluster node has a free GPU (or CPU), as many at once as the cluster has room for.

An executor never touches job records. It reports through ``report(job_id, event)``, from
any thread, an event of ``diffrec.protocol.events`` as it is: ``Started`` (a job began, or
began again: the table counts an attempt), ``Progress``, ``Preview`` and ``Log`` (the
runner's events), and last ``Finished`` (its ``Outcome``, message and results). A job stopped by
``close`` reports nothing: it is still "running" in its record and resumes (or, on a
cluster, is re-attached) when the server starts again.

What both executors do alike lives here: ``no_room`` (a job refused before it starts when its
output cannot fit on the disk), ``result_files`` (the ``results`` list of a job that is done),
``StopGrace`` (how long a job asked to stop may take before it is killed) and ``conclude``
(the ``Finished`` report of a job that ended, a cancelled one saying where it stopped).
``app.executor_factory`` picks the executor.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.protocol.events import Event, Finished, Outcome
from diffrec.protocol.schema import FILE_NAME_RE
from diffrec.protocol.transfer import content_hash_file

from .disk import DISK_RESERVE_BYTES, disk_full_message, free_bytes
from .runner import Runner, StopTakes

Report = Callable[[str, Event], None]
"""``report(job_id, event)``: what an executor tells the job table."""
STOP_MARGIN = 1.5
"""A job asked to stop gets this many times the time it measured a stop takes."""


@dataclass
class Ticket:
    """A queued job: what its runner needs. ``settings``: what ``runner.parse`` made of the
    job's spec; ``inputs`` are memory-mapped blob files (or small arrays), so that only their
    paths travel to the job's process. ``state_dir``: the job's folder of checkpoints, run
    folder and lock (see ``JobContext``). ``wall_time_s``: how long the job may run before it is
    stopped, as failed (None: no limit)."""

    job_id: str
    runner: Runner
    settings: Any
    inputs: Mapping[str, np.ndarray]
    state_dir: Path
    results_dir: Path
    wall_time_s: float | None = None


class Executor(ABC):
    """Runs tickets and reports on them (see the module docstring). Thread-safe."""

    running_per_key: int = 1
    """Jobs of one client key the table hands it at once unless the server says otherwise
    (``Quotas.running_jobs``)."""

    @abstractmethod
    def enqueue(self, ticket: Ticket) -> None:
        """Run ``ticket`` when there is room."""

    @abstractmethod
    def dequeue(self, job_id: str) -> bool:
        """Drop a job that has not started, without a report; whether it was waiting."""

    @abstractmethod
    def stop(self, job_id: str) -> bool:
        """Ask a running job to stop (it reports ``finished`` as cancelled soon after);
        whether it was running."""

    @abstractmethod
    def recovered(self) -> None:
        """Called once the table has enqueued every job of its records that is to run (at
        start): the executor may let go of work it holds for any other job."""

    @abstractmethod
    def engine(self) -> dict:
        """What runs the jobs, as the ``ping`` reply says it: ``engine`` (a sentence),
        ``device`` (the torch device jobs get) and ``gpu_free_bytes`` (int or None)."""

    @abstractmethod
    def close(self) -> None:
        """Stop reporting and let go of the jobs, leaving each resumable (see the module
        docstring); returns within a few seconds."""


def result_files(results_dir: Path) -> list[dict]:
    """The ``results`` of a job that is done: [{name, size, content_hash}] of the plain files
    in ``results_dir`` with wire-safe names (unfinished ``.part`` files left out)."""
    return [
        {"name": path.name, "size": path.stat().st_size, "content_hash": content_hash_file(path)}
        for path in sorted(results_dir.iterdir())
        if path.is_file() and FILE_NAME_RE.match(path.name) and not path.name.endswith(".part")
    ]


def discard(*directories: Path) -> None:
    """Empty ``directories`` (a failed job's partial results and checkpoints)."""
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)


def no_room(ticket: Ticket) -> Finished | None:
    """The verdict of a job whose output cannot fit on the disk, checked before it starts;
    None when it fits (or its size is unknown)."""
    needed = ticket.runner.output_bytes(ticket.settings, ticket.inputs)
    if needed and needed + DISK_RESERVE_BYTES > free_bytes(ticket.results_dir):
        return Finished(Outcome.FAILED, disk_full_message(ticket.results_dir, needed))
    return None


class StopGrace:
    """How long a job asked to stop may take to return by itself before it is killed:
    ``base`` seconds plus STOP_MARGIN times what the job last said a stop takes (the slowest
    iteration and a checkpoint's write, measured: ``runner.StopTakes``), so that a job whose
    iterations take seconds still writes its checkpoint."""

    def __init__(self, base: float):
        self.base = base
        self.measured = 0.0

    def heard(self, emitted: object) -> bool:
        """Take in what the job emitted; whether it was a ``StopTakes`` (no event)."""
        if not isinstance(emitted, StopTakes):
            return False
        self.measured = max(0.0, float(emitted.seconds))
        return True

    @property
    def seconds(self) -> float:
        return self.base + STOP_MARGIN * self.measured


def cancelled_message(state_dir: Path) -> str:
    """The sentence for a job cancelled with its checkpoints in ``state_dir``: where it
    stopped and whether Resume continues from there or starts over."""
    where = CheckpointStore(state_dir).latest()
    if where is None:
        return "the job was cancelled before its first checkpoint: Resume starts it over"
    at = f" at {where}" if where else ""
    return f"the job was cancelled, its checkpoint kept{at}: Resume continues from there"


def conclude(ticket: Ticket, verdict: Finished | None, stopped: bool) -> Finished:
    """The ``Finished`` report of a job that ended with ``verdict`` (None: none came),
    ``stopped`` when it was asked to stop: cancelled, the message saying where it stopped
    (``cancelled_message``). A failed job's partial files are discarded."""
    finished = verdict or Finished(Outcome.FAILED)
    if stopped:
        finished = Finished(Outcome.CANCELLED, cancelled_message(ticket.state_dir))
    if finished.outcome is Outcome.FAILED:
        discard(ticket.results_dir, ticket.state_dir)
    return finished
