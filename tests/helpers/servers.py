"""Helpers for the tests that talk to a server (in any folder): a server in a child process,
job specs and inputs, target images, and the content hash computed independently of the
protocol module."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from diffrec.protocol import Client, ServerError

START_TIMEOUT_S = 60.0
HASH_BLOCK_BYTES = 4 * 1024 * 1024  # docs/protocol.md, "Blobs"


def reference_content_hash(data: bytes) -> str:
    """docs/protocol.md's content hash, serially: SHA-256 of the blocks' SHA-256 digests."""
    blocks = range(0, len(data), HASH_BLOCK_BYTES)
    digests = b"".join(hashlib.sha256(data[i:i + HASH_BLOCK_BYTES]).digest() for i in blocks)
    return hashlib.sha256(digests).hexdigest()


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def blob_path(data_dir: Path, blob: str, owner: str = "local") -> Path:
    """Where a server keeps ``owner``'s blob (``owner``: a client key, or "local" in plain
    text); its upload in progress is ``HASH.SIZE.part`` beside it."""
    from diffrec.server.blobs import namespace

    return Path(data_dir) / "blobs" / namespace(owner) / blob


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServerProcess:
    """``diffrec serve`` in a child process; killed (SIGKILL) at the latest on teardown."""

    def __init__(self, data_dir: Path, *extra: str, port: int | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.extra = extra
        self.process: subprocess.Popen | None = None
        self.log = self.data_dir.parent / f"server-{self.port}.log"

    def start(self, wait: bool = True) -> ServerProcess:
        command = [sys.executable, "-m", "diffrec", "serve", "--bind", self.address,
                   "--data-dir", str(self.data_dir), "--device", "cpu", *self.extra]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, **client_args) -> None:
        with Client(self.address, timeout=1.0, retry_for=START_TIMEOUT_S, **client_args) as c:
            c.ping()

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def job_dir(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / job_id


@contextlib.contextmanager
def server_in_process(data_dir: Path, runners=(), **server_args) -> Iterator:
    """A Server running in a thread of this process, with extra test-only ``runners`` (which a
    ``diffrec serve`` child cannot have) and ``Server`` keyword arguments (``quotas``...);
    stopped and closed when the block ends."""
    from diffrec.server import app

    builtin = app.runners
    extra = {runner.task: runner for runner in runners}
    # patched for the constructor too: it resumes the jobs it finds, test-only tasks included
    with mock.patch.object(app, "runners", lambda *args: {**builtin(*args), **extra}):
        server = app.Server(f"tcp://127.0.0.1:{free_port()}", data_dir, "cpu", **server_args)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, args=(stop.is_set,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(10)
        server.close()


def resume_after_kill(server: ServerProcess, client: Client, connect, job: str):
    """SIGKILL the server (``client`` goes with it), start it again on the same port and data
    directory, and follow ``job`` to its end with a new client. Returns (that client, the
    final event, the iterations the job said it resumed from)."""
    server.kill()
    client.close()
    server.start()
    again = connect(server)
    events = []
    final = again.wait(job, on_event=events.append)
    resumed = [e["resumed_from"] for e in events if e["kind"] == "log" and "resumed_from" in e]
    return again, final, resumed


def open_client(server: ServerProcess, server_key: str, keypair, **kwargs) -> Client:
    """A CURVE client of ``server`` with the key pair ``keypair`` (short timeouts)."""
    return Client(server.address, server_key=server_key, client_keypair=keypair,
                  **({"timeout": 2.0, "retry_for": 10.0} | kwargs))


def fit_spec(**overrides) -> dict:
    return {"task": "fit_texture", "iterations": 200, "texture_size": 16, "lr": 0.05,
            "checkpoint_every": 50, "preview_every": 100, **overrides}


def target_images(count: int = 4, size: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((count, size, size, 3), dtype=np.float32)


def error_of(call) -> ServerError:
    """The ServerError that ``call()`` raises (the test fails if it raises none)."""
    with pytest.raises(ServerError) as info:
        call()
    return info.value


def optimize_inputs(count: int = 4, size: int = 16) -> dict[str, np.ndarray]:
    """Valid ``optimize`` inputs: a grey disc seen by ``count`` cameras around the origin."""
    from diffrec.camera import look_at

    angles = np.arange(count) * 2 * np.pi / count
    eyes = np.stack([3 * np.cos(angles), 3 * np.sin(angles), np.full(count, 0.5)], -1)
    cameras = look_at(eyes, (0.0, 0.0, 0.0)).numpy().astype(np.float32)
    focal = size / (2 * np.tan(np.radians(20)))
    intrinsics = np.tile(np.array([focal, focal, size / 2, size / 2, 0.1, 10], np.float32),
                         (count, 1))
    rows, cols = np.mgrid[:size, :size] + 0.5 - size / 2
    disc = (np.hypot(rows, cols) < size / 4).astype(np.float32)
    images = np.zeros((count, size, size, 4), np.float32)
    images[..., :3], images[..., 3] = 0.5 * disc[..., None], disc
    return {"images": images, "cameras": cameras, "intrinsics": intrinsics}


def smallest_materials_inputs() -> dict[str, np.ndarray]:
    """The smallest inputs a materials job accepts: two blank 8x8 views and one triangle (for
    tests of what the settings refuse, where the inputs are not under test)."""
    cameras = np.repeat(np.eye(4, dtype=np.float32)[None], 2, axis=0)
    intrinsics = np.tile(np.array([8, 8, 4, 4, 0.1, 10], np.float32), (2, 1))
    return {"images": np.zeros((2, 8, 8, 4), np.float32), "cameras": cameras,
            "intrinsics": intrinsics, "vertices": np.eye(3, dtype=np.float32),
            "faces": np.array([[0, 1, 2]], np.int32)}
