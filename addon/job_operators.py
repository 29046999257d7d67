"""The job operators: Optimize (check the backend, build, submit, follow, import), Re-attach
and Cancel. They start and cancel only: following is ``follow.jobs``'s.

Optimize and Re-attach first check that the backend answers (two seconds at most) and say
what to do when it does not. Then each hands a ``follow.JobRun`` to ``follow.start`` and is
done: the one timer of every followed job ticks it (one target render or one batch of updates
per tick, so Blender stays responsive from the first click), and the Cancel button stops it.
In the background (``blender --background``, the bpy module: no timer fires) the same run is
ticked to its end inside ``execute``. Optimize and Re-attach are undoable steps: undo removes
what they imported (the timer makes a job's end a step of its own). Every failure is
reported as a sentence (``messages``).
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


class _StartsJob:
    """Shared by the operators that start following a job (see the module)."""

    def start(self, context, job: str, connect, **run_options) -> set:
        """Hand the ``follow.JobRun`` of ``job`` (``run_options``: its builder) to
        ``follow.start``: FINISHED once handed over, or, ticked to its end here, once its job
        was followed (CANCELLED when its submission was dropped or failed)."""
        blocking = pump.blocking(context)
        run = follow.JobRun(job, connect, self.report if blocking else follow.console_report,
                            **run_options)
        followed = follow.start(context, run)
        if followed is None:
            self.report({"INFO"}, "This job is already being followed: its progress is in the "
                                  "diffrec panel.")
            return {"CANCELLED"}
        return {"FINISHED"} if followed.followed or not blocking else {"CANCELLED"}


BUSY = ("A job is being followed: wait for it to end, or cancel it, before you start another "
        "(its progress is in the diffrec panel).")


def busy(context) -> bool:
    """Whether a job is followed where timers tick it, so that another may not start."""
    return bool(follow.jobs) and not pump.blocking(context)


class DIFFREC_OT_optimize(_StartsJob, bpy.types.Operator):
    """Send the selected mesh, the cameras' images and the world light to the backend,
    follow the optimisation and import the result"""

    bl_idname = "diffrec.optimize"
    bl_label = "Optimize"
    bl_options = {"REGISTER", "UNDO"}  # noqa: RUF012  (Blender reads a set)

    replaces: StringProperty(name="Replaces", options={"HIDDEN", "SKIP_SAVE"},
                             description="The job whose Jobs list entry the new job takes the "
                                         "place of, once submitted")

    @classmethod
    def poll(cls, context):
        """Not while a job is followed where timers tick it (the panel greys the button; F3
        and scripts reach the operator too): two jobs would share the status line, the live
        mesh and Cancel. Headless, nothing ticks a followed job (a file saved while one ran
        follows it again when opened) and Optimize ticks its own to its end: allowed."""
        if busy(context):
            cls.poll_message_set(BUSY)
            return False
        return True

    @messages.reported
    def execute(self, context):
        settings = context.scene.diffrec
        problems = validate.problems(context, settings)
        if problems:
            self.report({"ERROR"}, "\n".join(problems))
            return {"CANCELLED"}
        connect = checked_connector(context, self.report)
        builder = SubmissionBuilder(context, settings)
        for note in builder.take_notes():
            self.report({"WARNING"}, note)
        settings.progress, settings.status = 0.0, builder.text
        return self.start(context, uuid.uuid4().hex, connect, builder=builder,
                          replaces=self.replaces)


class DIFFREC_OT_attach(_StartsJob, bpy.types.Operator):
    """Follow a job of this .blend again and fetch and import its result when it is done"""

    bl_idname = "diffrec.attach"
    bl_label = "Re-attach and Fetch"
    bl_options = {"REGISTER", "UNDO"}  # noqa: RUF012  (Blender reads a set)

    job_id: StringProperty(name="Job")

    @messages.reported
    def execute(self, context):
        entry = scene_updates.job_entry(context.scene, self.job_id)
        if entry is None:
            self.report({"ERROR"}, f"Job {self.job_id!r} is not one of this file's jobs: pick "
                                   "one from the panel's Jobs list.")
            return {"CANCELLED"}
        if entry.from_server:
            self.report({"ERROR"}, scene_updates.another_files(entry))
            return {"CANCELLED"}
        connect = checked_connector(context, self.report)
        return self.start(context, self.job_id, connect)


class DIFFREC_OT_cancel(bpy.types.Operator):
    """Cancel the running optimisation (target renders not yet sent are dropped)"""

    bl_idname = "diffrec.cancel"
    bl_label = "Cancel"

    job_id: StringProperty(name="Job", description="Empty: every job this session follows")

    @messages.reported
    def execute(self, context):
        follow.jobs.cancel(self.job_id)
        context.scene.diffrec.status = "cancelling"
        return {"FINISHED"}


CLASSES = (DIFFREC_OT_optimize, DIFFREC_OT_attach, DIFFREC_OT_cancel)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
