#!/usr/bin/env python3
"""Jobs per hour against the number of worker processes, through one gateway.

    .venv/bin/python scripts/bench_cluster.py [--workers 1 2 4] [--jobs 8] [--iterations 2000]

For each count N in ``--workers`` it starts a one-node Ray cluster with N CPUs on this
machine, a gateway (``diffrec serve --cluster``) on loopback with a fresh data directory, and
submits ``--jobs`` identical ``fit_texture`` jobs at once; each runs in an actor asking for
one CPU, so at most N run at a time. It times from the first submit to the last job's end and
prints, per N, the wall time, jobs per hour and the speed-up over one worker. The first row is
the default executor (``diffrec serve`` without ``--cluster``: one job at a time in a child
process) for comparison. Every job's results are checked byte-identical to the first's.
Needs ``pip install 'diffrec[cluster]'``. GPUs are not used: the actors ask for CPUs.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import ray
from ray.cluster_utils import Cluster

from diffrec.protocol import Client
from diffrec_bench.demo.backend import free_port


def spec(iterations: int) -> dict:
    return {"task": "fit_texture", "iterations": iterations, "texture_size": 16, "lr": 0.05,
            "checkpoint_every": 500, "preview_every": 1000}


def run_jobs(cluster: str | None, jobs: int, iterations: int) -> float:
    """Seconds from the first submit to the end of the last of ``jobs`` jobs through a new
    gateway (on ``cluster``, or the local executor when None)."""
    with tempfile.TemporaryDirectory() as data:
        address = f"tcp://127.0.0.1:{free_port()}"
        command = [sys.executable, "-m", "diffrec", "serve", "--bind", address,
                   "--data-dir", data, "--device", "cpu"]
        command += ["--cluster", cluster] if cluster else []
        gateway = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with Client(address, timeout=5.0, retry_for=120.0) as client:
                client.ping()
                images = np.random.default_rng(0).random((4, 16, 16, 3), dtype=np.float32)
                began = time.perf_counter()
                for index in range(jobs):
                    client.submit(f"job-{index}", spec(iterations), {"images": images})
                for index in range(jobs):
                    final = client.wait(f"job-{index}")
                    if final["kind"] != "done":
                        raise SystemExit(f"job-{index} ended {final['kind']}: {final.fields}")
                elapsed = time.perf_counter() - began
                hashes = {tuple(sorted((f["name"], f["content_hash"])
                                       for f in client.status(f"job-{index}")["results"]))
                          for index in range(jobs)}
                if len(hashes) != 1:
                    raise SystemExit("the jobs' results differ")
            return elapsed
        finally:
            gateway.kill()
            gateway.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()

    print(f"{platform.node()}: {os.cpu_count()} cores, {platform.python_version()}, "
          f"ray {ray.__version__}; {args.jobs} fit_texture jobs of {args.iterations} "
          "iterations each (16² texture, 4 × 16² targets); load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    rows = [("local executor", 1, run_jobs(None, args.jobs, args.iterations))]
    for workers in args.workers:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": workers})
        try:
            rows.append(("Ray", workers, run_jobs(cluster.address, args.jobs, args.iterations)))
        finally:
            cluster.shutdown()
    one = next((seconds for kind, n, seconds in rows if kind == "Ray" and n == 1), rows[0][2])
    print("\n| executor | worker processes | wall s | jobs per hour | speed-up vs 1 Ray worker |")
    print("| --- | --- | --- | --- | --- |")
    for kind, workers, seconds in rows:
        print(f"| {kind} | {workers} | {seconds:.1f} | {args.jobs / seconds * 3600:,.0f} | "
              f"{one / seconds:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
