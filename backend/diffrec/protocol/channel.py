"""The client's request loop: a DEALER socket with timeouts, reconnection with backoff,
requests answered or repeated, and the event stream with heartbeats (``Client`` adds the
operations, ``client_transfers`` the uploads and downloads).

Every request is idempotent, so after a timeout the channel reconnects (a fresh socket,
linger 0) and repeats it. ``ServerUnavailable`` is raised when the server stays silent for
``retry_for`` seconds.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping

import zmq

from .errors import ProtocolError, ServerError, ServerUnavailable
from .limits import HEARTBEAT_S, MAX_FRAME_BYTES, PEER_TIMEOUT_S
from .message import Message, decode, encode
from .schema import SERVER_MESSAGES

log = logging.getLogger(__name__)


class Lost(Exception):
    """The server did not answer in time (or lost our place): reconnect and resume."""


class Channel:
    """A connection to a diffrec server that requests go through.

    ``server_key`` pins the server's CURVE public key (Z85) and ``client_keypair`` is
    (public, secret) in Z85; both or neither. ``timeout`` bounds each wait for an answer,
    ``retry_for`` the total time spent reconnecting before ``ServerUnavailable``.
    Not thread-safe (its socket is not): use one per thread.
    """

    def __init__(
        self,
        address: str,
        *,
        server_key: str | None = None,
        client_keypair: tuple[str, str] | None = None,
        timeout: float = 10.0,
        retry_for: float = 60.0,
        context: zmq.Context | None = None,
    ):
        if (server_key is None) != (client_keypair is None):
            raise ValueError("CURVE needs both the server's public key and a client key pair")
        self.address = address
        self.server_key = server_key
        self.client_keypair = client_keypair
        self.timeout = timeout
        self.retry_for = retry_for
        self._context = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._events: deque[Message] = deque()
        self._attached: set[str] = set()
        self._socket: zmq.Socket | None = None
        self._connect()

    # -- connection ------------------------------------------------------------------------

    def _connect(self) -> None:
        socket = self._context.socket(zmq.DEALER)
        socket.linger = 0
        socket.maxmsgsize = MAX_FRAME_BYTES
        socket.reconnect_ivl = 100
        socket.reconnect_ivl_max = 2000
        socket.sndtimeo = int(self.timeout * 1000)  # a DEALER with no live peer blocks sends
        if self.server_key:
            socket.curve_serverkey = self.server_key.encode()
            socket.curve_publickey = self.client_keypair[0].encode()
            socket.curve_secretkey = self.client_keypair[1].encode()
        socket.connect(self.address)
        self._socket = socket

    def _reconnect(self, backoff: float) -> None:
        """A fresh socket after ``backoff`` seconds; attached jobs are attached again."""
        log.info("no answer from %s; reconnecting in %.1f s", self.address, backoff)
        self._socket.close(linger=0)
        time.sleep(backoff)
        self._connect()
        for job in self._attached:
            try:
                self.send("attach", {"job": job})
            except Lost:
                break  # the next heartbeat reconnects again

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- messages --------------------------------------------------------------------------

    def send(self, op: str, fields: Mapping, arrays: Mapping | None = None) -> int:
        """Send one request without waiting for its answer; its id (``Lost`` when no
        connection took it within the timeout)."""
        request_id = next(self._ids)
        frames = encode(op, {"id": request_id, **fields}, arrays)
        try:
            self._socket.send_multipart(frames, copy=False)
        except zmq.Again:
            raise Lost from None  # no connection took the message within the timeout
        return request_id

    def _receive(self, timeout: float) -> Message | None:
        """The next valid server message within ``timeout`` s; events are queued, not returned."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self._socket.poll(left * 1000):
                return None
            frames = self._socket.recv_multipart(copy=False)
            try:
                message = decode(frames, SERVER_MESSAGES)
            except ProtocolError as exc:
                log.warning("ignoring a malformed message from the server: %s", exc)
                continue
            if message.op == "event":
                self._events.append(message)
            elif message.op != "heartbeat":
                return message
        return None

    def answer(self, request_ids, timeout: float) -> Message:
        """The reply to one of ``request_ids``. Raises ServerError for an error reply, Lost
        after ``timeout`` seconds of silence."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self._receive(left)
            if message is None:
                break
            if message.get("re") not in request_ids:
                continue  # a late answer to a request we gave up on
            if message.op == "error":
                raise ServerError(message["code"], message["message"])
            return message
        raise Lost

    def retrying(self, attempt: Callable[[], object]):
        """Run ``attempt`` until it does not raise Lost, reconnecting with backoff."""
        deadline = time.monotonic() + self.retry_for
        backoff = 0.1
        while True:
            try:
                return attempt()
            except Lost:
                if time.monotonic() + backoff > deadline:
                    raise ServerUnavailable(
                        f"no answer from {self.address} for {self.retry_for:.0f} s"
                    ) from None
                self._reconnect(backoff)
                backoff = min(backoff * 2, 5.0)

    def call(self, op: str, fields: Mapping | None = None, arrays: Mapping | None = None) -> dict:
        """Send one request (repeated after reconnecting if unanswered); the reply's fields."""
        def attempt():
            request_id = self.send(op, fields or {}, arrays)
            return self.answer({request_id}, self.timeout)

        reply = self.retrying(attempt)
        return {**reply.fields, **({"arrays": reply.arrays} if reply.arrays else {})}

    # -- events ----------------------------------------------------------------------------

    def attach(self, job: str) -> dict:
        """Subscribe to a job's events; the reply is its status. The server then replays the
        recent log events, the latest progress and preview, and the final event if the job
        has ended. An attached job is attached again after each reconnection."""
        reply = self.call("attach", {"job": job})
        self._attached.add(job)
        return reply

    def detach(self, job: str) -> None:
        """Stop attaching ``job`` again after a reconnection."""
        self._attached.discard(job)

    def events(self, idle_timeout: float | None = None) -> Iterator[Message]:
        """Events of attached jobs as they arrive. Pings every HEARTBEAT_S; a server silent
        for PEER_TIMEOUT_S is presumed dead and reconnected to (jobs re-attached). Stops after
        ``idle_timeout`` seconds without an event (never, if None)."""
        last_event = last_heard = connected = time.monotonic()
        last_ping = 0.0
        backoff = 0.1
        silence = min(PEER_TIMEOUT_S, self.timeout)
        while True:
            while self._events:
                last_event = time.monotonic()
                yield self._events.popleft()
            now = time.monotonic()
            if idle_timeout is not None and now - last_event > idle_timeout:
                return
            if now - max(last_heard, connected) > silence:  # a new connection gets as long
                if now - last_heard > self.retry_for:
                    raise ServerUnavailable(f"no answer from {self.address}")
                self._reconnect(backoff)
                backoff = min(backoff * 2, 5.0)
                now = connected = time.monotonic()  # after the backoff
                last_ping = 0.0  # ask the new connection at once
            if now - last_ping >= HEARTBEAT_S:
                last_ping = now
                try:
                    self.send("ping", {})
                except Lost:
                    continue  # counted as silence
            if self._receive_until(last_ping + HEARTBEAT_S):
                last_heard, backoff = time.monotonic(), 0.1

    def _receive_until(self, deadline: float) -> bool:
        """Wait for messages until ``deadline`` or an event; whether the server spoke."""
        heard = False
        while not self._events and (left := deadline - time.monotonic()) > 0:
            if not self._socket.poll(left * 1000):
                break
            heard = True
            self._receive(0.001)
        return heard or bool(self._events)
