"""Checkpoints of a run on disk: one file per stage, written atomically.

Stages are named by the pipeline: each pass's checkpoint by the pass's name (``PassName``:
"surface", "textures", "path-traced"). A file is written to a
temporary name, flushed to disk and renamed over the old one, so a run killed at any moment
leaves either the previous checkpoint or the new one, never a torn file. torch is imported
when a checkpoint is read or written, so the job server's process can hold a store cheaply.

Beside them, ``LATEST_NAME`` says where the latest checkpoint stands ("iteration 10 of 200
of pass 1 of 2"), in JSON, so that the server can say where a cancelled job stopped and where
a resumed one starts without loading a checkpoint (``latest``).
"""

from __future__ import annotations

import json
from pathlib import Path

from diffrec.files import atomic_writer

LATEST_NAME = "latest.json"


class CheckpointStore:
    """Reads and writes ``<directory>/<stage>.pt``."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def path(self, stage: str) -> Path:
        return self.directory / f"{stage}.pt"

    def save(self, stage: str, state: dict, where: str | None = None) -> None:
        """Keep ``state`` as ``stage``'s checkpoint; ``where`` says where the run stands
        ("iteration 10 of 200 of pass 1 of 2"; None: not said), for ``latest``."""
        import torch

        with atomic_writer(self.path(stage)) as file:
            torch.save(state, file)
        with atomic_writer(self.directory / LATEST_NAME) as file:
            file.write(json.dumps({"stage": stage, "where": where or ""}).encode())

    def latest(self) -> str | None:
        """Where the latest checkpoint stands (``save``'s ``where``; "" when that is not
        known), or None when there is none. Reads no checkpoint."""
        if not any(self.directory.glob("*.pt")):
            return None
        try:
            return str(json.loads((self.directory / LATEST_NAME).read_text())["where"])
        except (OSError, ValueError, KeyError, TypeError):
            return ""

    def load(self, stage: str) -> dict | None:
        """The stage's state, or None if it was never saved."""
        path = self.path(stage)
        if not path.exists():
            return None
        import torch

        return torch.load(path, map_location="cpu", weights_only=False)

    def clear(self) -> None:
        for path in self.directory.glob("*.pt"):
            path.unlink()
        (self.directory / LATEST_NAME).unlink(missing_ok=True)
