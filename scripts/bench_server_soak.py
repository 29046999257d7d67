#!/usr/bin/env python3
"""Soak: many clients against one ``diffrec serve`` that is killed and restarted under them.

    .venv/bin/python scripts/bench_server_soak.py [--clients 50] [--seconds 60] [--kills 3]

Starts ``diffrec serve`` on loopback with a temporary data directory and runs a reference job
for each of a few tiny ``fit_texture`` jobs. Then ``--clients`` threads, each with its own
connection, mix pings, uploads of random blobs (1 KiB to 6 MiB), submits of tiny jobs (one
outstanding per client), status polls, cancels, fetches and deletes for ``--seconds``, while
the server is killed with SIGKILL at ``--kills`` random moments and started again on the same
port and data directory. At the end it waits for every job still queued or running, and
checks that no job and no finished upload was lost and that every job that ended ``done`` gave
results byte-identical to its reference run. It prints requests/s, p50/p99 latency (a request
caught by a restart waits for the new server: that is in the tail), the server's RSS before
and after, and exits 1 if any check failed.

Then two figures of issue 26. Misbehaving peers: ``--misbehaving`` raw ZMTP connections send
4 MiB frames with MORE set and never the last one for ``--misbehaving-seconds`` while a
normal client pings; it prints the server's RSS before and at its peak, and the pings' p99.
Fairness: a second server (CURVE, keys A and B, ``--max-wall-time-s --wall-time``) gets
``--long-jobs`` jobs of 10^6 iterations from key A, then a 5-iteration job from key B; it
prints how long B's job took to start.

Then issue 55's hostile clients, on a third server: ``--hostile-clients`` well-behaved clients
ping and read 256 KiB of a 192 KiB-plus result file for ``--hostile-seconds``, alone and then
beside ``--declared`` connections that declare a 4 MiB frame and send none of it,
``--small-frames`` connections pacing 34-byte frames with MORE set, ``--unread`` clients
asking for the file again and again and reading no reply, and ``--idle`` connections that send
nothing; it prints the well-behaved clients' p99 latency and errors, and the server's peak RSS
and descriptors, in each run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import zmq

from diffrec import cli
from diffrec.protocol import Client, ServerError, ServerUnavailable, read_keypair, write_keypair
from diffrec.protocol.limits import MAX_FRAME_BYTES, MIB
from diffrec.protocol.message import encode
from diffrec_bench.demo.backend import free_port
from diffrec_bench.zmtp_peer import send_unfinished, zmtp_dealer

VARIANTS = 4
EXPECTED_CODES = ("quota_exceeded", "too_many_jobs")
"""Refusals that are the server doing its job under load, not errors."""


def job_spec() -> dict:
    return {"task": "fit_texture", "iterations": 30, "texture_size": 8, "lr": 0.05,
            "checkpoint_every": 10, "preview_every": 1000}


def variant_images(variant: int) -> np.ndarray:
    return np.random.default_rng(variant).random((3, 12, 12, 3), dtype=np.float32)


class TimedClient(Client):
    """A Client that records the latency of every request (retries included), in seconds."""

    def __init__(self, *args, latencies: list, **kwargs):
        super().__init__(*args, **kwargs)
        self.latencies = latencies

    def call(self, op, fields=None, arrays=None):
        began = time.perf_counter()
        try:
            return super().call(op, fields, arrays)
        finally:
            self.latencies.append(time.perf_counter() - began)


class ServerUnderTest:
    """``diffrec serve`` in a child process that can be killed and started again."""

    def __init__(self, data_dir: Path, *extra: str):
        self.data_dir = data_dir
        self.extra = extra
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.process: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "diffrec", "serve", "--bind", self.address, "--data-dir",
             str(self.data_dir), "--device", "cpu", "--max-queued-jobs", "1000", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill_and_restart(self) -> None:
        self.process.kill()
        self.process.wait()
        self.restarts += 1
        self.start()

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


class Soak:
    """The clients' shared bookkeeping: what must still be on the server at the end."""

    def __init__(self, server: ServerUnderTest, references: dict, out: Path, seed: int):
        self.server, self.references, self.out = server, references, out
        self.seed = seed
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.jobs: dict[str, int] = {}  # job id -> variant, for jobs submitted and not deleted
        self.uploads: set[tuple[str, int]] = set()  # (blob, size) of finished uploads
        self.counts = {"done": 0, "cancelled": 0, "deleted": 0, "uploads": 0, "refused": 0,
                       "mismatched": 0, "failed": 0, "errors": 0}
        self.error_samples: list[str] = []

    def count(self, what: str, detail: str = "") -> None:
        with self.lock:
            self.counts[what] += 1
            if detail and len(self.error_samples) < 10:
                self.error_samples.append(detail)

    def check_results(self, client: Client, job: str) -> None:
        files = client.fetch(job, self.out / job)
        got = {path.name: path.read_bytes() for path in files}
        if got == self.references[self.jobs[job]]:
            self.count("done")
        else:
            self.count("mismatched", f"{job}: results differ from the reference")

    def client_loop(self, index: int, deadline: float) -> None:
        rng = random.Random(self.seed * 1000 + index)
        client = TimedClient(self.server.address, timeout=5.0, retry_for=90.0,
                             latencies=self.latencies)
        outstanding: str | None = None
        serial = 0
        with client:
            while time.monotonic() < deadline:
                try:
                    if outstanding:
                        state = client.status(outstanding)["state"]
                        if state in ("done", "cancelled", "failed"):
                            if state == "done":
                                self.check_results(client, outstanding)
                            elif state == "cancelled":
                                self.count("cancelled")
                            else:
                                self.count("failed", f"{outstanding} failed")
                            client.delete(outstanding)
                            with self.lock:
                                del self.jobs[outstanding]
                            self.count("deleted")
                            outstanding = None
                    roll = rng.random()
                    if roll < 0.4:
                        client.ping()
                    elif roll < 0.55:
                        size = rng.choice([1024, 64 * 1024, MIB, 6 * MIB])
                        payload = rng.randbytes(size)
                        blob = client.upload(payload)
                        with self.lock:
                            self.uploads.add((blob, size))
                        self.count("uploads")
                    elif roll < 0.75 and outstanding is None:
                        serial += 1
                        job, variant = f"c{index}-{serial}", rng.randrange(VARIANTS)
                        with self.lock:
                            self.jobs[job] = variant
                        try:
                            client.submit(job, job_spec(), {"images": variant_images(variant)})
                        except ServerError:
                            with self.lock:
                                del self.jobs[job]  # refused: never on the server
                            raise
                        outstanding = job
                        if rng.random() < 0.1:
                            client.cancel(job)
                    else:
                        client.list_jobs()
                except ServerError as exc:
                    if exc.code in EXPECTED_CODES:
                        self.count("refused")
                    else:
                        self.count("errors", f"{exc.code}: {exc.message}")
                except ServerUnavailable as exc:
                    self.count("errors", f"unavailable: {exc}")
                time.sleep(rng.uniform(0, 0.02))

    @staticmethod
    def held_jobs(client: Client) -> set[str]:
        return {job["job"] for job in client.list_jobs()}

    def final_check(self, client: Client, wait_s: float) -> list[str]:
        """Problems found once the clients have stopped: lost jobs or uploads, mismatches."""
        problems = []
        deadline = time.monotonic() + wait_s
        for job in sorted(self.jobs):
            try:
                final = client.wait(job) if time.monotonic() < deadline else None
            except ServerError as exc:
                problems.append(f"job {job} lost ({exc.code})")
                continue
            if final is None:
                problems.append(f"job {job} not finished in time")
            elif final["kind"] == "done":
                self.check_results(client, job)
            elif final["kind"] == "failed":
                problems.append(f"job {job} failed: {final['message']}")
        listed = self.held_jobs(client)
        problems += [f"job {job} missing from list" for job in sorted(set(self.jobs) - listed)]
        for blob, size in sorted(self.uploads):
            if not client.call("upload", {"blob": blob, "size": size})["complete"]:
                problems.append(f"upload {blob[:12]}… ({size} bytes) lost")
        return problems


def references(client: Client, out: Path) -> dict[int, dict[str, bytes]]:
    """Each variant's results from one undisturbed run."""
    refs = {}
    for variant in range(VARIANTS):
        job = f"reference-{variant}"
        client.submit(job, job_spec(), {"images": variant_images(variant)})
        assert client.wait(job)["kind"] == "done"
        refs[variant] = {path.name: path.read_bytes() for path in client.fetch(job, out / job)}
        client.delete(job)
    return refs


def misbehaving_phase(server: ServerUnderTest, connections: int,
                      seconds: float) -> tuple[float, float, float]:
    """(RSS before in MiB, peak RSS in MiB, ping p99 in ms) while ``connections`` raw peers
    send unfinished messages of up to 100 frames of 4 MiB each for ``seconds``."""
    rss_before, peak, pings = server.rss_mib(), 0.0, []
    peers = [zmtp_dealer(server.address) for _ in range(connections)]
    sender = threading.Thread(target=send_unfinished,
                              args=(peers, 100, 4 * MIB, time.monotonic() + seconds))
    sender.start()
    with Client(server.address, timeout=10.0, retry_for=30.0) as client:
        while sender.is_alive():
            began = time.perf_counter()
            client.ping()
            pings.append(time.perf_counter() - began)
            peak = max(peak, server.rss_mib())
            time.sleep(0.1)
    for peer in peers:
        peer.close()
    pings.sort()
    return rss_before, peak, pings[int(0.99 * (len(pings) - 1))] * 1000


def fairness_phase(root: Path, long_jobs: int, wall_time_s: float) -> float:
    """Seconds from key B's submit of a 5-iteration job until it ran, on a CURVE server where
    key A had submitted ``long_jobs`` jobs of 10^6 iterations just before."""
    data = root / "fair"
    keys = {name: write_keypair(root / name, "client") for name in ("a", "b")}
    with contextlib.redirect_stdout(io.StringIO()):  # the keys' own messages
        cli.main(["keys", "init", "--data-dir", str(data), "--host", "127.0.0.1"])
        for public, _ in keys.values():
            cli.main(["keys", "allow", "--data-dir", str(data), "--", public])
    server = ServerUnderTest(data, "--curve", "--max-wall-time-s", str(wall_time_s))
    server.start()
    server_key = read_keypair(data / "keys", "server")[0]
    images = {"images": variant_images(0)}
    long_spec = {**job_spec(), "iterations": 1_000_000, "checkpoint_every": 100_000}
    try:
        with Client(server.address, timeout=10.0, retry_for=60.0, server_key=server_key,
                    client_keypair=keys["a"]) as a, \
                Client(server.address, timeout=10.0, retry_for=60.0, server_key=server_key,
                       client_keypair=keys["b"]) as b:
            for index in range(long_jobs):
                a.submit(f"long-{index}", long_spec, images)
            submitted = time.monotonic()
            b.submit("small", {**job_spec(), "iterations": 5}, images)
            while b.status("small")["state"] == "queued":
                time.sleep(0.1)
            return time.monotonic() - submitted
    finally:
        server.stop()


class Peaks:
    """The server's peak RSS (MiB) and descriptors, sampled every 0.2 s while in use."""

    def __init__(self, server: ServerUnderTest):
        self.server, self.rss, self.fds = server, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(OSError):
                self.rss = max(self.rss, self.server.rss_mib())
                self.fds = max(self.fds, self.server.descriptors())

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def well_behaved(address: str, clients: int, seconds: float, job: str,
                 size: int) -> tuple[float, int, int]:
    """(p99 latency in ms, errors, requests) of ``clients`` threads that ping and read the
    job's texture.npy (``size`` bytes) in turns for ``seconds``."""
    latencies, errors = [], []

    def loop() -> None:
        with TimedClient(address, timeout=5.0, retry_for=10.0, latencies=latencies) as client:
            while time.monotonic() < deadline:
                try:
                    client.ping()
                    client.call("read", {"job": job, "file": "texture.npy", "offset": 0,
                                         "length": min(size, 256 * 1024)})
                except (ServerError, ServerUnavailable) as exc:
                    errors.append(exc)

    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    return latencies[int(0.99 * (len(latencies) - 1))] * 1000, len(errors), len(latencies)


def pace_small_frames(peers: list[socket.socket], deadline: float) -> None:
    """One 34-byte frame with MORE set to each peer in turn, every 2 ms, until ``deadline``."""
    frame = bytes([0x01, 34]) + bytes(34)
    for peer in peers:
        peer.setblocking(False)
    while time.monotonic() < deadline:
        for peer in peers:
            with contextlib.suppress(OSError):  # held back, or closed by the server
                peer.send(frame)
        time.sleep(0.002)


def ask_without_reading(address: str, job: str, size: int, deadline: float) -> None:
    """Ask for the job's texture.npy again and again until ``deadline``, reading nothing."""
    stalled = zmq.Context.instance().socket(zmq.DEALER)
    stalled.rcvhwm, stalled.rcvbuf, stalled.linger = 1, 4096, 0
    stalled.connect(address)
    number = 0
    while time.monotonic() < deadline:
        number += 1
        try:
            stalled.send_multipart(encode("read", {"id": number, "job": job,
                                                   "file": "texture.npy", "offset": 0,
                                                   "length": size}), zmq.NOBLOCK)
        except zmq.Again:
            time.sleep(0.05)
    stalled.close()


def declaring(address: str) -> socket.socket:
    """A raw ZMTP connection that has declared a frame of MAX_FRAME_BYTES and sent none of
    it (libzmq waits for it)."""
    peer = zmtp_dealer(address)
    peer.sendall(bytes([0x03]) + MAX_FRAME_BYTES.to_bytes(8, "big"))
    return peer


def open_peers(count: int, connect) -> list[socket.socket]:
    """Up to ``count`` connections from ``connect()``, until one fails to open (refused, or
    its handshake unanswered: a server that reads no more)."""
    peers = []
    with contextlib.suppress(OSError):
        while len(peers) < count:
            peers.append(connect())
    return peers


def hostile_phase(root: Path, args) -> list[tuple]:
    """Per run, alone and beside the hostile clients: (p99 ms, errors, requests, peak RSS
    MiB, peak descriptors, whether the server was still running, the idle, small-frame and
    declared-frame connections opened)."""
    server = ServerUnderTest(root / "hostile")
    server.start()
    runs = []
    try:
        with Client(server.address, timeout=10.0, retry_for=60.0) as client:
            spec = {**job_spec(), "iterations": 10, "checkpoint_every": 5, "texture_size": 128}
            client.submit("big", spec, {"images": variant_images(0)})
            assert client.wait("big")["kind"] == "done"
            size = next(entry["size"] for entry in client.call("fetch", {"job": "big"})["files"]
                        if entry["name"] == "texture.npy")
        host, port = server.address.removeprefix("tcp://").rsplit(":", 1)
        where = (host, int(port))
        for hostile in (False, True):
            peers, senders, opened = [], [], (0, 0, 0)
            if hostile:
                idle = open_peers(args.idle, lambda: socket.create_connection(where, timeout=5))
                small = open_peers(args.small_frames, lambda: zmtp_dealer(server.address))
                declared = open_peers(args.declared, lambda: declaring(server.address))
                peers, opened = idle + small + declared, (len(idle), len(small), len(declared))
            deadline = time.monotonic() + args.hostile_seconds
            if hostile:
                senders = [threading.Thread(target=pace_small_frames, args=(small, deadline))]
                senders += [threading.Thread(target=ask_without_reading,
                                             args=(server.address, "big", size, deadline))
                            for _ in range(args.unread)]
                for sender in senders:
                    sender.start()
            with Peaks(server) as peaks:
                p99, errors, requests = well_behaved(server.address, args.hostile_clients,
                                                     args.hostile_seconds, "big", size)
            for sender in senders:
                sender.join()
            for peer in peers:
                peer.close()
            runs.append((p99, errors, requests, peaks.rss, peaks.fds,
                         server.process.poll() is None, opened))
    finally:
        server.stop()
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kills", type=int, default=3, help="SIGKILL + restart this often")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp", default=None, help="where the server's data goes")
    parser.add_argument("--misbehaving", type=int, default=4,
                        help="raw connections holding unfinished messages at the end")
    parser.add_argument("--misbehaving-seconds", type=float, default=10.0)
    parser.add_argument("--long-jobs", type=int, default=3, help="key A's jobs (fairness)")
    parser.add_argument("--wall-time", type=float, default=10.0,
                        help="the fairness server's --max-wall-time-s")
    parser.add_argument("--hostile-clients", type=int, default=8)
    parser.add_argument("--hostile-seconds", type=float, default=10.0)
    parser.add_argument("--declared", type=int, default=300,
                        help="connections declaring a 4 MiB frame and sending none of it")
    parser.add_argument("--small-frames", type=int, default=16,
                        help="connections pacing 34-byte frames with MORE set")
    parser.add_argument("--unread", type=int, default=8,
                        help="clients asking for a file again and again, reading nothing")
    parser.add_argument("--idle", type=int, default=500,
                        help="connections that send nothing")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(dir=args.tmp) as temp:
        server = ServerUnderTest(Path(temp) / "data")
        server.start()
        try:
            with Client(server.address, timeout=10.0, retry_for=60.0) as client:
                refs = references(client, Path(temp) / "reference")
            rss_before = server.rss_mib()
            soak = Soak(server, refs, Path(temp) / "fetched", args.seed)
            began = time.monotonic()
            deadline = began + args.seconds
            threads = [threading.Thread(target=soak.client_loop, args=(i, deadline))
                       for i in range(args.clients)]
            for thread in threads:
                thread.start()
            for moment in sorted(rng.uniform(0.1, 0.9) * args.seconds
                                 for _ in range(args.kills)):
                time.sleep(max(0.0, began + moment - time.monotonic()))
                server.kill_and_restart()
            for thread in threads:
                thread.join()
            elapsed = time.monotonic() - began
            with Client(server.address, timeout=10.0, retry_for=60.0) as client:
                problems = soak.final_check(client, wait_s=120.0)
                client.ping()
            rss_after = server.rss_mib()
            misbehaving = misbehaving_phase(server, args.misbehaving, args.misbehaving_seconds)
        finally:
            server.stop()
        waited = fairness_phase(Path(temp), args.long_jobs, args.wall_time)
        hostile = hostile_phase(Path(temp), args)
    latencies = sorted(soak.latencies)
    counts = soak.counts
    if counts["mismatched"]:
        problems.append(f"{counts['mismatched']} jobs' results differ from their reference")
    print(f"clients {args.clients}, {elapsed:.0f} s, {server.restarts} SIGKILL + restart")
    print(f"requests {len(latencies)} ({len(latencies) / elapsed:.0f}/s), errors "
          f"{counts['errors']}, refused by quota {counts['refused']}")
    print(f"latency p50 {statistics.median(latencies) * 1000:.1f} ms, p99 "
          f"{latencies[int(0.99 * (len(latencies) - 1))] * 1000:.0f} ms, max "
          f"{latencies[-1] * 1000:.0f} ms")
    print(f"jobs done and byte-identical {counts['done']}, mismatched {counts['mismatched']}, "
          f"cancelled {counts['cancelled']}, failed {counts['failed']}, deleted "
          f"{counts['deleted']}; uploads {counts['uploads']}")
    print(f"server RSS {rss_before:.0f} MiB before, {rss_after:.0f} MiB after (the process "
          f"after the last restart)")
    print(f"misbehaving: {args.misbehaving} connections holding unfinished messages for "
          f"{args.misbehaving_seconds:g} s: server RSS {misbehaving[0]:.0f} MiB before, peak "
          f"{misbehaving[1]:.0f} MiB; ping p99 {misbehaving[2]:.0f} ms meanwhile")
    print(f"fairness: key B's 5-iteration job started {waited:.1f} s after its submit, key A "
          f"holding {args.long_jobs} jobs of 10^6 iterations (wall-time limit "
          f"{args.wall_time:g} s)")
    for run, (p99, errors, requests, rss, fds, alive, opened) in enumerate(hostile):
        idle, small, declared = opened
        label = "alone" if run == 0 else (
            f"beside {idle} idle, {small} small-frame, {declared} declared-frame (of "
            f"{args.idle}, {args.small_frames}, {args.declared} asked) and {args.unread} "
            f"unread-reply connections")
        print(f"hostile: {args.hostile_clients} well-behaved clients {label}: p99 {p99:.0f} "
              f"ms, errors {errors} of {requests} requests; server peak RSS {rss:.0f} MiB, "
              f"descriptors {fds}, {'running' if alive else 'DEAD'}")
        if errors or not alive:
            problems.append(f"well-behaved clients {label}: {errors} errors, "
                            f"{'running' if alive else 'dead'}")
    for sample in soak.error_samples:
        print(f"  error: {sample}")
    for problem in problems:
        print(f"  PROBLEM: {problem}")
    lost = len([p for p in problems if "lost" in p or "missing" in p])
    print(f"lost {lost}, problems {len(problems)}")
    return 1 if problems or counts["errors"] or counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
