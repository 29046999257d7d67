"""Issue 55.1-4: no client, keyed or not, can turn the gate against the others.

Before, the gate charged a data frame's declared size on its header alone and stopped reading
from every connection once the total passed its budget (300 keyless connections sending a few
bytes each locked a keyed client out); it charged a small frame 98 bytes where libzmq keeps
its whole 8 KiB receive buffer alive; it let replies pile up for a client that does not read
them, each ``read`` over 64 KiB holding a descriptor; and idle connections exhausted the
descriptors (the gate's thread died, or libzmq aborted). The peers here speak ZMTP over raw
sockets or are pyzmq sockets that never receive, for a few seconds each."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import zmq
from helpers.server_fixtures import curve_server
from helpers.servers import (
    fit_spec,
    free_port,
    open_client,
    rss_bytes,
    server_in_process,
    target_images,
)

from diffrec import cli
from diffrec.errors import UserError
from diffrec.protocol import Client, read_keypair, write_keypair
from diffrec.protocol.limits import MAX_FRAME_BYTES, MIB, REPLY_BUDGET_BYTES
from diffrec.protocol.message import encode
from diffrec.server import app, gate
from diffrec_bench.zmtp_peer import send_unfinished, zmtp_dealer

ANSWER_S = 1.0
"""How soon a well-behaved client must be answered while others misbehave."""


def curve_greeting(address: str) -> socket.socket:
    """A raw TCP connection to ``address`` that has sent a ZMTP 3.0 greeting for CURVE and
    nothing of the handshake after it."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    peer = socket.create_connection((host, int(port)), timeout=5)
    peer.sendall(b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + b"CURVE".ljust(20, b"\0")
                 + bytes(32))
    return peer


def answered_within(client: Client, seconds: float, times: int = 5) -> list[float]:
    """How long each of ``times`` pings took (the client's timeout must be ``seconds``)."""
    took = []
    for _ in range(times):
        began = time.monotonic()
        assert client.ping()["protocol"]
        took.append(time.monotonic() - began)
    assert max(took) < seconds
    return took


def test_keyless_connections_declaring_big_frames_do_not_lock_out_a_keyed_client(tmp_path):
    """300 connections with no key, each greeting for CURVE and then declaring a frame of
    MAX_FRAME_BYTES, 100 bytes of it sent (52 KB in all, 1.3 GB declared, which libzmq waits
    for until its handshake times out): alice, connected before, and bob, connecting after,
    are each answered within a second."""
    server, server_key, keys = curve_server(tmp_path)
    try:
        alice = open_client(server, server_key, keys["alice"], timeout=ANSWER_S, retry_for=0)
        alice.ping()
        header = bytes([0x02]) + MAX_FRAME_BYTES.to_bytes(8, "big")  # libzmq waits for it
        peers = [curve_greeting(server.address) for _ in range(300)]
        for peer in peers:
            peer.sendall(header + bytes(100))
        time.sleep(0.5)
        answered_within(alice, ANSWER_S)
        with open_client(server, server_key, keys["bob"], timeout=5 * ANSWER_S,
                         retry_for=0) as bob:
            answered_within(bob, 5 * ANSWER_S, times=1)  # the handshake included
            answered_within(bob, ANSWER_S)
        for peer in peers:
            peer.close()
        alice.close()
    finally:
        server.kill()


@pytest.fixture
def small_budget_server(tmp_path):
    """A server in this process whose gate holds each connection to 4 MiB."""
    budget = 4 * MIB
    with mock.patch.object(app, "open_gate",
                           lambda bind: gate.Gate("127.0.0.1", free_port(), peer_budget=budget)):
        with server_in_process(tmp_path / "data") as server:
            yield server, budget


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_paced_small_frames_cost_at_most_the_budget_per_connection(small_budget_server):
    """8 connections send 34-byte frames with MORE set, one at a time, 4,000 each (1.1 MiB
    on the wire): libzmq keeps an 8 KiB receive buffer alive for each (before, 220 MiB);
    the gate now charges that, so each connection is held at its budget."""
    server, budget = small_budget_server
    connections, frames = 8, 4000
    peers = [zmtp_dealer(server.endpoint) for _ in range(connections)]
    frame = bytes([0x01, 34]) + bytes(34)
    before = rss_bytes(os.getpid())
    for peer in peers:
        peer.setblocking(False)
    for _ in range(frames):
        for peer in peers:
            try:
                peer.send(frame)
            except BlockingIOError:
                pass  # held back
        time.sleep(0.002)
    time.sleep(0.5)
    grown = rss_bytes(os.getpid()) - before
    with Client(server.endpoint, timeout=ANSWER_S, retry_for=0) as client:
        answered_within(client, ANSWER_S, times=2)
    for peer in peers:
        peer.close()
    bound = connections * (budget + 16 * 1024) + 48 * MIB  # beyond it: one frame's charge
    assert grown < bound, f"the server grew by {grown / MIB:.0f} MiB (bound {bound / MIB:.0f})"


def test_beyond_the_address_budget_the_biggest_unfinished_holder_is_closed(tmp_path):
    """6 connections send 4 MiB frames with MORE set, never the last one, to a gate whose
    unauthenticated connections of one address may hold 12 MiB together: the biggest are
    closed until the rest fit (before, every connection was held back, the well-behaved
    one included, once all together passed the total)."""
    budget, address_budget = 4 * MIB, 12 * MIB
    with mock.patch.object(app, "open_gate", lambda bind: gate.Gate(
            "127.0.0.1", free_port(), peer_budget=budget, address_budget=address_budget)):
        with server_in_process(tmp_path / "data") as server, \
                Client(server.endpoint, timeout=ANSWER_S, retry_for=0) as client:
            client.ping()
            peers = [zmtp_dealer(server.endpoint) for _ in range(6)]
            send_unfinished(peers, 4, 4 * MIB, time.monotonic() + 3.0)
            held, links = server.gate.held_bytes(), len(server.gate.links)
            answered_within(client, ANSWER_S)
            for peer in peers:
                peer.close()
    assert held <= address_budget + MAX_FRAME_BYTES
    assert links < 7  # some were closed; the client's stays


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_replies_a_client_does_not_read_are_bounded_and_hold_no_descriptor(tmp_path):
    """A client asks 1,500 times for a 192 KiB result file (280 MiB of replies) and reads
    none: the server queues at most REPLY_BUDGET_BYTES of them (and a message) and drops the
    rest, holding no descriptor for them (before: one per queued reply, 1,000 of them)."""
    with server_in_process(tmp_path / "data") as server:
        with Client(server.endpoint, timeout=10.0, retry_for=30.0) as client:
            job = "big"
            client.submit(job, fit_spec(iterations=10, checkpoint_every=5, texture_size=128),
                          {"images": target_images()})
            assert client.wait(job)["kind"] == "done"
            size = next(f["size"] for f in client.call("fetch", {"job": job})["files"]
                        if f["name"] == "texture.npy")
            assert size > 128 * 1024  # over pyzmq's copy threshold: sent without a copy
            fds, rss = open_fds(), rss_bytes(os.getpid())
            stalled = zmq.Context.instance().socket(zmq.DEALER)
            stalled.rcvhwm, stalled.rcvbuf, stalled.linger = 1, 4096, 0
            stalled.connect(server.endpoint)
            for number in range(1500):
                stalled.send_multipart(encode("read", {"id": number + 1, "job": job,
                                                       "file": "texture.npy", "offset": 0,
                                                       "length": size}))
            time.sleep(3.0)
            held_fds = open_fds() - fds
            grown = rss_bytes(os.getpid()) - rss
            answered_within(client, ANSWER_S)
            stalled.close()
    assert held_fds < 32, f"{held_fds} descriptors held for unread replies"
    queued = server.gate.queued_bytes()
    assert queued <= REPLY_BUDGET_BYTES + gate.frame_cost(size) + gate.FRAME_COST * 2 ** 10
    assert grown < REPLY_BUDGET_BYTES + 64 * MIB, f"grew by {grown / MIB:.0f} MiB"


def start_with_descriptors(data_dir: Path, limit: int) -> tuple[subprocess.Popen, str]:
    """``diffrec serve`` in a child process whose descriptor limit is ``limit``."""
    address = f"tcp://127.0.0.1:{free_port()}"

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    with open(data_dir.parent / "server.log", "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "diffrec", "serve", "--bind", address,
                                    "--data-dir", str(data_dir), "--device", "cpu"],
                                   stdout=log, stderr=subprocess.STDOUT, preexec_fn=lower,
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    with Client(address, timeout=1.0, retry_for=60.0) as client:
        client.ping()
    return process, address


def test_idle_connections_beyond_the_descriptor_limit_leave_the_server_serving(tmp_path):
    """A server limited to 256 descriptors gets 300 idle connections (no key, no byte, 900
    descriptors' worth): it closes the oldest idle ones, stays up and answers a new client
    (before, it was left unreachable or libzmq aborted it)."""
    process, address = start_with_descriptors(tmp_path / "data", 256)
    peers = []
    try:
        for _ in range(300):
            host, port = address.removeprefix("tcp://").rsplit(":", 1)
            peers.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(1.0)
        with Client(address, timeout=ANSWER_S, retry_for=0) as client:
            answered_within(client, ANSWER_S)
        assert process.poll() is None
    finally:
        for peer in peers:
            peer.close()
        process.kill()
        process.wait(10)
    log = (tmp_path / "server.log").read_text()
    assert "Too many open files" not in log and "Traceback" not in log, log[-2000:]


def test_at_the_connection_limit_idle_keyless_connections_go_and_a_keyed_one_stays(tmp_path):
    """A CURVE server whose gate keeps 8 connections: alice's, authenticated, stays through
    30 idle keyless connections (the oldest of them are closed for the newest) and is
    answered on it within a second."""
    data = tmp_path / "data"
    assert cli.main(["keys", "init", "--data-dir", str(data), "--host", "127.0.0.1"]) == 0
    alice = write_keypair(tmp_path / "alice", "client")
    assert cli.main(["keys", "allow", "--data-dir", str(data), "--", alice[0]]) == 0
    keys = {"client_keypair": alice, "server_key": read_keypair(data / "keys", "server")[0]}
    with mock.patch.object(app, "open_gate", lambda bind: gate.Gate(
            "127.0.0.1", free_port(), max_connections=8)):
        with server_in_process(data, curve=True) as server, \
                Client(server.endpoint, timeout=ANSWER_S, retry_for=0, **keys) as client:
            client.ping()
            (name,) = server.gate.links
            host, port = server.endpoint.removeprefix("tcp://").rsplit(":", 1)
            peers = [socket.create_connection((host, int(port))) for _ in range(30)]
            time.sleep(0.5)
            answered_within(client, ANSWER_S)
            assert name in server.gate.links and len(server.gate.links) <= 8
            for peer in peers:
                peer.close()


def test_a_failure_in_one_connection_closes_only_it(tmp_path, monkeypatch):
    """An unexpected error while relaying one connection's bytes closes that connection; the
    gate's thread goes on serving the others (before, it died with the error)."""
    with server_in_process(tmp_path / "data") as server, \
            Client(server.endpoint, timeout=ANSWER_S, retry_for=0) as client:
        client.ping()
        feed = gate._Framing.feed

        def failing(self, data):
            if data.startswith(b"poison"):
                raise RuntimeError("a bug")
            return feed(self, data)

        monkeypatch.setattr(gate._Framing, "feed", failing)
        peer = zmtp_dealer(server.endpoint)
        peer.sendall(b"poison")
        assert peer.recv(1) == b""  # closed
        answered_within(client, ANSWER_S)


def test_a_gate_that_keeps_failing_stops_the_server_with_a_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(gate.Gate, "_round", lambda self: 1 / 0)
    server = app.Server(f"tcp://127.0.0.1:{free_port()}", tmp_path / "data")
    try:
        with pytest.raises(UserError, match="the connection gate failed 20 times in a row"):
            server.serve_forever(lambda: False)
    finally:
        server.close()
