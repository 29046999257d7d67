#!/usr/bin/env python3
"""Upload and download throughput of a large payload through a real server on loopback.

    .venv/bin/python scripts/bench_transfer.py [--mib 300] [--repeat 5] [--tmp /dev/shm]

Starts ``diffrec serve`` in a child process with a temporary data directory, uploads the
payload as a blob (chunked, credit-windowed, verified by the server against its content
hash), uploads it again (content-addressed: nothing is sent), then fetches it back as a job
result (chunked, resumable, verified by the client) and checks it is byte-identical.
``--repeat`` does the upload (the blob deleted in between) and the download that many times
against the same server and prints each run, then the best and the median.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from diffrec.protocol import Client
from diffrec.protocol.limits import CHUNK_BYTES, MIB, WINDOW_CHUNKS
from diffrec.protocol.manifest import write_manifest
from diffrec.protocol.transfer import HASH_THREADS, content_hash
from diffrec.server.blobs import namespace
from diffrec.server.executor import result_files
from diffrec.server.job_store import JobStore
from diffrec_bench.demo.backend import free_port


def finished_job(data_dir: Path, payload: np.ndarray) -> None:
    """A done job whose result is the payload, so that fetch has something to send."""
    store = JobStore(data_dir)
    record = {"id": "bench", "owner": "local", "task": "fit_texture", "spec": {}, "inputs": {},
              "state": "done", "seq": 1, "created": time.time(), "finished": time.time(),
              "attempts": 1, "progress": None, "message": "", "results": []}
    store.create(record)
    payload.tofile(store.results_dir("bench") / "payload.bin")
    write_manifest(store.results_dir("bench"), {"payload.bin": "data"})
    record["results"] = result_files(store.results_dir("bench"))
    store.save(record)


def rate(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 2**30:.2f} GiB/s ({seconds:.2f} s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=300, help="payload size in MiB")
    parser.add_argument("--repeat", type=int, default=1, help="upload and download this often")
    parser.add_argument("--tmp", default=None,
                        help="where the server's data and the download go (default: the system "
                             "temp dir; /dev/shm takes the disk out of the measurement)")
    args = parser.parse_args()
    payload = np.random.default_rng(0).integers(0, 256, args.mib * MIB, dtype=np.uint8)
    size = payload.nbytes
    uploads, downloads = [], []
    identical = True
    with tempfile.TemporaryDirectory(dir=args.tmp) as temp:
        data_dir = Path(temp) / "data"
        finished_job(data_dir, payload)
        address = f"tcp://127.0.0.1:{free_port()}"
        server = subprocess.Popen([sys.executable, "-m", "diffrec", "serve", "--bind", address,
                                   "--data-dir", str(data_dir), "--device", "cpu"])
        try:
            with Client(address, timeout=30.0, retry_for=60.0) as client:
                client.ping()
                print(f"payload           {args.mib} MiB, loopback, chunks of "
                      f"{CHUNK_BYTES // MIB} MiB, window of {WINDOW_CHUNKS}, files in "
                      f"{Path(temp).parent}")
                started = time.perf_counter()
                blob = content_hash(payload)
                hashed = time.perf_counter()
                print(f"content hash      {rate(size, hashed - started)}  ({HASH_THREADS} threads)")
                for run in range(1, args.repeat + 1):
                    (data_dir / "blobs" / namespace("local") / blob).unlink(missing_ok=True)
                    began = time.perf_counter()
                    client.upload(payload, blob=blob)
                    uploaded = time.perf_counter()
                    client.upload(payload, blob=blob)
                    again = time.perf_counter()
                    path, manifest = client.fetch("bench", Path(temp) / f"out{run}")
                    fetched = time.perf_counter()
                    identical &= np.array_equal(np.fromfile(path, np.uint8), payload)
                    path.unlink()
                    manifest.unlink()
                    uploads.append(uploaded - began)
                    downloads.append(fetched - again)
                    print(f"run {run:<13} upload {rate(size, uploads[-1])}, "
                          f"re-upload {again - uploaded:.3f} s (content-addressed: not sent "
                          f"again), download {rate(size, downloads[-1])}", flush=True)
        finally:
            server.terminate()
            server.wait(30)
    for name, times, note in (("upload", uploads, "server writes and verifies"),
                              ("download", downloads, "client writes and verifies")):
        print(f"{name:<17} best {rate(size, min(times))}, median "
              f"{rate(size, statistics.median(times))}  ({note})")
    print(f"upload + hashing  {rate(size, hashed - started + min(uploads))}  (best upload)")
    print(f"byte-identical    {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
