"""The job operators: Optimize (check the backend, build, submit, follow, import), Re-attach
and Cancel.

Optimize and Re-attach first check that the backend answers (two seconds at most) and say
what to do when it does not. Then each runs through ``pump``: a timer ticks its
``follow.JobRun`` (one target render or one batch of updates per tick, so Blender stays
responsive from the first click) and ESC or the Cancel button stops it; in the background
(``blender --background``, the bpy module: no event loop) the same run is ticked to its end
inside ``execute``. Optimize and Re-attach are undoable steps: undo removes what they imported.
Every failure is reported as a sentence (``messages``).
"""

from __future__ import annotations

import uuid

import bpy
from bpy.props import StringProperty

from . import backend_link, follow, pump, scene_updates, validate
from .core import messages
from .submission import SubmissionBuilder


def checked_connector(context, report):
    """``backend_link.connector`` once ``backend_link.check`` found the backend answering
    (within two seconds; a sentence saying what to do is raised otherwise). Nothing is
    rendered, exported or sent before this."""
    connect = backend_link.connector(context)
    if backend_link.check(context) is None:
        report({"INFO"}, "diffrec: starting the local backend; the job is sent once it answers")
    return connect


class _FollowsJob(pump.Pumped):
    """Shared by the operators that follow a job: its ``follow.JobRun`` ticked by ``pump``."""

    _run: follow.JobRun | None = None

    def follow(self, context, run: follow.JobRun):
        self._run = run
        if not pump.blocking(context):
            follow.running[run.job] = run
        return self.pump(context)

    def step(self, context) -> bool:
        return self._run.tick(context)

    def stop(self, context) -> None:
        self._run.cancel()
        context.scene.diffrec.status = "cancelling"

    def run_blocking(self, context) -> None:
        follow.follow_blocking(context, self._run)

    def finish(self, context) -> set:
        follow.forget(self._run)
        followed = self._run.session is not None and not self._run.detached
        return {"FINISHED"} if followed else {"CANCELLED"}

    def abandon(self, context) -> None:
        self._run.cancel()
        follow.forget(self._run)


class DIFFREC_OT_optimize(_FollowsJob, bpy.types.Operator):
    """Send the selected mesh, the cameras' images and the world light to the backend,
    follow the optimisation and import the result"""

    bl_idname = "diffrec.optimize"
    bl_label = "Optimize"
    bl_options = {"REGISTER", "UNDO"}  # noqa: RUF012  (Blender reads a set)

    @messages.reported
    def execute(self, context):
        settings = context.scene.diffrec
        problems = validate.problems(context, settings)
        if problems:
            self.report({"ERROR"}, "\n".join(problems))
            return {"CANCELLED"}
        connect = checked_connector(context, self.report)
        builder = SubmissionBuilder(context, settings)
        settings.progress, settings.status = 0.0, builder.text
        return self.follow(context, follow.JobRun(uuid.uuid4().hex, connect, self.report, builder))


class DIFFREC_OT_attach(_FollowsJob, bpy.types.Operator):
    """Follow a job of this .blend again and fetch and import its result when it is done"""

    bl_idname = "diffrec.attach"
    bl_label = "Re-attach and Fetch"
    bl_options = {"REGISTER", "UNDO"}  # noqa: RUF012  (Blender reads a set)

    job_id: StringProperty(name="Job")

    @messages.reported
    def execute(self, context):
        entry = scene_updates.job_entry(context.scene, self.job_id)
        if entry is None:
            self.report({"ERROR"}, f"job {self.job_id!r} is not one of this file's jobs")
            return {"CANCELLED"}
        if entry.from_server:
            self.report({"ERROR"}, scene_updates.another_files(entry))
            return {"CANCELLED"}
        if self.job_id in follow.running:
            self.report({"INFO"}, "this job is already being followed")
            return {"CANCELLED"}
        connect = checked_connector(context, self.report)
        return self.follow(context, follow.JobRun(self.job_id, connect, self.report))


class DIFFREC_OT_cancel(bpy.types.Operator):
    """Cancel the running optimisation (target renders not yet sent are dropped)"""

    bl_idname = "diffrec.cancel"
    bl_label = "Cancel"

    job_id: StringProperty(name="Job", description="Empty: every job this session follows")

    @messages.reported
    def execute(self, context):
        for job, run in list(follow.running.items()):
            if self.job_id in ("", job):
                run.cancel()
        context.scene.diffrec.status = "cancelling"
        return {"FINISHED"}


CLASSES = (DIFFREC_OT_optimize, DIFFREC_OT_attach, DIFFREC_OT_cancel)

register, _unregister_classes = bpy.utils.register_classes_factory(CLASSES)


def unregister() -> None:
    for run in follow.running.values():
        run.cancel()
    _unregister_classes()
