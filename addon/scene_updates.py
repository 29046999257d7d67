"""What a followed job changes in the scene (main thread only): the status line and progress,
the live preview (an image, and the panel's own preview icon), the live mesh, the job list,
and the imported result.

``apply_update`` applies one update from the worker thread's queue: a job event, typed
(``diffrec.protocol.events``) and dispatched by its type, described by the protocol's own
``describe`` as the command line describes it, or one of the session's ``job_session.Update``s.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import bpy
import bpy.utils.previews
import numpy as np

from . import import_result, object_links, selection, worlds
from .core import job_session, messages, pixels
from .core.wire import protocol

PREVIEW_IMAGE = "diffrec preview"
LIVE_MESH = "diffrec live mesh"
PANEL_PREVIEW = "live"
PANEL_PREVIEW_SIDE = 256
"""The panel's preview is scaled up (whole pixels) until its longer side reaches this."""
_previews = None  # the panel preview's bpy.utils.previews collection, made on first use


def job_entry(scene, job: str):
    """The scene's ``jobs`` entry of ``job``, or None."""
    return next((entry for entry in scene.diffrec.jobs if entry.job_id == job), None)


def another_files(entry) -> str:
    """Why a job Refresh listed from the server (``from_server``: sent from another .blend)
    is not imported, resumed or removed from this file."""
    return (f"diffrec: the job {entry.object_name or entry.job_id[:8]!r} was sent from another "
            ".blend: open that file to import, resume or remove it (the server keeps it until "
            "then)")


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
    update_panel_preview(side_by_side)
    return image


def panel_preview():
    """The panel's live preview (an ImagePreview; ``icon_id`` for ``template_icon``), or None
    before the first preview arrives."""
    return None if _previews is None else _previews.get(PANEL_PREVIEW)


def update_panel_preview(image: np.ndarray):
    """Show ``image`` ([H, W, 4] linear, rows top-down) in the panel: sRGB-encoded, scaled up by
    a whole factor to about PANEL_PREVIEW_SIDE pixels on its longer side."""
    global _previews
    if _previews is None:
        _previews = bpy.utils.previews.new()
    preview = _previews.get(PANEL_PREVIEW) or _previews.new(PANEL_PREVIEW)
    factor = max(1, PANEL_PREVIEW_SIDE // max(image.shape[:2]))
    shown = np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)
    encoded = protocol().images.linear_to_srgb(np.clip(shown[..., :3], 0.0, 1.0))
    shown = np.concatenate([encoded, shown[..., 3:]], -1)
    preview.image_size = (shown.shape[1], shown.shape[0])
    preview.image_pixels_float.foreach_set(pixels.to_blender_rows(shown))
    return preview


def release_panel_preview() -> None:
    """Free the panel preview's collection (the add-on's unregister)."""
    global _previews
    if _previews is not None:
        bpy.utils.previews.remove(_previews)
        _previews = None


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


def remove_job_entries(settings, jobs: set[str]) -> None:
    """Take the Jobs list entries of ``jobs`` (ids; absent ones ignored) out of ``settings``."""
    for index in reversed(range(len(settings.jobs))):
        if settings.jobs[index].job_id in jobs:
            settings.jobs.remove(index)


def remove_live_mesh() -> None:
    """Remove the live mesh object and its mesh, and any mesh of it left without users (the
    artist deleted the object while the job ran)."""
    obj = bpy.data.objects.get(LIVE_MESH)
    if obj is not None:
        bpy.data.objects.remove(obj)
    for mesh in [mesh for mesh in bpy.data.meshes
                 if mesh.name.startswith(LIVE_MESH) and mesh.users == 0]:
        bpy.data.meshes.remove(mesh)


def _import_fetched(context, entry, paths: list[Path], report) -> None:
    """Import the fetched result (when it holds a mesh) beside the object the job started
    from, its learned light as a world of its own (``worlds.adopt``), and save its GLB when
    asked. A failure is reported as a sentence. The operator that follows
    the job (UNDO in its options) makes the import part of its undo step. A job that is not
    this file's own (no ``entry``, or another file's listed by Refresh) is never imported
    here: its files stay in its results folder."""
    if not paths or entry is None or entry.from_server:
        return
    settings = context.scene.diffrec
    original = job_original(entry)
    name = f"{original.name if original else entry.object_name or 'diffrec'} optimised"
    # a kept HDRI comes back only resampled: only a learned light makes a world; the job's
    # own light decides (jobs of files saved before jobs kept it: the panel's)
    learned = entry.light.startswith("learn") if entry.light else settings.light == "LEARN"
    try:
        with _artist_kept_at_work(context):
            imported = import_result.import_result(context, paths[0].parent, name,
                                                   use_world=learned, beside=original)
    except Exception as exc:  # a bad manifest (checked before anything is imported), a bad file
        messages.log(exc)
        report({"ERROR"}, f"diffrec: the result cannot be imported. {messages.sentence(exc)}")
        if entry is not None:
            entry.message = not_imported(messages.sentence(exc))
        return
    if imported.object is None:
        return
    if imported.world is not None:
        worlds.adopt(context, imported.world)
    remove_live_mesh()  # no undo push here: Optimize's or Re-attach's own step holds it all
    if entry is not None:
        entry.imported, entry.message, entry.result = True, "", imported.object
    if settings.save_glb:
        saved = import_result.save_glb_beside_blend(paths, name)
        report({"INFO"}, f"diffrec: saved {saved}" if saved else
               "diffrec: save the .blend first to keep a GLB beside it")


def job_original(entry) -> bpy.types.Object | None:
    """The object ``entry``'s job started from, whatever it is called now; for entries saved
    before the pointer was kept, the object of the name it had (None: gone, or deleted and
    kept only by the pointer: ``object_links``)."""
    if entry.original is not None:
        return object_links.placed(entry.original)
    found = bpy.data.objects.get(entry.object_name) if entry.object_name else None
    return object_links.placed(found)


def _artist_kept_at_work(context):
    """Outside Object Mode (the artist editing, sculpting, painting while the job ran), the
    mode, the active object and the selection as they were after the import (which the glTF
    importer takes to Object Mode): the result arrives unselected. In Object Mode nothing is
    kept: the result becomes the selected, active object."""
    if context.mode == "OBJECT":
        return contextlib.nullcontext()
    return selection.kept(context.view_layer)


def not_imported(why: str) -> str:
    """The Jobs list's sentence for a done job whose result could not be brought in."""
    return f"done, not imported: {why.rstrip('.')}. Re-attach and Fetch tries again."


def learn_speed(settings, entry, progress) -> None:
    """Keep the server's measured speed (seconds per iteration per megapixel of a batch) for
    the panel's estimate (``estimate``), from a progress event of ``entry``'s job: of a
    rasterized training pass only (a path-traced one costs ``settings.PATH_TRACED_COST`` times
    that; the fit of the mip levels renders smaller images)."""
    per_iteration = progress.seconds_per_iteration
    passes = protocol().events.PassName
    other = progress.pass_name in (passes.PATH_TRACED, passes.MIPS)
    if entry is not None and entry.megapixels > 0 and per_iteration and not other:
        settings.seconds_per_megapixel = per_iteration / entry.megapixels


def apply_update(context, job: str, update, report) -> None:
    """Apply one update from the worker to the scene (main thread only): a job event, by its
    type (``diffrec.protocol.events``), or one of the session's ``job_session.Update``s.
    ``report`` is an operator's ``report(kinds, message)``."""
    entry = job_entry(context.scene, job)
    if isinstance(update, job_session.Update):
        _apply_session_update(context, job, entry, update, report)
    else:
        _apply_event(context, entry, update, report)


def _apply_event(context, entry, event, report) -> None:
    """A job event: progress and the bar, the preview, a log's sentence, how the job ended."""
    settings, events = context.scene.diffrec, protocol().events
    if isinstance(event, events.Progress):
        settings.status = events.describe(event)
        if bpy.app.background and (settings.progress == 0  # headless: the first, then per 5 %
                                   or int(20 * event.fraction) != int(settings.progress / 5)):
            print(f"diffrec: {settings.status}", flush=True)
        settings.progress = 100 * event.fraction
        learn_speed(settings, entry, event)
        if entry is not None:
            entry.progress = settings.progress
            if entry.state in ("submitting", "queued"):  # it trains: no longer waiting
                entry.state = "running"
    elif isinstance(event, events.Preview) and {"render", "target"} <= event.images.keys():
        update_preview(event.images["render"], event.images["target"])
        if {"vertices", "faces"} <= event.images.keys():
            if settings.live_mesh:
                update_live_mesh(context, event.images["vertices"], event.images["faces"])
            else:  # turned off while the job runs: gone at its next preview
                remove_live_mesh()
    elif isinstance(event, events.Log) and event.stage:  # what the job does between passes
        settings.status = event.message
        if bpy.app.background:
            print(f"diffrec: {settings.status}", flush=True)
    elif isinstance(event, events.Log):  # a warning (the unwrap's fallback layout) stands out
        report({"WARNING" if event.level == "warning" else "INFO"}, event.message)
    elif isinstance(event, events.Finished):
        _apply_finished(entry, settings, event, report)


def _apply_finished(entry, settings, event, report) -> None:
    """How the job ended, as the server says it: a done job's result is fetched next; a
    cancelled one says where it stopped (Resume goes on from there), a failed one why."""
    outcome = protocol().events.Outcome
    if event.outcome is outcome.DONE:
        settings.status = "finished: fetching the result"
    elif event.outcome is outcome.CANCELLED:
        settings.status = event.message or "the job was cancelled"
        report({"INFO"}, f"diffrec: {settings.status}")
    else:
        settings.status = event.message or event.kind
        report({"ERROR"}, f"diffrec: {settings.status}")
    if event.outcome is not outcome.DONE:
        remove_live_mesh()  # what the job showed while it ran ends with it
    if entry is not None:
        entry.state, entry.on_server = event.kind, True
        if event.outcome is not outcome.DONE:
            entry.message = event.message


def _final_state(entry, update) -> None:
    """The job list's entry after a session's 'error': a submit that never reached the server
    ends as failed (it can be removed or retried); a followed job keeps the server's state."""
    if entry.state == "submitting":
        entry.state = "failed"
    entry.message = update.fields.get("message", "")
    if entry.state == "done":  # the fetch failed, tries and all
        entry.message = not_imported(entry.message)


def _apply_session_update(context, job: str, entry, update, report) -> None:
    """One of the session's own updates: the upload, the submit, the server's liveness, the
    fetched result, a lost job or an error."""
    settings = context.scene.diffrec
    if update.kind == "uploading":  # bytes of all the arrays together
        fraction = update.fields["done"] / max(1, update.fields["total"])
        settings.status, settings.progress = f"uploading {fraction:.0%}", 100 * fraction
    elif update.kind == "submitted":
        settings.status = f"submitted ({update.fields.get('state', 'queued')})"
        settings.progress = 0.0
    elif update.kind in ("error", "lost"):
        settings.status = update.fields.get("message") or update.kind
        report({"ERROR"}, f"diffrec: {settings.status}")
    elif update.kind == "link":  # the server stopped, is back, or restarted
        settings.status = protocol().liveness.SAID[update.fields["change"]]
        report({"WARNING" if update.fields["change"] == "stopped" else "INFO"},
               f"diffrec: {settings.status}")  # headless, a report is a console line already
    elif update.kind == "fetched":
        paths = [Path(path) for path in update.fields["files"]]
        folder = f"results/{job[:8]}…"  # the folder's short name; Open Folder shows it
        if entry is not None and entry.imported:  # a second import would duplicate it
            settings.status = f"done: already imported (files in {folder})"
        else:
            _import_fetched(context, entry, paths, report)
            failed = entry is not None and paths and not entry.imported and entry.message
            settings.status = entry.message if failed else f"done: files in {folder}"
        settings.progress = 100.0
    if update.kind in ("error", "lost"):
        remove_live_mesh()  # what the job showed while it ran ends with it
    if entry is None:
        return
    if update.kind == "submitted":
        entry.state, entry.on_server = update.fields.get("state", update.kind), True
    if update.kind == "error":
        _final_state(entry, update)
    if update.kind == "lost":  # Resume optimizes its object again
        entry.state, entry.on_server, entry.message = "failed", False, update.fields["message"]
    if update.kind == "fetched":
        entry.state, entry.progress = "done", 100.0
