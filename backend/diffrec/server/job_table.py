"""The job table: every job a server holds and its lifecycle, apart from the transport.

A job is ``queued`` at submit, ``running`` once the executor starts it, and ends ``done``,
``failed`` or ``cancelled``; a job that was running when the server stopped is queued again
and resumes from its checkpoint. ``JobTable`` keeps the records (``JobRecord``, one state
file each in the ``JobStore``), hands jobs to its executor (``executor``: the local
``Worker`` or a Ray cluster) with keys taking turns, each key with at most
``Quotas.running_jobs`` handed at once (so that one key's long queue never starves another
key), applies the executor's reports,
keeps what an attaching client is replayed (recent log lines, the last progress and preview),
and deletes jobs past retention. It sends events through the ``event`` function the transport
gives it (``diffrec.server.app``), and only the server's main thread calls it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import time
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.protocol import events
from diffrec.protocol.arrays import wire_dtype
from diffrec.protocol.errors import ProtocolError
from diffrec.protocol.events import FINAL_STATES, Finished, Outcome
from diffrec.protocol.limits import MAX_ARRAYS, MAX_HEADER_BYTES, MAX_MESSAGE_CHARS
from diffrec.protocol.message import Message
from diffrec.protocol.schema import INPUTS

from .blobs import BlobStore
from .executor import Executor, Report, Ticket, discard
from .job_store import JobStore
from .quotas import Quotas, exceeded, over_bound
from .result_check import ResultCheck
from .runner import JobFailed, Runner

log = logging.getLogger(__name__)
MAX_JOBS_PER_OWNER = 1000
LOG_REPLAY = 50
BLOB_GRACE_S = 3600.0
LIST_REPLY_BYTES = MAX_HEADER_BYTES // 2
"""A ``list`` reply carries statuses up to about this many bytes of JSON, then a ``cursor``."""
MAX_LABEL_CHARS = 200
"""A job's ``label`` (the spec's, for the client's listing) is at most this long."""
TOMBSTONES = 10_000
"""Deleted job ids remembered, so that a repeated ``delete`` still answers ``deleted``."""

# event(job_id, event, peers=None): send the event to the job's subscribers (or peers)
EventFn = Callable[..., None]


def fit_text(text: str) -> str:
    """``text`` cut to MAX_MESSAGE_CHARS characters, so that any event carrying it fits."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[:MAX_MESSAGE_CHARS - 1] + "…"


def resume_message(where: str | None) -> str:
    """Where a resumed job starts: ``where`` its latest checkpoint stands
    (``CheckpointStore.latest``; None: it has none, "": not known)."""
    if where is None:
        return "resuming from the start: the job kept no checkpoint"
    return "resuming from its checkpoint" + (f" at {where}" if where else "")


def _not_found(job_id: str) -> ProtocolError:
    return ProtocolError("not_found", f"no job {job_id!r} (for this client key)")


@dataclass
class JobRecord:
    """One job, as its state file holds it (``JobStore``; times are Unix seconds).

    ``inputs``: {name: {blob, dtype, shape}} in the blob store; ``results``: [{name, size,
    content_hash}] once done; ``stop``: "cancel" or "delete" once a client asked a queued or
    running job to stop (None otherwise; absent from the file); ``label``: what the client
    calls the job (the spec's ``label``, kept apart from what the runner sees).
    """

    id: str
    owner: str
    task: str
    spec: dict
    inputs: dict[str, dict]
    seq: int
    created: float
    state: str = "queued"
    updated: float | None = None
    finished: float | None = None
    attempts: int = 0
    progress: dict | None = None
    message: str = ""
    results: list[dict] = field(default_factory=list)
    stop: str | None = None
    label: str = ""

    PUBLIC = ("state", "task", "created", "updated", "finished", "attempts", "progress",
              "message", "results")
    """The fields a client sees (``status``, ``list``, ``submit`` replies), besides ``job``
    and ``label`` (when the job has one)."""

    @classmethod
    def from_dict(cls, data: Mapping) -> JobRecord:
        """A record from its state file's JSON (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})

    def to_dict(self) -> dict:
        """The state file's JSON object."""
        data = dataclasses.asdict(self)
        if data["stop"] is None:
            del data["stop"]
        return data

    def public(self) -> dict:
        return {"job": self.id, **{key: getattr(self, key) for key in self.PUBLIC},
                **({"label": self.label} if self.label else {})}

    def ending(self) -> Finished:
        """The event that announces this finished job's end."""
        return Finished(Outcome(self.state), self.message, self.results)


class JobTable:
    """The jobs of one server (see the module docstring).

    ``runners``: {task: Runner}; ``event``: the transport's event sender; ``forget(job_id)``:
    called when a job is removed (the transport drops its subscribers); ``retention_s``: how
    long finished jobs are kept; ``quotas``: what each client key may hold; ``executor``:
    ``make(report)`` for what runs the jobs (``app.executor_factory``), kept as
    ``executor``.
    """

    def __init__(self, store: JobStore, blobs: BlobStore, runners: dict[str, Runner],
                 executor: Callable[[Report], Executor], event: EventFn,
                 forget: Callable[[str], None], *, retention_s: float, quotas: Quotas):
        self.store, self.blobs, self.runners = store, blobs, runners
        self.retention_s, self.quotas = retention_s, quotas
        self._event, self._forget = event, forget
        self.records: dict[str, JobRecord] = {}
        for job_id, data in store.load_all().items():
            try:
                self.records[job_id] = JobRecord.from_dict(data)
            except TypeError as exc:  # a state file missing fields
                log.warning("skipping job %s: %s", job_id, exc)
        for record in self.records.values():
            for ref in record.inputs.values():
                self.blobs.adopt_legacy(record.owner, ref["blob"])
        self.previews: dict[str, events.Preview] = {}
        self.result_check = ResultCheck()
        self.logs: defaultdict[str, deque[events.Log]] = defaultdict(
            lambda: deque(maxlen=LOG_REPLAY))
        self.tombstones: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.unsaved: set[str] = set()
        """Jobs whose state file could not be written; tried again every heartbeat."""
        self.waiting: OrderedDict[str, deque[Ticket]] = OrderedDict()
        """Queued jobs not yet handed to the executor, per owner; owners in turn order."""
        self.handed: set[str] = set()
        """Jobs handed to the executor (running, or in its queue) that have not ended."""
        self._reports: queue.SimpleQueue = queue.SimpleQueue()
        self.executor = executor(lambda *report: self._reports.put(report))
        self.expire()
        self._recover()

    def close(self) -> None:
        """Stop the executor (a running job stays resumable)."""
        self.executor.close()

    # -- records ---------------------------------------------------------------------------

    def get(self, owner: str, job_id: str) -> JobRecord:
        """``owner``'s job ``job_id``; ProtocolError ``not_found`` for anyone else's."""
        record = self.records.get(job_id)
        if record is None or record.owner != owner:
            raise _not_found(job_id)
        return record

    def checked_results(self, owner: str, job_id: str) -> JobRecord:
        """``owner``'s done job ``job_id``, its result files checked on disk (``ResultCheck``);
        ProtocolError ``not_ready`` for a job that is not done, ``damaged`` (the job is then
        failed, ``damaged``) for one whose result files changed since it ended."""
        record = self.get(owner, job_id)
        if record.state != "done":
            raise ProtocolError("not_ready", f"job {job_id!r} is {record.state}, not done")
        problems = self.result_check.problems(job_id, self.store.results_dir(job_id),
                                              record.results)
        if problems:
            raise self.damaged(job_id, problems)
        return record

    def damaged(self, job_id: str, problems: list[str]) -> ProtocolError:
        """Mark the done job ``job_id`` failed because its result files changed on the disk
        (``problems``: one sentence per file), discarding them, so that ``resume`` runs it
        again; the ``damaged`` error that says so."""
        sentence = fit_text(f"the results of job {job_id!r} on the server's disk are damaged: "
                            f"{'; '.join(problems)}; the job is now failed: resume it to run "
                            "it again")
        log.error("%s", sentence)
        self.result_check.forget(job_id)
        discard(self.store.results_dir(job_id))
        self._finish(job_id, Finished(Outcome.FAILED, sentence))
        return ProtocolError("damaged", sentence)

    def page(self, owner: str, cursor: int = 0) -> dict:
        """The ``list`` reply: ``owner``'s jobs after ``cursor`` in submission order, up to
        about LIST_REPLY_BYTES of statuses, and the cursor of the next page (None: the end)."""
        records = sorted((r for r in self.records.values() if r.owner == owner and r.seq > cursor),
                         key=lambda r: r.seq)
        jobs, size = [], 0
        for index, record in enumerate(records):
            jobs.append(record.public())
            size += len(json.dumps(jobs[-1]))
            if size > LIST_REPLY_BYTES and index + 1 < len(records):
                return {"jobs": jobs, "cursor": record.seq}
        return {"jobs": jobs, "cursor": None}

    def replay(self, record: JobRecord) -> Iterator[events.Event]:
        """The events an attaching client gets: recent log lines, the last progress (as the
        record keeps it) and preview, and the end of a finished job."""
        yield from self.logs.get(record.id, ())
        if record.progress:
            yield events.Progress.from_fields(record.progress)
        if record.id in self.previews:
            yield self.previews[record.id]
        if record.state in FINAL_STATES:
            yield record.ending()

    def _save(self, record: JobRecord) -> None:
        """Write ``record``'s state file. A failure (a read-only disk, or a full one past the
        store's reserve) is logged and the write tried again every heartbeat, so that disk
        and memory agree as soon as the disk allows; the server goes on meanwhile."""
        data = record.to_dict()
        try:
            self.store.save(data)
            self.unsaved.discard(record.id)
        except OSError as exc:
            if record.id not in self.unsaved:
                log.error("job %s: cannot write its state, will try again: %s", record.id, exc)
            self.unsaved.add(record.id)
        record.updated = data["updated"]

    def tend_disk(self) -> None:
        """Retry the state files that could not be written; put back the store's reserve."""
        for job_id in list(self.unsaved):
            if job_id in self.records:
                self._save(self.records[job_id])
            else:
                self.unsaved.discard(job_id)
        self.store.restore_reserve()

    # -- submitting ------------------------------------------------------------------------

    def submit(self, owner: str, message: Message) -> dict:
        """Create and queue the job of a ``submit`` request; the reply's fields. A job id the
        owner already used answers its job (``existing``: true)."""
        job_id = message["job"]
        existing = self.records.get(job_id)
        if existing is not None:
            if existing.owner != owner:
                raise ProtocolError("conflict", f"job id {job_id!r} is taken; choose another")
            return {**existing.public(), "existing": True}
        if sum(r.owner == owner for r in self.records.values()) >= MAX_JOBS_PER_OWNER:
            raise ProtocolError("too_many_jobs", "delete finished jobs before submitting more")
        self._check_queue(owner)
        spec = dict(message["spec"])
        label = spec.pop("label", "")
        if not isinstance(label, str) or len(label) > MAX_LABEL_CHARS:
            raise ProtocolError("invalid_input", "spec 'label' must be text of at most "
                                                 f"{MAX_LABEL_CHARS} characters")
        task = spec.get("task")
        runner = self.runners.get(task) if isinstance(task, str) else None
        if runner is None:
            raise ProtocolError("invalid_input",
                                f"spec 'task' must be one of {sorted(self.runners)}")
        inputs = self._submitted_inputs(owner, message)
        settings = runner.parse(spec)
        self._check_job(runner, settings, {name: array for name, (_, array) in inputs.items()})
        manifest = {}
        for name, (ref, array) in inputs.items():
            blob = ref["blob"] if ref else self.blobs.put(
                owner, memoryview(np.ascontiguousarray(array)))
            manifest[name] = {"blob": blob, "dtype": wire_dtype(array),
                              "shape": list(array.shape)}
        record = JobRecord(id=job_id, owner=owner, task=runner.task, spec=spec, inputs=manifest,
                           seq=max((r.seq for r in self.records.values()), default=0) + 1,
                           created=time.time(), label=label)
        data = record.to_dict()
        self.store.create(data)
        record.updated = data["updated"]
        self.records[job_id] = record
        self.tombstones.pop((owner, job_id), None)
        self._enqueue(record, settings)
        return {**record.public(), "existing": False}

    def _check_queue(self, owner: str) -> None:
        """``quota_exceeded`` if ``owner`` cannot queue one more job (``Quotas.queued_jobs``):
        at submit and at resume alike."""
        waiting = sum(r.owner == owner and r.state not in FINAL_STATES
                      for r in self.records.values())
        if waiting >= self.quotas.queued_jobs:
            raise exceeded("queued_jobs", self.quotas.queued_jobs, waiting, 1,
                           "wait for your queued jobs to finish, or cancel some")

    def _check_job(self, runner: Runner, settings: Any,
                   inputs: Mapping[str, np.ndarray]) -> None:
        """Whether this server, as it is now, takes a job of ``settings`` on ``inputs``: the
        task's own checks (the inputs, and ranks and memory against this server's device,
        ``JobFailed``) and the bound on iterations (``invalid_input``). At submit, at resume
        and for the jobs a restarted server finds queued, so that a bound lowered since
        holds for them too."""
        runner.check_inputs(settings, inputs)
        iterations = runner.iterations(settings)
        if iterations > self.quotas.iterations:
            raise over_bound("iterations", iterations, self.quotas.iterations,
                             "lower iterations, or split the work into several jobs")

    def _stored_inputs(self, record: JobRecord) -> dict[str, np.ndarray]:
        """``record``'s inputs from the blob store."""
        return {name: self.blobs.load(record.owner, ref["blob"], ref["dtype"], ref["shape"])
                for name, ref in record.inputs.items()}

    def _submitted_inputs(self, owner: str,
                          message: Message) -> dict[str, tuple[dict | None, np.ndarray]]:
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

    def _enqueue(self, record: JobRecord, settings: Any) -> None:
        """Queue ``record`` (whose spec its runner parsed into ``settings``) behind its
        owner's waiting jobs, and hand out what may run."""
        ticket = Ticket(record.id, self.runners[record.task], settings, self._stored_inputs(record),
                        self.store.checkpoint_dir(record.id), self.store.results_dir(record.id),
                        self.quotas.wall_time_s)
        self.waiting.setdefault(record.owner, deque()).append(ticket)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand waiting jobs to the executor: owners take turns (round robin, one job each
        per turn), each with at most ``quotas.running_jobs`` (or the executor's own share)
        handed at once."""
        handed = Counter(self.records[job_id].owner for job_id in self.handed)
        limit = self.quotas.running_jobs or self.executor.running_per_key
        turns = True
        while turns:
            turns = False
            for owner in list(self.waiting):
                if handed[owner] >= limit:
                    continue
                queue_ = self.waiting.pop(owner)
                ticket = queue_.popleft()
                self.handed.add(ticket.job_id)
                handed[owner] += 1
                self.executor.enqueue(ticket)
                turns = True
                if queue_:  # the owner's turn is over: to the back of the line
                    self.waiting[owner] = queue_

    def _unqueue(self, job_id: str) -> bool:
        """Take a job that has not started out of the queues; whether it was waiting."""
        owner = self.records[job_id].owner
        for ticket in self.waiting.get(owner, ()):
            if ticket.job_id == job_id:
                self.waiting[owner].remove(ticket)
                if not self.waiting[owner]:
                    del self.waiting[owner]
                return True
        if job_id in self.handed and self.executor.dequeue(job_id):
            self.handed.discard(job_id)
            self._dispatch()
            return True
        return False

    def queued(self, owner: str) -> int:
        """How many of ``owner``'s jobs wait to start."""
        return sum(r.owner == owner and r.state == "queued" for r in self.records.values())

    def _recover(self) -> None:
        """Queued jobs stay queued; a job that was running resumes from its checkpoint, handed
        to the executor before its owner's queued jobs (a cluster re-attaches to it)."""
        for record in sorted(self.records.values(), key=lambda r: (r.state != "running", r.seq)):
            if record.state not in ("queued", "running"):
                continue
            if record.stop == "delete":  # asked for before the server stopped
                self._remove(record.id)
                continue
            if record.stop == "cancel":
                self._finish(record.id, Finished(Outcome.CANCELLED, "the job was cancelled"))
                continue
            if record.state == "running":
                log.info("job %s was running when the server stopped; resuming", record.id)
                record.state = "queued"
                self._save(record)
            try:
                if record.task not in self.runners:
                    raise ProtocolError("invalid_input", f"unknown task {record.task!r}")
                runner = self.runners[record.task]
                settings = runner.parse(record.spec)
                self._check_job(runner, settings, self._stored_inputs(record))
                self._enqueue(record, settings)
            except ProtocolError as exc:
                self._finish(record.id, Finished(Outcome.FAILED, f"cannot resume: {exc.message}"))
            except JobFailed as exc:  # a spec this server's version no longer takes
                self._finish(record.id, Finished(Outcome.FAILED, f"cannot resume: {exc}"))
        self.executor.recovered()

    # -- stopping and ending ---------------------------------------------------------------

    def cancel(self, owner: str, job_id: str) -> dict:
        """Cancel a queued job at once, or ask a running one to stop; the reply's fields."""
        record = self.get(owner, job_id)
        if record.state == "queued" and self._unqueue(job_id):
            self._finish(job_id, Finished(Outcome.CANCELLED, "the job was cancelled"))
        elif record.state in ("queued", "running"):
            self._request_stop(record, "cancel")
            return {**record.public(), "state": "cancelling"}
        return record.public()

    def resume(self, owner: str, job_id: str) -> dict:
        """Queue a cancelled or failed job again with the inputs it was submitted with; it
        starts from its checkpoints when it has some (a cancelled job keeps them, a job that
        failed while it ran had them removed, so it starts over; a done job made failed by
        damaged results keeps its last one): its message, and a ``log`` event with
        ``stage`` "resuming", say which (``resume_message``). It passes what a submit passes
        (the queue quota, ``_check_job``), or stays as it was. The reply's fields; ProtocolError
        ``not_ready`` for a job that has not ended, ``conflict`` for a done one."""
        record = self.get(owner, job_id)
        if record.state not in ("cancelled", "failed"):
            code = "conflict" if record.state == "done" else "not_ready"
            raise ProtocolError(code, f"job {job_id!r} is {record.state}: only a cancelled or "
                                      "failed job can be resumed")
        self._check_queue(owner)
        runner = self.runners.get(record.task)
        if runner is None:
            raise ProtocolError("invalid_input", f"this server has no task {record.task!r}")
        settings = runner.parse(record.spec)
        self._check_job(runner, settings, self._stored_inputs(record))
        record.state, record.message, record.results = "queued", resume_message(
            CheckpointStore(self.store.checkpoint_dir(job_id)).latest()), []
        record.finished, record.stop, record.progress = None, None, None
        self._save(record)
        self.previews.pop(job_id, None)
        self._apply_report(job_id, events.Log(record.message, stage="resuming"))
        self._enqueue(record, settings)
        return record.public()

    def delete(self, owner: str, job_id: str) -> dict:
        """Delete a job (a running one once it has stopped); repeating it is harmless."""
        if (owner, job_id) in self.tombstones:  # a repeated delete
            return {"job": job_id, "deleted": True}
        record = self.get(owner, job_id)
        if record.state in FINAL_STATES:
            self._remove(job_id)
        elif self._unqueue(job_id):
            self._event(job_id, Finished(Outcome.CANCELLED, "the job was deleted"))
            self._remove(job_id)
        else:
            self._request_stop(record, "delete")  # removed when it has stopped
        return {"job": job_id, "deleted": True}

    def _request_stop(self, record: JobRecord, why: str) -> None:
        """Ask the running job to stop, remembering why (``cancel`` or ``delete``) in its
        state file, so that a server killed before the job stops still honours it."""
        record.stop = why
        self._save(record)
        self.executor.stop(record.id)

    def _finish(self, job_id: str, finished: Finished) -> None:
        record = self.records[job_id]
        message = "the job was deleted" if record.stop == "delete" else finished.message
        record.state, record.message = finished.outcome.value, fit_text(message)
        record.results = list(finished.results)
        record.finished = time.time()
        self._save(record)
        self._event(job_id, record.ending())
        if record.stop == "delete":
            self._remove(job_id)
        if job_id in self.handed:
            self.handed.discard(job_id)
            self._dispatch()

    def _remove(self, job_id: str) -> None:
        record = self.records.pop(job_id, None)
        if record is not None:
            self.tombstones[(record.owner, job_id)] = None
            while len(self.tombstones) > TOMBSTONES:
                self.tombstones.popitem(last=False)
        self._forget(job_id)
        self.result_check.forget(job_id)
        self.unsaved.discard(job_id)
        self.previews.pop(job_id, None)
        self.logs.pop(job_id, None)
        self.store.delete(job_id)

    def expire(self) -> None:
        """Delete finished jobs past retention, then blobs no job refers to."""
        cutoff = time.time() - self.retention_s
        for job_id, record in list(self.records.items()):
            if record.state in FINAL_STATES and (record.finished or 0) < cutoff:
                log.info("job %s is past retention; deleting it", job_id)
                self._remove(job_id)
        referenced = {(r.owner, ref["blob"])
                      for r in self.records.values() for ref in r.inputs.values()}
        self.blobs.collect(referenced, BLOB_GRACE_S, self.retention_s)

    # -- the executor's reports ------------------------------------------------------------

    def drain_reports(self) -> None:
        """Apply every report the executor has queued since the last call."""
        while True:
            try:
                job_id, event = self._reports.get_nowait()
            except queue.Empty:
                return
            try:
                self._apply_report(job_id, event)
            except Exception:  # a bad event must not stop the loop that serves everyone
                log.exception("job %s: cannot handle its report %r", job_id, event)

    def _apply_report(self, job_id: str, event: events.Event) -> None:
        """Apply one report of the executor: a job ``Started`` or ``Finished``, or an event
        its subscribers get."""
        record = self.records.get(job_id)
        if record is None:
            return
        if isinstance(event, events.Started):
            record.state, record.attempts = "running", record.attempts + 1
            self._save(record)
        elif isinstance(event, Finished):
            self._finish(job_id, event)
        else:
            if isinstance(event, events.Progress):
                record.progress = event.fields()  # the record's form: its state file, status
            elif isinstance(event, events.Preview):
                self.previews[job_id] = event
            elif isinstance(event, events.Log):
                event = dataclasses.replace(event, message=fit_text(event.message))
                self.logs[job_id].append(event)
            self._event(job_id, event)
