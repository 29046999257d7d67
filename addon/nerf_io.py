"""Datasets in and out of the scene: File > Import of a NeRF-style or LLFF capture as cameras
with their images, and File > Export of the scene's cameras as a rendered NeRF-style dataset
(one view rendered per tick, through ``pump``, like Optimize's targets)."""

from __future__ import annotations

from pathlib import Path

import bpy
from bpy.props import StringProperty
from mathutils import Matrix

from . import export_scene, import_result, pump, validate
from .core import camera_model, messages
from .core.wire import protocol


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

    @messages.reported
    def execute(self, context):
        path = Path(self.filepath)
        captures = protocol().captures
        data = (captures.read_llff(path.parent) if path.suffix.lower() == ".npy"
                else captures.read_nerf(path))
        images = [bpy.data.images.load(str(frame.image), check_existing=True)
                  for frame in data.frames]  # a missing image raises: reported as a sentence
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


class DatasetWriter:
    """Writes ``cameras``' renders as a NeRF-style dataset in ``root`` in steps (main thread
    only): one view rendered and saved as ``train/r_<i>.png`` per ``step``, then
    ``transforms_train.json``; ``written`` lists the images so far. The render data is kept
    between the views until the last is written or ``release`` (``export_scene.KeptRenderData``).
    """

    def __init__(self, scene, cameras: list, root: Path):
        self.scene, self.cameras, self.root = scene, cameras, root
        self.size = export_scene.render_size(scene)
        self.written: list[Path] = []
        self.render_data = export_scene.KeptRenderData(scene)
        (root / "train").mkdir(parents=True, exist_ok=True)

    def step(self) -> bool:
        """Render and save the next view, or write the transforms file; whether all is done."""
        index = len(self.written)
        if index < len(self.cameras):
            path = self.root / "train" / f"r_{index}.png"
            self.render_data.keep()
            save_png(export_scene.render_view(self.scene, self.cameras[index], self.size), path)
            self.written.append(path)
            return False
        self.render_data.release()
        poses, intrinsics = export_scene.export_cameras(self.cameras, self.scene, self.size)
        protocol().captures.write_nerf(self.root / "transforms_train.json", self.written, poses,
                                       *self.size, intrinsics[0, :4])
        return True


class DIFFREC_OT_export_nerf(pump.Pumped, bpy.types.Operator):
    """Render the scene's cameras and write them as a NeRF-style dataset folder, one view per
    tick (ESC stops it: the views written so far stay, without a transforms file)"""

    bl_idname = "diffrec.export_nerf"
    bl_label = "Export NeRF Dataset"

    directory: StringProperty(subtype="DIR_PATH")

    def invoke(self, context, event):
        context.window_manager.fileselect_add(self)
        return {"RUNNING_MODAL"}

    @messages.reported
    def execute(self, context):
        cameras = validate.target_cameras(context, context.scene.diffrec)
        if not cameras:
            self.report({"ERROR"}, validate.NO_CAMERAS)
            return {"CANCELLED"}
        self._writer = DatasetWriter(context.scene, cameras,
                                     Path(bpy.path.abspath(self.directory)))
        self._stopped = False
        return self.pump(context)

    def step(self, context) -> bool:
        return self._stopped or self._writer.step()

    def stop(self, context) -> None:
        self._stopped = True

    def abandon(self, context) -> None:
        self._writer.render_data.release()

    def finish(self, context) -> set:
        self._writer.render_data.release()  # stopped: the last view's release did not come
        count, root = len(self._writer.written), self._writer.root
        if self._stopped:
            self.report({"INFO"}, f"stopped after {count} views: {root} has no transforms file")
            return {"CANCELLED"}
        self.report({"INFO"}, f"wrote {count} views to {root}")
        return {"FINISHED"}


def save_png(image, path: Path) -> None:
    """``image`` (linear [H,W,3|4], rows top-down) saved as an 8-bit sRGB PNG at ``path``."""
    png = import_result.new_image(f"nerf {path.stem}", image, "sRGB", pack=False)
    try:
        png.filepath_raw, png.file_format = str(path), "PNG"
        png.save()
    finally:
        bpy.data.images.remove(png)


def write_dataset(root: Path, split: str, images, poses, intrinsics) -> list[Path]:
    """One split of a NeRF-style dataset at once: ``root/split/r_N.png`` (8-bit sRGB with
    alpha, from linear [N,H,W,4] ``images``) and ``root/transforms_<split>.json`` (``poses``
    [N,4,4] camera-to-world, the first row of ``intrinsics`` [N,6] for all). Returns the PNG
    paths. (File > Export writes one view per tick instead: ``DatasetWriter``.)"""
    (root / split).mkdir(parents=True, exist_ok=True)
    paths = [root / split / f"r_{index}.png" for index in range(len(images))]
    for image, path in zip(images, paths, strict=True):
        save_png(image, path)
    height, width = images.shape[1:3]
    protocol().captures.write_nerf(root / f"transforms_{split}.json", paths, poses, width,
                                   height, intrinsics[0, :4])
    return paths


def import_nerf_menu(self, context):
    self.layout.operator(DIFFREC_OT_import_nerf.bl_idname,
                         text="Dataset: NeRF (.json) / LLFF (poses_bounds.npy)")


def export_nerf_menu(self, context):
    self.layout.operator(DIFFREC_OT_export_nerf.bl_idname, text="Dataset: NeRF (rendered cameras)")


CLASSES = (DIFFREC_OT_import_nerf, DIFFREC_OT_export_nerf)

_register_classes, _unregister_classes = bpy.utils.register_classes_factory(CLASSES)


def register() -> None:
    _register_classes()
    bpy.types.TOPBAR_MT_file_import.append(import_nerf_menu)
    bpy.types.TOPBAR_MT_file_export.append(export_nerf_menu)


def unregister() -> None:
    bpy.types.TOPBAR_MT_file_export.remove(export_nerf_menu)
    bpy.types.TOPBAR_MT_file_import.remove(import_nerf_menu)
    _unregister_classes()
