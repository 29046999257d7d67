"""Jobs of this Blender session, pumped from the main thread.

A ``JobRun`` is one job: its submission built step by step (Optimize: one target render per
step), then its ``job_session.JobSession`` (network work on a worker thread) followed by
applying its updates to the scene. ``jobs``, the one ``core.job_controller.JobController``,
owns every run followed now (the panel and Cancel ask it), and one ``bpy.app.timers``
function, ``pump_jobs``, ticks them all: registered by ``start`` when a run is handed over,
unregistered once none is left. Where no timer fires (``blender --background``, the bpy
module) ``start`` ticks the run to its end at once instead.

Jobs belong to the .blend that sent them. Loading a file (another, or the same again)
first detaches every run (``jobs.detach_all``, a ``load_pre`` handler): its job goes on on the
server and nothing more of it reaches any scene. Then the loaded file's own jobs still
queued or running are followed again (``reattach``, a ``load_post`` handler): the same
``JobRun``s, handed to the same controller and pumped by the same timer, their results
imported into that file only.

An undo or a redo swaps the file's data under a submission being built (its renders may no
longer show the scene, its objects are gone or others): every such run is dropped first, with
a sentence (``abandon_build``, an ``undo_pre`` handler), and after the undo, the redo or a file
load whatever a build had changed that the file or an undo step caught is put back
(``temporaries.sweep``, ``KeptRenderData.put_back``).
"""

from __future__ import annotations

import queue
import sys
import time
from pathlib import Path

import bpy

from . import (
    backend_link,
    export_scene,
    import_result,
    object_links,
    preferences,
    pump,
    scene_updates,
    temporaries,
)
from .core import job_controller, job_session, messages
from .submission import SubmissionBuilder

FOLLOWABLE = ("submitted", "queued", "running", "cancelling")
"""Job states worth re-attaching to: the job has not ended on the server."""

# failures of a build step the user can act on: bad files, a failed render, a deleted camera
BUILD_ERRORS = (ValueError, OSError, RuntimeError, ReferenceError)

UNDONE = ("Undo or Redo while the job was being prepared: what it had rendered or baked may "
          "no longer be the scene, so nothing was sent; press Optimize again.")
LISTED = ("job_id", "created", "mode", "object_name", "light", "megapixels")
"""A job entry's fields set when it is sent and never after."""
KEPT = ("state", "on_server", "progress", "message", "imported")
"""A job entry's fields its updates change."""


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

    ``connect`` makes a protocol Client (``backend_link.connector``); ``report(kinds,
    message)`` is the operator's while its ``execute`` ticks the run to its end, else
    ``console_report`` (an operator is gone once the timer ticks its run). With a ``builder``
    the run first builds and then submits the job (added to ``scene.diffrec.jobs`` only then);
    with a ready ``submission`` it sends that (the jobs entry is the caller's); with neither it
    re-attaches to the job ``job`` already submitted. ``cancel`` before the submission is
    complete ends the run at the next tick with nothing sent and the scene as it was; after, it
    asks the server. ``fetch_only``: the result files (names or manifest roles) fetched when
    the job is done, by default what the add-on imports; None fetches every file.
    ``replaces``: the job id of a Jobs list entry this run's job takes the place of (Resume on
    a job the server lost), removed when this one's built submission is handed to its session,
    not before: a refusal or a cancel while it is built leaves that entry as it was.
    """

    def __init__(
        self,
        job: str,
        connect,
        report,
        builder: SubmissionBuilder | None = None,
        submission: job_session.Submission | None = None,
        fetch_only: tuple[str, ...] | None = import_result.IMPORTED_ROLES,
        replaces: str = "",
    ):
        self.job = job
        self.replaces = replaces
        self.fetch_only = fetch_only
        self.connect = connect
        self.report = report
        self.builder = builder
        self.cancelled = False
        self.detached = False
        self.abandoned = ""  # why the build was dropped before it was sent (``abandon_build``)
        self._entry: dict | None = None  # its Jobs list entry's fields as last seen
        self._undone = False  # an undo or a redo came since the last tick
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
        closed); the job goes on on the server, a submission not yet sent is dropped (what
        its builder added to the scene removed now: no tick may come)."""
        self.detached = True
        if self.session is not None:
            self.session.detach()
        elif self.builder is not None:
            self.builder.close()

    def abandon_build(self, reason: str) -> None:
        """Drop a submission not yet sent (before an undo or a redo swaps the data its builder
        holds): the next tick ends the run with ``reason``, nothing sent, and what the builder
        added to the scene is removed now. Nothing for a run already sent or detached."""
        if self.session is None and self.builder is not None and not self.detached:
            self.abandoned = reason
            self.builder.close()

    @property
    def followed(self) -> bool:
        """Whether the run reached its job's session (submitted or attached) and was not
        detached: False for a submission dropped or failed while it was built."""
        return self.session is not None and not self.detached

    def tick(self, context, block: bool = False) -> bool:
        """Do the next piece of work; whether the run is over. ``block``: follow the submitted
        job to its end in this call instead of applying only the updates already queued.
        Pumped, a run works in its own scene (``own_scene``): in a window that shows it, and
        waits, nothing lost, while none does."""
        if self.detached:
            return True
        own = None if block else self.own_scene()
        if own is None or own == context.scene:
            return self._tick(context, block)
        window = next((window for window in context.window_manager.windows
                       if window.scene == own), None)
        if window is None:
            return False
        with context.temp_override(window=window):
            return self._tick(bpy.context, block)

    def own_scene(self):
        """The scene the job belongs to: the one its submission is built in, or the one whose
        Jobs list holds it as its own (not as another file's, listed by Refresh); None where
        none is known (a build ending anyway, its scene deleted, its entry undone)."""
        if self.session is None:
            if self.builder is None or self.cancelled or self.abandoned:
                return None
            return object_links.alive(self.builder.scene)
        return next((scene for scene in bpy.data.scenes
                     if _own_entry(scene, self.job) is not None), None)

    def _tick(self, context, block: bool) -> bool:
        if self.session is None:
            return self._build_step(context)
        if not self._started:
            self.session.start()
            self._started = True
        self._listed(context.scene.diffrec)
        return _drain(context, self.session, self.report, block)

    def _build_step(self, context) -> bool:
        settings = context.scene.diffrec
        if self.cancelled:
            self.builder.close()
            settings.status, settings.progress = "cancelled: nothing was sent", 0.0
            self.report({"INFO"}, f"diffrec: {settings.status}")
            return True
        if self.abandoned:
            settings.status, settings.progress = f"not sent: {self.abandoned}", 0.0
            self.report({"ERROR"}, self.abandoned)
            return True
        try:
            complete = self.builder.step(context)
        except BUILD_ERRORS as exc:
            self.builder.close()
            text = messages.sentence(exc)
            settings.status, settings.progress = f"not sent: {text}", 0.0
            self.report({"ERROR"}, text)
            return True
        except Exception:  # what no step means to raise: the caller reports it
            self.builder.close()
            raise
        for note in self.builder.take_notes():
            self.report({"WARNING"}, note)
        if complete:
            self._submit(settings, self.builder.submission)
            return False
        if self.cancelled:  # meanwhile (a render's handler): the next tick says so, not this
            return False
        settings.status = self.builder.text
        settings.progress = 100 * self.builder.done / self.builder.steps
        if bpy.app.background:
            print(f"diffrec: {settings.status}", flush=True)
        return False

    def _submit(self, settings, submission: job_session.Submission) -> None:
        choices = self.builder.choices
        width, height = self.builder.size
        if self.replaces:
            scene_updates.remove_job_entries(settings, {self.replaces})
        entry = settings.jobs.add()
        entry.job_id, entry.state, entry.created = self.job, "submitting", time.time()
        entry.mode, entry.object_name = choices.mode, self.builder.object_name
        entry.original = object_links.placed(self.builder.original)  # the artist may delete it
        entry.light = submission.spec["settings"]["light"]
        entry.megapixels = choices.batch * width * height / 1e6
        self._seen(entry)
        settings.progress, settings.status = 0.0, "submitting"
        self.session = job_session.JobSession(self.connect, self.job, results_dir(self.job),
                                              submission, only=self.fetch_only)
        self.session.start()  # now: a cancel from here on reaches the server
        self._started = True

    def undone(self) -> None:
        """An undo or a redo happened: where it took this run's entry out of the Jobs list, the
        next tick lists it again as last seen (``_listed``)."""
        self._undone = True

    def _listed(self, settings) -> None:
        """Keep what this run's entry in the Jobs list holds (``_seen``), and list it again
        where an undo or a redo took it out (so that its result is still imported; the object
        it stands beside found again by name, a reference from before the undo being void)."""
        entry = _own_entry(settings.id_data, self.job)
        if entry is not None:
            self._seen(entry)
        elif self._undone and self._entry is not None:
            entry = settings.jobs.add()
            for name, value in self._entry.items():
                setattr(entry, name, value)
        self._undone = False

    def _seen(self, entry) -> None:
        self._entry = {name: getattr(entry, name) for name in (*LISTED, *KEPT)}


def _own_entry(scene, job: str):
    """``scene``'s Jobs list entry of ``job`` as its own job (not one Refresh listed as another
    file's), or None."""
    entry = scene_updates.job_entry(scene, job)
    return entry if entry is not None and not entry.from_server else None


def _pushed_as_undo_step(run: JobRun) -> None:
    """Make what a pumped run applied, its imported result above all, one undo step (the
    step of the operator that started it ended when it was handed over); in the interface only
    (the background's operators tick their runs to the end inside their own step)."""
    if not bpy.app.background:
        bpy.ops.ed.undo_push(message=f"diffrec: job {run.job[:8]}")


jobs = job_controller.JobController(pump.TICK_S, on_end=_pushed_as_undo_step)
"""Every run this Blender session follows (the open file's only)."""


def pump_jobs(block: bool = False) -> float | None:
    """The ``bpy.app.timers`` function: tick every followed run once (``block``: each to its
    end); the interval until the next tick, None once none is left (Blender unregisters it)."""
    return jobs.tick(bpy.context, block=block)


def start(context, run: JobRun) -> JobRun | None:
    """Follow ``run``: pumped by ``pump_jobs`` from now on, or, where no timer fires
    (``pump.blocking``), ticked to its end before this returns; the run that follows the job
    (``run``), or None, and nothing done, when its job is already followed. Where no timer
    fires, a job already followed (one a file opened in the background followed again, which
    no tick reaches) is ticked to its end by the run that follows it, reporting as ``run``
    would, and that run is returned."""
    if not jobs.follow(run):
        if not pump.blocking(context):
            return None
        following = jobs.run(run.job)
        following.report = run.report
        run = following
    if pump.blocking(context):
        jobs.run_to_end(context, run.job)
    else:
        _pumped()
    return run


def _pumped() -> None:
    """Register ``pump_jobs`` unless it is: the one timer of every followed run."""
    if not bpy.app.timers.is_registered(pump_jobs):
        bpy.app.timers.register(pump_jobs, first_interval=pump.TICK_S, persistent=True)


def console_report(kinds, message: str) -> None:
    """A report where no operator runs (a pumped job): the console; the status line and the
    job list show the rest."""
    print(message, file=sys.stderr if "ERROR" in kinds else sys.stdout, flush=True)


def reattach(context) -> list[str]:
    """Follow again this scene's own jobs that have not ended (FOLLOWABLE states; not the
    other files' jobs Refresh lists), by the same ``JobRun`` path as Attach; the jobs now
    followed by ``jobs`` (the caller starts their timer). A server that does not answer is
    waited for (``job_session``: the status says it stopped); a backend address that is wrong
    is put in the status line, and the jobs stay as they are for Attach."""
    settings = context.scene.diffrec
    pending = [entry.job_id for entry in settings.jobs if entry.state in FOLLOWABLE
               and not entry.from_server and entry.job_id not in jobs]
    if not pending:
        return []
    try:
        connect = backend_link.connector(context)
    except Exception as exc:
        messages.log(exc)
        settings.status = f"jobs not re-attached: {messages.sentence(exc)}"
        return []
    for job in pending:
        jobs.follow(JobRun(job, connect, console_report))
    settings.status = (f"re-attached to {len(pending)} running jobs" if len(pending) > 1 else
                       "re-attached to the running job")
    return pending


@bpy.app.handlers.persistent
def _on_load_pre(*_args) -> None:
    jobs.detach_all()


@bpy.app.handlers.persistent
def _on_load_post(*_args) -> None:
    _put_back()
    if reattach(bpy.context) and not bpy.app.background:  # timers never fire in background
        _pumped()


@bpy.app.handlers.persistent
def _on_undo_pre(*_args) -> None:
    for run in jobs.runs():
        try:
            run.undone()
            run.abandon_build(UNDONE)
        except Exception as exc:  # the other runs are dropped all the same
            messages.log(exc)


@bpy.app.handlers.persistent
def _put_back(*_args) -> None:
    """After an undo, a redo or a file load (none of this file's submissions is being built
    then): what a build had changed and the file or an undo step caught is put back."""
    try:
        temporaries.sweep()
        export_scene.KeptRenderData.put_back()
    except Exception as exc:  # a linked scene, say: the load's other handlers go on
        messages.log(exc)


HANDLERS = (("load_pre", _on_load_pre), ("load_post", _on_load_post),
            ("undo_pre", _on_undo_pre), ("redo_pre", _on_undo_pre),
            ("undo_post", _put_back), ("redo_post", _put_back))
"""``bpy.app.handlers`` lists and the function each gets."""


def register() -> None:
    for kind, handler in HANDLERS:
        getattr(bpy.app.handlers, kind).append(handler)


def unregister() -> None:
    for kind, handler in HANDLERS:
        handlers = getattr(bpy.app.handlers, kind)
        if handler in handlers:
            handlers.remove(handler)
    if bpy.app.timers.is_registered(pump_jobs):
        bpy.app.timers.unregister(pump_jobs)
    jobs.detach_all()  # no longer followed here; the jobs go on on the server
