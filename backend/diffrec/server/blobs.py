"""Content-addressed blobs, each owned by the client key that stored it.

A key's blobs live in its own folder, ``DATA/blobs/NS/``, where ``NS`` is a digest of the key
(a key never becomes a path): ``NS/HASH`` holds exactly the bytes whose content hash
(``diffrec.protocol.transfer``) is ``HASH``, and an upload in progress is ``NS/HASH.SIZE.part``
(resumable by its length; the declared size is part of its name, so an upload declaring
another size is another file). Another key can neither see, resume, truncate nor use them:
the same bytes sent by two keys are stored twice, and nothing one key does tells it whether
another holds a blob.

Each key's uploads in progress and stored bytes are bounded by ``Quotas``; an upload is
refused when its remaining bytes do not fit on the disk.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import shutil
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diffrec.files import write_atomic
from diffrec.protocol.arrays import DTYPES, shape_problem
from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.schema import CONTENT_HASH_RE
from diffrec.protocol.transfer import ResumableFile, content_hash

from .disk import check_free
from .quotas import DEFAULT_QUOTAS, Quotas, exceeded

log = logging.getLogger(__name__)
MAX_OPEN_UPLOADS = 16
"""Part files kept open at once (over every key); the least recently used one is closed, and
reopened from its part file when its upload goes on."""
NAMESPACE_RE = re.compile(r"[0-9a-f]{32}\Z")
PART_RE = re.compile(r"([0-9a-f]{64})\.(?:([0-9]{1,12})\.)?part\Z")
"""An upload in progress, ``HASH.SIZE.part`` (``HASH.part`` before per-key blobs)."""


def namespace(owner: str) -> str:
    """The folder name of ``owner``'s blobs (a client key in Z85, or "local")."""
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


@dataclass
class Holdings:
    """What one key holds: complete blobs {hash: size} and uploads in progress {(hash,
    declared size)}."""

    blobs: dict[str, int] = field(default_factory=dict)
    parts: set[tuple[str, int]] = field(default_factory=set)

    @property
    def stored_bytes(self) -> int:
        return sum(self.blobs.values())

    @property
    def pending_bytes(self) -> int:
        return sum(size for _, size in self.parts)


class BlobStore:
    """Blobs on disk and the uploads in progress. Only the server's main thread calls it."""

    def __init__(self, data_dir: Path, quotas: Quotas = DEFAULT_QUOTAS):
        self.root = Path(data_dir) / "blobs"
        self.root.mkdir(parents=True, exist_ok=True)
        self.quotas = quotas
        self._uploads: OrderedDict[tuple[str, str, int], ResumableFile] = OrderedDict()
        self._held: defaultdict[str, Holdings] = defaultdict(Holdings)
        for directory in self.root.iterdir():
            if directory.is_dir() and NAMESPACE_RE.match(directory.name):
                self._scan(directory)

    def _scan(self, directory: Path) -> None:
        held = self._held[directory.name]
        for path in directory.iterdir():
            if CONTENT_HASH_RE.match(path.name):
                held.blobs[path.name] = path.stat().st_size
            elif (match := PART_RE.match(path.name)) and match[2]:
                held.parts.add((match[1], int(match[2])))

    def usage(self, owner: str) -> Holdings:
        """What ``owner`` holds now (a live view: do not change it)."""
        return self._held[namespace(owner)]

    def path(self, owner: str, blob: str) -> Path:
        if not CONTENT_HASH_RE.match(blob):
            raise ValueError(f"bad blob id {blob!r}")
        return self.root / namespace(owner) / blob

    def has(self, owner: str, blob: str, size: int | None = None) -> bool:
        """Whether ``owner`` holds ``blob`` (of ``size`` bytes); the file decides."""
        try:
            held = self.path(owner, blob).stat().st_size
        except FileNotFoundError:
            self.usage(owner).blobs.pop(blob, None)
            return False
        return size is None or held == size

    def put(self, owner: str, data) -> str:
        """Store a bytes-like object for ``owner``; returns its content hash."""
        blob = content_hash(data)
        if not self.has(owner, blob):
            nbytes = memoryview(data).nbytes
            held = self.usage(owner)
            if held.stored_bytes + nbytes > self.quotas.stored_bytes:
                raise exceeded("stored_bytes", self.quotas.stored_bytes, held.stored_bytes,
                               nbytes, "delete finished jobs (their inputs go an hour later)")
            check_free(self.root, nbytes)
            write_atomic(self.path(owner, blob), data)
            held.blobs[blob] = nbytes
        return blob

    def adopt_legacy(self, owner: str, blob: str) -> None:
        """Give ``owner`` the blob a server before per-key blobs kept at ``DATA/blobs/HASH``
        (for a job of ``owner`` that names it), unless it has it already."""
        legacy = self.root / blob
        if self.has(owner, blob) or not CONTENT_HASH_RE.match(blob) or not legacy.is_file():
            return
        target = self.path(owner, blob)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(legacy, target)
        except OSError:
            shutil.copyfile(legacy, target)
        self.usage(owner).blobs[blob] = target.stat().st_size

    def _admit(self, owner: str, blob: str, size: int) -> None:
        """Raise quota_exceeded or disk_full unless ``owner`` may begin a new upload."""
        quotas, held = self.quotas, self.usage(owner)
        finish = "finish the uploads already begun (upload resumes them)"
        if len(held.parts) + 1 > quotas.pending_uploads:
            raise exceeded("pending_uploads", quotas.pending_uploads, len(held.parts), 1, finish)
        if held.pending_bytes + size > quotas.pending_bytes:
            raise exceeded("pending_bytes", quotas.pending_bytes, held.pending_bytes, size,
                           finish)
        if held.stored_bytes + size > quotas.stored_bytes:
            raise exceeded("stored_bytes", quotas.stored_bytes, held.stored_bytes, size,
                           "delete finished jobs (their inputs go an hour later)")
        check_free(self.root, size)

    def _upload(self, owner: str, blob: str, size: int) -> ResumableFile:
        key = (namespace(owner), blob, size)
        upload = self._uploads.get(key)
        if upload is None:
            held = self._held[key[0]]
            if (blob, size) not in held.parts:
                self._admit(owner, blob, size)
            if len(self._uploads) >= MAX_OPEN_UPLOADS:
                self._uploads.popitem(last=False)[1].close()
            final = self.path(owner, blob)
            final.parent.mkdir(exist_ok=True)
            part = final.with_name(f"{blob}.{size}.part")
            upload = self._uploads[key] = ResumableFile(final, size, blob, part=part)
            held.parts.add((blob, size))
        self._uploads.move_to_end(key)
        return upload

    def begin(self, owner: str, blob: str, size: int) -> tuple[int, bool]:
        """(offset to send from, complete) for ``owner``'s upload of ``size`` bytes."""
        if self.has(owner, blob, size):
            return size, True
        upload = self._upload(owner, blob, size)
        check_free(self.root, size - upload.offset)
        return self.write(owner, blob, size, 0, b"")

    def write(self, owner: str, blob: str, size: int, offset: int, data) -> tuple[int, bool]:
        """Append one chunk; returns (bytes held, complete). The last chunk is verified."""
        if self.has(owner, blob, size):
            return size, True
        key = (namespace(owner), blob, size)
        upload = self._upload(owner, blob, size)
        try:
            upload.write(offset, data)
            if upload.complete:
                upload.finish()
        except ProtocolError:
            if upload.complete or not upload.part.exists():  # a hash mismatch removed it
                self._close(key)
            raise
        except OSError:  # disk full or read-only: reopened from the part file next time
            self._close(key)
            raise
        if upload.complete:
            self._close(key)
            self._held[key[0]].blobs[blob] = size
        return upload.offset, upload.complete

    def _close(self, key: tuple[str, str, int]) -> None:
        """Forget the open upload ``key``; its part stays counted only if its file is there."""
        upload = self._uploads.pop(key, None)
        if upload is not None:
            upload.close()
            if not upload.part.exists():
                self._held[key[0]].parts.discard(key[1:])

    def load(self, owner: str, blob: str, dtype: str, shape: list[int]) -> np.ndarray:
        """A read-only array over ``owner``'s blob (memory-mapped)."""
        if dtype not in DTYPES:
            raise ProtocolError("bad_dtype", f"dtype {dtype!r} not in {list(DTYPES)}")
        why = shape_problem(shape)
        if why:
            raise ProtocolError("invalid_input", f"blob {blob}: shape {why}")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if not self.has(owner, blob, nbytes):
            if self.has(owner, blob):
                held = self.path(owner, blob).stat().st_size
                raise ProtocolError("invalid_input", f"blob {blob} holds {held} bytes, but "
                                    f"{dtype} {list(shape)} needs {nbytes}: give the array's "
                                    "own dtype and shape")
            raise ProtocolError("invalid_input", f"blob {blob} of {nbytes} bytes is missing: "
                                "upload it (with this client key) first")
        if nbytes == 0:
            return np.empty(shape, DTYPES[dtype])
        return np.memmap(self.path(owner, blob), DTYPES[dtype], mode="r", shape=tuple(shape))

    def collect(self, referenced: set[tuple[str, str]], min_age_s: float,
                part_age_s: float) -> int:
        """Remove the blobs older than ``min_age_s`` that no job references (``referenced``
        holds (owner, blob) pairs), and the part files untouched for ``part_age_s``; also
        the files of a server before per-key blobs (``DATA/blobs/HASH``) once that old."""
        keep = {(namespace(owner), blob) for owner, blob in referenced}
        keep |= {key[:2] for key in self._uploads}
        removed = 0
        now = time.time()
        for directory in [self.root, *self.root.iterdir()]:
            if directory != self.root and not (directory.is_dir()
                                               and NAMESPACE_RE.match(directory.name)):
                continue
            held = self._held[directory.name] if directory != self.root else Holdings()
            for path in list(directory.iterdir()):
                part = PART_RE.match(path.name)
                blob = part[1] if part else path.name
                if not (part or CONTENT_HASH_RE.match(blob)) or (directory.name, blob) in keep:
                    continue
                if now - path.stat().st_mtime < (part_age_s if part else min_age_s):
                    continue
                path.unlink(missing_ok=True)
                removed += 1
                if part:
                    held.parts.discard((blob, int(part[2] or 0)))
                else:
                    held.blobs.pop(blob, None)
        return removed

    def close(self) -> None:
        for upload in self._uploads.values():
            upload.close()
        self._uploads.clear()
