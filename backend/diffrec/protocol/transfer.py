"""Chunked, resumable, SHA-256-verified transfer of one payload, used by both sides.

The receiver appends chunks in order to ``<final>.part``; after a crash the part file's size
is the offset to resume from. Only when every byte is there and the SHA-256 matches does the
part file become ``<final>`` (fsync, then rename).

Throughput: a receiver does three things per chunk (write it, hash it, flush it to disk), and
only the write has to happen before the chunk is acknowledged. Hashing runs on a background
thread (``Sha256Stream``; hashlib releases the GIL for large buffers), and the kernel is asked
to start writing each few chunks to disk at once (``write_behind``), so the final fsync has
little left to do.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .errors import ProtocolError
from .limits import CHUNK_BYTES, MIB

WRITEBACK_BYTES = 16 * MIB
"""A receiver asks the kernel to start writing its part file to disk every this many bytes."""

HASH_BACKLOG = 2
"""Updates a ``Sha256Stream`` lets wait for the hash thread before ``update`` blocks: enough
to keep that thread busy, few enough that little memory is held and the final wait is short."""

_hash_pool: ThreadPoolExecutor | None = None
_hash_pool_lock = threading.Lock()


def _hash_thread() -> ThreadPoolExecutor:
    """The one background thread that runs every ``Sha256Stream``'s updates, in order."""
    global _hash_pool
    with _hash_pool_lock:
        if _hash_pool is None:
            _hash_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diffrec-sha256")
        return _hash_pool


def _forget_hash_thread() -> None:
    """In a forked child: the parent's hash thread is not there; make a new one when needed."""
    global _hash_pool, _hash_pool_lock
    _hash_pool, _hash_pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_hash_thread)


def sha256_hex(buffer) -> str:
    """SHA-256 of a bytes-like object, lowercase hex."""
    return hashlib.sha256(buffer).hexdigest()


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's content, lowercase hex."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(CHUNK_BYTES))  # one buffer, reused: no fresh pages per block
    with open(path, "rb", buffering=0) as stream:
        while count := stream.readinto(buffer):
            digest.update(buffer[:count])
    return digest.hexdigest()


class Sha256Stream:
    """SHA-256 of bytes fed in order, computed on a background thread so that hashing one
    chunk overlaps receiving and writing the next.

    ``update`` keeps a reference to ``data`` until it is hashed, so the caller must not change
    the buffer afterwards (received frames and fresh ``bytes`` never change). At most
    ``depth`` updates wait; one more blocks ``update`` until the oldest is done, which bounds
    the memory held.
    """

    def __init__(self, depth: int = HASH_BACKLOG):
        self._digest = hashlib.sha256()
        self._pending: deque[Future] = deque()
        self._depth = depth

    def update(self, data) -> None:
        self._pending.append(_hash_thread().submit(self._digest.update, data))
        while len(self._pending) > self._depth:
            self._pending.popleft().result()

    def wait(self) -> None:
        """Block until every update so far has been hashed."""
        while self._pending:
            self._pending.popleft().result()

    def hexdigest(self) -> str:
        self.wait()
        return self._digest.hexdigest()


def write_behind(fd: int, start: int, end: int) -> None:
    """Hint that bytes ``[start, end)`` of ``fd`` were just written: the kernel starts writing
    them to disk now (so the final fsync has little left to do), and drops from the page cache
    the bytes before ``start - WRITEBACK_BYTES``, written back by now (so a large transfer
    recycles a few MiB of cache instead of taking fresh memory for every chunk). On Linux,
    ``POSIX_FADV_DONTNEED`` starts writeback of dirty pages and drops only clean ones (GNU
    dd's ``oflag=nocache`` does the same; PostgreSQL uses it to force writeback). Where
    posix_fadvise is missing this does nothing; it never changes what the file holds."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None:
        return
    try:
        fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        if start > WRITEBACK_BYTES:
            fadvise(fd, 0, start - WRITEBACK_BYTES, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass  # only a hint


def chunk_ranges(size: int, offset: int = 0, chunk: int = CHUNK_BYTES):
    """(start, end) byte ranges covering ``[offset, size)`` in steps of ``chunk``."""
    for start in range(offset, size, chunk):
        yield start, min(start + chunk, size)


def fsync_dir(path: Path) -> None:
    """Make a rename or creation in directory ``path`` durable (POSIX; Windows cannot open a
    directory, and its renames need no such step)."""
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ResumableFile:
    """Receive ``size`` bytes whose SHA-256 is ``sha256`` into the file ``final``.

    ``offset`` is how many bytes are already there (resumed from a previous part file).
    Chunks are written at once (so ``offset`` is what the part file holds) and hashed in the
    background; ``finish`` waits for the hash.
    """

    def __init__(self, final: Path, size: int, sha256: str):
        self.final = Path(final)
        self.part = self.final.with_name(self.final.name + ".part")
        self.size = size
        self.sha256 = sha256
        self._digest = Sha256Stream()
        self._stream = open(self.part, "ab+")
        self._stream.seek(0)
        self.offset = 0
        while self.offset < size:
            block = self._stream.read(min(CHUNK_BYTES, size - self.offset))
            if not block:
                break
            self._digest.update(block)
            self.offset += len(block)
        self._stream.truncate(self.offset)  # a part file longer than the payload is garbage
        self._stream.seek(self.offset)
        self._flushed = self.offset  # bytes before this have been handed to write_behind

    @property
    def complete(self) -> bool:
        return self.offset == self.size

    def write(self, offset: int, data) -> int:
        """Append ``data`` found at ``offset``; returns the new offset. A chunk the file already
        holds is ignored; one that would leave a gap raises ProtocolError('offset_mismatch').
        ``data`` must not change afterwards: it is hashed in the background."""
        length = memoryview(data).nbytes
        if offset + length <= self.offset:
            return self.offset
        if offset != self.offset:
            raise ProtocolError("offset_mismatch", f"expected offset {self.offset}, got {offset}")
        if offset + length > self.size:
            raise ProtocolError("too_large", f"chunk runs past the declared size {self.size}")
        self._stream.write(data)
        self._digest.update(data)
        self.offset += length
        if self.offset - self._flushed >= WRITEBACK_BYTES:
            self._stream.flush()
            write_behind(self._stream.fileno(), self._flushed, self.offset)
            self._flushed = self.offset
        return self.offset

    def finish(self) -> Path:
        """Verify and publish the file; a hash mismatch discards it (ProtocolError)."""
        if not self.complete:
            raise ProtocolError("bad_request", f"only {self.offset} of {self.size} bytes received")
        self._stream.flush()
        os.fsync(self._stream.fileno())
        self._stream.close()
        if self._digest.hexdigest() != self.sha256:
            self.part.unlink(missing_ok=True)
            raise ProtocolError("hash_mismatch", "the received bytes do not match their SHA-256")
        os.replace(self.part, self.final)
        fsync_dir(self.final.parent)
        return self.final

    def close(self) -> None:
        """Stop receiving; the part file stays for a later resume."""
        self._stream.close()
        self._digest.wait()  # release the chunks still queued for hashing
