"""The job-runner interface: what the server hands a job to, and what a runner may use.

A runner is chosen by the job spec's ``task``. The server calls ``parse`` once per job (at
submit, and again only when a server that restarted, or a ``resume``, queues the job anew),
then ``check_inputs``, ``iterations`` and ``output_bytes`` with what it returned (errors at
submit reach the client as ``invalid_input``) and, in a child process of its own (see
``job_process``, or a Ray actor on a cluster node, ``cluster``; the runner and the parsed
settings are pickled to get there), ``run`` with a ``JobContext``. ``run``
writes its result files into ``ctx.results_dir`` and returns; it checks ``ctx.should_stop()``
at least every few hundred milliseconds and returns early when it is set (the job was
cancelled, deleted or the server is stopping), writing a checkpoint first; a run that has not
returned half a second, plus the time it said a stop takes (``StopTakes``), later is killed;
it keeps checkpoints in ``ctx.checkpoints`` (a ``CheckpointStore`` in the job's
state folder) and starts from them when there are some, so a job resumes after a server
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
from typing import Any

import numpy as np

from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.protocol import events


@dataclass(frozen=True)
class StopTakes:
    """What a runner emits to tell its executor the longest a stop asked now would take, its
    checkpoint written (measured; ``executor.StopGrace``): no event, it goes no further."""

    seconds: float


Emitted = events.Progress | events.Preview | events.Log | StopTakes
"""What a runner emits: its job's events, and the executor's ``StopTakes``."""
EmitFn = Callable[[Emitted], None]


class JobFailed(Exception):
    """The job cannot finish; the message tells the user why and what to change."""


@dataclass
class JobContext:
    """Everything a runner gets. ``settings``: what its ``parse`` made of the job's spec;
    ``inputs`` are read-only arrays (copy before modifying or handing to torch); ``device`` is
    a torch device string such as ``cuda:0`` or ``cpu``; ``state_dir`` is the job's own folder
    (``JobStore.checkpoint_dir``): its checkpoints, the ``run/`` folder a run writes its result
    into before it is copied to ``results_dir``, and the ``lifeline`` lock."""

    job_id: str
    settings: Any
    inputs: Mapping[str, np.ndarray]
    state_dir: Path
    results_dir: Path
    device: str
    emit_fn: EmitFn
    stop_flag: threading.Event | multiprocessing.synchronize.Event

    def emit(self, event: Emitted) -> None:
        """Send a ``Progress``, ``Preview`` or ``Log`` event to attached clients, or tell the
        executor how long a stop would take (``StopTakes``: no event)."""
        if not isinstance(event, Emitted):
            raise TypeError(f"runners emit progress, preview or log events, not {event!r}")
        self.emit_fn(event)

    def should_stop(self) -> bool:
        return self.stop_flag.is_set()

    @property
    def checkpoints(self) -> CheckpointStore:
        """The job's checkpoints, one file per stage in its state folder."""
        return CheckpointStore(self.state_dir)


class Runner(ABC):
    """One kind of job (``task`` in the job spec). ``settings`` below is what ``parse``
    returned for the job's spec."""

    task: str

    @abstractmethod
    def parse(self, spec: Mapping) -> Any:
        """The job spec's settings, typed and checked (it pickles); ``JobFailed`` naming what
        is wrong."""

    @abstractmethod
    def check_inputs(self, settings: Any, inputs: Mapping[str, np.ndarray]) -> None:
        """Raise ``JobFailed`` if the inputs cannot make a job of ``settings`` (at submit)."""

    @abstractmethod
    def run(self, ctx: JobContext) -> None:
        """Do the work; write results into ``ctx.results_dir``."""

    def iterations(self, settings: Any) -> int:
        """The iterations (per pass) a job of ``settings`` asks for, which the server bounds
        (``Quotas.iterations``). 0: not counted."""
        return 0

    def output_bytes(self, settings: Any, inputs: Mapping[str, np.ndarray]) -> int:
        """About how many bytes a run writes (checkpoints and results), at most; the executor
        fails a job at once when they do not fit on the disk. 0: unknown."""
        return 0

    def processes(self, settings: Any) -> int:
        """The processes a job of ``settings`` trains on (a cluster reserves a CPU, and a GPU
        where there are some, for each)."""
        return 1
