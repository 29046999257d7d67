"""A job's processes live no longer than their server, and a job never runs twice at once.

- ``die_with_parent``: a job's process (a child of the fork server, which exits when the
  server does) and each rank of a multi-rank job (a child of the job's process) call it
  first; the kernel kills the process when its parent ends (Linux ``PR_SET_PDEATHSIG``),
  elsewhere a thread polls the parent and ends the process within ``POLL_S``. A server killed
  by SIGKILL therefore takes its jobs and their ranks with it.
- ``hold(work_dir)``: the job's process and its ranks each hold a shared lock on the job's
  ``LOCK_NAME`` for as long as they live; ``wait_for_release`` (the worker, before it starts
  a job) waits until no process holds it, so that a restarted server never runs a job whose
  processes from before are still alive (the kernel drops the locks of a dead process).
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
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


def die_with_parent() -> None:
    """End this process as soon as its parent ends, killed or not."""
    parent = os.getppid()
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


def hold(work_dir: Path) -> None:
    """Hold a shared lock on ``work_dir``'s LOCK_NAME until this process ends."""
    descriptor = os.open(Path(work_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_SH)
    _held.append(descriptor)


def wait_for_release(work_dir: Path, stop: Callable[[], bool], job_id: str) -> bool:
    """Wait until no process holds ``work_dir``'s lock (checking every POLL_S); False if
    ``stop()`` became true first."""
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    descriptor = os.open(Path(work_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
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
