"""Durable file writes: temp file, fsync, rename, fsync of the directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from diffrec.protocol.transfer import fsync_dir


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file."""
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)


def write_json_atomic(path: Path, value) -> None:
    write_atomic(path, json.dumps(value, indent=1, allow_nan=False).encode())
