"""Jobs on a Ray cluster (``diffrec serve --cluster ADDRESS``): the ``RayExecutor``.

The server stays the one gateway clients talk to (protocol, keys, quotas, job records); only
the running moves. Each job runs in a detached Ray actor (``JobActor``) named ``job-<id>`` in
a namespace of the server's data directory (``namespace``), asking for one CPU and, when the
cluster has GPUs, one GPU, so Ray places it on whichever node has one free and
runs as many at once as the cluster has room for (queued jobs wait in Ray's scheduler).

**Shared filesystem.** Every node mounts the server's data directory at the same path. The
actor memory-maps the job's input blobs from it, so the inputs never pass through the
gateway's memory (nor Ray's object store: one read, by the node that needs them), and writes
its checkpoints and results into the job's directory there. That is what lets a job whose node
dies resume from its last checkpoint on any other node, and the gateway serve results exactly
as it does for local jobs. An actor on a node without the directory fails its job saying so.

**Events.** The actor keeps its runner's events in a buffer, numbered; one gateway thread
polls every actor every POLL_S (one call in flight per actor), forwards the new events and,
once a verdict is there, reports ``finished`` and kills the actor. Cancel sets the runner's
stop flag through ``JobActor.stop``; an actor still running STOP_GRACE_S, plus the time the
job measured a stop takes (``executor.StopGrace``), later is killed.

**Failures.** An actor that dies (its process killed, its node lost) is created again, up to
MAX_STARTS starts, and its runner resumes from the job's last checkpoint wherever Ray places
it. ``close`` lets go of the actors without stopping them: a gateway that starts again finds
each job still "running" in its records by its actor's name and re-attaches (the events
buffered meanwhile arrive then); a job that ended meanwhile reports its verdict at once, and
the actor of a job cancelled or deleted meanwhile is killed.

**Exposure.** With ``--cluster local`` the gateway starts a Ray of its own on loopback, its
token in no file and its session folders in a private folder removed when it stops
(``private_ray``). On a cluster the operator started, Ray's processes listen on every
interface (its gRPC servers bind 127.0.0.1 or all of them, nothing between); the gateway
makes Ray's token file readable by its owner only (``private_ray.tighten_token_file``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray.exceptions import RayActorError

from diffrec.errors import UserError, one_line
from diffrec.protocol.events import Finished, Log, Outcome, Started

from . import job_process
from .disk import PRIVATE_UMASK
from .executor import Executor, Report, StopGrace, Ticket, conclude, no_room
from .private_ray import PrivateRay, tighten_token_file
from .runner import Emitted

log = logging.getLogger(__name__)
POLL_S = 0.1
STOP_GRACE_S = 2.0
"""How long a job asked to stop may take to return by itself before its actor is killed."""
MAX_STARTS = 3
"""Actors created for one job on one gateway before a job whose worker keeps dying fails."""
EVENT_BUFFER = 1000
"""Events an actor keeps for a gateway that is away (the oldest are dropped first)."""
CONNECT_TIMEOUT_S = 5.0
"""How long the gateway waits for a Ray head's port to answer before it gives up."""


def namespace(data_dir: Path) -> str:
    """The Ray namespace of the jobs of the server whose data directory is ``data_dir``."""
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()
    return f"diffrec-{digest[:16]}"


HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""An HTTP/2 client's first bytes: the connection preface, then an empty SETTINGS frame."""


def connect(address: str, namespace: str) -> None:
    """Join the Ray cluster at ``address`` (``auto``, ``HEAD:PORT`` or ``ray://HEAD:PORT``);
    UserError, at once, when nothing answers at ``HEAD:PORT`` or what answers is no gRPC
    server (Ray would retry for minutes), or Ray finds no cluster."""
    host, _, port = address.rpartition(":")
    if host and "://" not in address and port.isdigit():
        why = _not_a_ray_head(host.strip("[]"), int(port))
        if why:
            raise UserError(no_cluster(address, why))
    try:
        ray.init(address=address, namespace=namespace)
    except ConnectionError as exc:
        raise UserError(no_cluster(address, one_line(exc))) from None
    except ValueError as exc:  # an address Ray cannot read, or ray:// without ray[client]
        raise UserError(f"--cluster {address}: {one_line(exc)}; give auto, local, HEAD:PORT "
                        "or ray://HEAD:PORT (with pip install 'ray[client]')") from None


def _not_a_ray_head(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be a Ray head's GCS, a gRPC server (its first frame answering
    HTTP/2's preface is SETTINGS), or None where it may be one. Not asked with TLS on
    (``RAY_USE_TLS``): the preface would have to go through a TLS handshake first."""
    try:
        with socket.create_connection((host, port), CONNECT_TIMEOUT_S) as probe:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return None
            probe.sendall(HTTP2_HELLO)
            answer = b""
            while len(answer) < 9:
                chunk = probe.recv(9 - len(answer))
                if not chunk:
                    break
                answer += chunk
    except TimeoutError:
        return f"no answer within {CONNECT_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return exc.strerror or "no answer"
    if len(answer) < 9 or answer[3] != 4:
        return "something answers there, but it is no Ray head: Ray's GCS speaks gRPC"
    return None


def no_cluster(address: str, why: str) -> str:
    return (f"cannot reach a Ray cluster at --cluster {address} ({why}): start Ray first "
            "(`ray start --head` on the head node), or give the address of its head "
            "(HEAD:6379), or use --cluster local")


def actor_name(job_id: str) -> str:
    return f"job-{job_id}"


class JobActor:
    """One job in a Ray worker process (a threaded actor: ``poll`` and ``stop`` answer while
    ``run`` works)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._events: deque[tuple[int, Emitted]] = deque(maxlen=EVENT_BUFFER)
        self._next = 0
        self._started = False
        self._verdict: Finished | None = None
        self._stop = threading.Event()

    def run(self, order: job_process.JobOrder) -> None:
        """Run the job, its files private to their user as the gateway's (the actor's process
        has Ray's umask); its verdict waits for ``poll``."""
        os.umask(PRIVATE_UMASK)
        with self._lock:
            self._started = True
        if order.state_dir.is_dir():
            verdict = job_process.execute(order, self._emit, self._stop)
        else:
            verdict = Finished(Outcome.FAILED, f"cluster node {socket.gethostname()} does not "
                               f"see the server's data directory {order.state_dir.parents[2]}: "
                               "mount it at the same path on every node (docs/guide.md, "
                               "'Running a cluster')")
        with self._lock:
            self._verdict = verdict

    def _emit(self, emitted: Emitted) -> None:
        with self._lock:
            self._events.append((self._next, emitted))
            self._next += 1

    def poll(self, after: int) -> tuple[list[tuple[int, Emitted]], bool, Finished | None]:
        """(the buffered events numbered ``after`` or later as (number, event), whether the
        job started, its verdict or None); older events are dropped."""
        with self._lock:
            while self._events and self._events[0][0] < after:
                self._events.popleft()
            return list(self._events), self._started, self._verdict

    def stop(self) -> None:
        self._stop.set()

    def where(self) -> tuple[int, str]:
        """(the actor's process id, its Ray node id)."""
        return os.getpid(), ray.get_runtime_context().get_node_id()


RemoteJobActor = ray.remote(JobActor)


@dataclass
class _Job:
    """A job this gateway follows."""

    ticket: Ticket
    actor: ray.actor.ActorHandle
    starts: int = 1
    seen: int = 0
    started: bool = False
    polling: ray.ObjectRef | None = None
    stop_asked: float | None = None
    grace: StopGrace = field(default_factory=lambda: StopGrace(STOP_GRACE_S))


class RayExecutor(Executor):
    """Runs tickets as Ray actors on the cluster at ``address`` (see the module docstring);
    connects unless this process already is connected to Ray."""

    running_per_key = sys.maxsize
    """As many as the cluster has room for: keys still take turns as jobs are handed out."""

    def __init__(self, address: str, data_dir: Path, report: Report):
        self.namespace = namespace(data_dir)
        self._connected = not ray.is_initialized()
        self._private: PrivateRay | None = None
        if self._connected and address == "local":
            self._private = PrivateRay(self.namespace)
        elif self._connected:
            tighten_token_file()
            connect(address, self.namespace)
        self._report = report
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.RLock()
        """Held while a job's answer is applied, so that ``dequeue`` sees it started or not."""
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="diffrec-ray", daemon=True)
        self._thread.start()

    # -- the Executor contract -------------------------------------------------------------

    def enqueue(self, ticket: Ticket) -> None:
        """Re-attach to the job's actor if it still runs, else start one (the job fails at
        once if its output cannot fit on the shared disk)."""
        try:
            actor = ray.get_actor(actor_name(ticket.job_id), namespace=self.namespace)
            log.info("job %s: re-attached to its running actor", ticket.job_id)
        except ValueError:
            verdict = no_room(ticket)
            if verdict is not None:
                self._report(ticket.job_id, conclude(ticket, verdict, False))
                return
            actor = self._start(ticket)
        with self._lock:
            self._jobs[ticket.job_id] = _Job(ticket, actor)

    def dequeue(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.started:
                return False
            del self._jobs[job_id]
        ray.kill(job.actor)
        return True

    def stop(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return False
            if job.stop_asked is None:
                job.stop_asked = time.monotonic()
        job.actor.stop.remote()
        return True

    def recovered(self) -> None:
        """Kill the actors of this namespace that no job is followed by (a job cancelled or
        deleted while no gateway was there): they would hold their GPU for ever."""
        with self._lock:
            followed = {actor_name(job_id) for job_id in self._jobs}
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["namespace"] == self.namespace and entry["name"] not in followed:
                log.info("killing the actor %s: its job is no longer to run", entry["name"])
                try:
                    ray.kill(ray.get_actor(entry["name"], namespace=self.namespace))
                except ValueError:  # it ended meanwhile
                    pass

    def engine(self) -> dict:
        """The cluster's live nodes, GPUs and CPUs; the device its jobs get."""
        resources = ray.cluster_resources()
        nodes = sum(node["Alive"] for node in ray.nodes())
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        return {"engine": f"Ray cluster: {nodes} nodes, {gpus} GPUs, {cpus} CPUs",
                "device": "cuda:0" if gpus else "cpu", "gpu_free_bytes": None}

    def close(self) -> None:
        """Stop following the jobs, leaving their actors running (see the module docstring);
        disconnect from Ray if this executor connected (a Ray it started ends with it)."""
        self._closing.set()
        self._thread.join(10)
        if self._private is not None:
            self._private.stop()
        elif self._connected:
            ray.shutdown()

    # -- following the actors --------------------------------------------------------------

    def _start(self, ticket: Ticket) -> ray.actor.ActorHandle:
        """A new actor running ``ticket``: it asks for one CPU per process of the job
        (``Runner.processes``: an optimize job's ``ranks``), and as many GPUs as well when the
        cluster has GPUs (then CPU-only nodes take no jobs); the ranks share the actor's
        node."""
        gpu = ray.cluster_resources().get("GPU", 0) >= 1
        ranks = ticket.runner.processes(ticket.settings)
        order = job_process.JobOrder(
            ticket.job_id, ticket.runner, ticket.settings, _absolute(ticket.inputs),
            ticket.state_dir.resolve(), ticket.results_dir.resolve(), "cuda:0" if gpu else "cpu")
        actor = RemoteJobActor.options(
            name=actor_name(ticket.job_id), namespace=self.namespace, lifetime="detached",
            max_concurrency=3, max_restarts=0, num_cpus=ranks,
            num_gpus=ranks if gpu else 0).remote()
        actor.run.remote(order)
        return actor

    def _loop(self) -> None:
        while not self._closing.wait(POLL_S):
            try:
                self._poll()
            except Exception:  # the cluster unreachable for a moment: try again next round
                log.exception("cannot poll the cluster's jobs")

    def _poll(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            if job.polling is None:
                job.polling = job.actor.poll.remote(job.seen)
        ready, _ = ray.wait([job.polling for job in jobs], num_returns=len(jobs), timeout=POLL_S)
        answered = set(ready)
        for job in jobs:
            with self._lock:
                if self._jobs.get(job.ticket.job_id) is not job:
                    continue  # dequeued meanwhile: it reports nothing more
                if job.polling in answered:
                    self._answer(job)
                elif (job.stop_asked is not None
                      and time.monotonic() - job.stop_asked > job.grace.seconds):
                    log.info("job %s did not stop within %.1f s; killing its actor",
                             job.ticket.job_id, job.grace.seconds)
                    self._end(job, None)

    def _answer(self, job: _Job) -> None:
        """Apply the answer of ``job``'s poll, which has arrived."""
        job_id = job.ticket.job_id
        try:
            events, started, verdict = ray.get(job.polling)
        except RayActorError as exc:
            self._died(job, exc)
            return
        finally:
            job.polling = None
        if started and not job.started:
            job.started = True
            self._report(job_id, Started())
        for number, emitted in events:
            if number >= job.seen:
                if not job.grace.heard(emitted):
                    self._report(job_id, emitted)
                job.seen = number + 1
        if verdict is not None:
            self._end(job, verdict)

    def _end(self, job: _Job, verdict: Finished | None) -> None:
        """Report the job finished (cancelled if it was asked to stop) and kill its actor."""
        with self._lock:
            del self._jobs[job.ticket.job_id]
        ray.kill(job.actor)
        self._report(job.ticket.job_id,
                     conclude(job.ticket, verdict, job.stop_asked is not None))

    def _died(self, job: _Job, exc: RayActorError) -> None:
        """The job's actor is gone: start it again from the checkpoint, or give up."""
        job_id = job.ticket.job_id
        if job.stop_asked is not None:
            self._end(job, None)
            return
        if job.starts >= MAX_STARTS:
            cause = f"its worker died {job.starts} times (last: {type(exc).__name__})"
            self._end(job, Finished(Outcome.FAILED, f"the job cannot run on this cluster: "
                                                    f"{cause}; the server log has the details"))
            return
        log.warning("job %s: its actor died (%s); starting it again", job_id, exc)
        self._report(job_id, Log("the cluster worker running this job stopped; starting it "
                                 "again from its last checkpoint", "warning"))
        job.actor = self._start(job.ticket)
        job.starts, job.seen, job.started = job.starts + 1, 0, False


def _absolute(inputs) -> dict[str, tuple]:
    """``JobOrder.portable(inputs)`` with absolute file paths (nodes have other working
    directories)."""
    return {name: (item[0], os.path.abspath(item[1]), *item[2:]) if item[0] == "file" else item
            for name, item in job_process.JobOrder.portable(inputs).items()}
