"""The Jobs list's operators: Refresh (the server's jobs too), Remove, Clear Finished, Resume /
Retry, Open Folder. Import is ``diffrec.attach`` (job_operators).

The list holds this file's own jobs and, apart and read-only, the jobs of the same key that
Refresh found on the server (``from_server``: sent from other .blend files). Remove, Clear
Finished, Resume and Import act on this file's jobs only, so one file never deletes, resumes
or imports another's.

Each asks the server once, on the main thread, within ``backend_link.ASK_BUDGET_S`` (a
server that is down or silent is said at once or after that, never after the preferences'
longer timeout); Resume then starts following the job as Attach does (``job_operators``).
"""

from __future__ import annotations

import time

import bpy
from bpy.props import StringProperty

from . import backend_link, follow, scene_updates, selection
from .core import messages
from .core.wire import protocol
from .job_operators import BUSY, _StartsJob, busy, checked_connector


def _ask(context, report, request):
    """``request(client)`` on a new client of the preferences' backend, each request within
    ASK_BUDGET_S; its answer, or None once a failure is reported in one sentence
    (``messages.sentence``)."""
    budget = backend_link.ASK_BUDGET_S
    try:
        with backend_link.connector(context, budget)() as client:
            return request(client)
    except protocol().ServerUnavailable:
        report({"ERROR"}, f"diffrec: The backend did not answer within {budget:.0f} s: check "
                          "that it still runs, then try again.")
        return None
    except Exception as exc:
        messages.log(exc)
        report({"ERROR"}, f"diffrec: {messages.sentence(exc)}")
        return None


class _OnListedJob:
    """An operator on this file's job ``job_id``: ``execute`` finds its entry (a job not in
    this file's list, or another file's listed by Refresh, is reported, and cancels) and
    hands it to ``on_entry``."""

    job_id: StringProperty(name="Job")

    @messages.reported
    def execute(self, context):
        entry = scene_updates.job_entry(context.scene, self.job_id)
        if entry is None:
            self.report({"ERROR"}, f"job {self.job_id[:8]} is not in this file's list")
            return {"CANCELLED"}
        if entry.from_server:
            self.report({"ERROR"}, scene_updates.another_files(entry))
            return {"CANCELLED"}
        return self.on_entry(context, entry)


def _delete_on_server(client, job: str) -> None:
    """Delete ``job`` on the server; one the server does not know is already gone."""
    try:
        client.delete(job)
    except protocol().ServerError as exc:
        if exc.code != "not_found":
            raise


GONE = "the server no longer has this job: Resume optimizes its object again"
"""A job of this file that the server's listing lacks (deleted there, or another server's)."""


def apply_listing(settings, listed: list[dict]) -> None:
    """Bring the Jobs list up to date with the server's listing of this key's jobs: states,
    progress and messages of the file's jobs, and the server's other jobs (other files')
    listed apart as they are now (marked ``from_server``, named by their label). A job of
    this file the server no longer has is no longer ``on_server``; unless its result is
    imported it is failed, with GONE for a message."""
    events = protocol().events
    known = {job["job"] for job in listed}
    for index in reversed(range(len(settings.jobs))):
        entry = settings.jobs[index]
        if entry.job_id in known or not entry.on_server:
            continue
        if entry.from_server:
            settings.jobs.remove(index)
            continue
        entry.on_server = False
        if not (entry.state == "done" and entry.imported):
            entry.state, entry.message = "failed", GONE
    for job in listed:
        entry = next((e for e in settings.jobs if e.job_id == job["job"]), None)
        if entry is None:
            entry = settings.jobs.add()
            entry.job_id, entry.from_server = job["job"], True
            entry.object_name, entry.mode = job.get("label", ""), job.get("task", "")
        entry.state, entry.message, entry.on_server = job["state"], job.get("message", ""), True
        entry.created = job.get("created") or entry.created
        if job.get("progress"):
            entry.progress = 100 * events.Progress.from_fields(job["progress"]).fraction
        if job["state"] == "done":
            entry.progress = 100.0


class DIFFREC_OT_refresh_jobs(bpy.types.Operator):
    """Ask the server for your jobs: their states, and the jobs not submitted from this file"""

    bl_idname = "diffrec.refresh_jobs"
    bl_label = "Refresh"

    @messages.reported
    def execute(self, context):
        listed = _ask(context, self.report, lambda client: client.list_jobs())
        if listed is None:
            return {"CANCELLED"}
        apply_listing(context.scene.diffrec, listed)
        return {"FINISHED"}


class DIFFREC_OT_remove_job(_OnListedJob, bpy.types.Operator):
    """Remove the job from the list and from the server (its result files there too)"""

    bl_idname = "diffrec.remove_job"
    bl_label = "Remove Job"
    bl_options = {"UNDO"}  # noqa: RUF012  (Blender reads a set)

    def on_entry(self, context, entry):
        if self.job_id in follow.jobs:
            self.report({"ERROR"}, "diffrec: cancel the job before removing it")
            return {"CANCELLED"}
        if entry.on_server and _ask(context, self.report, lambda client: _delete_on_server(
                client, self.job_id) or True) is None:
            return {"CANCELLED"}
        scene_updates.remove_job_entries(context.scene.diffrec, {self.job_id})
        return {"FINISHED"}


class DIFFREC_OT_clear_finished(bpy.types.Operator):
    """Remove this file's finished jobs (done, failed or cancelled) from the list and the
    server; other files' jobs are left to them"""

    bl_idname = "diffrec.clear_finished"
    bl_label = "Clear Finished"
    bl_options = {"UNDO"}  # noqa: RUF012  (Blender reads a set)

    @messages.reported
    def execute(self, context):
        settings = context.scene.diffrec
        finished = {entry.job_id for entry in settings.jobs
                    if entry.state in protocol().events.FINAL_STATES
                    and not entry.from_server}
        if not finished:
            self.report({"INFO"}, "diffrec: no finished jobs")
            return {"CANCELLED"}
        on_server = [e.job_id for e in settings.jobs if e.job_id in finished and e.on_server]

        def delete_all(client):
            for job in on_server:
                _delete_on_server(client, job)
            return True

        if on_server and _ask(context, self.report, delete_all) is None:
            return {"CANCELLED"}
        scene_updates.remove_job_entries(settings, finished)
        return {"FINISHED"}


class DIFFREC_OT_resume_job(_OnListedJob, _StartsJob, bpy.types.Operator):
    """Run a cancelled or failed job again on the server, from its checkpoint when it kept one
    (a cancelled job does), and follow it; a job that never reached the server is optimized
    again from its object"""

    bl_idname = "diffrec.resume_job"
    bl_label = "Resume"

    def on_entry(self, context, entry):
        if entry.state not in ("failed", "cancelled"):
            self.report({"ERROR"}, f"diffrec: the job is {entry.state}; only a cancelled or "
                                   "failed job can be resumed")
            return {"CANCELLED"}
        if not entry.on_server:
            return self._optimize_again(context, entry)
        connect = checked_connector(context, self.report)
        reply = _ask(context, self.report, lambda client: client.resume(self.job_id))
        if reply is None:
            return {"CANCELLED"}
        entry.state, entry.message = "queued", ""
        # where it starts, as the server found it: from a checkpoint's iteration, or over
        context.scene.diffrec.status = reply.get("message") or "resumed"
        return self.start(context, self.job_id, connect)

    def _optimize_again(self, context, entry):
        """Select the job's object again and press Optimize for it, with the panel's settings
        as they are now: the entry is replaced once the new job is submitted (kept where
        Optimize refuses or is cancelled first)."""
        if busy(context):  # Optimize's own poll would refuse it, as an exception
            self.report({"ERROR"}, BUSY)
            return {"CANCELLED"}
        subject = scene_updates.job_original(entry)
        if subject is None or context.scene not in subject.users_scene:
            self.report({"ERROR"}, f"diffrec: the object {entry.object_name!r} is gone; "
                                   "select a mesh and press Optimize")
            return {"CANCELLED"}
        selection.only(context.view_layer, [subject], subject)
        return bpy.ops.diffrec.optimize("INVOKE_DEFAULT", replaces=entry.job_id)


class DIFFREC_OT_open_folder(bpy.types.Operator):
    """Open the folder the job's result files were fetched to"""

    bl_idname = "diffrec.open_folder"
    bl_label = "Open Folder"

    job_id: StringProperty(name="Job")

    @messages.reported
    def execute(self, context):
        folder = follow.results_dir(self.job_id)
        if not folder.is_dir():
            self.report({"ERROR"}, "diffrec: nothing fetched yet for this job; Import fetches it")
            return {"CANCELLED"}
        bpy.ops.wm.path_open(filepath=str(folder))
        return {"FINISHED"}


def age(created: float, now: float | None = None) -> str:
    """How long ago a job was submitted, short: "just now", "5 min", "3 h", "2 d"."""
    if not created:
        return ""
    seconds = max(0.0, (now or time.time()) - created)
    if seconds < 60:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return ""


CLASSES = (DIFFREC_OT_refresh_jobs, DIFFREC_OT_remove_job, DIFFREC_OT_clear_finished,
           DIFFREC_OT_resume_job, DIFFREC_OT_open_folder)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
