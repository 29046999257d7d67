"""The server: a ROUTER socket, the job store, the blob store and the worker, driven by one
loop in the main thread (the only thread that touches job records or the socket).

Requests are validated by ``diffrec.protocol`` before a handler sees them; a handler returns
the reply's fields (or sends its own answer and returns None) and raises ProtocolError for a
request it refuses. Nothing a client sends can stop the loop: every failure becomes an
``error`` reply.
"""

from __future__ import annotations

import json
import logging
import mmap
import queue
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import zmq

from diffrec import __version__
from diffrec.protocol.arrays import wire_dtype
from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.limits import (
    CHUNK_BYTES,
    HEARTBEAT_S,
    MAX_ARRAYS,
    MAX_FRAME_BYTES,
    MAX_HEADER_BYTES,
    MAX_MESSAGE_CHARS,
    PEER_TIMEOUT_S,
    PROTOCOL_VERSION,
    WINDOW_CHUNKS,
)
from diffrec.protocol.message import Message, decode, encode
from diffrec.protocol.schema import INPUTS, REQUESTS

from .blobs import BlobStore
from .quotas import DEFAULT_QUOTAS, Quotas, exceeded
from .registry import runners
from .runner import JobFailed
from .security import Security, secure
from .storage import storage_error
from .store import TERMINAL, JobStore
from .worker import Ticket, Worker

log = logging.getLogger(__name__)
MAX_JOBS_PER_OWNER = 1000
LOG_REPLAY = 50
MAINTENANCE_S = 3600.0
BLOB_GRACE_S = 3600.0
LIST_REPLY_BYTES = MAX_HEADER_BYTES // 2
"""A ``list`` reply carries statuses up to about this many bytes of JSON, then a ``cursor``."""
TOMBSTONES = 10_000
"""Deleted job ids remembered, so that a repeated ``delete`` still answers ``deleted``."""


def _not_found(job_id: str) -> ProtocolError:
    return ProtocolError("not_found", f"no job {job_id!r} (for this client key)")


def _fit_text(text: str) -> str:
    """``text`` cut to MAX_MESSAGE_CHARS characters, so that any event carrying it fits."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[:MAX_MESSAGE_CHARS - 1] + "…"


class Server:
    """A diffrec job server bound to ``bind``, keeping its state under ``data_dir``.

    ``curve`` forces CURVE on a loopback bind (it is always on for any other address);
    ``retention_s`` is how long finished jobs are kept; ``quotas`` bound what each client key
    may hold.
    """

    def __init__(self, bind: str, data_dir: Path, device: str = "cpu", *, curve: bool = False,
                 retention_s: float = 7 * 86400.0, quotas: Quotas = DEFAULT_QUOTAS):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.device = device
        self.retention_s = retention_s
        self.quotas = quotas
        self.store = JobStore(self.data_dir)
        self.blobs = BlobStore(self.data_dir, quotas)
        self.runners = runners(device)
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.linger = 0
        self.socket.maxmsgsize = MAX_FRAME_BYTES
        self.socket.router_mandatory = 1
        self.security: Security | None = None
        try:
            self.security = secure(self.context, self.socket, bind, self.data_dir, curve)
            self.socket.bind(bind)
        except BaseException:
            self.close()
            raise
        self.endpoint = self.socket.last_endpoint.decode()
        self.jobs: dict[str, dict] = self.store.load_all()
        for record in self.jobs.values():
            for ref in record["inputs"].values():
                self.blobs.adopt_legacy(record["owner"], ref["blob"])
        self.subscribers: defaultdict[str, set[bytes]] = defaultdict(set)
        self.last_seen: dict[bytes, float] = {}
        self.previews: dict[str, tuple[dict, dict]] = {}
        self.logs: defaultdict[str, deque[dict]] = defaultdict(lambda: deque(maxlen=LOG_REPLAY))
        self.tombstones: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.unsaved: set[str] = set()
        """Jobs whose state file could not be written; tried again every heartbeat."""
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.worker = Worker(device, lambda *event: self._outbox.put(event))
        self._handlers: dict[str, Callable[[bytes, str, Message], dict | None]] = {
            op: getattr(self, f"_op_{op}") for op in REQUESTS
        }
        self._expire()
        self._recover()

    @property
    def pairing(self) -> str | None:
        return self.security.pairing(self.endpoint) if self.security else None

    # -- loop ------------------------------------------------------------------------------

    def serve_forever(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        next_beat = next_maintenance = time.monotonic()
        while not should_stop():
            if self.socket.poll(50):
                for _ in range(256):  # bounded, so worker events and heartbeats keep flowing
                    try:
                        frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._handle(frames)
            self._drain_outbox()
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + HEARTBEAT_S
                self._heartbeat(now)
                self._tend_disk()
            if now >= next_maintenance:
                next_maintenance = now + MAINTENANCE_S
                self._expire()

    def close(self) -> None:
        """Stop the worker (a running job stays resumable), the authenticator and the socket."""
        if hasattr(self, "worker"):
            self.worker.close()
        self.blobs.close()
        if self.security:
            self.security.close()
        self.socket.close(linger=0)
        self.context.term()

    # -- messages --------------------------------------------------------------------------

    def _send(self, peer: bytes, op: str, fields: dict, arrays=None) -> bool:
        """Send without blocking; a gone or saturated peer loses the message (and, if gone,
        its subscriptions)."""
        return self._send_frames(peer, encode(op, fields, arrays))

    def _send_frames(self, peer: bytes, frames: list) -> bool:
        try:
            self.socket.send_multipart([peer, *frames], zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                self._forget(peer)
                return False
            raise

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

    def _event(self, job_id: str, kind: str, fields: dict, arrays=None, peers=None) -> None:
        """Send an event to the job's subscribers (or ``peers``). One that breaks a limit (a
        runner's bug, such as a preview over the frame size) is logged and dropped."""
        peers = list(self.subscribers.get(job_id, ()) if peers is None else peers)
        if not peers:
            return
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
            self._send(peer, "heartbeat", {"time": time.time()})

    # -- jobs ------------------------------------------------------------------------------

    def _save(self, record: dict) -> None:
        """Write ``record``'s state file. A failure (a read-only disk, or a full one past the
        store's reserve) is logged and the write tried again every heartbeat, so that disk
        and memory agree as soon as the disk allows; the server goes on meanwhile."""
        try:
            self.store.save(record)
            self.unsaved.discard(record["id"])
        except OSError as exc:
            if record["id"] not in self.unsaved:
                log.error("job %s: cannot write its state, will try again: %s", record["id"], exc)
            self.unsaved.add(record["id"])

    def _tend_disk(self) -> None:
        """Retry the state files that could not be written; put back the store's reserve."""
        for job_id in list(self.unsaved):
            if job_id in self.jobs:
                self._save(self.jobs[job_id])
            else:
                self.unsaved.discard(job_id)
        self.store.restore_reserve()

    def _job(self, owner: str, job_id: str) -> dict:
        record = self.jobs.get(job_id)
        if record is None or record["owner"] != owner:
            raise _not_found(job_id)
        return record

    @staticmethod
    def _public(record: dict) -> dict:
        keys = ("state", "task", "created", "updated", "finished", "attempts", "progress",
                "message", "results")
        return {"job": record["id"], **{key: record.get(key) for key in keys}}

    def _enqueue(self, record: dict) -> None:
        job_id = record["id"]
        inputs = {name: self.blobs.load(record["owner"], ref["blob"], ref["dtype"], ref["shape"])
                  for name, ref in record["inputs"].items()}
        self.worker.enqueue(Ticket(job_id, self.runners[record["task"]], record["spec"], inputs,
                                   self.store.checkpoint_dir(job_id),
                                   self.store.results_dir(job_id)))

    def _recover(self) -> None:
        """Queued jobs stay queued; a job that was running resumes from its checkpoint."""
        for record in sorted(self.jobs.values(), key=lambda r: r["seq"]):
            if record["state"] not in ("queued", "running"):
                continue
            if record.get("stop") == "delete":  # asked for before the server stopped
                self._remove(record["id"])
                continue
            if record.get("stop") == "cancel":
                self._finish(record["id"], "cancelled", "the job was cancelled", [])
                continue
            if record["state"] == "running":
                log.info("job %s was running when the server stopped; resuming", record["id"])
                record["state"] = "queued"
                self._save(record)
            try:
                if record["task"] not in self.runners:
                    raise ProtocolError("invalid_input", f"unknown task {record['task']!r}")
                self._enqueue(record)
            except ProtocolError as exc:
                self._finish(record["id"], "failed", f"cannot resume: {exc.message}", [])

    def _finish(self, job_id: str, outcome: str, message: str, results: list) -> None:
        record = self.jobs[job_id]
        message = _fit_text(message)
        record.update(state=outcome, message=message, results=results, finished=time.time())
        self._save(record)
        fields = {"results": results} if outcome == "done" else {"message": message}
        self._event(job_id, outcome, fields)
        if record.get("stop") == "delete":
            self._remove(job_id)

    def _remove(self, job_id: str) -> None:
        record = self.jobs.pop(job_id, None)
        if record is not None:
            self.tombstones[(record["owner"], job_id)] = None
            while len(self.tombstones) > TOMBSTONES:
                self.tombstones.popitem(last=False)
        self.subscribers.pop(job_id, None)
        self.unsaved.discard(job_id)
        self.previews.pop(job_id, None)
        self.logs.pop(job_id, None)
        self.store.delete(job_id)

    def _expire(self) -> None:
        """Delete finished jobs past retention, then blobs no job refers to."""
        cutoff = time.time() - self.retention_s
        for job_id, record in list(self.jobs.items()):
            if record["state"] in TERMINAL and (record.get("finished") or 0) < cutoff:
                log.info("job %s is past retention; deleting it", job_id)
                self._remove(job_id)
        referenced = {(r["owner"], ref["blob"])
                      for r in self.jobs.values() for ref in r["inputs"].values()}
        self.blobs.collect(referenced, BLOB_GRACE_S, self.retention_s)

    def _drain_outbox(self) -> None:
        while True:
            try:
                job_id, kind, fields, arrays = self._outbox.get_nowait()
            except queue.Empty:
                return
            try:
                self._worker_report(job_id, kind, fields, arrays)
            except Exception:  # a bad event must not stop the loop that serves everyone
                log.exception("job %s: cannot handle its %s report", job_id, kind)

    def _worker_report(self, job_id: str, kind: str, fields: dict, arrays) -> None:
        """Apply one report of the worker thread: a job started or finished, or an event."""
        record = self.jobs.get(job_id)
        if record is None:
            return
        if kind == "started":
            record.update(state="running", attempts=record.get("attempts", 0) + 1)
            self._save(record)
        elif kind == "finished":
            self._finish(job_id, fields["outcome"], fields["message"], fields["results"])
        else:
            if kind == "progress":
                record["progress"] = fields
            elif kind == "preview":
                self.previews[job_id] = (fields, arrays)
            elif kind == "log":
                fields = {**fields, "message": _fit_text(str(fields.get("message", "")))}
                self.logs[job_id].append(fields)
            self._event(job_id, kind, fields, arrays)

    # -- operations ------------------------------------------------------------------------

    def _op_ping(self, peer, owner, message) -> dict:
        engine, free = "CPU", None
        if self.device.startswith("cuda") and torch.cuda.is_available():
            engine = torch.cuda.get_device_name(self.device)
            free = torch.cuda.mem_get_info(self.device)[0]
        return {"protocol": PROTOCOL_VERSION, "server": __version__, "engine": engine,
                "device": self.device, "gpu_free_bytes": free, "queued": self.worker.queued(),
                "chunk_bytes": CHUNK_BYTES, "window_chunks": WINDOW_CHUNKS,
                "heartbeat_s": HEARTBEAT_S, "tasks": sorted(self.runners)}

    def _op_upload(self, peer, owner, message) -> dict:
        offset, complete = self.blobs.begin(owner, message["blob"], message["size"])
        return {"blob": message["blob"], "offset": offset, "complete": complete}

    def _op_chunk(self, peer, owner, message) -> None:
        offset, complete = self.blobs.write(owner, message["blob"], message["size"],
                                            message["offset"], message.arrays["data"])
        self._send(peer, "ack", {"re": message["id"], "blob": message["blob"], "offset": offset,
                                 "complete": complete})

    def _submitted_inputs(self, owner: str,
                          message: Message) -> dict[str, tuple[dict, np.ndarray]]:
        """{name: (blob reference or None, array)}, every input checked."""
        refs = message.get("inputs", {})
        names = [*message.arrays, *refs]
        if len(set(names)) != len(names) or len(names) > MAX_ARRAYS:
            raise ProtocolError("invalid_input", "input names must be unique (inline or blob)")
        inputs = {}
        for name in names:
            if name not in INPUTS:
                raise ProtocolError("invalid_input",
                                    f"unknown input {name!r}; known: {sorted(INPUTS)}")
            if name in refs:
                ref = refs[name]
                INPUTS[name].check_layout(name, ref["dtype"], tuple(ref["shape"]))
                inputs[name] = (ref, self.blobs.load(owner, ref["blob"], ref["dtype"],
                                                     ref["shape"]))
            else:
                inputs[name] = (None, message.arrays[name])
            INPUTS[name].check(name, inputs[name][1])
        return inputs

    def _op_submit(self, peer, owner, message) -> dict:
        job_id = message["job"]
        existing = self.jobs.get(job_id)
        if existing is not None:
            if existing["owner"] != owner:
                raise ProtocolError("conflict", f"job id {job_id!r} is taken; choose another")
            return {**self._public(existing), "existing": True}
        owned = [r for r in self.jobs.values() if r["owner"] == owner]
        if len(owned) >= MAX_JOBS_PER_OWNER:
            raise ProtocolError("too_many_jobs", "delete finished jobs before submitting more")
        waiting = sum(r["state"] not in TERMINAL for r in owned)
        if waiting >= self.quotas.queued_jobs:
            raise exceeded("queued_jobs", self.quotas.queued_jobs, waiting, 1,
                           "wait for your queued jobs to finish, or cancel some")
        spec = message["spec"]
        task = spec.get("task")
        runner = self.runners.get(task) if isinstance(task, str) else None
        if runner is None:
            raise ProtocolError("invalid_input",
                                f"spec 'task' must be one of {sorted(self.runners)}")
        inputs = self._submitted_inputs(owner, message)
        runner.validate(spec, {name: array for name, (_, array) in inputs.items()})
        manifest = {}
        for name, (ref, array) in inputs.items():
            blob = ref["blob"] if ref else self.blobs.put(
                owner, memoryview(np.ascontiguousarray(array)))
            manifest[name] = {"blob": blob, "dtype": wire_dtype(array),
                              "shape": list(array.shape)}
        now = time.time()
        record = {"id": job_id, "owner": owner, "task": runner.task, "spec": spec,
                  "inputs": manifest, "state": "queued", "created": now, "finished": None,
                  "seq": max((r["seq"] for r in self.jobs.values()), default=0) + 1,
                  "attempts": 0, "progress": None, "message": "", "results": []}
        self.store.create(record)
        self.jobs[job_id] = record
        self.tombstones.pop((owner, job_id), None)
        self._enqueue(record)
        return {**self._public(record), "existing": False}

    def _op_status(self, peer, owner, message) -> dict:
        return self._public(self._job(owner, message["job"]))

    def _op_list(self, peer, owner, message) -> dict:
        records = sorted((r for r in self.jobs.values() if r["owner"] == owner),
                         key=lambda r: r["seq"])
        records = [r for r in records if r["seq"] > message.get("cursor", 0)]
        jobs, size = [], 0
        for index, record in enumerate(records):
            jobs.append(self._public(record))
            size += len(json.dumps(jobs[-1]))
            if size > LIST_REPLY_BYTES and index + 1 < len(records):
                return {"jobs": jobs, "cursor": record["seq"]}
        return {"jobs": jobs, "cursor": None}

    def _op_attach(self, peer, owner, message) -> None:
        record = self._job(owner, message["job"])
        job_id = record["id"]
        self.subscribers[job_id].add(peer)
        self._send(peer, "reply", {"re": message["id"], **self._public(record)})
        for fields in self.logs.get(job_id, ()):
            self._event(job_id, "log", fields, peers=[peer])
        if record["progress"]:
            self._event(job_id, "progress", record["progress"], peers=[peer])
        if job_id in self.previews:
            self._event(job_id, "preview", *self.previews[job_id], peers=[peer])
        if record["state"] in TERMINAL:
            fields = ({"results": record["results"]} if record["state"] == "done"
                      else {"message": record["message"]})
            self._event(job_id, record["state"], fields, peers=[peer])

    def _op_detach(self, peer, owner, message) -> dict:
        self.subscribers.get(self._job(owner, message["job"])["id"], set()).discard(peer)
        return {"job": message["job"]}

    def _op_cancel(self, peer, owner, message) -> dict:
        record = self._job(owner, message["job"])
        job_id = record["id"]
        if record["state"] == "queued" and self.worker.dequeue(job_id):
            self._finish(job_id, "cancelled", "the job was cancelled", [])
        elif record["state"] in ("queued", "running"):
            self._request_stop(record, "cancel")
            return {**self._public(record), "state": "cancelling"}
        return self._public(record)

    def _request_stop(self, record: dict, why: str) -> None:
        """Ask the running job to stop, remembering why (``cancel`` or ``delete``) in its
        state file, so that a server killed before the job stops still honours it."""
        record["stop"] = why
        self._save(record)
        self.worker.stop(record["id"])

    def _op_delete(self, peer, owner, message) -> dict:
        job_id = message["job"]
        if (owner, job_id) in self.tombstones:  # a repeated delete
            return {"job": job_id, "deleted": True}
        record = self._job(owner, job_id)
        if record["state"] in TERMINAL:
            self._remove(job_id)
        elif self.worker.dequeue(job_id):
            self._event(job_id, "cancelled", {"message": "the job was deleted"})
            self._remove(job_id)
        else:
            self._request_stop(record, "delete")  # removed when it has stopped
        return {"job": job_id, "deleted": True}

    def _op_fetch(self, peer, owner, message) -> dict:
        record = self._job(owner, message["job"])
        if record["state"] != "done":
            raise ProtocolError("not_ready", f"job {record['id']!r} is {record['state']}, not done")
        return {"job": record["id"], "files": record["results"]}

    def _op_read(self, peer, owner, message) -> None:
        record = self._job(owner, message["job"])
        entry = next((f for f in record["results"] if f["name"] == message["file"]), None)
        if record["state"] != "done" or entry is None:
            raise ProtocolError("not_found", f"no result file {message['file']!r}")
        offset = message["offset"]
        length = max(0, min(message["length"], entry["size"] - offset))
        data = np.empty(0, np.uint8)
        if length:  # zero-copy: the frame is a view of the file's pages
            with open(self.store.results_dir(record["id"]) / entry["name"], "rb") as stream:
                mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
            data = np.frombuffer(mapped, np.uint8, count=length, offset=offset)
        self._send(peer, "data", {"re": message["id"], "offset": offset}, {"data": data})
