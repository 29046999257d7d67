"""The server's disk as clients see it: free space, and file-system failures as sentences;
and its data directory kept private.

A server whose data directory is full or read-only keeps running; the request or job that
needed the space gets an error code (``disk_full`` or ``read_only``) and a sentence saying
what is wrong and what to do, never ``internal``.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.limits import MIB

log = logging.getLogger(__name__)
DISK_RESERVE_BYTES = 64 * MIB
"""Uploads may not take the last this many free bytes: job states, checkpoints and results
need room too."""

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
PRIVATE_UMASK = 0o077
"""The umask of a server and of its jobs' processes: every file they write is 0600, every
folder 0700 (uploads, results and checkpoints are no other local user's to read)."""


def make_private_dir(path: Path) -> None:
    """Create the folder ``path`` (and its parents) if needed, and make it its owner's alone
    (0700 on POSIX), one made by an earlier version too; a folder this user may not change
    (another's, or on a read-only disk) is left as it is, with a warning."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.name != "posix" or not path.stat().st_mode & 0o077:
        return
    try:
        os.chmod(path, 0o700)
    except OSError as exc:
        log.warning("cannot make %s readable by its owner only: %s", path, exc.strerror)


def outermost_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist yet: what creating
    ``path`` makes, and what removing it takes away again; None when ``path`` exists."""
    missing = None
    for folder in (path := path.absolute(), *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def remove_made(folder: Path | None) -> None:
    """Remove ``folder``, made by this process (``outermost_missing`` before it was made), and
    what it holds; None: nothing was made."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def free_bytes(path: Path) -> int:
    """Bytes that an unprivileged writer may still use on the file system holding ``path``."""
    return shutil.disk_usage(path).free


def disk_full_message(path: Path, needed: int | None = None) -> str:
    """"the server's disk is full: N bytes free, M needed; ...", for the disk holding ``path``."""
    need = f", {needed} needed" if needed is not None else ""
    total = shutil.disk_usage(path).total
    if total < 2 * DISK_RESERVE_BYTES:
        return (f"the server's disk is too small: it holds {total} bytes in all, and the server "
                f"keeps {DISK_RESERVE_BYTES} free for job states and checkpoints{need}; its "
                "operator must give it a data directory on a larger disk")
    return (f"the server's disk is full: {free_bytes(path)} bytes free{need}; its operator "
            "must free space in its data directory (or lower the job's sizes), then try again")


def check_free(path: Path, needed: int) -> None:
    """ProtocolError('disk_full') unless ``needed`` bytes fit on ``path``'s disk with
    DISK_RESERVE_BYTES to spare."""
    if needed > 0 and needed + DISK_RESERVE_BYTES > free_bytes(path):
        raise ProtocolError("disk_full", disk_full_message(path, needed))


def is_full(exc: OSError, path: Path) -> bool:
    """Whether writing under ``path`` failed with ``exc`` for want of space: a full-disk
    errno, or none at all (numpy's writers drop it) on a disk with less than
    DISK_RESERVE_BYTES free."""
    return exc.errno in FULL_ERRNOS or (exc.errno is None
                                        and free_bytes(path) < DISK_RESERVE_BYTES)


def storage_error(exc: OSError, path: Path) -> ProtocolError | None:
    """The error a client gets when writing under ``path`` failed with ``exc``: ``disk_full``
    or ``read_only``; None for other failures (those are the server's own)."""
    if is_full(exc, path):
        return ProtocolError("disk_full", disk_full_message(path))
    if exc.errno in READ_ONLY_ERRNOS:
        return ProtocolError("read_only", read_only_message(path))
    return None


def read_only_message(path: Path) -> str:
    return (f"the server cannot write to its data directory ({os.strerror(errno.EROFS)} or no "
            "permission): its operator must make it writable, then try again")
