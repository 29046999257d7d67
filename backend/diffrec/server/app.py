"""The server's transport: a ROUTER socket and the loop that serves it, in the main thread
(the only thread that touches the socket or, through ``JobTable``, the job records).

Requests are validated by ``diffrec.protocol`` before a handler (``_op_<op>``) sees them; a
handler returns the reply's fields (or sends its own answer and returns None) and raises
ProtocolError for a request it refuses. Nothing a client sends can stop the loop: every
failure becomes an ``error`` reply. The jobs themselves (submit, lifecycle, the worker's
reports, retention) live in ``diffrec.server.job_table``; this module keeps the peers: who is
subscribed to which job, who was seen when, and the heartbeat.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zmq

from diffrec import __version__
from diffrec.errors import UserError
from diffrec.protocol import events
from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.limits import (
    CHUNK_BYTES,
    HEARTBEAT_S,
    MAX_FRAME_BYTES,
    PEER_TIMEOUT_S,
    PROTOCOL_VERSION,
    WINDOW_CHUNKS,
)
from diffrec.protocol.message import Message, decode, encode
from diffrec.protocol.schema import REQUESTS

from .blobs import BlobStore
from .data_lock import DataLock
from .disk import make_private_dir, outermost_missing, remove_made, storage_error
from .executor import Executor, Report
from .gate import Gate, open_gate
from .job_store import JobStore
from .job_table import JobTable
from .quotas import DEFAULT_QUOTAS, Quotas
from .registry import runners
from .result_check import size_problem
from .runner import JobFailed
from .security import Security, secure

log = logging.getLogger(__name__)
MAINTENANCE_S = 3600.0


def executor_factory(device: str, cluster: str | None,
                     data_dir: Path) -> Callable[[Report], Executor]:
    """``make(report)`` for the executor a server runs its jobs with: the local worker on
    ``device``, or Ray at ``cluster`` (an address ``ray.init`` takes, ``auto``, or ``local``
    for a Ray started by the server; docs/guide.md, "Running a cluster"), its jobs named
    after the server's ``data_dir``. Each is imported only when chosen (Ray is optional)."""
    if cluster is None:
        from .worker import Worker

        return lambda report: Worker(device, report)
    from .cluster import RayExecutor

    return lambda report: RayExecutor(cluster, data_dir, report)


class Server:
    """A diffrec job server bound to ``bind``, keeping its state under ``data_dir``.

    It holds ``data_dir`` (``data_lock``: UserError if another server does) until ``close``.
    ``curve`` forces CURVE on a loopback bind (it is always on for any other address);
    ``retention_s`` is how long finished jobs are kept; ``quotas`` bound what each client key
    may hold; ``cluster``: the Ray cluster that runs the jobs (``executor_factory``),
    None to run them here on ``device``.
    """

    def __init__(self, bind: str, data_dir: Path, device: str = "cpu", *, curve: bool = False,
                 retention_s: float = 7 * 86400.0, quotas: Quotas = DEFAULT_QUOTAS,
                 cluster: str | None = None):
        self.data_dir = Path(data_dir)
        made = outermost_missing(self.data_dir)  # a start that fails takes it away again
        make_private_dir(self.data_dir)
        self.lock = DataLock(self.data_dir)
        self.device = device
        try:
            self.blobs = BlobStore(self.data_dir, quotas)
        except BaseException:
            self.lock.release()
            remove_made(made)
            raise
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.linger = 0
        self.socket.maxmsgsize = MAX_FRAME_BYTES
        self.socket.router_mandatory = 1
        self.security: Security | None = None
        self.gate: Gate | None = None
        self.subscribers: defaultdict[str, set[bytes]] = defaultdict(set)
        self.last_seen: dict[bytes, float] = {}
        self.session = secrets.token_hex(8)
        """This run of the server, named in ping replies and heartbeats: a client hearing
        another one knows the server restarted (and forgot its subscribers)."""
        self._handlers: dict[str, Callable[[bytes, str, Message], dict | None]] = {
            op: getattr(self, f"_op_{op}") for op in REQUESTS
        }
        try:
            self.security = secure(self.context, self.socket, bind, self.data_dir, curve)
            self.gate = open_gate(bind)
            self.socket.bind(self.gate.upstream if self.gate else bind)
            self.endpoint = self.gate.endpoint if self.gate else self.socket.last_endpoint.decode()
            self.lock.describe(self.endpoint)
            self.jobs = JobTable(JobStore(self.data_dir), self.blobs, runners(device),
                                 executor_factory(device, cluster, self.data_dir),
                                 self._event, lambda job_id: self.subscribers.pop(job_id, None),
                                 retention_s=retention_s, quotas=quotas)
        except BaseException:
            self.close()
            remove_made(made)
            raise

    @property
    def pairing(self) -> str | None:
        return self.security.pairing(self.endpoint) if self.security else None

    # -- loop ------------------------------------------------------------------------------

    def serve_forever(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        next_beat = next_maintenance = time.monotonic()
        while not should_stop():
            if self.gate and self.gate.failure:
                raise UserError(self.gate.failure)
            if self.socket.poll(50):
                for _ in range(256):  # bounded, so worker events and heartbeats keep flowing
                    try:
                        frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    if self.gate:
                        self.gate.consumed(frames)
                    self._handle(frames)
            self.jobs.drain_reports()
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + HEARTBEAT_S
                self._heartbeat(now)
                self.jobs.tend_disk()
            if now >= next_maintenance:
                next_maintenance = now + MAINTENANCE_S
                self.jobs.expire()

    def close(self) -> None:
        """Stop the worker (a running job stays resumable), the authenticator and the socket;
        then let go of the data directory."""
        try:
            if hasattr(self, "jobs"):
                self.jobs.close()
            self.blobs.close()
            if self.security:
                self.security.close()
            if self.gate:
                self.gate.close()
            self.socket.close(linger=0)
            self.context.term()
        finally:
            self.lock.release()

    # -- messages --------------------------------------------------------------------------

    def _send(self, peer: bytes, op: str, fields: dict, arrays=None) -> bool:
        """Send without blocking; a gone or saturated peer loses the message (and, if gone,
        its subscriptions)."""
        return self._send_frames(peer, encode(op, fields, arrays))

    def _send_frames(self, peer: bytes, frames: list) -> bool:
        """Send ``frames`` to ``peer`` unless the gate says it has too much queued already
        (a client that does not read its replies loses them)."""
        cost = self.gate.reserve(peer, frames) if self.gate else 0
        if cost is None:
            return False
        try:
            self.socket.send_multipart([peer, *frames], zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            self._release(peer, cost)
            return False
        except zmq.ZMQError as exc:
            self._release(peer, cost)
            if exc.errno == zmq.EHOSTUNREACH:
                self._forget(peer)
                return False
            raise

    def _release(self, peer: bytes, cost: int) -> None:
        if self.gate:
            self.gate.release(peer, cost)

    def _forget(self, peer: bytes) -> None:
        self.last_seen.pop(peer, None)
        for peers in self.subscribers.values():
            peers.discard(peer)

    def _handle(self, frames: list) -> None:
        if len(frames) < 2:
            return
        peer = frames[0].bytes
        self.last_seen[peer] = time.monotonic()
        owner = self._owner(frames[1])
        request_id = None
        try:
            message = decode(frames[1:], REQUESTS)
            request_id = message["id"]
            reply = self._handlers[message.op](peer, owner, message)
            if reply is not None:
                self._send(peer, "reply", {"re": request_id, **reply})
        except ProtocolError as exc:
            request_id = request_id if request_id is not None else getattr(exc, "request_id", None)
            self._send(peer, "error", {"re": request_id, "code": exc.code, "message": exc.message})
        except JobFailed as exc:
            self._send(peer, "error", {"re": request_id, "code": "invalid_input",
                                       "message": str(exc)})
        except OSError as exc:
            error = storage_error(exc, self.data_dir)
            if error is None:
                log.exception("request failed")
                error = ProtocolError("internal", f"internal error ({type(exc).__name__})")
            self._send(peer, "error", {"re": request_id, "code": error.code,
                                       "message": error.message})
        except Exception as exc:
            log.exception("request failed")
            self._send(peer, "error", {"re": request_id, "code": "internal",
                                       "message": f"internal error ({type(exc).__name__})"})

    def _owner(self, frame) -> str:
        """The client's CURVE public key (Z85); "local" for plain-text loopback clients."""
        if self.security is None or self.security.server_public is None:
            return "local"
        return frame.get("User-Id")

    def _event(self, job_id: str, event: events.Event, peers=None) -> None:
        """Send ``event`` to the job's subscribers (or ``peers``): the one place a job's event
        is written for the wire (``events.to_wire``). One that breaks a limit (a runner's bug,
        such as a preview over the frame size) is logged and dropped."""
        peers = list(self.subscribers.get(job_id, ()) if peers is None else peers)
        if not peers:
            return
        kind, fields, arrays = events.to_wire(event)
        try:
            frames = encode("event", {"job": job_id, "kind": kind, **fields}, arrays)
        except ProtocolError as exc:
            log.warning("job %s: %s event dropped: %s", job_id, kind, exc.message)
            return
        for peer in peers:
            self._send_frames(peer, frames)

    def _heartbeat(self, now: float) -> None:
        for peer, seen in list(self.last_seen.items()):
            if now - seen > PEER_TIMEOUT_S:
                self._forget(peer)
        subscribed = set().union(*self.subscribers.values()) if self.subscribers else set()
        for peer in subscribed:
            self._send(peer, "heartbeat", {"time": time.time(), "session": self.session})

    # -- operations ------------------------------------------------------------------------

    def _op_ping(self, peer, owner, message) -> dict:
        return {"protocol": PROTOCOL_VERSION, "server": __version__, "session": self.session,
                **self.jobs.executor.engine(),
                "queued": self.jobs.queued(owner), "chunk_bytes": CHUNK_BYTES,
                "window_chunks": WINDOW_CHUNKS, "heartbeat_s": HEARTBEAT_S,
                "tasks": sorted(self.jobs.runners)}

    def _op_upload(self, peer, owner, message) -> dict:
        offset, complete = self.blobs.begin(owner, message["blob"], message["size"])
        return {"blob": message["blob"], "offset": offset, "complete": complete}

    def _op_chunk(self, peer, owner, message) -> None:
        offset, complete = self.blobs.write(owner, message["blob"], message["size"],
                                            message["offset"], message.arrays["data"])
        self._send(peer, "ack", {"re": message["id"], "blob": message["blob"], "offset": offset,
                                 "complete": complete})

    def _op_submit(self, peer, owner, message) -> dict:
        return self.jobs.submit(owner, message)

    def _op_status(self, peer, owner, message) -> dict:
        return self.jobs.get(owner, message["job"]).public()

    def _op_list(self, peer, owner, message) -> dict:
        return self.jobs.page(owner, message.get("cursor", 0))

    def _op_attach(self, peer, owner, message) -> None:
        record = self.jobs.get(owner, message["job"])
        self.subscribers[record.id].add(peer)
        self._send(peer, "reply", {"re": message["id"], **record.public()})
        for event in self.jobs.replay(record):
            self._event(record.id, event, peers=[peer])

    def _op_detach(self, peer, owner, message) -> dict:
        self.subscribers.get(self.jobs.get(owner, message["job"]).id, set()).discard(peer)
        return {"job": message["job"]}

    def _op_cancel(self, peer, owner, message) -> dict:
        return self.jobs.cancel(owner, message["job"])

    def _op_resume(self, peer, owner, message) -> dict:
        return self.jobs.resume(owner, message["job"])

    def _op_delete(self, peer, owner, message) -> dict:
        return self.jobs.delete(owner, message["job"])

    def _op_fetch(self, peer, owner, message) -> dict:
        """The result files of a finished job, each checked on the disk: [{name, size,
        content_hash}]."""
        record = self.jobs.checked_results(owner, message["job"])
        return {"job": record.id, "files": record.results}

    def _op_read(self, peer, owner, message) -> None:
        record = self.jobs.get(owner, message["job"])
        if record.state != "done":
            raise ProtocolError("not_ready", f"job {record.id!r} is {record.state}, not done")
        entry = next((f for f in record.results if f["name"] == message["file"]), None)
        if entry is None:
            raise ProtocolError("not_found", f"no result file {message['file']!r}")
        offset = message["offset"]
        if offset > entry["size"]:
            raise ProtocolError("bad_request", f"offset {offset} is past the end of "
                                f"{entry['name']} ({entry['size']} bytes)")
        length = max(0, min(message["length"], entry["size"] - offset))
        try:
            stream = open(self.jobs.store.results_dir(record.id) / entry["name"], "rb")
        except FileNotFoundError:
            raise self.jobs.damaged(record.id, [size_problem(entry["name"], None,
                                                             entry["size"])]) from None
        with stream:
            if problem := size_problem(entry["name"], os.fstat(stream.fileno()), entry["size"]):
                raise self.jobs.damaged(record.id, [problem])
            # read now, so that a reply waiting for a slow client holds no descriptor
            data = np.empty(length, np.uint8)
            stream.seek(offset)
            if stream.readinto(memoryview(data)) != length:
                raise self.jobs.damaged(record.id, [size_problem(
                    entry["name"], os.fstat(stream.fileno()), entry["size"])
                    or f"{entry['name']} ended before its listed size"])
        self._send(peer, "data", {"re": message["id"], "offset": offset}, {"data": data})
