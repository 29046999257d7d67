"""The gate: a relay in front of the server's ROUTER socket that bounds what each connection
may make libzmq hold.

libzmq keeps the frames of a multipart message in memory until its last frame arrives, and
no socket option bounds that (``ZMQ_MAXMSGSIZE`` is per frame; the high-water marks count
whole messages): a peer that sends frames with MORE set and never the last one grows the
server without bound. So clients do not reach the ROUTER directly. The gate listens on the
server's address and relays each connection's bytes, unchanged (ZMTP, CURVE included), to
the ROUTER over a Unix socket in a private folder (mode 0700, so no one else can bypass it).
It reads each connection's ZMTP frame headers (not their content: under CURVE the MORE flag
is encrypted) and keeps a balance per connection: the cost of the data frames relayed
(``FRAME_COST`` plus their bytes) less the cost of the messages the server has received
from it (``consumed``; the server finds a message's connection from the Unix socket it came
through, ``ZMQ_SRCFD``). Frames held by libzmq, finished messages waiting to be read or an
unfinished one, are that balance. The gate reads no more from a connection whose balance is
over ``PEER_BUDGET``, nor from any while all balances together are over ``TOTAL_BUDGET``,
and closes one that has been held back without sending or being served for ``IDLE_S``
(libzmq then frees its frames). Bounds: docs/protocol.md, "Limits".
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from diffrec.errors import UserError
from diffrec.protocol.limits import (
    GATE_IDLE_S,
    MAX_FRAME_BYTES,
    MAX_HEADER_BYTES,
    PEER_BUDGET_BYTES,
    TOTAL_BUDGET_BYTES,
)

from .security import bind_host_port

log = logging.getLogger(__name__)
FRAME_COST = 64
"""Bytes counted per frame besides its content: libzmq's own record of a frame."""
GREETING_BYTES = 64
GREETING_KEPT = 32
"""The greeting's signature (10 bytes), version (2) and mechanism name (20)."""
CURVE_OVERHEAD = 33
"""A CURVE data frame's bytes besides the frame it carries: the command name, the nonce and
the box's MAC and flags."""
FOLDER_PREFIX = "diffrec-gate-"
"""The private folders are ``FOLDER_PREFIX<server pid>-<random>`` in the temporary folder."""
READ_BYTES = 256 * 1024
POLL_S = 0.05


@dataclass(eq=False)
class _Link:
    """One client connection and its relay to the ROUTER; ``events``: what the selector
    watches on each side."""

    client: socket.socket
    upstream: socket.socket
    name: str
    to_upstream: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    header: bytearray = field(default_factory=bytearray)
    greeting: int = GREETING_BYTES
    overhead: int = 0
    body_left: int = 0
    balance: int = 0
    active: float = field(default_factory=time.monotonic)
    events: dict = field(default_factory=dict)

    def parse(self, data: bytes) -> tuple[int, str | None]:
        """Account for the client's ``data``: (the cost it adds, what is wrong with it or
        None). Only ZMTP 3 is spoken (libzmq's older framings are refused)."""
        view, at, cost = memoryview(data), 0, 0
        while at < len(view):
            if self.greeting:
                take = min(self.greeting, len(view) - at)
                keep = max(0, min(take, GREETING_KEPT - len(self.header)))
                self.header += view[at:at + keep]
                self.greeting -= take
                at += take
                if len(self.header) >= 11 and (self.header[0] != 0xFF
                                               or self.header[10] < 3):
                    return cost, "not ZMTP 3"
                if not self.greeting:
                    if bytes(self.header[12:GREETING_KEPT]).rstrip(b"\0") == b"CURVE":
                        self.overhead = CURVE_OVERHEAD
                    self.header.clear()
                continue
            if self.body_left:
                take = min(self.body_left, len(view) - at)
                self.body_left -= take
                at += take
                continue
            self.header.append(view[at])
            at += 1
            flags = self.header[0]
            if len(self.header) < (9 if flags & 0x02 else 2):
                continue
            size = int.from_bytes(self.header[1:], "big")
            self.header.clear()
            if flags & 0x04:  # a command (handshake, heartbeat): handled by libzmq at once
                if size > MAX_HEADER_BYTES:
                    return cost, f"a command frame of {size} bytes"
            elif size > MAX_FRAME_BYTES + self.overhead:
                return cost, f"a frame of {size} bytes"
            else:
                cost += max(0, size - self.overhead) + FRAME_COST
            self.body_left = size
        return cost, None


class Gate:
    """Listens on ``host``:``port`` (TCP) and relays to ``upstream``, the ipc:// endpoint the
    ROUTER binds; ``endpoint`` is the address clients use (``tcp://HOST:PORT``)."""

    def __init__(self, host: str, port: int, peer_budget: int = PEER_BUDGET_BYTES,
                 total_budget: int = TOTAL_BUDGET_BYTES, idle_s: float = GATE_IDLE_S):
        self.peer_budget, self.total_budget, self.idle_s = peer_budget, total_budget, idle_s
        remove_stale_folders()
        self.folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")  # mode 0700
        self.upstream = f"ipc://{self.folder}/router"
        family, kind, proto, _, address = socket.getaddrinfo(
            None if host in ("*", "") else host, port, type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE)[0]
        self.listener = socket.socket(family, kind, proto)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(address)
            self.listener.listen(256)
        except OSError:
            self.close()
            raise
        self.listener.setblocking(False)
        bound = self.listener.getsockname()
        self.endpoint = (f"tcp://[{bound[0]}]:{bound[1]}" if family == socket.AF_INET6
                         else f"tcp://{bound[0]}:{bound[1]}")
        self.links: dict[str, _Link] = {}
        self._lock = threading.Lock()
        self._total = 0
        self._held: set[str] = set()
        self._count = 0
        self._stop = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._loop, name="diffrec-gate", daemon=True)
        self._thread.start()

    def held_bytes(self) -> int:
        """The balances together: about what libzmq holds of the clients' messages."""
        return self._total

    def consumed(self, frames: list) -> None:
        """The server received ``frames`` (from ``recv_multipart(copy=False)``, the routing id
        first): credit the connection they came through."""
        if len(frames) < 2:
            return
        try:
            with socket.fromfd(frames[1].get(zmq.SRCFD), socket.AF_UNIX,
                               socket.SOCK_STREAM) as through:
                peer = through.getpeername()
        except OSError:
            return  # the connection is already gone
        if not isinstance(peer, str):
            # gone, and its descriptor number already reused by a client's TCP connection
            # (an address tuple): the server went down on this once, after a reconnect storm
            return
        name = os.path.basename(peer)
        cost = sum(len(frame.buffer) + FRAME_COST for frame in frames[1:])
        with self._lock:
            link = self.links.get(name)
            if link is not None:
                link.balance -= cost
                self._total -= cost
                link.active = time.monotonic()

    def close(self) -> None:
        self._stop = True
        if hasattr(self, "_thread"):
            self._thread.join(5)
            for link in list(self.links.values()):
                self._drop(link)
            self._selector.close()
        if hasattr(self, "listener"):
            self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- the relay thread ------------------------------------------------------------------

    def _loop(self) -> None:
        next_sweep = time.monotonic()
        while not self._stop:
            for key, events in self._selector.select(POLL_S):
                if key.fileobj is self.listener:
                    self._accept()
                    continue
                link, side = key.data
                if link.name not in self.links:
                    continue  # dropped earlier in this round
                try:
                    if events & selectors.EVENT_WRITE:
                        self._write(link, side)
                    if events & selectors.EVENT_READ and link.name in self.links:
                        self._read(link, side)
                except OSError:
                    self._drop(link)
            for link in [self.links[name] for name in self._held if name in self.links]:
                self._interest(link)  # credit may have come: read again if within budget
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + 1.0
                self._sweep()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        self._count += 1
        name = f"c{self._count}"
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.bind(os.path.join(self.folder, name))
            upstream.connect(self.upstream[len("ipc://"):])
        except OSError as exc:
            log.error("gate: cannot reach the server's socket: %s", exc)
            client.close()
            upstream.close()
            return
        for end in (client, upstream):
            end.setblocking(False)
        link = _Link(client, upstream, name)
        with self._lock:
            self.links[name] = link
        self._interest(link)

    def _read(self, link: _Link, side: str) -> None:
        source = link.client if side == "client" else link.upstream
        data = source.recv(READ_BYTES)
        if not data:
            self._drop(link)
            return
        if side == "upstream":
            link.to_client += data
            self._write(link, "client")
            return
        with self._lock:
            cost, problem = link.parse(data)
            link.balance += cost
            self._total += cost
            link.active = time.monotonic()
        if problem:
            log.warning("gate: dropping connection %s: %s", link.name, problem)
            self._drop(link)
            return
        link.to_upstream += data
        self._write(link, "upstream")

    def _write(self, link: _Link, side: str) -> None:
        target, pending = ((link.client, link.to_client) if side == "client"
                           else (link.upstream, link.to_upstream))
        if pending:
            try:
                sent = target.send(pending)
            except BlockingIOError:
                sent = 0
            del pending[:sent]
        self._interest(link)

    def _interest(self, link: _Link) -> None:
        """Read from the client only while it, and all together, are within budget and its
        relay has drained; from the ROUTER only while the client takes what it sends."""
        open_ = (link.balance <= self.peer_budget and self._total <= self.total_budget
                 and not link.to_upstream)
        if open_:
            self._held.discard(link.name)
        else:
            self._held.add(link.name)
        wants = {
            "client": (selectors.EVENT_READ if open_ else 0)
            | (selectors.EVENT_WRITE if link.to_client else 0),
            "upstream": (selectors.EVENT_READ if not link.to_client else 0)
            | (selectors.EVENT_WRITE if link.to_upstream else 0),
        }
        for side, events in wants.items():
            before = link.events.get(side, 0)
            if events == before:
                continue
            end = link.client if side == "client" else link.upstream
            if not before:
                self._selector.register(end, events, (link, side))
            elif not events:
                self._selector.unregister(end)
            else:
                self._selector.modify(end, events, (link, side))
            link.events[side] = events

    def _sweep(self) -> None:
        """Drop connections whose unfinished messages have seen nothing sent or served for
        ``idle_s`` (libzmq then frees their frames)."""
        now = time.monotonic()
        for link in list(self.links.values()):
            if link.balance > 0 and now - link.active > self.idle_s:
                log.warning("gate: dropping connection %s: %d bytes of unfinished messages "
                            "and nothing sent or served for %.0f s", link.name, link.balance,
                            self.idle_s)
                self._drop(link)

    def _drop(self, link: _Link) -> None:
        with self._lock:
            if self.links.pop(link.name, None) is not None:
                self._total -= link.balance
        self._held.discard(link.name)
        for side, end in (("client", link.client), ("upstream", link.upstream)):
            if link.events.pop(side, 0):
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(end)
            end.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.folder, link.name))


def remove_stale_folders() -> None:
    """Remove the private folders of gates whose server is gone (killed, so it could not)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name[len(FOLDER_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or folder.stat().st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # a live process of another user has this pid


def open_gate(bind: str) -> Gate | None:
    """The gate for a ``tcp://HOST:PORT`` bind (port ``*`` or 0: any free one); None where
    there are no Unix sockets (the ROUTER then listens itself, bounded per frame only)."""
    if not hasattr(socket, "AF_UNIX"):
        log.warning("no Unix sockets here: unfinished messages are bounded per frame only")
        return None
    host, port = bind_host_port(bind)
    try:
        return Gate(host, 0 if port == "*" else int(port))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot listen on {bind}: {getattr(exc, 'strerror', None) or exc}"
                        ) from None
