"""One server per data directory: a server holds an exclusive lock on ``DATA/LOCK_NAME`` for
as long as it runs, so that a second one on the same directory refuses to start instead of
running the first one's jobs again.

The lock is the operating system's (``flock`` on POSIX, ``msvcrt.locking`` on Windows): it
goes with the process that holds it, so a server that crashed or was killed never blocks the
next one. The file also says who holds it (process id, host and address), for the refusal.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from diffrec.errors import UserError

LOCK_NAME = "server.lock"
WINDOWS_LOCK_OFFSET = 1 << 20
"""Where Windows locks one byte: past the holder's description, which stays readable (a
locked range cannot be read by another process there)."""

if os.name == "nt":
    import msvcrt

    def _try_lock(descriptor: int) -> bool:
        os.lseek(descriptor, WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
else:
    import fcntl

    def _try_lock(descriptor: int) -> bool:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


class DataLock:
    """The lock on ``data_dir``, taken by the constructor (UserError if another server holds
    it) and held until ``release`` or the end of the process."""

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / LOCK_NAME
        try:
            self._descriptor: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise UserError(f"cannot lock the data directory {data_dir} ({exc.strerror}): the "
                            "server must be able to write there; make it writable, or give "
                            "another --data-dir") from None
        if not _try_lock(self._descriptor):
            os.close(self._descriptor)
            self._descriptor = None
            raise UserError(refusal(Path(data_dir), self.path))
        self.describe(None)

    def describe(self, address: str | None) -> None:
        """Record this server (its process id, host and ``address`` once bound) in the lock
        file."""
        serving = f", serving {address}" if address else ""
        text = f"process {os.getpid()} on {socket.gethostname()}{serving}\n"
        os.ftruncate(self._descriptor, 0)
        os.lseek(self._descriptor, 0, os.SEEK_SET)
        os.write(self._descriptor, text.encode())

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def refusal(data_dir: Path, path: Path) -> str:
    """The sentence for a server refused because another one holds ``data_dir``."""
    try:
        holder = path.read_text().strip()
    except OSError:
        holder = ""
    who = f" ({holder})" if holder else ""
    return (f"another diffrec server{who} is using the data directory {data_dir}: stop it "
            "first, or give this one another --data-dir")
