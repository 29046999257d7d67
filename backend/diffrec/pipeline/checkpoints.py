"""Checkpoints of a run on disk: one file per stage, written atomically.

Stages are named by the pipeline ("pass1", "pass1-result", "pass2"). A file is written to a
temporary name, flushed to disk and renamed over the old one, so a run killed at any moment
leaves either the previous checkpoint or the new one, never a torn file. torch is imported
when a checkpoint is read or written, so the job server's process can hold a store cheaply.
"""

from __future__ import annotations

import json
from pathlib import Path

from diffrec.files import atomic_writer
from diffrec.protocol.settings import BOOKKEEPING, Settings


def settings_fingerprint(settings: Settings) -> str:
    """The settings that shape the optimisation (a checkpoint only resumes the same run)."""
    values = {k: v for k, v in settings.to_dict().items() if k not in BOOKKEEPING}
    return json.dumps(values, sort_keys=True, default=str)


class CheckpointStore:
    """Reads and writes ``<directory>/<stage>.pt``."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def path(self, stage: str) -> Path:
        return self.directory / f"{stage}.pt"

    def save(self, stage: str, state: dict) -> None:
        import torch

        with atomic_writer(self.path(stage)) as file:
            torch.save(state, file)

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
