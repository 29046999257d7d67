"""Durable file replacement: write a temporary file, flush it to disk, rename it over the
target, then flush the directory. A crash at any moment leaves the old file or the new one,
never a torn one; concurrent writers each use their own temporary name."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from diffrec.protocol.transfer import fsync_dir


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """``with atomic_writer(path) as f: f.write(...)`` replaces ``path`` when the block ends
    without an exception (creating its folder if needed); otherwise nothing changes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (see ``atomic_writer``)."""
    with atomic_writer(path) as stream:
        stream.write(data)


def write_json_atomic(path: str | os.PathLike, value) -> None:
    """Replace ``path`` with ``value`` as JSON (indented, no NaN) atomically."""
    write_atomic(path, json.dumps(value, indent=1, allow_nan=False).encode())


def cache_dir(*parts: str) -> Path:
    """diffrec's cache folder (``$XDG_CACHE_HOME/diffrec``, else ``~/.cache/diffrec``), joined
    with ``parts``; not created here."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "diffrec", *parts)
