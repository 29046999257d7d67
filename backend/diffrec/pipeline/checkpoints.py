"""Checkpoints of a run on disk: one file per stage, written atomically.

Stages are named by the pipeline: each pass's checkpoint by the pass's name (``PassName``:
"surface", "textures", "path-traced"). A file is written to a
temporary name, flushed to disk and renamed over the old one, so a run killed at any moment
leaves either the previous checkpoint or the new one, never a torn file. torch is imported
when a checkpoint is read or written, so the job server's process can hold a store cheaply.

A store may carry the digest of what its run trains on (``for_inputs``,
``pipeline.input_digest``): every checkpoint it saves is tagged with it, and ``made_from``
tells a checkpoint of other inputs (untagged ones, from before tags, are taken as made from
these).

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

    def __init__(self, directory: str | Path, inputs: str | None = None):
        self.directory = Path(directory)
        self.inputs = inputs

    def for_inputs(self, digest: str) -> CheckpointStore:
        """This store, its checkpoints tagged with the inputs' ``digest``."""
        return CheckpointStore(self.directory, digest)

    def made_from(self, state: dict) -> bool:
        """Whether the checkpoint ``state`` was made from this store's inputs (True where
        either carries no digest)."""
        return self.inputs is None or state.get("inputs", self.inputs) == self.inputs

    def path(self, stage: str) -> Path:
        return self.directory / f"{stage}.pt"

    def save(self, stage: str, state: dict, where: str | None = None) -> None:
        """Keep ``state`` as ``stage``'s checkpoint; ``where`` says where the run stands
        ("iteration 10 of 200 of pass 1 of 2"; None: not said), for ``latest``."""
        import torch

        if self.inputs is not None:
            state = {**state, "inputs": self.inputs}
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
