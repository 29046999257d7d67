"""What a followed job changes in the scene (main thread only): the status line and progress,
the live preview image and mesh, the job list, and the imported result.

``apply_update`` applies one ``jobs.Update`` from the worker thread's queue.
"""

from __future__ import annotations

from pathlib import Path

import bpy
import numpy as np

from . import import_result, jobs, pixels

PREVIEW_IMAGE = "diffrec preview"
LIVE_MESH = "diffrec live mesh"


def job_entry(scene, job: str):
    """The scene's ``jobs`` entry of ``job``, or None."""
    return next((entry for entry in scene.diffrec.jobs if entry.job_id == job), None)


def update_preview(render: np.ndarray, target: np.ndarray) -> bpy.types.Image:
    """Show render | target side by side in the 'diffrec preview' image (rows top-down)."""
    side_by_side = np.concatenate(
        [pixels.rgba(render), pixels.rgba(target)], axis=1
    )
    height, width = side_by_side.shape[:2]
    image = bpy.data.images.get(PREVIEW_IMAGE)
    if image is None or tuple(image.size) != (width, height):
        if image is not None:
            bpy.data.images.remove(image)
        image = bpy.data.images.new(PREVIEW_IMAGE, width, height, alpha=True, float_buffer=True)
        image.colorspace_settings.name = import_result.LINEAR
    image.pixels.foreach_set(pixels.to_blender_rows(side_by_side))
    image.update()
    return image


def update_live_mesh(context, vertices: np.ndarray, faces: np.ndarray) -> bpy.types.Object:
    """Show the mesh the backend is optimising as the 'diffrec live mesh' object."""
    mesh = bpy.data.meshes.new(LIVE_MESH)
    mesh.from_pydata(np.asarray(vertices, np.float64).tolist(), [],
                     np.asarray(faces, np.int64).tolist())
    mesh.update()
    obj = bpy.data.objects.get(LIVE_MESH)
    if obj is None:
        obj = bpy.data.objects.new(LIVE_MESH, mesh)
        obj.display_type = "WIRE"
        context.scene.collection.objects.link(obj)
    else:
        old, obj.data = obj.data, mesh
        bpy.data.meshes.remove(old)
    return obj


def remove_live_mesh() -> None:
    obj = bpy.data.objects.get(LIVE_MESH)
    if obj is not None:
        mesh = obj.data
        bpy.data.objects.remove(obj)
        bpy.data.meshes.remove(mesh)


def _import_fetched(context, entry, paths: list[Path], report) -> None:
    """Import the fetched result (when it holds a mesh) and save its GLB when asked."""
    if not paths:
        return
    settings = context.scene.diffrec
    name = f"{entry.object_name or 'diffrec'} optimised" if entry else "diffrec result"
    try:
        # a kept HDRI comes back only resampled: the scene's own world stays
        obj = import_result.import_result(context, paths[0].parent, name,
                                          use_world=settings.light == "LEARN")
    except (ValueError, RuntimeError) as exc:  # the manifest's ManifestError is a ValueError
        report({"ERROR"}, f"diffrec: the result cannot be imported: {exc}")
        return
    if obj is None:
        return
    remove_live_mesh()
    if not bpy.app.background:
        bpy.ops.ed.undo_push(message="diffrec: import result")
    if entry is not None:
        entry.imported = True
    if settings.save_glb:
        saved = import_result.save_glb_beside_blend(paths, name)
        report({"INFO"}, f"diffrec: saved {saved}" if saved else
               "diffrec: save the .blend first to keep a GLB beside it")


def apply_update(context, job: str, update: jobs.Update, report) -> None:
    """Apply one update from the worker to the scene (main thread only). ``report`` is an
    operator's ``report(kinds, message)``."""
    settings = context.scene.diffrec
    entry = job_entry(context.scene, job)
    if update.kind == "uploading":
        settings.status = f"uploading {update.fields['done'] / max(1, update.fields['total']):.0%}"
    elif update.kind == "submitted":
        settings.status = f"submitted ({update.fields.get('state', 'queued')})"
    elif update.kind == "progress":
        settings.status, fraction = jobs.progress_text(update.fields)
        if bpy.app.background and (settings.progress == 0  # headless: the first, then per 5 %
                                   or int(20 * fraction) != int(settings.progress / 5)):
            print(f"diffrec: {settings.status}", flush=True)
        settings.progress = 100 * fraction
    elif update.kind == "preview" and {"render", "target"} <= update.arrays.keys():
        update_preview(update.arrays["render"], update.arrays["target"])
        if settings.live_mesh and {"vertices", "faces"} <= update.arrays.keys():
            update_live_mesh(context, update.arrays["vertices"], update.arrays["faces"])
    elif update.kind == "log":
        report({"INFO"}, update.fields.get("message", ""))
    elif update.kind in ("done", "failed", "cancelled", "error"):
        settings.status = update.fields.get("message") or update.kind
        report({"INFO" if update.kind == "done" else "ERROR"}, f"diffrec: {settings.status}")
    elif update.kind == "fetched":
        paths = [Path(path) for path in update.fields["files"]]
        _import_fetched(context, entry, paths, report)
        settings.status = f"done: {len(paths)} files in {paths[0].parent if paths else '-'}"
    if entry is not None and update.kind in ("submitted", "done", "failed", "cancelled"):
        entry.state = update.fields.get("state", update.kind)
    if entry is not None and update.kind == "fetched":
        entry.state = "done"
