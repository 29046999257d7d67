"""The job-runner interface: what the server hands a job to, and what a runner may use.

A runner is chosen by the job spec's ``task``. The server calls ``validate`` at submit time
(errors reach the client as ``invalid_input``) and, in a child process of its own (see
``job_process``, or a Ray actor on a cluster node, ``cluster``; the runner is pickled to get
there), ``run`` with a ``JobContext``. ``run``
writes its result files into ``ctx.results_dir`` and returns; it checks ``ctx.should_stop()``
at least every few hundred milliseconds and returns early when it is set (the job was
cancelled, deleted or the server is stopping; a run that has not returned half a second later
is killed); it keeps checkpoints in ``ctx.checkpoints`` (a ``CheckpointStore`` in the job's
work directory) and starts from them when there are some, so a job resumes after a server
crash. It raises
``JobFailed`` with a sentence the user can act on; any other exception fails the job alone
with an "internal error" message (or, for a full disk, a sentence saying so).
"""

from __future__ import annotations

import multiprocessing.synchronize
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from diffrec.pipeline.checkpoints import CheckpointStore

EmitFn = Callable[[str, dict, "Mapping[str, np.ndarray] | None"], None]


class JobFailed(Exception):
    """The job cannot finish; the message tells the user why and what to change."""


@dataclass
class JobContext:
    """Everything a runner gets. ``inputs`` are read-only arrays (copy before modifying or
    handing to torch); ``device`` is a torch device string such as ``cuda:0`` or ``cpu``."""

    job_id: str
    spec: Mapping
    inputs: Mapping[str, np.ndarray]
    work_dir: Path
    results_dir: Path
    device: str
    emit_fn: EmitFn
    stop_flag: threading.Event | multiprocessing.synchronize.Event

    def emit(self, kind: str, fields: dict, arrays: Mapping[str, np.ndarray] | None = None):
        """Send a ``progress``, ``preview`` or ``log`` event to attached clients."""
        if kind not in ("progress", "preview", "log"):
            raise ValueError(f"runners emit progress, preview or log events, not {kind!r}")
        self.emit_fn(kind, fields, arrays)

    def should_stop(self) -> bool:
        return self.stop_flag.is_set()

    @property
    def checkpoints(self) -> CheckpointStore:
        """The job's checkpoints, one file per stage in its work directory."""
        return CheckpointStore(self.work_dir)


class Runner(ABC):
    """One kind of job (``task`` in the job spec)."""

    task: str

    @abstractmethod
    def validate(self, spec: Mapping, inputs: Mapping[str, np.ndarray]) -> None:
        """Raise ``JobFailed`` if the spec or inputs cannot make a job (runs at submit)."""

    @abstractmethod
    def run(self, ctx: JobContext) -> None:
        """Do the work; write results into ``ctx.results_dir``."""

    def iterations(self, spec: Mapping) -> int:
        """The iterations (per pass) a job of ``spec`` asks for, which the server bounds
        (``Quotas.iterations``); ``spec`` has passed ``validate``. 0: not counted."""
        return 0

    def output_bytes(self, spec: Mapping, inputs: Mapping[str, np.ndarray]) -> int:
        """About how many bytes a run writes (checkpoints and results), at most; the worker
        fails a job at once when they do not fit on the disk. 0: unknown."""
        return 0
