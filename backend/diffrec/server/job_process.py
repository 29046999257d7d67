"""One job in a child process of its own, so that the server can always stop it.

The worker thread (``worker.py``) starts ``main`` in a process forked from a fork server (a
clean process that imported torch once, before any thread, CUDA context or OpenMP pool
existed), hands it the job through ``JobOrder`` and listens on a pipe. The child sends each
event its runner emits as it is (``runner.Emitted``: a ``Progress``, ``Preview`` or ``Log`` of
``diffrec.protocol.events``, or a ``StopTakes``; objects pickle) and, last, its verdict: a
``Finished``, cancelled when it saw the stop flag and returned early. A child that is killed,
or dies, sends no verdict; the worker decides from its exit code.

Inputs are memory-mapped blob files: the order carries their paths, never their bytes.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diffrec.protocol.events import Finished, Outcome

from . import lifeline
from .disk import disk_full_message, is_full, read_only_message
from .executor import result_files
from .runner import EmitFn, JobContext, JobFailed, Runner

log = logging.getLogger(__name__)
PRELOAD = ["torch", "diffrec.server.texture_fit", "diffrec.server.optimize_runner"]
"""Modules the fork server imports once, so that a job's process starts in milliseconds (the
optimisers are diffrec's own, ``pipeline.optimizers``: torch's would import ``torch._dynamo``
in each job, 1.3-1.8 s on a 2-core CPU)."""


@dataclass
class JobOrder:
    """What a job's process needs; every field pickles small."""

    job_id: str
    runner: Runner
    settings: Any
    inputs: dict[str, tuple]
    state_dir: Path
    results_dir: Path
    device: str

    @staticmethod
    def portable(inputs: Mapping[str, np.ndarray]) -> dict[str, tuple]:
        """{name: ("file", path, dtype, shape)} for memory-mapped inputs, ("array", array) for
        the others (empty or small)."""
        return {name: (("file", array.filename, array.dtype.str, array.shape)
                       if isinstance(array, np.memmap) else ("array", np.asarray(array)))
                for name, array in inputs.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        """The inputs again, mapped read-only from their files."""
        return {name: (np.memmap(item[1], np.dtype(item[2]), mode="r", shape=item[3])
                       if item[0] == "file" else item[1])
                for name, item in self.inputs.items()}


def context() -> multiprocessing.context.BaseContext:
    """The fork server where there is one (Linux, macOS), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        forkserver = multiprocessing.get_context("forkserver")
        forkserver.set_forkserver_preload(PRELOAD)
        return forkserver
    return multiprocessing.get_context("spawn")


def failure_message(exc: BaseException, directory: Path, needed: int) -> str:
    """A sentence for a job that raised ``exc`` while writing under ``directory`` and
    expected to write about ``needed`` bytes."""
    import torch

    if isinstance(exc, JobFailed):
        return str(exc)
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return ("the GPU ran out of memory: lower the image or texture resolution, or free the "
                "GPU of other work, then submit again")
    if isinstance(exc, OSError) and is_full(exc, directory):
        return disk_full_message(directory, needed or None)
    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES):
        return read_only_message(directory)
    return unexpected_failure(exc)


def unexpected_failure(exc: BaseException) -> str:
    """The sentence for a failure no rule above words: what it said, without the class name
    (the server log holds the traceback)."""
    said = str(exc).strip() or "no details"
    return (f"the job stopped on an unexpected problem in the server ({said}); the server log "
            "has the details for a bug report")


def execute(order: JobOrder, emit: EmitFn, stop_flag) -> Finished:
    """Run the job in this process, sending its events through ``emit(event)``; its verdict.
    Shared by this module's child process and the cluster's job actors (``cluster``)."""
    ctx = JobContext(order.job_id, order.settings, order.arrays(), order.state_dir,
                     order.results_dir, order.device, emit, stop_flag)
    try:
        order.runner.run(ctx)
        return (Finished(Outcome.CANCELLED) if stop_flag.is_set()
                else Finished(Outcome.DONE, results=result_files(order.results_dir)))
    except Exception as exc:
        if not isinstance(exc, (JobFailed, OSError)):
            log.exception("job %s failed", order.job_id)
        try:
            needed = order.runner.output_bytes(order.settings, ctx.inputs)
        except Exception:  # only for the message: a failed estimate must not hide the failure
            needed = 0
        return Finished(Outcome.FAILED, failure_message(exc, order.results_dir, needed))


def main(order: JobOrder, pipe, stop_flag) -> None:
    """Run the job and send its events and verdict through ``pipe`` (the child's side); the
    process ends as soon as the server's side is closed."""
    lifeline.end_with_reader(pipe)
    lifeline.hold(order.state_dir)

    pipe.send(execute(order, pipe.send, stop_flag))
    pipe.close()
