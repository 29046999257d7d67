"""The gate: a relay in front of the server's ROUTER socket that bounds what each connection
may make the server hold, so that no client, with a key or without, can starve the others.

libzmq keeps the frames of a multipart message in memory until its last frame arrives, and
no socket option bounds that (``ZMQ_MAXMSGSIZE`` is per frame; the high-water marks count
whole messages): a peer that sends frames with MORE set and never the last one grows the
server without bound. So clients do not reach the ROUTER directly. The gate listens on the
server's address and relays each connection's bytes, unchanged (ZMTP, CURVE included), to
the ROUTER over a Unix socket in a private folder (mode 0700, so no one else can bypass it).
It reads the ZMTP frame headers of both directions (not their content: under CURVE the MORE
flag is encrypted) and keeps two balances per connection:

- ``balance``: what libzmq holds of the client's messages, charged as the bytes arrive
  (``frame_cost``: a frame's content, libzmq's record of it and the receive buffer a small
  frame can keep alive), credited when the server reads a message (``consumed``; the server
  finds a message's connection from the Unix socket it came through, ``ZMQ_SRCFD``). The
  gate reads no more from a connection over ``PEER_BUDGET_BYTES``; beyond
  ``ADDRESS_BUDGET_BYTES`` for the unauthenticated connections of one address, or
  ``TOTAL_BUDGET_BYTES`` for all, it closes the biggest unauthenticated holder, those the
  server has read nothing of lately first (libzmq then frees their frames). No connection is
  held back for another's bytes.
- ``backlog``: replies and events the server queued for the client (``reserve``) that have
  not yet come through the relay. The server drops a message for a connection over
  ``REPLY_BUDGET_BYTES``; beyond ``TOTAL_REPLY_BUDGET_BYTES`` for all, the unauthenticated
  connection with the most queued is closed.

A connection is *authenticated* once the server has sent READY in a CURVE handshake (so its
key passed the allow-list); without CURVE none is. Connections are limited to what the
process's descriptors allow (``connection_limit``; each takes three) and, per address, to
half of that; a new one beyond either closes the unauthenticated one idle the longest. The
gate's thread survives any failure of one connection (that connection is closed); if its
loop keeps failing it stops and says why in ``failure``, and the server stops with it.
Bounds: docs/protocol.md, "Limits".
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from diffrec.errors import UserError
from diffrec.protocol.limits import (
    ADDRESS_BUDGET_BYTES,
    GATE_IDLE_S,
    MAX_FRAME_BYTES,
    MAX_HEADER_BYTES,
    PEER_BUDGET_BYTES,
    REPLY_BUDGET_BYTES,
    TOTAL_BUDGET_BYTES,
    TOTAL_REPLY_BUDGET_BYTES,
)

from .security import bind_host_port

log = logging.getLogger(__name__)
FRAME_COST = 64
"""Bytes counted per frame besides its content: libzmq's own record of a frame."""
SMALL_FRAME_BYTES = 33
"""Frames up to this size live inside libzmq's record of the frame."""
BATCH_BYTES = 8192
"""libzmq's receive buffer (``ZMQ_IN_BATCH_SIZE``): a larger frame received in it keeps all
of it alive until the message is read, so each is charged at least this much."""
GREETING_BYTES = 64
GREETING_KEPT = 32
"""The greeting's signature (10 bytes), version (2) and mechanism name (20)."""
CURVE_OVERHEAD = 33
"""A CURVE data frame's bytes besides the frame it carries: the command name, the nonce and
the box's MAC and flags."""
READY = b"\x05READY"
"""The start of the handshake's last command; sent by a CURVE server, the client's key passed."""
FOLDER_PREFIX = "diffrec-gate-"
"""The private folders are ``FOLDER_PREFIX<server pid>-<random>`` in the temporary folder."""
READ_BYTES = 256 * 1024
POLL_S = 0.05
FDS_PER_CONNECTION = 3
"""The client's TCP socket, the relay's Unix socket and the ROUTER's end of it."""
FDS_KEPT_MIN = 64
"""Descriptors kept for everything else (files, the worker, libzmq) at the least: a quarter
of the process's limit, and no fewer than this."""
FAILURES_TO_STOP = 20
"""Rounds of the relay loop failing one after the other before the gate gives up."""
SERVED_S = 1.0
"""A connection the server has read a message of this recently is closed for holding too
much only after those it has not."""


def frame_cost(size: int) -> int:
    """Bytes charged for a data frame with ``size`` bytes of content."""
    return FRAME_COST + (max(size, BATCH_BYTES) if size > SMALL_FRAME_BYTES else size)


def connection_limit() -> int:
    """Connections the gate keeps at once: what the descriptor limit (``RLIMIT_NOFILE``)
    leaves after those kept for everything else."""
    import resource  # Unix only, as the gate is (``open_gate``)

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(1, (soft - max(FDS_KEPT_MIN, soft // 4)) // FDS_PER_CONNECTION)


@dataclass(eq=False)
class _Framing:
    """The ZMTP 3 framing of one direction of a connection: a greeting, then frames."""

    greeting: int = GREETING_BYTES
    header: bytearray = field(default_factory=bytearray)
    overhead: int = 0
    body_left: int = 0
    uncharged: int = 0
    command: bytearray | None = None

    def feed(self, data: bytes) -> tuple[int, bool, str | None]:
        """Account for ``data``: (the cost it adds, whether a READY command began in it, what
        is wrong with it or None). A data frame costs ``frame_cost`` of its content: the part
        for the frame on its header, its content as it arrives. Only ZMTP 3 is spoken
        (libzmq's older framings are refused)."""
        view, at, cost, ready = memoryview(data), 0, 0, False
        while at < len(view):
            if self.greeting:
                take = min(self.greeting, len(view) - at)
                keep = max(0, min(take, GREETING_KEPT - len(self.header)))
                self.header += view[at:at + keep]
                self.greeting -= take
                at += take
                if len(self.header) >= 11 and (self.header[0] != 0xFF
                                               or self.header[10] < 3):
                    return cost, ready, "not ZMTP 3"
                if not self.greeting:
                    if bytes(self.header[12:GREETING_KEPT]).rstrip(b"\0") == b"CURVE":
                        self.overhead = CURVE_OVERHEAD
                    self.header.clear()
                continue
            if self.body_left:
                take = min(self.body_left, len(view) - at)
                if self.command is not None and len(self.command) < len(READY):
                    self.command += view[at:at + min(take, len(READY) - len(self.command))]
                    ready = ready or self.command == READY
                skipped = min(take, self.uncharged)
                self.uncharged -= skipped
                cost += take - skipped if self.command is None else 0
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
                    return cost, ready, f"a command frame of {size} bytes"
                self.command, self.uncharged = bytearray(), 0
            elif size > MAX_FRAME_BYTES + self.overhead:
                return cost, ready, f"a frame of {size} bytes"
            else:
                self.command = None
                self.uncharged = min(size, self.overhead)
                content = size - self.uncharged
                cost += frame_cost(content) - content
            self.body_left = size
        return cost, ready, None


@dataclass(eq=False)
class _Link:
    """One client connection and its relay to the ROUTER; ``events``: what the selector
    watches on each side; ``active``: when the client last sent or was served; ``served``:
    when the server last read a message of it."""

    client: socket.socket
    upstream: socket.socket
    name: str
    address: str
    to_upstream: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    from_client: _Framing = field(default_factory=_Framing)
    from_server: _Framing = field(default_factory=_Framing)
    balance: int = 0
    backlog: int = 0
    authenticated: bool = False
    route: bytes | None = None
    active: float = field(default_factory=time.monotonic)
    served: float = 0.0
    events: dict = field(default_factory=dict)


class Gate:
    """Listens on ``host``:``port`` (TCP) and relays to ``upstream``, the ipc:// endpoint the
    ROUTER binds; ``endpoint`` is the address clients use (``tcp://HOST:PORT``)."""

    def __init__(self, host: str, port: int, peer_budget: int = PEER_BUDGET_BYTES,
                 total_budget: int = TOTAL_BUDGET_BYTES,
                 address_budget: int = ADDRESS_BUDGET_BYTES,
                 reply_budget: int = REPLY_BUDGET_BYTES,
                 total_reply_budget: int = TOTAL_REPLY_BUDGET_BYTES,
                 idle_s: float = GATE_IDLE_S, max_connections: int | None = None):
        self.peer_budget, self.total_budget, self.idle_s = peer_budget, total_budget, idle_s
        self.address_budget = address_budget
        self.reply_budget, self.total_reply_budget = reply_budget, total_reply_budget
        self.max_connections = max_connections or connection_limit()
        self.max_per_address = max(1, self.max_connections // 2)
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
        self.failure: str | None = None
        """Why the gate stopped (the server stops with it); None while it runs."""
        self._lock = threading.Lock()
        self._total = 0
        self._backlog = 0
        self._unauthenticated: Counter[str] = Counter()
        """Balances of the unauthenticated connections, per address."""
        self._per_address: Counter[str] = Counter()
        self._routes: dict[bytes, _Link] = {}
        self._doomed: set[_Link] = set()
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

    def queued_bytes(self) -> int:
        """The backlogs together: replies queued for clients and not yet relayed."""
        return self._backlog

    def consumed(self, frames: list) -> None:
        """The server received ``frames`` (from ``recv_multipart(copy=False)``, the routing id
        first): credit the connection they came through, and know it by its routing id."""
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
        cost = sum(frame_cost(len(frame.buffer)) for frame in frames[1:])
        with self._lock:
            link = self.links.get(name)
            if link is not None:
                self._charge(link, -cost)
                link.active = link.served = time.monotonic()
                if link.route is None:
                    link.route = frames[0].bytes
                    self._routes[link.route] = link

    def reserve(self, route: bytes, frames: list) -> int | None:
        """The server is about to send ``frames`` (routing id excluded) to ``route``: the
        bytes charged to its connection (give them back with ``release`` if the send fails),
        or None if they are to be dropped: the connection has more than ``reply_budget``
        queued already. Beyond ``total_reply_budget`` for all, the unauthenticated connection
        with the most queued is closed."""
        cost = sum(frame_cost(memoryview(frame).nbytes) for frame in frames)
        with self._lock:
            link = self._routes.get(route)
            if link is None:
                return 0  # not seen through the gate (or gone: libzmq refuses it)
            if link.backlog > 0 and link.backlog + cost > self.reply_budget:
                return None
            link.backlog += cost
            self._backlog += cost
            if self._backlog > self.total_reply_budget:
                biggest = max((other for other in self.links.values()
                               if not other.authenticated and other not in self._doomed),
                              key=lambda other: other.backlog, default=None)
                if biggest is not None and biggest.backlog > 0:
                    self._doomed.add(biggest)
        return cost

    def release(self, route: bytes, cost: int) -> None:
        """Give back what ``reserve`` charged for a message that was not sent."""
        with self._lock:
            link = self._routes.get(route)
            if link is not None:
                link.backlog -= cost
                self._backlog -= cost

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
        next_sweep, failures = time.monotonic(), 0
        while not self._stop:
            try:
                self._round()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + 1.0
                    self._sweep()
                failures = 0
            except Exception as exc:  # the relay must outlive any one failure
                failures += 1
                if failures >= FAILURES_TO_STOP:
                    self.failure = (f"the connection gate failed {failures} times in a row "
                                    f"({type(exc).__name__}: {exc}), so the server stops")
                    log.error("gate: %s", self.failure)
                    return
                log.exception("gate: a round of the relay failed; going on")
                time.sleep(POLL_S)

    def _round(self) -> None:
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
            except Exception:  # one connection's failure closes only it
                log.exception("gate: closing connection %s after a failure", link.name)
                self._drop(link)
        with self._lock:
            doomed, self._doomed = self._doomed, set()
        for link in doomed:
            self._drop(link, f"{link.backlog} bytes of replies it does not read")
        for link in [self.links[name] for name in self._held if name in self.links]:
            self._interest(link)  # credit may have come: read again if within budget

    def _accept(self) -> None:
        try:
            client, address = self.listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                self._make_room(None, "the process is out of descriptors")
            return
        host = address[0]
        while len(self.links) >= self.max_connections \
                or self._per_address[host] >= self.max_per_address:
            crowded = None if len(self.links) >= self.max_connections else host
            if not self._make_room(crowded, "connection limit reached"):
                log.warning("gate: refusing a connection from %s: %d connections, every one "
                            "authenticated", host, len(self.links))
                client.close()
                return
        self._count += 1
        name = f"c{self._count}"
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("gate: closing a new connection from %s: %s", host, exc)
            client.close()
            self._make_room(None, "the process is out of descriptors")
            return
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
        link = _Link(client, upstream, name, host)
        with self._lock:
            self.links[name] = link
            self._per_address[host] += 1
        self._interest(link)

    def _make_room(self, address: str | None, why: str) -> bool:
        """Close the unauthenticated connection (from ``address``, or any) idle the longest;
        False if there is none."""
        idle = min((link for link in self.links.values() if not link.authenticated
                    and address in (None, link.address)),
                   key=lambda link: link.active, default=None)
        if idle is not None:
            self._drop(idle, f"idle the longest ({why})")
        return idle is not None

    def _read(self, link: _Link, side: str) -> None:
        source = link.client if side == "client" else link.upstream
        data = source.recv(READ_BYTES)
        if not data:
            self._drop(link)
            return
        if side == "upstream":
            with self._lock:
                credit, ready, _ = link.from_server.feed(data)
                link.backlog -= credit
                self._backlog -= credit
                if ready and link.from_server.overhead and not link.authenticated:
                    self._unauthenticated[link.address] -= link.balance
                    link.authenticated = True
            link.to_client += data
            self._write(link, "client")
            return
        with self._lock:
            cost, _, problem = link.from_client.feed(data)
            self._charge(link, cost)
            link.active = time.monotonic()
        if problem:
            self._drop(link, problem)
            return
        link.to_upstream += data
        self._write(link, "upstream")
        self._shed(link)

    def _charge(self, link: _Link, cost: int) -> None:
        """Add ``cost`` (negative: a credit) to ``link``'s balance and the sums (lock held)."""
        link.balance += cost
        self._total += cost
        if not link.authenticated:
            self._unauthenticated[link.address] += cost

    def _shed(self, link: _Link) -> None:
        """Close the biggest unauthenticated holders while the unauthenticated connections of
        ``link``'s address, or all connections, hold more than their budget: first those the
        server has read nothing of for ``SERVED_S`` (unfinished messages), then the others."""
        while self._unauthenticated[link.address] > self.address_budget \
                or self._total > self.total_budget:
            over_address = self._unauthenticated[link.address] > self.address_budget
            stale = time.monotonic() - SERVED_S
            biggest = max((other for other in self.links.values() if not other.authenticated
                           and other.balance > 0
                           and (not over_address or other.address == link.address)),
                          key=lambda other: (other.served < stale, other.balance), default=None)
            if biggest is None:
                return  # what is held belongs to authenticated clients, each within budget
            self._drop(biggest, f"{biggest.balance} bytes held, the most "
                                f"while {'its address' if over_address else 'all'} "
                                f"held over budget")

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
        """Read from the client only while it is within its budget and its relay has
        drained; from the ROUTER only while the client takes what it sends."""
        open_ = link.balance <= self.peer_budget and not link.to_upstream
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
                self._drop(link, f"{link.balance} bytes of unfinished messages and nothing "
                                 f"sent or served for {self.idle_s:.0f} s")

    def _drop(self, link: _Link, why: str | None = None) -> None:
        """Close ``link`` (saying ``why`` in the log, if given) and forget what it held."""
        with self._lock:
            if self.links.pop(link.name, None) is None:
                return
            self._charge(link, -link.balance)
            self._backlog -= link.backlog
            self._per_address[link.address] -= 1
            if not self._per_address[link.address]:
                del self._per_address[link.address]
            if not self._unauthenticated[link.address]:
                del self._unauthenticated[link.address]
            if link.route is not None:
                self._routes.pop(link.route, None)
        if why:
            log.warning("gate: closing connection %s from %s: %s", link.name, link.address, why)
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
