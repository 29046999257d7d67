"""The executor contract: what runs a server's jobs, apart from the job table that owns them.

``JobTable`` (``jobs``) hands an executor ``Ticket``s and applies what it reports; two
executors keep the same contract:

- ``worker.Worker`` (the default): one job at a time on this machine, each in a child process.
- ``cluster.RayExecutor`` (``diffrec serve --cluster``): each job in a Ray actor on whichever
  cluster node has a free GPU (or CPU), as many at once as the cluster has room for.

An executor never touches job records. It reports through ``report(job_id, kind, fields,
arrays)``, from any thread: ``started`` (a job began, or began again: the table counts an
attempt), ``progress``, ``preview`` and ``log`` (the runner's events), and last ``finished``
(fields ``outcome``: done|failed|cancelled, ``message``, ``results``). A job stopped by
``close`` reports nothing: it is still "running" in its record and resumes (or, on a
cluster, is re-attached) when the server starts again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .runner import Runner

Report = Callable[[str, str, dict, "Mapping[str, np.ndarray] | None"], None]


@dataclass
class Ticket:
    """A queued job: what its runner needs. ``inputs`` are memory-mapped blob files (or small
    arrays), so that only their paths travel to the job's process. ``wall_time_s``: how long
    the job may run before it is stopped, as failed (None: no limit)."""

    job_id: str
    runner: Runner
    spec: Mapping
    inputs: Mapping[str, np.ndarray]
    work_dir: Path
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


def executor_factory(device: str, cluster: str | None,
                     data_dir: Path) -> Callable[[Report], Executor]:
    """``make(report)`` for the executor a server runs its jobs with: the local worker on
    ``device``, or Ray at ``cluster`` (an address ``ray.init`` takes, ``auto``, or ``local``
    for a Ray started by the server; docs/guide.md, "Running a cluster"), its jobs named
    after the server's ``data_dir``."""
    if cluster is None:
        from .worker import Worker

        return lambda report: Worker(device, report)
    from .cluster import RayExecutor

    return lambda report: RayExecutor(cluster, data_dir, report)
