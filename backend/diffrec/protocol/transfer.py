"""Chunked, resumable, hash-verified transfer of one payload, used by both sides.

A payload is named by its **content hash**: the SHA-256 of the concatenated 32-byte SHA-256
digests of its consecutive ``HASH_BLOCK_BYTES`` blocks (the last block may be shorter; an empty
payload has no blocks). Unlike one SHA-256 over the whole payload, whose single sequential
stream caps verification at one core's hashing speed (about 1 GiB/s), the blocks are hashed in
parallel on a small thread pool (hashlib releases the GIL), so verifying scales with cores.
Dropbox's ``content_hash`` is the same construction with the same block size.

The receiver appends chunks in order to ``<final>.part``; after a crash the part file's size
is the offset to resume from. Only when every byte is there and the content hash matches does
the part file become ``<final>`` (fsync, then rename).

Throughput: a receiver does three things per chunk (write it, hash it, flush it to disk), and
only the write has to happen before the chunk is acknowledged. Hashing runs on the pool, and
the kernel is asked to start writing each few chunks to disk at once (``write_behind``), so the
final fsync has little left to do.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .errors import ProtocolError
from .limits import CHUNK_BYTES, HASH_BLOCK_BYTES, MIB

WRITEBACK_BYTES = 16 * MIB
"""A receiver asks the kernel to start writing its part file to disk every this many bytes."""

HASH_THREADS = max(1, min(8, os.cpu_count() or 1))
"""Threads hashing blocks, shared by every ``ContentHash`` in the process."""

_hash_pool: ThreadPoolExecutor | None = None
_hash_pool_lock = threading.Lock()


def _hash_threads() -> ThreadPoolExecutor:
    """The pool of ``HASH_THREADS`` threads that hashes blocks, made on first use."""
    global _hash_pool
    with _hash_pool_lock:
        if _hash_pool is None:
            _hash_pool = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="diffrec-hash")
        return _hash_pool


def _forget_hash_threads() -> None:
    """In a forked child: the parent's threads are not there; make a new pool when needed."""
    global _hash_pool, _hash_pool_lock
    _hash_pool, _hash_pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_hash_threads)


def _block_digest(block) -> bytes:
    return hashlib.sha256(block).digest()


class ContentHash:
    """The content hash of bytes fed in order, in any pieces; whole blocks are hashed on the
    thread pool while the caller goes on.

    ``update`` keeps a reference to ``data`` until its blocks are hashed, so the caller must
    not change the buffer afterwards (received frames and fresh ``bytes`` never change). At
    most ``backlog`` blocks wait for the pool; one more blocks ``update`` until the oldest is
    done, which bounds the memory held.
    """

    def __init__(self, backlog: int = 2 * HASH_THREADS):
        self._digests: list[bytes] = []
        self._pending: deque[Future] = deque()
        self._backlog = backlog
        self._partial = bytearray()  # the start of a block that has not fully arrived

    def update(self, data) -> ContentHash:
        view = memoryview(data).cast("B")
        if self._partial:
            taken = min(len(view), HASH_BLOCK_BYTES - len(self._partial))
            self._partial += view[:taken]
            view = view[taken:]
            if len(self._partial) == HASH_BLOCK_BYTES:
                self._submit(bytes(self._partial))
                self._partial = bytearray()
        whole = len(view) - len(view) % HASH_BLOCK_BYTES
        for start in range(0, whole, HASH_BLOCK_BYTES):
            self._submit(view[start:start + HASH_BLOCK_BYTES])
        self._partial += view[whole:]
        return self

    def _submit(self, block) -> None:
        self._pending.append(_hash_threads().submit(_block_digest, block))
        while len(self._pending) > self._backlog:
            self._digests.append(self._pending.popleft().result())

    def wait(self) -> None:
        """Block until every whole block fed so far has been hashed."""
        while self._pending:
            self._digests.append(self._pending.popleft().result())

    def hexdigest(self) -> str:
        self.wait()
        tail = [_block_digest(self._partial)] if self._partial else []
        return hashlib.sha256(b"".join(self._digests + tail)).hexdigest()


def content_hash(buffer) -> str:
    """Content hash of a bytes-like object, lowercase hex."""
    return ContentHash().update(buffer).hexdigest()


def content_hash_file(path: Path) -> str:
    """Content hash of a file's content, lowercase hex."""
    digest = ContentHash()
    with open(path, "rb", buffering=0) as stream:
        while block := stream.read(HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


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
    """Receive ``size`` bytes whose content hash is ``expected`` into the file ``final``,
    through the part file ``part`` (default ``<final>.part``).

    ``offset`` is how many bytes are already there (resumed from a previous part file).
    Chunks are written at once (so ``offset`` is what the part file holds) and hashed in the
    background; ``finish`` waits for the hash.
    """

    def __init__(self, final: Path, size: int, expected: str, part: Path | None = None):
        self.final = Path(final)
        self.part = Path(part) if part else self.final.with_name(self.final.name + ".part")
        self.size = size
        self.expected = expected
        self._digest = ContentHash()
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
        if self._digest.hexdigest() != self.expected:
            self.part.unlink(missing_ok=True)
            raise ProtocolError("hash_mismatch", f"{self.final.name}: the received bytes do not "
                                                 "match its content hash; they were discarded")
        os.replace(self.part, self.final)
        fsync_dir(self.final.parent)
        return self.final

    def close(self) -> None:
        """Stop receiving; the part file stays for a later resume."""
        self._stream.close()
        self._digest.wait()  # release the chunks still queued for hashing
