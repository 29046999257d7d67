"""Datasets in and out of the scene: File > Import of a NeRF-style or LLFF capture as cameras
with their images, and the export of the scene's cameras as a rendered NeRF-style dataset."""

from __future__ import annotations

from pathlib import Path

import bpy
from bpy.props import StringProperty
from mathutils import Matrix

from . import camera_model, export_scene, import_result, validate
from .wire import protocol


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
        captures = protocol().captures
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
        size = export_scene.render_size(scene)
        images = export_scene.render_views(scene, cameras, size)
        poses, intrinsics = export_scene.export_cameras(cameras, scene, size)
        paths = write_dataset(root, "train", images, poses, intrinsics)
        self.report({"INFO"}, f"wrote {len(paths)} views to {root}")
        return {"FINISHED"}


def write_dataset(root: Path, split: str, images, poses, intrinsics) -> list[Path]:
    """One split of a NeRF-style dataset: ``root/split/r_N.png`` (8-bit sRGB with alpha, from
    linear [N,H,W,4] ``images``) and ``root/transforms_<split>.json`` (``poses`` [N,4,4]
    camera-to-world, the first row of ``intrinsics`` [N,6] for all). Returns the PNG paths."""
    (root / split).mkdir(parents=True, exist_ok=True)
    paths = []
    for index, image in enumerate(images):
        path = root / split / f"r_{index}.png"
        png = import_result.new_image(f"nerf r_{index}", image, "sRGB", pack=False)
        png.filepath_raw, png.file_format = str(path), "PNG"
        png.save()
        bpy.data.images.remove(png)
        paths.append(path)
    height, width = images.shape[1:3]
    protocol().captures.write_nerf(root / f"transforms_{split}.json", paths, poses, width,
                                   height, intrinsics[0, :4])
    return paths


def import_nerf_menu(self, context):
    self.layout.operator(DIFFREC_OT_import_nerf.bl_idname,
                         text="Dataset: NeRF (.json) / LLFF (poses_bounds.npy)")


CLASSES = (DIFFREC_OT_import_nerf, DIFFREC_OT_export_nerf)

_register_classes, _unregister_classes = bpy.utils.register_classes_factory(CLASSES)


def register() -> None:
    _register_classes()
    bpy.types.TOPBAR_MT_file_import.append(import_nerf_menu)


def unregister() -> None:
    bpy.types.TOPBAR_MT_file_import.remove(import_nerf_menu)
    _unregister_classes()
