"""A job's processes live no longer than their server, and a job never runs twice at once.

- ``end_with_reader``: a job's process leads a process group of its own (its ranks join it),
  watches the pipe its events go to the server through, and kills the group as soon as the
  server's end is closed (the server ended, killed or not). Its parent is the fork server,
  which cannot tell: every process it starts holds the fd whose closing would tell it the
  server has gone, so it outlives the server as long as they do.
- ``die_with_parent``: each rank of a multi-rank job (a child of the job's process) calls it
  first; the kernel kills the process when its parent ends (Linux ``PR_SET_PDEATHSIG``),
  elsewhere a thread polls the parent and ends the process within ``POLL_S``. A server killed
  by SIGKILL therefore takes its jobs and their ranks with it.
- ``hold(state_dir)``: the job's process and its ranks each hold a shared lock on the job's
  ``LOCK_NAME`` for as long as they live; ``wait_for_release`` (the worker, before it starts
  a job) waits until no process holds it, so that a restarted server never runs a job whose
  processes from before are still alive (the kernel drops the locks of a dead process).
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)
LOCK_NAME = ".processes.lock"
POLL_S = 0.2
PR_SET_PDEATHSIG = 1
_held: list[int] = []  # the lock's descriptors, open for this process's life


def die_with_parent(parent: int) -> None:
    """End this process as soon as its parent, process ``parent``, ends, killed or not (even
    if it ended before this call)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(POLL_S)
            os._exit(1)

        threading.Thread(target=watch, name="die-with-parent", daemon=True).start()
    if os.getppid() != parent:  # the parent ended before the kernel was told
        os._exit(1)


def end_with_reader(connection) -> None:
    """Make this process lead a new process group, which its children join, and kill that
    group (SIGKILL) as soon as the reading end of ``connection``, the writing end of a
    one-way pipe (``multiprocessing.Pipe(duplex=False)``), is closed everywhere."""
    os.setpgid(0, 0)
    poller = select.poll()
    poller.register(connection.fileno(), select.POLLERR | select.POLLHUP)

    def watch() -> None:
        poller.poll()
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="end-with-reader", daemon=True).start()


def hold(state_dir: Path) -> None:
    """Hold a shared lock on ``state_dir``'s LOCK_NAME until this process ends."""
    descriptor = os.open(Path(state_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_SH)
    _held.append(descriptor)


def wait_for_release(state_dir: Path, stop: Callable[[], bool], job_id: str) -> bool:
    """Wait until no process holds ``state_dir``'s lock (checking every POLL_S); False if
    ``stop()`` became true first."""
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    descriptor = os.open(Path(state_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        logged = False
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(descriptor, fcntl.LOCK_UN)
                return True
            except BlockingIOError:
                if not logged:
                    log.warning("job %s: processes of an earlier run of it still live; waiting "
                                "for them to end before running it again", job_id)
                    logged = True
            if stop():
                return False
            time.sleep(POLL_S)
    finally:
        os.close(descriptor)
