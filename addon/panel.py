"""View3D > Sidebar > diffrec: targets, mode and settings, what the job will cost, Optimize /
Cancel, progress with the live preview, and the Jobs list."""

from __future__ import annotations

import bpy

from . import (
    bake_start,
    estimate,
    export_scene,
    follow,
    queue_operators,
    scene_updates,
    subjects,
    validate,
)
from .core import panel_fields

PREVIEW_SCALE = 8.0
"""The live preview's size in the panel, in units of a button's height."""


def _draw_estimate(layout, context, settings) -> None:
    """The pre-submit estimate: sizes, upload, time, and warnings past the thresholds."""
    try:
        guess = estimate.for_scene(context, settings)
    except (ValueError, RuntimeError, ReferenceError):  # a scene mid-edit: nothing to say
        return
    if guess is None:
        return
    box = layout.box()
    column = box.column(align=True)
    for line in guess.lines():
        column.label(text=line)
    for warning in guess.warnings():
        column.label(text=warning, icon="ERROR")


def _draw_subjects(layout, context, settings) -> None:
    """Reference, Start From and Triangles: what the targets show, what the fit starts from
    and the result's budget (``subjects``), and what a bake of the reference cannot read."""
    if settings.target_source == "RENDER":
        layout.prop(settings, "reference")
        layout.prop(settings, "reference_object")
    if settings.mode != "reconstruct":
        layout.prop(settings, "start_from")
    layout.prop(settings, "triangles")
    note = bake_note(context, settings)
    if note:
        layout.label(text=note, icon="INFO")


def bake_note(context, settings) -> str | None:
    """Where the reference is baked onto the start (``subjects.bakes_reference``), the shaders
    of the reference that the bake cannot read (``bake_start.unread_shaders``), in a
    sentence; else None."""
    if settings.mode == "reconstruct":
        return None
    reference = subjects.reference_object(context, settings)
    if not subjects.bakes_reference(subjects.start_kind(context, settings),
                                    subjects.subject(context), reference,
                                    settings.target_source):
        return None
    unread = bake_start.unread_shaders(reference) if reference is not None else []
    if not unread:
        return None
    whose = "its" if len(unread) == 1 else "their"
    return f"The bake cannot read {', '.join(unread)}: the fit learns {whose} look"


def photos_note(context, settings) -> str | None:
    """With Camera images as targets, where the first camera's photo has no alpha channel
    (``export_scene.has_alpha_channel``; a capture's photos are alike, and one is read, not
    hundreds at each redraw): that the server cuts the object out of them itself
    (diffrec.pipeline.auto_masks), in a sentence; else None."""
    if settings.target_source != "CAMERA_IMAGES":
        return None
    photos = (export_scene.camera_image(camera)
              for camera in validate.target_cameras(context, settings))
    first = next((photo for photo in photos if photo is not None), None)
    if first is None or export_scene.has_alpha_channel(first):
        return None
    return "No photo has alpha: the server cuts the object out of them"


def light_line(settings, has_world: bool, lamps: int) -> tuple[str, str]:
    """Which light the fit uses, in words (the panel's Light as the job will send it, with
    ``has_world`` a world that lights and ``lamps`` lamps lighting the target renders, which
    are never sent), and the line's icon:
    ERROR where the world is kept although lamps light the renders too."""
    light = panel_fields.light_setting(settings.light, settings.target_source, has_world, lamps)
    lit = settings.target_source == "RENDER" and lamps > 0
    lamps_light = f"{lamps} lamp{'s light' if lamps > 1 else ' lights'} the renders"
    if light == "fixed" and lit:
        return f"World kept, but {lamps_light} too: set Light to Learn", "ERROR"
    if light == "fixed":
        why = " (the true light of these renders)" if settings.light == "AUTO" else ""
        return f"Fit under the world's light, kept{why}", "LIGHT"
    learned = "Fit learns the light" + (", from the world" if has_world else "")
    return (f"{learned} ({lamps_light} too)" if lit else learned), "LIGHT"


class DIFFREC_PT_main(bpy.types.Panel):
    bl_idname = "DIFFREC_PT_main"
    bl_label = "diffrec"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "diffrec"

    def draw(self, context):
        settings = context.scene.diffrec
        layout = self.layout
        layout.use_property_split = True
        layout.prop(settings, "target_source")
        if settings.target_source == "DATASET":
            layout.prop(settings, "dataset_path")
        else:
            layout.prop(settings, "cameras", expand=True)
        note = photos_note(context, settings)
        if note:
            layout.label(text=note, icon="INFO")
        layout.prop(settings, "mode")
        _draw_subjects(layout, context, settings)
        layout.prop(settings, "preset")
        column = layout.column(align=True)  # every value here is sent as shown
        column.prop(settings, "iterations")
        column.prop(settings, "batch")
        column.prop(settings, "train_resolution")
        column.prop(settings, "texture_resolution")
        column.prop(settings, "light_resolution")
        if settings.mode == "reconstruct":
            column.prop(settings, "grid")
        if settings.mode == "materials":
            layout.prop(settings, "shading")
        layout.prop(settings, "gpus")
        layout.prop(settings, "light", expand=True)
        lamps = subjects.render_lamps(context.scene, context.view_layer)
        lit_by_world = not validate.world_problems(context.scene.world)
        line, icon = light_line(settings, lit_by_world, lamps)
        layout.label(text=line, icon=icon)
        row = layout.row()
        row.prop(settings, "live_mesh")
        row.prop(settings, "save_glb")
        following = bool(follow.jobs)
        if not following:
            _draw_estimate(layout, context, settings)
        row = layout.row(align=True)
        row.scale_y = 1.4
        row.enabled = not following
        row.operator("diffrec.optimize", icon="PLAY")
        if following:
            layout.operator("diffrec.cancel", icon="CANCEL")
        if settings.status:
            layout.progress(factor=settings.progress / 100, text=settings.status)
        own = [entry for entry in settings.jobs if not entry.from_server]
        latest = own[-1] if own else None
        if (not following and latest is not None and latest.state == "done"
                and follow.results_dir(latest.job_id).is_dir()):
            layout.operator("diffrec.open_folder", icon="FILE_FOLDER").job_id = latest.job_id
        preview = scene_updates.panel_preview()
        if preview is not None and following:
            layout.template_icon(icon_value=preview.icon_id, scale=PREVIEW_SCALE)


def _job_buttons(row, entry) -> None:
    """The actions a job's state allows, as icon buttons; another file's job (listed by
    Refresh) is read-only: its files' folder at most."""
    followed = entry.job_id in follow.jobs
    done = entry.state == "done"
    if entry.from_server:
        if done and follow.results_dir(entry.job_id).is_dir():
            row.operator("diffrec.open_folder", text="", icon="FILE_FOLDER").job_id = (
                entry.job_id)
        return
    if followed:
        row.operator("diffrec.cancel", text="", icon="CANCEL").job_id = entry.job_id
    elif entry.state in follow.FOLLOWABLE or (done and not entry.imported):
        icon = "IMPORT" if done else "LINKED"
        row.operator("diffrec.attach", text="", icon=icon).job_id = entry.job_id
    if entry.state in ("cancelled", "failed") and not followed:
        icon = "PLAY" if entry.state == "cancelled" else "FILE_REFRESH"
        row.operator("diffrec.resume_job", text="", icon=icon).job_id = entry.job_id
    if done and follow.results_dir(entry.job_id).is_dir():
        row.operator("diffrec.open_folder", text="", icon="FILE_FOLDER").job_id = entry.job_id
    if not followed:
        row.operator("diffrec.remove_job", text="", icon="X").job_id = entry.job_id


def job_line(entry) -> str:
    """A job's line in the list: object, state, progress, age."""
    parts = [entry.object_name or entry.mode or entry.job_id[:8], entry.state]
    if entry.state in ("running", "queued", "cancelling") and entry.progress:
        parts.append(f"{entry.progress:.0f}%")
    age = queue_operators.age(entry.created)
    if age:
        parts.append(age)
    return " · ".join(parts)


class DIFFREC_PT_jobs(bpy.types.Panel):
    bl_idname = "DIFFREC_PT_jobs"
    bl_label = "Jobs"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "diffrec"
    bl_parent_id = "DIFFREC_PT_main"

    def draw(self, context):
        layout = self.layout
        jobs = context.scene.diffrec.jobs
        row = layout.row(align=True)
        row.operator("diffrec.refresh_jobs", icon="FILE_REFRESH")
        row.operator("diffrec.clear_finished", icon="TRASH")
        if not jobs:
            layout.label(text="No jobs yet")
        for title, from_server in (("This file", False), ("Others on the server", True)):
            entries = [entry for entry in reversed(jobs) if entry.from_server == from_server]
            if entries and any(entry.from_server for entry in jobs):
                layout.label(text=title)
            for entry in entries:
                row = layout.row(align=True)
                row.label(text=job_line(entry))
                _job_buttons(row, entry)
                if entry.message and (entry.state in ("failed", "cancelled")
                                      or (entry.state == "done" and not entry.imported)):
                    layout.label(text=entry.message, icon="INFO")


CLASSES = (DIFFREC_PT_main, DIFFREC_PT_jobs)


_register_classes, _unregister_classes = bpy.utils.register_classes_factory(CLASSES)


def register() -> None:
    _register_classes()


def unregister() -> None:
    _unregister_classes()
    scene_updates.release_panel_preview()
