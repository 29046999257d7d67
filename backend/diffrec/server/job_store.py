"""The job store: one directory per job under ``DATA/jobs``.

``DATA/jobs/ID/state.json`` is the job's record (written atomically), ``checkpoint/`` the
runner's checkpoints and ``results/`` its result files. Inputs live in the blob store and the
record names them by content hash. A record is a plain dict:
``{id, owner, task, spec, inputs: {name: {blob, dtype, shape}}, state, seq, created, updated,
finished, attempts, progress, message, results: [{name, size, content_hash}]}``, and ``stop``
("cancel" or "delete") once a client asked a running job to stop.

``DATA/jobs/.reserve`` holds RESERVE_BYTES of zeros: when the disk is full, the store deletes
it to write a state file (a job's end must reach the disk, or a restart would run it again),
and puts it back once the disk has room.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from diffrec.files import write_atomic, write_json_atomic
from diffrec.protocol.events import FINAL_STATES
from diffrec.protocol.limits import MIB
from diffrec.protocol.schema import JOB_ID_RE

from .disk import DISK_RESERVE_BYTES, FULL_ERRNOS, free_bytes

log = logging.getLogger(__name__)
STATES = ("queued", "running", *FINAL_STATES)
"""A job's states: waiting, running, or one of the final ones (``events.Outcome``)."""
RESERVE_BYTES = MIB
"""Room kept for state files (each a few KiB) on a full disk."""


class JobStore:
    """Job records on disk. Only the server's main thread calls it."""

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / "jobs"
        self.root.mkdir(parents=True, exist_ok=True)
        self.reserve = self.root / ".reserve"
        self.restore_reserve()

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
        try:
            for sub in ("", "results", "checkpoint"):
                (directory / sub).mkdir(parents=True, exist_ok=True)
            self.save(record)
        except OSError:
            self.delete(record["id"])
            raise

    def save(self, record: dict) -> None:
        """Replace the record's state file; on a full disk, in the room the reserve held.
        Raises OSError when even that fails (a read-only disk)."""
        record["updated"] = time.time()
        path = self.job_dir(record["id"]) / "state.json"
        try:
            write_json_atomic(path, record)
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS or not self.reserve.exists():
                raise
            log.warning("the disk is full: using the reserve to save job %s", record["id"])
            self.reserve.unlink()
            write_json_atomic(path, record)

    def restore_reserve(self) -> None:
        """Put the reserve back if it was used and the disk has room again."""
        if self.reserve.exists():
            return
        try:
            if free_bytes(self.root) > RESERVE_BYTES + DISK_RESERVE_BYTES:
                write_atomic(self.reserve, bytes(RESERVE_BYTES))
        except OSError as exc:
            log.warning("cannot put back the disk reserve %s: %s", self.reserve, exc)

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
