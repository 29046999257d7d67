"""A local diffrec backend for the demo: ``diffrec serve`` as a child process on a random
loopback port, and one optimize job run through the wire protocol's client."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diffrec.protocol import Client

START_TIMEOUT_S = 120.0


class LocalBackend:
    """``diffrec serve`` on ``tcp://127.0.0.1:<random port>`` with its data in ``data_dir``;
    a context manager that stops the server (SIGTERM, then kill) on exit."""

    def __init__(self, data_dir: Path, device: str | None = None):
        command = [sys.executable, "-m", "diffrec", "serve", "--bind", "tcp://127.0.0.1:*",
                   "--data-dir", str(data_dir)]
        if device:
            command += ["--device", device]
        self.log_path = Path(data_dir) / "serve.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=open(self.log_path, "w"), text=True)
        self.endpoint = self._read_endpoint()

    def _read_endpoint(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            match = re.search(r"serving on (tcp://\S+)", line)
            if match:
                return match.group(1)
        self.close()
        raise RuntimeError(f"the backend did not start; see {self.log_path}:\n"
                           f"{self.log_path.read_text()[-2000:]}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class JobRecord:
    """What the demo keeps of a job: its id, progress history and result files."""

    job: str
    progress: list[dict] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def run_optimize(endpoint: str, settings: dict, arrays: dict[str, np.ndarray], result_dir: Path,
                 on_progress: Callable[[dict], None] | None = None) -> JobRecord:
    """Submit an ``optimize`` job, follow it to its end, fetch its results into
    ``result_dir``. Raises RuntimeError when the job fails or is cancelled."""
    record = JobRecord(job=f"demo-{uuid.uuid4().hex[:12]}")
    started = time.monotonic()
    with Client(endpoint, timeout=30.0, retry_for=120.0) as client:
        client.submit(record.job, {"task": "optimize", "settings": settings}, arrays)

        def on_event(event) -> None:
            if event["kind"] == "progress":
                fields = dict(event.fields)
                record.progress.append(fields)
                if on_progress:
                    on_progress(fields)

        final = client.wait(record.job, on_event=on_event)
        if final["kind"] != "done":
            raise RuntimeError(f"the optimize job {final['kind']}: {final.get('message', '')}")
        record.files = client.fetch(record.job, result_dir)
    record.seconds = time.monotonic() - started
    return record
