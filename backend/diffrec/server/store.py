"""The job store: one directory per job under ``DATA/jobs``.

``DATA/jobs/ID/state.json`` is the job's record (written atomically), ``checkpoint/`` the
runner's checkpoints and ``results/`` its result files. Inputs live in the blob store and the
record names them by content hash. A record is a plain dict:
``{id, owner, task, spec, inputs: {name: {blob, dtype, shape}}, state, seq, created, updated,
finished, attempts, progress, message, results: [{name, size, content_hash}]}``, and ``stop``
("cancel" or "delete") once a client asked a running job to stop.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from diffrec.protocol.schema import JOB_ID_RE

from .files import write_json_atomic

log = logging.getLogger(__name__)
STATES = ("queued", "running", "done", "failed", "cancelled")
TERMINAL = ("done", "failed", "cancelled")


class JobStore:
    """Job records on disk. Only the server's main thread calls it."""

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / "jobs"
        self.root.mkdir(parents=True, exist_ok=True)

    def job_dir(self, job_id: str) -> Path:
        if not JOB_ID_RE.match(job_id):  # ids come from the wire: never a path trick
            raise ValueError(f"bad job id {job_id!r}")
        return self.root / job_id

    def results_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "results"

    def checkpoint_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "checkpoint"

    def create(self, record: dict) -> None:
        directory = self.job_dir(record["id"])
        for sub in ("", "results", "checkpoint"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        self.save(record)

    def save(self, record: dict) -> None:
        record["updated"] = time.time()
        write_json_atomic(self.job_dir(record["id"]) / "state.json", record)

    def delete(self, job_id: str) -> None:
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def load_all(self) -> dict[str, dict]:
        """Every readable record; a directory without a valid state file is skipped (logged)."""
        records = {}
        for directory in sorted(self.root.iterdir()):
            if not JOB_ID_RE.match(directory.name):
                continue
            try:
                record = json.loads((directory / "state.json").read_text())
                if record["id"] != directory.name or record["state"] not in STATES:
                    raise ValueError("inconsistent record")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("skipping job directory %s: %s", directory, exc)
                continue
            records[record["id"]] = record
        return records
