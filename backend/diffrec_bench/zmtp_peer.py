"""A misbehaving ZeroMQ peer for benchmarks and tests: ZMTP 3.0 spoken over a raw socket,
sending frames with MORE set and never the last one (what no libzmq client can send)."""

from __future__ import annotations

import socket
import time


def zmtp_dealer(address: str) -> socket.socket:
    """A raw TCP connection to ``address`` (tcp://HOST:PORT, plain text) that has greeted as
    a ZMTP 3.0 DEALER (NULL mechanism) and received the server's READY (libzmq closes a
    connection whose messages arrive before its handshake has ended)."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    peer = socket.create_connection((host, int(port)), timeout=5)
    greeting = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0")
    peer.sendall(greeting + bytes(32))
    ready = b"\x05READY" + b"\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER"
    peer.sendall(bytes([0x04, len(ready)]) + ready)
    seen = b""
    while b"READY" not in seen:
        received = peer.recv(4096)
        if not received:
            raise ConnectionError(f"{address} closed the connection in its handshake")
        seen += received
    return peer


def send_unfinished(peers: list[socket.socket], frames: int, frame_bytes: int,
                    deadline: float) -> int:
    """Frames of ``frame_bytes`` zeros, MORE set, round robin over ``peers`` without blocking,
    until each has sent ``frames`` or the deadline (time.monotonic()); the frames sent. One
    buffer serves every frame."""
    frame = memoryview(bytes([0x03]) + frame_bytes.to_bytes(8, "big") + bytes(frame_bytes))
    state = {peer: [frames, 0] for peer in peers}  # frames left, offset in the current one
    sent = 0
    for peer in peers:
        peer.setblocking(False)
    while state and time.monotonic() < deadline:
        progressed = False
        for peer, (left, offset) in list(state.items()):
            try:
                offset += peer.send(frame[offset:])
            except BlockingIOError:
                continue  # held back: the server reads no more from this peer
            except OSError:
                del state[peer]  # the server closed it
                continue
            progressed = True
            if offset == len(frame):
                left, offset, sent = left - 1, 0, sent + 1
            state[peer] = [left, offset]
            if not left:
                del state[peer]
        if not progressed:
            time.sleep(0.05)
    return sent
