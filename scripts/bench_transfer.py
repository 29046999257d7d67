#!/usr/bin/env python3
"""Upload and download throughput of a large payload through a real server on loopback.

    .venv/bin/python scripts/bench_transfer.py [--mib 300]

Starts ``diffrec serve`` in a child process with a temporary data directory, uploads the
payload as a blob (chunked, credit-windowed, SHA-256 verified by the server), uploads it again
(content-addressed: nothing is sent), then fetches it back as a job result (chunked,
resumable, verified by the client) and checks it is byte-identical.
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from diffrec.protocol import Client
from diffrec.protocol.limits import MIB
from diffrec.server.store import JobStore
from diffrec.server.worker import result_manifest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def finished_job(data_dir: Path, payload: np.ndarray) -> None:
    """A done job whose result is the payload, so that fetch has something to send."""
    store = JobStore(data_dir)
    record = {"id": "bench", "owner": "local", "task": "fit_texture", "spec": {}, "inputs": {},
              "state": "done", "seq": 1, "created": time.time(), "finished": time.time(),
              "attempts": 1, "progress": None, "message": "", "results": []}
    store.create(record)
    payload.tofile(store.results_dir("bench") / "payload.bin")
    record["results"] = result_manifest(store.results_dir("bench"))
    store.save(record)


def rate(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 2**30:.2f} GiB/s ({seconds:.2f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=300, help="payload size in MiB")
    parser.add_argument("--tmp", default=None,
                        help="where the server's data and the download go (default: the system "
                             "temp dir; /dev/shm takes the disk out of the measurement)")
    args = parser.parse_args()
    payload = np.random.default_rng(0).integers(0, 256, args.mib * MIB, dtype=np.uint8)
    with tempfile.TemporaryDirectory(dir=args.tmp) as temp:
        data_dir = Path(temp) / "data"
        finished_job(data_dir, payload)
        address = f"tcp://127.0.0.1:{free_port()}"
        server = subprocess.Popen([sys.executable, "-m", "diffrec", "serve", "--bind", address,
                                   "--data-dir", str(data_dir), "--device", "cpu"])
        try:
            with Client(address, timeout=30.0, retry_for=60.0) as client:
                client.ping()
                started = time.perf_counter()
                sha256 = hashlib.sha256(payload).hexdigest()
                hashed = time.perf_counter()
                client.upload(payload, sha256=sha256)
                uploaded = time.perf_counter()
                client.upload(payload, sha256=sha256)
                again = time.perf_counter()
                (path,) = client.fetch("bench", Path(temp) / "out")
                fetched = time.perf_counter()
            identical = np.array_equal(np.fromfile(path, np.uint8), payload)
        finally:
            server.terminate()
            server.wait(30)
    size = payload.nbytes
    print(f"payload           {args.mib} MiB, loopback, chunks of 4 MiB, window of 8, "
          f"files in {Path(temp).parent}")
    print(f"client SHA-256    {rate(size, hashed - started)}")
    print(f"upload            {rate(size, uploaded - hashed)}  (server writes and verifies)")
    print(f"upload + hashing  {rate(size, uploaded - started)}")
    print(f"re-upload         {again - uploaded:.3f} s  (content-addressed: not sent again)")
    print(f"download          {rate(size, fetched - again)}  (client writes and verifies)")
    print(f"byte-identical    {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
