"""The client's request loop: a DEALER socket with timeouts, reconnection with backoff,
requests answered or repeated, and the event stream with heartbeats and the silence clock
(``liveness``: a stopped or restarted server noticed, attached jobs attached again) (``Client``
adds the operations, ``client_transfers`` the uploads and downloads).

Every request is idempotent, so after a timeout the channel reconnects (a fresh socket,
linger 0) and repeats it. ``ServerUnavailable`` is raised when the server stays silent for
``retry_for`` seconds.
"""

from __future__ import annotations

import itertools
import logging
import re
import socket as sockets
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import zmq

from . import events
from .errors import JobLost, ProtocolError, ServerError, ServerUnavailable
from .limits import HEARTBEAT_S, MAX_FRAME_BYTES, PEER_TIMEOUT_S
from .liveness import Liveness
from .message import Message, decode, encode
from .schema import SERVER_MESSAGES

log = logging.getLogger(__name__)

TCP_ADDRESS = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]?#]+):(\d{1,5})")
"""A server's ZeroMQ address as a client gives it: ``tcp://HOST:PORT``, an IPv6 host in
brackets (``tcp://[::1]:5557``)."""


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``tcp://HOST:PORT`` address (an IPv6 host without its brackets), or
    None when ``address`` has another form."""
    match = TCP_ADDRESS.fullmatch(address)
    if not match or not 0 < int(match[2]) < 65536:
        return None
    return match[1].strip("[]"), int(match[2])


def tcp_failure(address: str, timeout: float) -> str | None:
    """Why no TCP connection to ``address`` (``tcp://HOST:PORT``) opens within ``timeout``
    seconds, as a clause ("nothing listens on port 5557 of gpubox"), or None when one does: a
    host name that does not resolve and a closed port are known at once."""
    host, port = split_address(address)
    try:
        with sockets.create_connection((host, port), timeout=timeout):
            return None
    except sockets.gaierror:
        return f"the host name {host} is not known here (it does not resolve)"
    except ConnectionRefusedError:
        return f"nothing listens on port {port} of {host}"
    except TimeoutError:
        return f"{host} did not take a connection to port {port} within {timeout:g} s"
    except OSError as exc:
        return f"{host} cannot be reached ({exc.strerror or exc})"


def typed(message: Message) -> Message:
    """``message``, an ``event`` its schema checked (``schema.EVENT_KINDS``), with its typed
    event read into ``message.event`` (a preview's images copied: frames are views): the one
    place a client parses an event."""
    arrays = {name: np.array(array) for name, array in message.arrays.items()}
    message.event = events.parse(message["kind"], message.fields, arrays)
    return message

class Lost(Exception):
    """The server did not answer in time (or lost our place): reconnect and resume."""


class Channel:
    """A connection to a diffrec server that requests go through.

    ``server_key`` pins the server's CURVE public key (Z85) and ``client_keypair`` is
    (public, secret) in Z85; both or neither. ``timeout`` bounds each wait for an answer,
    ``retry_for`` the total time spent reconnecting before ``ServerUnavailable``.
    ``liveness`` is the connection's silence clock. Not thread-safe (its socket is not): use
    one per thread.
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
        self.liveness = Liveness()
        self._last_ping = 0.0
        self._backoff = 0.1
        self._connect()

    # -- connection ------------------------------------------------------------------------

    def _connect(self) -> None:
        socket = self._context.socket(zmq.DEALER)
        socket.linger = 0
        socket.maxmsgsize = MAX_FRAME_BYTES
        socket.reconnect_ivl = 100
        socket.reconnect_ivl_max = 2000
        socket.sndtimeo = int(self.timeout * 1000)  # a DEALER with no live peer blocks sends
        socket.ipv6 = self.address.startswith("tcp://[")  # a bracketed host is an IPv6 one
        if self.server_key:
            socket.curve_serverkey = self.server_key.encode()
            socket.curve_publickey = self.client_keypair[0].encode()
            socket.curve_secretkey = self.client_keypair[1].encode()
        socket.connect(self.address)
        self._socket = socket
        self._connected_at = time.monotonic()

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
        self.liveness.asked()
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
            self.liveness.heard(message.get("session") if message.op in ("reply", "heartbeat")
                                else None)
            if message.op == "event":
                self._events.append(typed(message))
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

    def events(self, idle_timeout: float | None = None,
               on_link: Callable[[str], None] | None = None,
               give_up: bool = True) -> Iterator[Message]:
        """Events of attached jobs as they arrive. Pings every HEARTBEAT_S; the server's
        silence is measured on ``liveness``, the connection's wall clock, across calls (a
        caller polling with a short ``idle_timeout`` sees it add up). A server silent for
        min(PEER_TIMEOUT_S, timeout) is presumed dead or hung and reconnected to, with
        backoff; when it answers again after a ``stopped`` spell or as a new session, the
        attached jobs are attached again (the server replays their state). ``on_link`` is
        told each change of ``liveness`` ("stopped", "back", "restarted"), after it is handled.

        Stops after ``idle_timeout`` seconds without an event (never, if None). Raises
        ServerUnavailable after ``retry_for`` seconds of silence (never, without
        ``give_up``), JobLost when the server answers again without an attached job."""
        last_event = time.monotonic()
        reconnect_after = min(PEER_TIMEOUT_S, self.timeout)
        while True:
            while self._events:
                last_event = time.monotonic()
                yield self._events.popleft()
            change = self.liveness.change()
            if change in ("back", "restarted"):
                self._attach_again()
            if change and on_link:
                on_link(change)
            now = time.monotonic()
            if idle_timeout is not None and now - last_event > idle_timeout:
                return
            silence = self.liveness.silence_s()
            if min(silence, now - self._connected_at) > reconnect_after:  # a new one gets as long
                if give_up and silence > self.retry_for:
                    raise ServerUnavailable(f"no answer from {self.address}")
                self._reconnect(self._backoff)
                self._backoff = min(self._backoff * 2, 5.0)
                now = time.monotonic()  # after the backoff
                self._last_ping = 0.0  # ask the new connection at once
            if now - self._last_ping >= HEARTBEAT_S:
                self._last_ping = now
                try:
                    self.send("ping", {})
                except Lost:
                    continue  # counted as silence
            crossings = (self.liveness.silent_at(limit + 0.01)  # wake just past each limit
                         for limit in (reconnect_after, self.liveness.stopped_after_s))
            until = min([self._last_ping + HEARTBEAT_S,
                         *(at for at in crossings if at is not None and at > now)])
            if idle_timeout is not None:
                until = min(until, last_event + idle_timeout)
            if self._receive_until(until):
                self._backoff = 0.1

    def _attach_again(self) -> None:
        """Attach every attached job again (a server back or restarted); JobLost for one it
        does not know."""
        for job in list(self._attached):
            try:
                self.call("attach", {"job": job})
            except ServerError as exc:
                if exc.code != "not_found":
                    raise
                self._attached.discard(job)
                raise JobLost(job) from None

    def _receive_until(self, deadline: float) -> bool:
        """Wait for messages until ``deadline`` or an event; whether the server spoke."""
        heard = False
        while not self._events and (left := deadline - time.monotonic()) > 0:
            if not self._socket.poll(left * 1000):
                break
            heard = True
            self._receive(0.001)
        return heard or bool(self._events)
