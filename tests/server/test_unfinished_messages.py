"""Issue 26.1: a peer that sends frames with MORE set and never the last one costs the server
at most ``PEER_BUDGET_BYTES`` (and a frame) per connection. Before, libzmq kept every frame:
four such connections grew a server by 2.4 GB. The peer here speaks ZMTP 3 over a raw
socket, for a bounded time, reusing one buffer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from helpers.servers import rss_bytes, server_in_process

from diffrec import cli
from diffrec.protocol import Client, read_keypair, write_keypair
from diffrec.protocol.limits import MAX_FRAME_BYTES, MIB, PEER_BUDGET_BYTES
from diffrec.server import gate
from diffrec_bench.zmtp_peer import send_unfinished, zmtp_dealer

FRAME = 4 * MIB
FRAMES = 100  # 400 MiB per connection if nothing held it back
CONNECTIONS = 2
SEND_FOR_S = 10.0
SLACK_BYTES = 64 * MIB  # the server's own growth besides the held frames (allocator, pages)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_unfinished_messages_cost_at_most_the_budget_per_connection(start_server, connect):
    server = start_server()
    client = connect(server)
    client.ping()
    before = rss_bytes(server.process.pid)
    peers = [zmtp_dealer(server.address) for _ in range(CONNECTIONS)]
    try:
        send_unfinished(peers, FRAMES, FRAME, time.monotonic() + SEND_FOR_S)
        time.sleep(1.0)  # let the transport take what it will
        grown = rss_bytes(server.process.pid) - before
        assert client.ping()["protocol"]  # others are served meanwhile
    finally:
        for peer in peers:
            peer.close()
    bound = CONNECTIONS * (PEER_BUDGET_BYTES + MAX_FRAME_BYTES) + SLACK_BYTES
    assert grown < bound, f"the server grew by {grown / MIB:.0f} MiB (bound {bound / MIB:.0f})"


@pytest.mark.parametrize("curve", [False, True])
def test_finished_messages_leave_no_balance(tmp_path, curve):
    """The gate's count of what libzmq holds goes back to zero once the server has read every
    message, and its count of replies queued once the client has taken them, in plain text
    and under CURVE (whose frames carry 33 bytes more), so that clients that behave are never
    held back nor lose a reply; a CURVE client is authenticated, a plain one is not."""
    data = tmp_path / "data"
    keys = {}
    if curve:
        assert cli.main(["keys", "init", "--data-dir", str(data), "--host", "127.0.0.1"]) == 0
        keys = {"client_keypair": write_keypair(tmp_path / "alice", "client"),
                "server_key": read_keypair(data / "keys", "server")[0]}
        assert cli.main(["keys", "allow", "--data-dir", str(data), "--",
                         keys["client_keypair"][0]]) == 0
    with server_in_process(data, curve=curve) as server, \
            Client(server.endpoint, timeout=5.0, retry_for=30.0, **keys) as client:
        client.upload(np.random.default_rng(1).bytes(3 * FRAME + 12345))
        client.ping()
        deadline = time.monotonic() + 5
        while (server.gate.held_bytes() or server.gate.queued_bytes()) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.gate.held_bytes() == 0 and server.gate.queued_bytes() == 0
        assert [link.authenticated for link in server.gate.links.values()] == [curve]


def test_a_killed_servers_gate_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{gate.FOLDER_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{gate.FOLDER_PREFIX}{os.getpid()}-def"
    for folder in (stale, live):
        folder.mkdir()
    gate.remove_stale_folders()
    assert not stale.exists() and live.exists()


class _Frame:
    """A received frame as ``Gate.consumed`` reads it: its bytes and its source descriptor."""

    def __init__(self, fd: int, data: bytes = b"x"):
        self.fd, self.buffer = fd, memoryview(data)

    def get(self, option):
        assert option == zmq.SRCFD
        return self.fd


def test_a_message_whose_descriptor_now_holds_a_tcp_connection_is_not_credited():
    """A connection can close between the server's read and ``consumed``, and the gate's own
    thread can accept a client on the same descriptor number: its peer is then an address
    tuple, not the Unix socket's path. That crashed the server (a TypeError, found by
    test_liveness after a reconnect storm); now such a message is left uncredited."""
    relay = gate.Gate("127.0.0.1", 0)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        with socket.create_connection(listener.getsockname()) as client:
            accepted, _ = listener.accept()
            with accepted:
                relay.consumed([_Frame(-1), _Frame(accepted.fileno(), b"payload")])
                relay.consumed([_Frame(-1), _Frame(client.fileno())])
        assert relay.held_bytes() == 0
    finally:
        listener.close()
        relay.close()
