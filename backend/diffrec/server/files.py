"""Durable file writes: temp file, fsync, rename, fsync of the directory."""

from __future__ import annotations

import json
from pathlib import Path

from diffrec.files import write_atomic


def write_json_atomic(path: Path, value) -> None:
    write_atomic(path, json.dumps(value, indent=1, allow_nan=False).encode())
