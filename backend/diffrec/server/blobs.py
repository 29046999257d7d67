"""Content-addressed blobs: ``DATA/blobs/SHA256`` holds exactly the bytes whose SHA-256 is
its name; uploads in progress are ``SHA256.part`` files (resumable by their size)."""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from diffrec.protocol.arrays import DTYPES
from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.schema import SHA256_RE
from diffrec.protocol.transfer import ResumableFile, sha256_hex

from .files import write_atomic

log = logging.getLogger(__name__)
MAX_OPEN_UPLOADS = 16


class BlobStore:
    """Blobs on disk and the uploads in progress. Only the server's main thread calls it."""

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / "blobs"
        self.root.mkdir(parents=True, exist_ok=True)
        self._uploads: OrderedDict[str, ResumableFile] = OrderedDict()

    def path(self, sha256: str) -> Path:
        if not SHA256_RE.match(sha256):
            raise ValueError(f"bad blob id {sha256!r}")
        return self.root / sha256

    def has(self, sha256: str, size: int | None = None) -> bool:
        path = self.path(sha256)
        return path.exists() and (size is None or path.stat().st_size == size)

    def put(self, data) -> str:
        """Store a bytes-like object; returns its SHA-256."""
        sha256 = sha256_hex(data)
        if not self.has(sha256):
            write_atomic(self.path(sha256), data)
        return sha256

    def _upload(self, sha256: str, size: int) -> ResumableFile:
        upload = self._uploads.get(sha256)
        if upload is not None and upload.size != size:
            raise ProtocolError("bad_request", "the blob's size changed during its upload")
        if upload is None:
            if len(self._uploads) >= MAX_OPEN_UPLOADS:
                self._uploads.popitem(last=False)[1].close()
            upload = self._uploads[sha256] = ResumableFile(self.path(sha256), size, sha256)
        self._uploads.move_to_end(sha256)
        return upload

    def begin(self, sha256: str, size: int) -> tuple[int, bool]:
        """(offset to send from, complete) for an upload of ``size`` bytes."""
        if self.has(sha256, size):
            return size, True
        return self.write(sha256, size, 0, b"")

    def write(self, sha256: str, size: int, offset: int, data) -> tuple[int, bool]:
        """Append one chunk; returns (bytes held, complete). The last chunk is verified."""
        if self.has(sha256, size):
            return size, True
        upload = self._upload(sha256, size)
        try:
            upload.write(offset, data)
            if upload.complete:
                upload.finish()
        except ProtocolError:
            if upload.complete or not upload.part.exists():
                self._uploads.pop(sha256).close()
            raise
        if upload.complete:
            del self._uploads[sha256]
        return upload.offset, upload.complete

    def load(self, sha256: str, dtype: str, shape: list[int]) -> np.ndarray:
        """A read-only array over the blob (memory-mapped)."""
        if dtype not in DTYPES:
            raise ProtocolError("bad_dtype", f"dtype {dtype!r} not in {list(DTYPES)}")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if not self.has(sha256, nbytes):
            raise ProtocolError("invalid_input", f"blob {sha256} of {nbytes} bytes is missing")
        if nbytes == 0:
            return np.empty(shape, DTYPES[dtype])
        return np.memmap(self.path(sha256), DTYPES[dtype], mode="r", shape=tuple(shape))

    def collect(self, referenced: set[str], min_age_s: float) -> int:
        """Remove blobs and part files older than ``min_age_s`` that no job references."""
        removed = 0
        cutoff = time.time() - min_age_s
        for path in self.root.iterdir():
            sha256 = path.name.removesuffix(".part")
            if sha256 in referenced or sha256 in self._uploads or path.stat().st_mtime > cutoff:
                continue
            path.unlink(missing_ok=True)
            removed += 1
        return removed

    def close(self) -> None:
        for upload in self._uploads.values():
            upload.close()
        self._uploads.clear()
