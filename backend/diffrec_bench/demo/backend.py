"""A local diffrec backend for the demo and the benchmarks: ``diffrec serve`` as a child process
on a random loopback port (the add-on connects to it as it would to any backend), and a free
loopback port (where nothing listens)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT_S = 120.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LocalBackend:
    """``diffrec serve`` on ``tcp://127.0.0.1:<random port>`` with its data in ``data_dir``
    and its output in ``log_path``; a context manager that stops the server (SIGTERM, then
    kill) on exit."""

    def __init__(self, data_dir: Path, log_path: Path, device: str | None = None):
        command = [sys.executable, "-m", "diffrec", "serve", "--bind", "tcp://127.0.0.1:*",
                   "--data-dir", str(data_dir)]
        if device:
            command += ["--device", device]
        self.log_path = Path(log_path)
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
