"""Content-addressed blobs: ``DATA/blobs/HASH`` holds exactly the bytes whose content hash
(``diffrec.protocol.transfer``) is its name; uploads in progress are ``HASH.part`` files
(resumable by their size)."""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from diffrec.protocol.arrays import DTYPES
from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.schema import CONTENT_HASH_RE
from diffrec.protocol.transfer import ResumableFile, content_hash

from .files import write_atomic

log = logging.getLogger(__name__)
MAX_OPEN_UPLOADS = 16


class BlobStore:
    """Blobs on disk and the uploads in progress. Only the server's main thread calls it."""

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / "blobs"
        self.root.mkdir(parents=True, exist_ok=True)
        self._uploads: OrderedDict[str, ResumableFile] = OrderedDict()

    def path(self, blob: str) -> Path:
        if not CONTENT_HASH_RE.match(blob):
            raise ValueError(f"bad blob id {blob!r}")
        return self.root / blob

    def has(self, blob: str, size: int | None = None) -> bool:
        path = self.path(blob)
        return path.exists() and (size is None or path.stat().st_size == size)

    def put(self, data) -> str:
        """Store a bytes-like object; returns its content hash."""
        blob = content_hash(data)
        if not self.has(blob):
            write_atomic(self.path(blob), data)
        return blob

    def _upload(self, blob: str, size: int) -> ResumableFile:
        upload = self._uploads.get(blob)
        if upload is not None and upload.size != size:
            raise ProtocolError("bad_request", "the blob's size changed during its upload")
        if upload is None:
            if len(self._uploads) >= MAX_OPEN_UPLOADS:
                self._uploads.popitem(last=False)[1].close()
            upload = self._uploads[blob] = ResumableFile(self.path(blob), size, blob)
        self._uploads.move_to_end(blob)
        return upload

    def begin(self, blob: str, size: int) -> tuple[int, bool]:
        """(offset to send from, complete) for an upload of ``size`` bytes."""
        if self.has(blob, size):
            return size, True
        return self.write(blob, size, 0, b"")

    def write(self, blob: str, size: int, offset: int, data) -> tuple[int, bool]:
        """Append one chunk; returns (bytes held, complete). The last chunk is verified."""
        if self.has(blob, size):
            return size, True
        upload = self._upload(blob, size)
        try:
            upload.write(offset, data)
            if upload.complete:
                upload.finish()
        except ProtocolError:
            if upload.complete or not upload.part.exists():
                self._uploads.pop(blob).close()
            raise
        if upload.complete:
            del self._uploads[blob]
        return upload.offset, upload.complete

    def load(self, blob: str, dtype: str, shape: list[int]) -> np.ndarray:
        """A read-only array over the blob (memory-mapped)."""
        if dtype not in DTYPES:
            raise ProtocolError("bad_dtype", f"dtype {dtype!r} not in {list(DTYPES)}")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if not self.has(blob, nbytes):
            raise ProtocolError("invalid_input", f"blob {blob} of {nbytes} bytes is missing")
        if nbytes == 0:
            return np.empty(shape, DTYPES[dtype])
        return np.memmap(self.path(blob), DTYPES[dtype], mode="r", shape=tuple(shape))

    def collect(self, referenced: set[str], min_age_s: float, part_age_s: float) -> int:
        """Remove the blobs no job references that are older than ``min_age_s``, and the part
        files (uploads in progress) untouched for ``part_age_s``."""
        removed = 0
        now = time.time()
        for path in self.root.iterdir():
            blob = path.name.removesuffix(".part")
            age = now - path.stat().st_mtime
            if (blob in referenced or blob in self._uploads
                    or age < (part_age_s if path.name.endswith(".part") else min_age_s)):
                continue
            path.unlink(missing_ok=True)
            removed += 1
        return removed

    def close(self) -> None:
        for upload in self._uploads.values():
            upload.close()
        self._uploads.clear()
