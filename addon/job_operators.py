"""The job operators: Optimize (build, submit, follow, import), Re-attach and Cancel.

In the interface each runs modally: a timer ticks its ``follow.JobRun`` (one target render or
one batch of updates per tick, so Blender stays responsive from the first click) and ESC or
the Cancel button stops it. In the background (``blender --background``, the bpy module: no
event loop) the same run is ticked to its end inside ``execute``.
"""

from __future__ import annotations

import uuid

import bpy
from bpy.props import StringProperty

from . import backend_link, follow, scene_updates, validate
from .submission import SubmissionBuilder


def _blocking(context) -> bool:
    """Whether no modal operator can tick here (no event loop or no window)."""
    return bpy.app.background or context.window_manager is None or not context.window


class _FollowsJob:
    """Shared by the operators that follow a job: blocking or modal."""

    _timer = None
    _run: follow.JobRun | None = None

    def connector(self, context):
        """``backend_link.connector`` from the preferences, or None once the reason it cannot
        be made (a bad endpoint, offline, unreadable keys) is reported."""
        try:
            return backend_link.connector(context)
        except (ValueError, PermissionError, OSError) as exc:
            self.report({"ERROR"}, str(exc))
            return None

    def follow(self, context, run: follow.JobRun):
        if _blocking(context):
            follow.follow_blocking(context, run)
            return {"FINISHED"} if run.session is not None else {"CANCELLED"}
        follow.running[run.job] = run
        self._run = run
        self._timer = context.window_manager.event_timer_add(0.1, window=context.window)
        context.window_manager.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC":
            self._run.cancel()
            context.scene.diffrec.status = "cancelling"
        if event.type == "TIMER" and self._run.tick(context):
            context.window_manager.event_timer_remove(self._timer)
            follow.running.pop(self._run.job, None)
            return {"FINISHED"} if self._run.session is not None else {"CANCELLED"}
        if context.area:
            context.area.tag_redraw()
        return {"PASS_THROUGH"}


class DIFFREC_OT_optimize(_FollowsJob, bpy.types.Operator):
    """Send the selected mesh, the cameras' images and the world light to the backend,
    follow the optimisation and import the result"""

    bl_idname = "diffrec.optimize"
    bl_label = "Optimize"

    def execute(self, context):
        settings = context.scene.diffrec
        problems = validate.problems(context, settings)
        if problems:
            self.report({"ERROR"}, "\n".join(problems))
            return {"CANCELLED"}
        connect = self.connector(context)
        if connect is None:
            return {"CANCELLED"}
        builder = SubmissionBuilder(context, settings)
        settings.progress, settings.status = 0.0, builder.text
        return self.follow(context, follow.JobRun(uuid.uuid4().hex, connect, self.report, builder))


class DIFFREC_OT_attach(_FollowsJob, bpy.types.Operator):
    """Follow a job of this .blend again and fetch and import its result when it is done"""

    bl_idname = "diffrec.attach"
    bl_label = "Re-attach and Fetch"

    job_id: StringProperty(name="Job")

    def execute(self, context):
        if scene_updates.job_entry(context.scene, self.job_id) is None:
            self.report({"ERROR"}, f"job {self.job_id!r} is not one of this file's jobs")
            return {"CANCELLED"}
        if self.job_id in follow.running:
            self.report({"INFO"}, "this job is already being followed")
            return {"CANCELLED"}
        connect = self.connector(context)
        if connect is None:
            return {"CANCELLED"}
        return self.follow(context, follow.JobRun(self.job_id, connect, self.report))


class DIFFREC_OT_cancel(bpy.types.Operator):
    """Cancel the running optimisation (target renders not yet sent are dropped)"""

    bl_idname = "diffrec.cancel"
    bl_label = "Cancel"

    job_id: StringProperty(name="Job", description="Empty: every job this session follows")

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
