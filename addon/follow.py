"""Jobs of this Blender session, pumped from the main thread.

A ``JobRun`` is one job: its submission built step by step (Optimize: one target render per
step), then its ``job_session.JobSession`` (network work on a worker thread) followed by
applying its updates to the scene. ``tick`` does one piece of main-thread work and says
whether the run is over: a modal operator calls it on each timer event; ``follow_blocking``
calls it in a loop where no event loop runs (``blender --background``, the bpy module).
Runs in progress are in ``running``, by job id, for the panel and the Cancel operator: the
open file's runs only.

Jobs belong to the .blend that sent them. Loading a file (another, or the same again)
first detaches every run (``detach_all``, a ``load_pre`` handler): its job goes on on the
server and nothing more of it reaches any scene. Then the loaded file's own jobs still
queued or running are followed again (``reattach``, a ``load_post`` handler): the same
``JobRun``s, ticked by a ``bpy.app.timers`` function (``tick_reattached``) instead of an
operator, their results imported into that file only.
"""

from __future__ import annotations

import queue
import sys
import time
from pathlib import Path

import bpy

from . import backend_link, import_result, preferences, scene_updates
from .core import job_session, messages
from .submission import SubmissionBuilder, training_size

running: dict[str, JobRun] = {}
_reattached: set[str] = set()
"""The jobs of ``running`` that ``tick_reattached`` ticks (no operator follows them)."""
FOLLOWABLE = ("submitted", "queued", "running", "cancelling")
"""Job states worth re-attaching to: the job has not ended on the server."""

# failures of a build step the user can act on: bad files, a failed render, a deleted camera
BUILD_ERRORS = (ValueError, OSError, RuntimeError, ReferenceError)


def results_dir(job: str) -> Path:
    """Where a job's result files are fetched to."""
    return preferences.user_directory() / "results" / job


def _drain(context, session: job_session.JobSession, report, block: bool) -> bool:
    """Apply queued updates; whether the session reached its end. ``block`` waits for it."""
    while True:
        try:
            update = session.updates.get(timeout=0.5) if block else session.updates.get_nowait()
        except queue.Empty:
            if block and session.alive:
                continue
            return not session.alive and session.updates.empty()
        scene_updates.apply_update(context, session.job, update, report)
        if job_session.ends(update):
            return True


class JobRun:
    """One job followed from the main thread (bpy only there).

    ``connect`` makes a protocol Client (``backend_link.connector``); ``report`` is an
    operator's ``report(kinds, message)``. With a ``builder`` the run first builds and then
    submits the job (added to ``scene.diffrec.jobs`` only then); with a ready ``submission`` it
    sends that (the jobs entry is the caller's); with neither it re-attaches to the job ``job``
    already submitted. ``cancel`` before the submission is complete ends the run at the next
    tick with nothing sent and the scene as it was; after, it asks the server. ``fetch_only``:
    the result files (names or manifest roles) fetched when the job is done, by default what
    the add-on imports; None fetches every file.
    """

    def __init__(
        self,
        job: str,
        connect,
        report,
        builder: SubmissionBuilder | None = None,
        submission: job_session.Submission | None = None,
        fetch_only: tuple[str, ...] | None = import_result.IMPORTED_ROLES,
    ):
        self.job = job
        self.fetch_only = fetch_only
        self.connect = connect
        self.report = report
        self.builder = builder
        self.cancelled = False
        self.detached = False
        self.session: job_session.JobSession | None = None
        if builder is None:
            self.session = job_session.JobSession(connect, job, results_dir(job), submission,
                                                  only=fetch_only)
        self._started = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.session is not None:
            self.session.cancel()

    def detach(self) -> None:
        """Stop following: the next tick ends the run with nothing applied (its file was
        closed); the job goes on on the server, a submission not yet sent is dropped."""
        self.detached = True
        if self.session is not None:
            self.session.detach()

    def tick(self, context, block: bool = False) -> bool:
        """Do the next piece of work; whether the run is over. ``block``: follow the submitted
        job to its end in this call instead of applying only the updates already queued."""
        if self.detached:
            return True
        if self.session is None:
            return self._build_step(context)
        if not self._started:
            self.session.start()
            self._started = True
        return _drain(context, self.session, self.report, block)

    def _build_step(self, context) -> bool:
        settings = context.scene.diffrec
        if self.cancelled:
            self.builder.close()
            settings.status, settings.progress = "cancelled: nothing was sent", 0.0
            self.report({"INFO"}, f"diffrec: {settings.status}")
            return True
        try:
            complete = self.builder.step(context)
        except BUILD_ERRORS as exc:
            self.builder.close()
            text = messages.sentence(exc)
            settings.status, settings.progress = f"not sent: {text}", 0.0
            self.report({"ERROR"}, text)
            return True
        if complete:
            self._submit(settings, self.builder.submission)
            return False
        settings.status = self.builder.text
        settings.progress = 100 * self.builder.done / self.builder.steps
        if bpy.app.background:
            print(f"diffrec: {settings.status}", flush=True)
        return False

    def _submit(self, settings, submission: job_session.Submission) -> None:
        choices = self.builder.choices
        entry = settings.jobs.add()
        entry.job_id, entry.state, entry.created = self.job, "submitting", time.time()
        entry.mode, entry.object_name = choices.mode, self.builder.object_name
        entry.light = submission.spec["settings"]["light"]
        width, height = training_size(self.builder.scene, choices.train_resolution)
        entry.megapixels = choices.batch * width * height / 1e6
        settings.progress, settings.status = 0.0, "submitting"
        self.session = job_session.JobSession(self.connect, self.job, results_dir(self.job),
                                              submission, only=self.fetch_only)
        self.session.start()  # now: a cancel from here on reaches the server
        self._started = True


def follow_blocking(context, run: JobRun) -> None:
    """Tick ``run`` to its end here on the main thread: the path for ``blender --background``
    and the bpy module, where modal operators never tick."""
    running[run.job] = run
    try:
        while not run.tick(context, block=True):
            pass
    finally:
        forget(run)


def forget(run: JobRun) -> None:
    """Take ``run`` out of ``running`` (not another run of its job: the one a reopened file
    re-attached)."""
    if running.get(run.job) is run:
        del running[run.job]
        _reattached.discard(run.job)


def detach_all() -> None:
    """Detach every run (``JobRun.detach``): the open file is being closed."""
    for run in running.values():
        run.detach()
    running.clear()
    _reattached.clear()


def _print_report(kinds, message: str) -> None:
    """A report where no operator runs (a re-attached job): the console; the status line and
    the job list show the rest."""
    print(message, file=sys.stderr if "ERROR" in kinds else sys.stdout, flush=True)


def reattach(context) -> list[str]:
    """Follow again this scene's own jobs that have not ended (FOLLOWABLE states; not the
    other files' jobs Refresh lists), by the same ``JobRun`` path as Attach; the jobs now
    followed. A server that does not answer is waited for (``job_session``: the status says
    it stopped); a backend address that is wrong is put in the status line, and the jobs
    stay as they are for Attach."""
    settings = context.scene.diffrec
    pending = [entry.job_id for entry in settings.jobs if entry.state in FOLLOWABLE
               and not entry.from_server and entry.job_id not in running]
    if not pending:
        return []
    try:
        connect = backend_link.connector(context)
    except Exception as exc:
        messages.log(exc)
        settings.status = f"jobs not re-attached: {messages.sentence(exc)}"
        return []
    for job in pending:
        running[job] = JobRun(job, connect, _print_report)
        _reattached.add(job)
    settings.status = f"re-attached to {len(pending)} running job(s)"
    return pending


def tick_reattached(block: bool = False) -> float | None:
    """Tick the re-attached runs once (``block``: each to its end); the ``bpy.app.timers``
    interval until the next tick, None when none is left."""
    for job in list(_reattached):
        run = running.get(job)
        if run is None or run.tick(bpy.context, block=block):
            running.pop(job, None)
            _reattached.discard(job)
    return 0.2 if _reattached else None


@bpy.app.handlers.persistent
def _on_load_pre(*_args) -> None:
    detach_all()


@bpy.app.handlers.persistent
def _on_load_post(*_args) -> None:
    if (reattach(bpy.context) and not bpy.app.background  # timers never fire in background
            and not bpy.app.timers.is_registered(tick_reattached)):
        bpy.app.timers.register(tick_reattached, first_interval=0.1)


def register() -> None:
    bpy.app.handlers.load_pre.append(_on_load_pre)
    bpy.app.handlers.load_post.append(_on_load_post)


def unregister() -> None:
    for handlers, handler in ((bpy.app.handlers.load_pre, _on_load_pre),
                              (bpy.app.handlers.load_post, _on_load_post)):
        if handler in handlers:
            handlers.remove(handler)
    if bpy.app.timers.is_registered(tick_reattached):
        bpy.app.timers.unregister(tick_reattached)
    for job in _reattached:  # no longer followed here; the jobs go on on the server
        running.pop(job, None)
    _reattached.clear()
