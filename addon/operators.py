"""The ``diffrec.*`` operators.

``diffrec.optimize`` checks the setup, exports the scene on the main thread, then follows the
job through a ``jobs.JobSession``: on a worker thread with a modal timer in the interface (ESC
cancels), or on a worker thread drained by a blocking loop when Blender runs in the background
(timers and modal handlers never run there). Both paths apply updates with ``_apply``. Job ids
are kept in ``scene.diffrec.jobs``, so a reopened .blend re-attaches (``diffrec.attach``).
"""

from __future__ import annotations

import queue
import uuid
from pathlib import Path

import bpy
import numpy as np
from bpy.props import StringProperty
from mathutils import Matrix

from . import (
    camera_model,
    connection,
    export_scene,
    import_result,
    jobs,
    pixels,
    preferences,
    validate,
)

PREVIEW_IMAGE = "diffrec preview"
LIVE_MESH = "diffrec live mesh"
_sessions: dict[str, jobs.JobSession] = {}


# -- building a job --------------------------------------------------------------------------


def training_size(scene, longest_side: int) -> tuple[int, int]:
    """The scene's render aspect with its longest side ``longest_side`` pixels."""
    width, height = export_scene.render_size(scene)
    scale = longest_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _captures():
    """``diffrec.protocol.captures``: the dataset reader the backend uses too."""
    from .wire import protocol

    return protocol().captures


def _dataset_targets(settings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images, cameras, intrinsics) from a dataset folder, NeRF-style or LLFF (masks become
    the images' alpha)."""
    capture = _captures().read_capture(Path(bpy.path.abspath(settings.dataset_path)))
    images = []
    for frame in capture.frames:
        image = export_scene.load_image_array(frame.image)
        if frame.mask is not None:
            image[..., 3] = export_scene.load_image_array(frame.mask, data=True)[..., 0]
        images.append(image)
    images = np.stack(images)
    height, width = images.shape[1:3]
    depths = [(frame.near, frame.far) for frame in capture.frames]
    intrinsics = np.concatenate([capture.intrinsics(width, height), depths], -1)
    return images, capture.camera_to_world().astype(np.float32), intrinsics.astype(np.float32)


def build_submission(context, settings) -> jobs.Submission:
    """Export what the job needs: targets, cameras, the selected mesh, the world light."""
    scene = context.scene
    if settings.target_source == "DATASET":
        images, poses, intrinsics = _dataset_targets(settings)
    else:
        cameras = validate.target_cameras(context, settings)
        if settings.target_source == "RENDER":
            size = training_size(scene, settings.train_resolution)
            images = export_scene.render_views(scene, cameras, size)
        else:
            images = export_scene.camera_images(cameras)
            size = (images.shape[2], images.shape[1])
        poses, intrinsics = export_scene.export_cameras(cameras, scene, size)
    arrays = {"images": images, "cameras": poses, "intrinsics": intrinsics}
    subject = context.active_object
    if subject is not None and subject.type == "MESH" and subject.select_get():
        mesh = export_scene.export_mesh(subject, context.evaluated_depsgraph_get())
        arrays.update(vertices=mesh.vertices, faces=mesh.faces)
        if mesh.uvs is not None:
            arrays.update(uvs=mesh.uvs, uv_faces=mesh.uv_faces)
    if scene.world is not None:
        arrays["envmap"] = export_scene.export_world(scene)
    spec = {"task": "optimize", "settings": optimize_settings(settings, "envmap" in arrays)}
    return jobs.Submission(spec, arrays)


def optimize_settings(settings, has_envmap: bool) -> dict:
    """The panel's choices as the backend's ``optimize`` settings (docs/protocol.md)."""
    values = {
        "mode": settings.mode,
        "iterations": settings.iterations,
        "texture_res": int(settings.texture_resolution),
        "train_res": settings.train_resolution,
        "light": "fixed" if settings.light == "KEEP" else
                 "learn-from-envmap" if has_envmap else "learn",
        "preview_every": max(10, settings.iterations // 50),  # about 50 live previews
    }
    if settings.preset != "CUSTOM":
        values["preset"] = settings.preset.lower()
    return values


# -- talking to the backend ------------------------------------------------------------------


def connector(context):
    """A function making a protocol Client from the preferences. Everything it needs is read
    here, on the main thread; the function itself never touches bpy (worker threads call it)."""
    from .wire import protocol

    target = connection.endpoint(preferences.setting("endpoint", context) or "")
    connection.check_online_access(target, bpy.app.online_access)
    keypair = None
    if target.server_key:
        keypair = connection.client_keypair(preferences.user_directory())
    timeout = preferences.setting("timeout", context)
    auto_start = preferences.setting("auto_start", context) and target.is_loopback
    python = preferences.setting("python", context)
    data_dir = preferences.user_directory() / "backend"

    def connect():
        client_class = protocol().Client
        if auto_start:
            try:
                with client_class(target.address, timeout=1.0, retry_for=1.0) as probe:
                    probe.ping()
            except protocol().ServerUnavailable:
                connection.start_local_backend(python, target.address, data_dir)
        return client_class(
            target.address,
            server_key=target.server_key,
            client_keypair=keypair,
            timeout=timeout,
            retry_for=max(30.0, 3 * timeout),
        )

    return connect


def results_dir(job: str) -> Path:
    return preferences.user_directory() / "results" / job


# -- applying updates (main thread) ----------------------------------------------------------


def _job_entry(scene, job: str):
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


def _apply(context, job: str, update: jobs.Update, report) -> None:
    """Apply one update from the worker to the scene (main thread only)."""
    settings = context.scene.diffrec
    entry = _job_entry(context.scene, job)
    if update.kind == "uploading":
        settings.status = f"uploading {update.fields['done'] / max(1, update.fields['total']):.0%}"
    elif update.kind == "submitted":
        settings.status = f"submitted ({update.fields.get('state', 'queued')})"
    elif update.kind == "progress":
        settings.status, fraction = jobs.progress_text(update.fields)
        if bpy.app.background and int(20 * fraction) != int(settings.progress / 5):
            print(f"diffrec: {settings.status}", flush=True)  # headless: a line per 5 %
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
        name = f"{entry.object_name or 'diffrec'} optimised" if entry else "diffrec result"
        # a kept HDRI comes back only resampled: the scene's own world stays
        try:
            result = import_result.import_result(context, results_dir(job), name,
                                                 use_world=settings.light == "LEARN")
        except (ValueError, RuntimeError) as exc:  # the manifest's ManifestError is a ValueError
            result = None
            report({"ERROR"}, f"diffrec: the result cannot be imported: {exc}")
        if result is not None:
            remove_live_mesh()
            if not bpy.app.background:
                bpy.ops.ed.undo_push(message="diffrec: import result")
            if entry is not None:
                entry.imported = True
            if settings.save_glb:
                saved = save_glb_beside_blend(paths, name)
                report({"INFO"}, f"diffrec: saved {saved}" if saved else
                       "diffrec: save the .blend first to keep a GLB beside it")
        settings.status = f"done: {len(paths)} files in {paths[0].parent if paths else '-'}"
    if entry is not None and update.kind in ("submitted", "done", "failed", "cancelled"):
        entry.state = update.fields.get("state", update.kind)
    if entry is not None and update.kind == "fetched":
        entry.state = "done"


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


def save_glb_beside_blend(paths: list[Path], name: str) -> Path | None:
    """Copy the result's mesh.glb next to the saved .blend as ``<name>.glb``."""
    glb = next((path for path in paths if path.name == "mesh.glb"), None)
    if glb is None or not bpy.data.filepath:
        return None
    target = Path(bpy.data.filepath).parent / f"{bpy.path.clean_name(name)}.glb"
    target.write_bytes(glb.read_bytes())
    return target


def _drain(context, session: jobs.JobSession, report, block: bool) -> bool:
    """Apply queued updates; whether the session reached its end. ``block`` waits for it."""
    while True:
        try:
            update = session.updates.get(timeout=0.5) if block else session.updates.get_nowait()
        except queue.Empty:
            if block and session.alive:
                continue
            return not session.alive and session.updates.empty()
        _apply(context, session.job, update, report)
        if update.kind in jobs.FINAL:
            return True


def follow_blocking(context, session: jobs.JobSession, report) -> None:
    """Follow ``session`` to its end, applying its updates here on the main thread: the path
    for ``blender --background`` and the bpy module, where modal operators never tick."""
    _sessions[session.job] = session
    session.start()
    try:
        _drain(context, session, report, block=True)
    finally:
        _sessions.pop(session.job, None)


class _FollowsJob:
    """Shared by the operators that follow a job: blocking or modal."""

    _timer = None
    _session: jobs.JobSession | None = None

    def follow(self, context, session: jobs.JobSession):
        if bpy.app.background or context.window_manager is None or not context.window:
            follow_blocking(context, session, self.report)
            return {"FINISHED"}
        _sessions[session.job] = session
        session.start()
        self._session = session
        self._timer = context.window_manager.event_timer_add(0.1, window=context.window)
        context.window_manager.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        if event.type == "ESC":
            self._session.cancel()
            context.scene.diffrec.status = "cancelling"
        if event.type == "TIMER" and _drain(context, self._session, self.report, block=False):
            context.window_manager.event_timer_remove(self._timer)
            _sessions.pop(self._session.job, None)
            return {"FINISHED"}
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
        try:
            connect = connector(context)
            submission = build_submission(context, settings)
        except (ValueError, PermissionError, OSError) as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        job = uuid.uuid4().hex
        entry = settings.jobs.add()
        entry.job_id, entry.mode, entry.state = job, settings.mode, "submitting"
        subject = context.active_object
        entry.object_name = subject.name if subject is not None else ""
        settings.progress, settings.status = 0.0, "submitting"
        return self.follow(context, jobs.JobSession(connect, job, results_dir(job), submission,
                                                    only=import_result.IMPORTED_ROLES))


class DIFFREC_OT_attach(_FollowsJob, bpy.types.Operator):
    """Follow a job of this .blend again and fetch and import its result when it is done"""

    bl_idname = "diffrec.attach"
    bl_label = "Re-attach and Fetch"

    job_id: StringProperty(name="Job")

    def execute(self, context):
        if _job_entry(context.scene, self.job_id) is None:
            self.report({"ERROR"}, f"job {self.job_id!r} is not one of this file's jobs")
            return {"CANCELLED"}
        if self.job_id in _sessions:
            self.report({"INFO"}, "this job is already being followed")
            return {"CANCELLED"}
        try:
            connect = connector(context)
        except (ValueError, PermissionError, OSError) as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        session = jobs.JobSession(connect, self.job_id, results_dir(self.job_id),
                                  only=import_result.IMPORTED_ROLES)
        return self.follow(context, session)


class DIFFREC_OT_cancel(bpy.types.Operator):
    """Cancel the running optimisation"""

    bl_idname = "diffrec.cancel"
    bl_label = "Cancel"

    job_id: StringProperty(name="Job", description="Empty: every job this session follows")

    def execute(self, context):
        for job, session in list(_sessions.items()):
            if self.job_id in ("", job):
                session.cancel()
        context.scene.diffrec.status = "cancelling"
        return {"FINISHED"}


class DIFFREC_OT_test_connection(bpy.types.Operator):
    """Ask the backend for its protocol version, device and free memory"""

    bl_idname = "diffrec.test_connection"
    bl_label = "Test Connection"

    def execute(self, context):
        from .wire import protocol

        try:
            with connector(context)() as client:
                client.retry_for = client.timeout
                reply = client.ping()
        except protocol().ServerUnavailable as exc:
            self.report(
                {"ERROR"},
                f"{exc}: the backend is not running, the port is refused, or the keys do not "
                "match (a CURVE server answers nothing to an unknown key)",
            )
            return {"CANCELLED"}
        except (ValueError, PermissionError, OSError) as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        if reply.get("protocol") != protocol().PROTOCOL_VERSION:
            self.report(
                {"ERROR"},
                f"protocol version mismatch: server {reply.get('protocol')}, add-on "
                f"{protocol().PROTOCOL_VERSION}; update the older side",
            )
            return {"CANCELLED"}
        free = reply.get("gpu_free_bytes")
        memory = f", {free / 2**30:.1f} GiB free" if free else ""
        self.report(
            {"INFO"},
            f"diffrec {reply.get('server')} (protocol {reply['protocol']}) on "
            f"{reply.get('engine')}{memory}",
        )
        return {"FINISHED"}


class DIFFREC_OT_generate_keys(bpy.types.Operator):
    """Create this computer's key pair for a remote backend"""

    bl_idname = "diffrec.generate_keys"
    bl_label = "Generate Key Pair"

    def execute(self, context):
        public, _ = connection.client_keypair(preferences.user_directory())
        self.report({"INFO"}, f"public key {public}")
        return {"FINISHED"}


class DIFFREC_OT_copy_public_key(bpy.types.Operator):
    """Copy this computer's public key to the clipboard"""

    bl_idname = "diffrec.copy_public_key"
    bl_label = "Copy Public Key"

    def execute(self, context):
        public, _ = connection.client_keypair(preferences.user_directory())
        context.window_manager.clipboard = public
        return {"FINISHED"}


class DIFFREC_OT_import_nerf(bpy.types.Operator):
    """Import a dataset as cameras with their images: a NeRF-style transforms file or an LLFF
    capture's poses_bounds.npy"""

    bl_idname = "diffrec.import_nerf"
    bl_label = "Import Dataset"
    bl_options = {"REGISTER", "UNDO"}  # noqa: RUF012  (Blender reads a set)

    filepath: StringProperty(subtype="FILE_PATH")
    filter_glob: StringProperty(default="*.json;*.npy", options={"HIDDEN"})

    def invoke(self, context, event):
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        path = Path(self.filepath)
        captures = _captures()
        try:
            data = (captures.read_llff(path.parent) if path.suffix.lower() == ".npy"
                    else captures.read_nerf(path))
            images = [bpy.data.images.load(str(frame.image), check_existing=True)
                      for frame in data.frames]
        except (OSError, ValueError, RuntimeError) as exc:
            self.report({"ERROR"}, str(exc))  # bpy raises RuntimeError for a missing image
            return {"CANCELLED"}
        collection = bpy.data.collections.new(Path(self.filepath).parent.name or "dataset")
        context.scene.collection.children.link(collection)
        width, height = images[0].size if images[0].size[0] else (1, 1)
        for index, (frame, image) in enumerate(zip(data.frames, images, strict=True)):
            settings = camera_model.camera_for(frame.pinhole.at(width, height), width, height)
            camera_data = bpy.data.cameras.new(f"view {index:03d}")
            camera_data.sensor_fit, camera_data.sensor_width, camera_data.lens = (
                settings.sensor_fit, settings.sensor_width, settings.lens
            )
            camera_data.shift_x, camera_data.shift_y = settings.shift_x, settings.shift_y
            background = camera_data.background_images.new()
            background.image = image
            camera_data.show_background_images = True
            camera = bpy.data.objects.new(camera_data.name, camera_data)
            camera.matrix_world = Matrix(frame.camera_to_world.tolist())
            collection.objects.link(camera)
        first = export_scene.camera_image(collection.objects[0])
        if first is not None and first.size[0]:
            context.scene.render.resolution_x, context.scene.render.resolution_y = first.size
            context.scene.render.resolution_percentage = 100
        context.scene.diffrec.target_source = "CAMERA_IMAGES"
        self.report({"INFO"}, f"imported {len(data.frames)} cameras")
        return {"FINISHED"}


class DIFFREC_OT_export_nerf(bpy.types.Operator):
    """Render the scene's cameras and write them as a NeRF-style dataset folder"""

    bl_idname = "diffrec.export_nerf"
    bl_label = "Export NeRF Dataset"

    directory: StringProperty(subtype="DIR_PATH")

    def invoke(self, context, event):
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context):
        scene = context.scene
        cameras = validate.target_cameras(context, scene.diffrec)
        if not cameras:
            self.report({"ERROR"}, validate.NO_CAMERAS)
            return {"CANCELLED"}
        root = Path(bpy.path.abspath(self.directory))
        (root / "train").mkdir(parents=True, exist_ok=True)
        size = export_scene.render_size(scene)
        images = export_scene.render_views(scene, cameras, size)
        poses, intrinsics = export_scene.export_cameras(cameras, scene, size)
        paths = []
        for index, image in enumerate(images):
            path = root / "train" / f"r_{index}.png"
            png = import_result.new_image(f"nerf r_{index}", image, "sRGB", pack=False)
            png.filepath_raw, png.file_format = str(path), "PNG"
            png.save()
            bpy.data.images.remove(png)
            paths.append(path)
        _captures().write_nerf(root / "transforms_train.json", paths, poses, *size,
                               intrinsics[0, :4])
        self.report({"INFO"}, f"wrote {len(paths)} views to {root}")
        return {"FINISHED"}


def import_nerf_menu(self, context):
    self.layout.operator(DIFFREC_OT_import_nerf.bl_idname,
                         text="Dataset: NeRF (.json) / LLFF (poses_bounds.npy)")


CLASSES = (
    DIFFREC_OT_optimize,
    DIFFREC_OT_attach,
    DIFFREC_OT_cancel,
    DIFFREC_OT_test_connection,
    DIFFREC_OT_generate_keys,
    DIFFREC_OT_copy_public_key,
    DIFFREC_OT_import_nerf,
    DIFFREC_OT_export_nerf,
)


_register_classes, _unregister_classes = bpy.utils.register_classes_factory(CLASSES)


def register() -> None:
    _register_classes()
    bpy.types.TOPBAR_MT_file_import.append(import_nerf_menu)


def unregister() -> None:
    bpy.types.TOPBAR_MT_file_import.remove(import_nerf_menu)
    for session in _sessions.values():
        session.cancel()
    _unregister_classes()
