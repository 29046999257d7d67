"""The client side: a DEALER socket with timeouts, reconnection with backoff, resumable
chunked upload and download, and event streaming with heartbeats.

Every operation is idempotent, so after a timeout the client reconnects (a fresh socket, linger
0) and repeats the request; uploads and downloads continue from the byte offset the receiver
holds. ``ServerUnavailable`` is raised when the server stays silent for ``retry_for`` seconds.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path

import numpy as np
import zmq

from .errors import ProtocolError, ServerError, ServerUnavailable
from .keys import parse_pairing
from .limits import CHUNK_BYTES, HEARTBEAT_S, MAX_FRAME_BYTES, PEER_TIMEOUT_S, WINDOW_CHUNKS
from .manifest import MANIFEST_NAME, ManifestError, mismatch, parse_manifest, select
from .message import Message, decode, encode
from .schema import CONTENT_HASH_RE, FILE_NAME_RE, SERVER_MESSAGES
from .transfer import ResumableFile, chunk_ranges, content_hash, content_hash_file

log = logging.getLogger(__name__)
TERMINAL_EVENTS = ("done", "failed", "cancelled")
Progress = Callable[[int, int], None]


class _Lost(Exception):
    """The server did not answer in time (or lost our place): reconnect and resume."""


def _as_bytes(data) -> np.ndarray:
    """A flat uint8 view of a bytes-like object or a C-contiguous little-endian array."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
        if data.dtype.byteorder == ">":
            data = data.astype(data.dtype.newbyteorder("<"))
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


class Client:
    """A connection to a diffrec server.

    ``server_key`` pins the server's CURVE public key (Z85) and ``client_keypair`` is
    (public, secret) in Z85; both or neither. ``timeout`` bounds each wait for an answer,
    ``retry_for`` the total time spent reconnecting before ``ServerUnavailable``.
    A Client is not thread-safe (its socket is not): use one per thread.
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

    @classmethod
    def from_pairing(cls, pairing: str, client_keypair: tuple[str, str], **kwargs) -> Client:
        address, server_key = parse_pairing(pairing)
        return cls(address, server_key=server_key, client_keypair=client_keypair, **kwargs)

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
                self._send("attach", {"job": job})
            except _Lost:
                break  # the next heartbeat reconnects again

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- messages --------------------------------------------------------------------------

    def _send(self, op: str, fields: Mapping, arrays: Mapping | None = None) -> int:
        request_id = next(self._ids)
        frames = encode(op, {"id": request_id, **fields}, arrays)
        try:
            self._socket.send_multipart(frames, copy=False)
        except zmq.Again:
            raise _Lost from None  # no connection took the message within the timeout
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

    def _answer(self, request_ids, timeout: float) -> Message:
        """The reply to one of ``request_ids``. Raises ServerError for an error reply, _Lost
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
        raise _Lost

    def _retrying(self, attempt: Callable[[], object]):
        """Run ``attempt`` until it does not raise _Lost, reconnecting with backoff."""
        deadline = time.monotonic() + self.retry_for
        backoff = 0.1
        while True:
            try:
                return attempt()
            except _Lost:
                if time.monotonic() + backoff > deadline:
                    raise ServerUnavailable(
                        f"no answer from {self.address} for {self.retry_for:.0f} s"
                    ) from None
                self._reconnect(backoff)
                backoff = min(backoff * 2, 5.0)

    def call(self, op: str, fields: Mapping | None = None, arrays: Mapping | None = None) -> dict:
        """Send one request (repeated after reconnecting if unanswered); the reply's fields."""
        def attempt():
            request_id = self._send(op, fields or {}, arrays)
            return self._answer({request_id}, self.timeout)

        reply = self._retrying(attempt)
        return {**reply.fields, **({"arrays": reply.arrays} if reply.arrays else {})}

    # -- operations ------------------------------------------------------------------------

    def ping(self) -> dict:
        return self.call("ping")

    def status(self, job: str) -> dict:
        return self.call("status", {"job": job})

    def list_jobs(self) -> list[dict]:
        """The statuses of this client key's jobs, in submission order (every page)."""
        jobs, fields = [], {}
        while True:
            reply = self.call("list", fields)
            jobs += reply["jobs"]
            if reply.get("cursor") is None:
                return jobs
            fields = {"cursor": reply["cursor"]}

    def cancel(self, job: str) -> dict:
        return self.call("cancel", {"job": job})

    def resume(self, job: str) -> dict:
        """Queue a cancelled or failed job again (from its checkpoint when it kept one)."""
        return self.call("resume", {"job": job})

    def delete(self, job: str) -> dict:
        self._attached.discard(job)
        return self.call("delete", {"job": job})

    def submit(
        self, job: str, spec: Mapping, arrays: Mapping[str, np.ndarray], on_progress=None
    ) -> dict:
        """Submit a job. Arrays up to CHUNK_BYTES go inline; larger ones are uploaded as blobs
        first (skipped when the server has them). Resubmitting the same ``job`` id returns the
        existing job (its reply has ``existing: true``). ``on_progress(done, total)``: bytes of
        all the uploads together, so the fraction only grows."""
        inline, inputs = {}, {}
        arrays = {name: np.asarray(array) for name, array in arrays.items()}
        total = sum(array.nbytes for array in arrays.values() if array.nbytes > CHUNK_BYTES)
        before = 0  # bytes of the arrays already uploaded
        for name, array in arrays.items():
            if array.nbytes <= CHUNK_BYTES:
                inline[name] = array
                continue
            overall = None if on_progress is None else partial(
                lambda start, done, _size: on_progress(start + done, total), before)
            blob = self.upload(array, on_progress=overall)
            before += array.nbytes
            inputs[name] = {"blob": blob, "dtype": array.dtype.name, "shape": list(array.shape)}
        return self.call("submit", {"job": job, "spec": dict(spec), "inputs": inputs}, inline)

    def upload(self, data, blob: str | None = None, on_progress: Progress | None = None) -> str:
        """Store ``data`` (bytes-like or array) on the server as a blob; returns its content
        hash, the blob's name (``blob``, when the caller knows it already). Resumes from the
        server's offset after any interruption, server restarts included."""
        view = _as_bytes(data)
        blob = blob or content_hash(view)

        def attempt():
            reply = self.call("upload", {"blob": blob, "size": view.nbytes})
            if not reply["complete"]:
                self._send_chunks(view, blob, reply["offset"], on_progress)
            return blob

        return self._retrying(attempt)

    def _send_chunks(self, view: np.ndarray, blob: str, offset: int, on_progress) -> None:
        ranges = chunk_ranges(view.nbytes, offset)
        in_flight: set[int] = set()
        fields = {"blob": blob, "size": view.nbytes}
        while True:
            while len(in_flight) < WINDOW_CHUNKS and (span := next(ranges, None)):
                start, end = span
                chunk = {"data": view[start:end]}
                in_flight.add(self._send("chunk", {**fields, "offset": start}, chunk))
            try:
                ack = self._answer(in_flight, self.timeout)
            except ServerError as exc:
                if exc.code == "offset_mismatch":
                    raise _Lost from None  # start again from the server's offset
                raise
            in_flight.discard(ack["re"])
            if on_progress:
                on_progress(ack["offset"], view.nbytes)
            if ack["complete"]:
                return

    def fetch(self, job: str, directory: Path, on_progress: Progress | None = None,
              only: Iterable[str] | None = None) -> list[Path]:
        """Download a finished job's results into ``directory``: its ``manifest.json`` first,
        then the files ``only`` selects from it (file names or roles, see
        ``manifest.select``; every listed file when None). Each file is verified by its
        transfer content hash (resumed from any ``.part`` file left by an earlier attempt, and
        not downloaded again when already held), then against the manifest's size and sha256.
        Returns the selected files' paths in manifest order, then the manifest's.

        Raises ManifestError when the results have no valid manifest, ``only`` names something
        the result does not hold, or files do not match the manifest (those files are removed,
        and the error names each one); ProtocolError or ServerError for transfer failures."""
        directory = Path(directory)
        listing = {}
        for entry in self.call("fetch", {"job": job})["files"]:
            name = entry["name"]
            if not (isinstance(name, str) and FILE_NAME_RE.match(name)
                    and CONTENT_HASH_RE.match(entry["content_hash"])):
                raise ProtocolError("bad_message", f"the server listed a bad result file {name!r}")
            listing[name] = entry
        if MANIFEST_NAME not in listing:
            raise ManifestError(f"job {job!r}'s results have no {MANIFEST_NAME}")
        directory.mkdir(parents=True, exist_ok=True)  # only once the job is known to exist
        manifest = self._download(job, directory, listing[MANIFEST_NAME], on_progress)
        chosen = select(parse_manifest(manifest.read_bytes()), only)
        problems = []
        for entry in chosen:
            if entry.name not in listing:
                problems.append(f"{entry.name} is in the manifest but not among the results")
                continue
            path = self._download(job, directory, listing[entry.name], on_progress)
            if problem := mismatch(path, entry):
                path.unlink()
                problems.append(problem)
        if problems:
            raise ManifestError(f"job {job!r}: " + "; ".join(problems))
        return [directory / entry.name for entry in chosen] + [manifest]

    def _download(self, job: str, directory: Path, entry: Mapping, on_progress) -> Path:
        """One listed result file into ``directory``, unless a copy with its content hash is
        there already; verified by that hash."""
        path, size, expected = directory / entry["name"], entry["size"], entry["content_hash"]
        held = path.exists() and path.stat().st_size == size
        if not (held and content_hash_file(path) == expected):
            target = ResumableFile(path, size, expected)
            try:
                self._retrying(partial(self._read_into, job, entry["name"], target, on_progress))
                target.finish()
            finally:
                target.close()
        return path

    def _read_into(self, job: str, name: str, target: ResumableFile, on_progress) -> None:
        ranges = chunk_ranges(target.size, target.offset)
        in_flight: dict[int, int] = {}
        while not target.complete:
            while len(in_flight) < WINDOW_CHUNKS and (span := next(ranges, None)):
                start, end = span
                fields = {"job": job, "file": name, "offset": start, "length": end - start}
                in_flight[self._send("read", fields)] = start
            data = self._answer(in_flight, self.timeout)
            if in_flight.pop(data["re"]) != target.offset or data["offset"] != target.offset:
                raise _Lost  # out of order: ask again from where the file stands
            target.write(data["offset"], data.arrays["data"])
            if on_progress:
                on_progress(target.offset, target.size)

    # -- events ----------------------------------------------------------------------------

    def attach(self, job: str) -> dict:
        """Subscribe to a job's events; the reply is its status. The server then replays the
        recent log events, the latest progress and preview, and the final event if the job
        has ended."""
        reply = self.call("attach", {"job": job})
        self._attached.add(job)
        return reply

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
                    self._send("ping", {})
                except _Lost:
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

    def wait(self, job: str, on_event: Callable[[Message], None] | None = None) -> Message | dict:
        """Attach and follow ``job`` to its end; returns the final event (or, if it had already
        ended, the final event replayed by the server)."""
        self.attach(job)
        for event in self.events():
            if event["job"] != job:
                continue
            if on_event:
                on_event(event)
            if event["kind"] in TERMINAL_EVENTS:
                self._attached.discard(job)
                return event
        raise ServerUnavailable("the event stream ended")
