"""Chunked, resumable, SHA-256-verified transfer of one payload, used by both sides.

The receiver appends chunks in order to ``<final>.part``; after a crash the part file's size
is the offset to resume from. Only when every byte is there and the SHA-256 matches does the
part file become ``<final>`` (fsync, then rename).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .errors import ProtocolError
from .limits import CHUNK_BYTES


def sha256_hex(buffer) -> str:
    """SHA-256 of a bytes-like object, lowercase hex."""
    return hashlib.sha256(buffer).hexdigest()


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's content, lowercase hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


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
    """

    def __init__(self, final: Path, size: int, sha256: str):
        self.final = Path(final)
        self.part = self.final.with_name(self.final.name + ".part")
        self.size = size
        self.sha256 = sha256
        self._digest = hashlib.sha256()
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

    @property
    def complete(self) -> bool:
        return self.offset == self.size

    def write(self, offset: int, data) -> int:
        """Append ``data`` found at ``offset``; returns the new offset. A chunk the file already
        holds is ignored; one that would leave a gap raises ProtocolError('offset_mismatch')."""
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
