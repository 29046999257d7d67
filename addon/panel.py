"""View3D > Sidebar > diffrec: targets, mode and settings, Optimize/Cancel, progress, jobs."""

from __future__ import annotations

import bpy

from . import follow


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
        layout.prop(settings, "train_resolution")
        layout.prop(settings, "mode")
        layout.prop(settings, "preset")
        column = layout.column()
        column.prop(settings, "iterations")
        column.prop(settings, "texture_resolution")
        column.prop(settings, "gpus")
        layout.prop(settings, "light", expand=True)
        row = layout.row()
        row.prop(settings, "live_mesh")
        row.prop(settings, "save_glb")
        following = bool(follow.running)
        row = layout.row(align=True)
        row.scale_y = 1.4
        row.enabled = not following
        row.operator("diffrec.optimize", icon="PLAY")
        if following:
            layout.operator("diffrec.cancel", icon="CANCEL")
        if settings.status:
            layout.progress(factor=settings.progress / 100, text=settings.status)


class DIFFREC_PT_jobs(bpy.types.Panel):
    bl_idname = "DIFFREC_PT_jobs"
    bl_label = "Jobs"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "diffrec"
    bl_parent_id = "DIFFREC_PT_main"
    bl_options = {"DEFAULT_CLOSED"}  # noqa: RUF012  (Blender reads a set)

    def draw(self, context):
        jobs = context.scene.diffrec.jobs
        if not jobs:
            self.layout.label(text="No jobs yet")
        for entry in reversed(jobs):
            row = self.layout.row(align=True)
            row.label(text=f"{entry.object_name or entry.mode} · {entry.state}")
            row.label(text=entry.job_id[:8])
            if not entry.imported and entry.job_id not in follow.running:
                op = row.operator("diffrec.attach", text="", icon="IMPORT")
                op.job_id = entry.job_id


CLASSES = (DIFFREC_PT_main, DIFFREC_PT_jobs)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
