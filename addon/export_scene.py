"""Scene data out of Blender into the wire's arrays (docs/protocol.md, "Inputs").

Mesh: the evaluated mesh (modifiers applied), triangulated, world space, float32, vertices
welded as in Blender; UVs and the shading normals (Blender's corner normals: flat faces, sharp
edges, custom normals as the viewport shades them) have their own index buffers
(``uv_faces``, ``normal_faces``), so seams and hard edges split nothing.
Cameras: ``matrix_world`` (camera to world, scale removed) and intrinsics (fx, fy, cx, cy,
near, far) in pixels, top-left origin. World: an equirectangular float32 [H,W,3] map, rows
top-down, scene-linear, laid out as Blender's Environment Texture reads it. Target images:
float32 [H,W,4], straight alpha, rows top-down.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import bpy
import numpy as np

from . import corner_normals
from .core import camera_model, pixels
from .core.wire import protocol


@dataclass
class MeshArrays:
    """vertices [V,3] float32 (world, metres), faces [F,3] int32; uvs [U,2] float32 and
    uv_faces [F,3] int32 (the rows of ``uvs`` at each triangle's corners), or None; normals
    [N,3] float32 (world, unit) and normal_faces [F,3] int32, likewise."""

    vertices: np.ndarray
    faces: np.ndarray
    uvs: np.ndarray | None
    uv_faces: np.ndarray | None
    normals: np.ndarray
    normal_faces: np.ndarray


def _indexed(per_corner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, [F,3] int32 index of each triangle corner's row) of per-corner values
    ``[F*3, K]``, rows told apart by their float32 bytes (each row one opaque key: 3x faster
    than ``np.unique(axis=0)``'s sort over columns, 1.4 s against 4.4 s for 3M corners of 600k
    distinct normals; a -0.0 beside a 0.0 only keeps one row more)."""
    values = np.ascontiguousarray(per_corner, np.float32)
    keys = values.view(np.dtype((np.void, values.itemsize * values.shape[1]))).ravel()
    _, first, index = np.unique(keys, return_index=True, return_inverse=True)
    return values[first], index.reshape(-1, 3).astype(np.int32)


def _matrix(matrix) -> np.ndarray:
    return np.array([list(row) for row in matrix], dtype=np.float64)


def export_mesh(obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph) -> MeshArrays:
    """The object's evaluated mesh, triangulated, in world space, its triangles wound
    counter-clockwise about their outward normals (a mirrored object's turned back)."""
    evaluated = obj.evaluated_get(depsgraph)
    mesh = evaluated.to_mesh()
    try:
        mesh.calc_loop_triangles()
        count_v, count_t = len(mesh.vertices), len(mesh.loop_triangles)
        positions = np.empty(count_v * 3, np.float32)
        mesh.vertices.foreach_get("co", positions)
        corner_vertex = np.empty(len(mesh.loops), np.int32)
        mesh.loops.foreach_get("vertex_index", corner_vertex)
        tri_corners = np.empty(count_t * 3, np.int32)
        mesh.loop_triangles.foreach_get("loops", tri_corners)
        uv_layer = mesh.uv_layers.active
        corner_uvs = None
        if uv_layer is not None:
            corner_uvs = np.empty(len(mesh.loops) * 2, np.float32)
            uv_layer.data.foreach_get("uv", corner_uvs)
            corner_uvs = corner_uvs.reshape(-1, 2)
        normals_by_corner = corner_normals.read(mesh)
        matrix = _matrix(evaluated.matrix_world)
    finally:
        evaluated.to_mesh_clear()
    positions = positions.reshape(-1, 3).astype(np.float64) @ matrix[:3, :3].T + matrix[:3, 3]
    if np.linalg.det(matrix[:3, :3]) < 0:  # a mirror turns the winding: each corner order back
        tri_corners = np.ascontiguousarray(tri_corners.reshape(-1, 3)[:, ::-1]).ravel()
    faces = corner_vertex[tri_corners].reshape(-1, 3).astype(np.int32)
    world_normals = corner_normals.turned(normals_by_corner, matrix[:3, :3])
    normals, normal_faces = _indexed(world_normals[tri_corners].astype(np.float32))
    uvs, uv_faces = (None, None) if corner_uvs is None else _indexed(corner_uvs[tri_corners])
    return MeshArrays(positions.astype(np.float32), faces, uvs, uv_faces, normals, normal_faces)


def render_size(scene: bpy.types.Scene, scale: float = 1.0) -> tuple[int, int]:
    """The scene's render resolution in pixels, percentage applied, times ``scale``."""
    factor = scene.render.resolution_percentage / 100 * scale
    return (
        max(1, round(scene.render.resolution_x * factor)),
        max(1, round(scene.render.resolution_y * factor)),
    )


def camera_settings(camera: bpy.types.Object, scene, size: tuple[int, int]):
    data = camera.data
    return camera_model.CameraSettings(
        lens=data.lens,
        sensor_width=data.sensor_width,
        sensor_height=data.sensor_height,
        sensor_fit=data.sensor_fit,
        width=size[0],
        height=size[1],
        shift_x=data.shift_x,
        shift_y=data.shift_y,
        pixel_aspect_x=scene.render.pixel_aspect_x,
        pixel_aspect_y=scene.render.pixel_aspect_y,
    )


def export_camera(camera: bpy.types.Object, scene, size: tuple[int, int]):
    """(camera_to_world [4,4] float64 without scale, intrinsics [6] float64:
    fx, fy, cx, cy, near, far) for a perspective camera rendering ``size`` (width, height)."""
    if camera.type != "CAMERA" or camera.data.type != "PERSP":
        raise ValueError(f"{camera.name} is not a perspective camera")
    fx, fy, cx, cy = camera_model.intrinsics(camera_settings(camera, scene, size))
    near, far = camera.data.clip_start, camera.data.clip_end
    return _matrix(camera.matrix_world.normalized()), np.array([fx, fy, cx, cy, near, far])


def export_cameras(cameras, scene, size) -> tuple[np.ndarray, np.ndarray]:
    """Stacked ``export_camera`` results: [N,4,4] and [N,6], float32."""
    poses, intrinsics = zip(*(export_camera(c, scene, size) for c in cameras), strict=True)
    return np.stack(poses).astype(np.float32), np.stack(intrinsics).astype(np.float32)


# -- images ----------------------------------------------------------------------------------


def image_array(image: bpy.types.Image) -> np.ndarray:
    """A Blender image as float32 [H,W,4], rows top-down, scene-linear (8-bit sRGB images are
    linearised; float images are linear already)."""
    width, height = image.size
    if width == 0 or height == 0:
        raise ValueError(f"image {image.name!r} has no pixels (missing file?)")
    flat = np.empty(width * height * image.channels, np.float32)
    image.pixels.foreach_get(flat)
    array = pixels.rgba(pixels.from_blender_rows(flat, width, height, image.channels))
    if not image.is_float and image.colorspace_settings.name == "sRGB":
        array[..., :3] = protocol().images.srgb_to_linear(array[..., :3])
    return array


def load_image_array(path: Path, data: bool = False) -> np.ndarray:
    """An image file read through Blender, as ``image_array`` (``data``: values as stored, as
    masks need, not sRGB-decoded); the datablock is removed."""
    image = bpy.data.images.load(str(path), check_existing=False)
    try:
        if data:
            image.colorspace_settings.is_data = True
        return image_array(image)
    finally:
        bpy.data.images.remove(image)


@contextlib.contextmanager
def _temporarily(target, **values):
    """Set attributes of ``target`` for the duration of the block, then restore them (both in
    the order given)."""
    saved = {name: getattr(target, name) for name in values}
    try:
        for name, value in values.items():
            setattr(target, name, value)
        yield target
    finally:
        for name, value in saved.items():
            setattr(target, name, value)


@contextlib.contextmanager
def _exr_output(scene: bpy.types.Scene, transparent: bool):
    # one block, set and restored in this order: the format first, so that the depth set
    # (32: EXR only) and the depth restored (say 8: PNG only) are each valid for it, and the
    # codec (ZIP: lossless) last, as the depth allows it (16-bit B44 is no 32-bit codec)
    settings = scene.render.image_settings
    with (
        _temporarily(scene.render, film_transparent=transparent),
        _temporarily(settings, file_format="OPEN_EXR", color_depth="32", color_mode="RGBA",
                     exr_codec="ZIP"),
    ):
        yield


@contextlib.contextmanager
def _measured(scene: bpy.types.Scene, box_pixels: bool = False):
    """The scene's render as a measurement of radiance through a pinhole for the block: none
    of what the fit's own renders cannot reproduce (the compositor's and the sequencer's
    changes to the picture, motion blur, a render region, Cycles' film exposure, which the
    world sent does not carry, a pixel filter other than the engines' default 1.5 pixels),
    restored after. ``box_pixels``: Cycles' pixels each the mean over its own square (a box
    filter of 1 pixel) instead, as a judge that box-reduces images reads them."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_temporarily(
            scene.render, use_compositing=False, use_sequencer=False, use_motion_blur=False,
            use_border=False, use_crop_to_border=False, filter_size=1.5))
        if hasattr(scene, "cycles"):
            pixel_filter = ("BOX", 1.0) if box_pixels else ("BLACKMAN_HARRIS", 1.5)
            stack.enter_context(_temporarily(scene.cycles, film_exposure=1.0,
                                             pixel_filter_type=pixel_filter[0],
                                             filter_width=pixel_filter[1]))
        yield


@contextlib.contextmanager
def _render_output(scene: bpy.types.Scene, size: tuple[int, int], transparent: bool,
                   box_pixels: bool = False):
    """The scene set to render ``size`` pixels to lossless float EXR for the block, as a
    measurement (``_measured``, which ``box_pixels`` goes to); every setting it changes
    (camera, resolution, output path and format, film transparency, those of ``_measured``)
    is restored."""
    render = scene.render
    with (
        _temporarily(scene, camera=scene.camera),
        _temporarily(render, resolution_x=size[0], resolution_y=size[1]),
        _temporarily(render, resolution_percentage=100),
        _temporarily(render, filepath=render.filepath),
        _exr_output(scene, transparent),
        _measured(scene, box_pixels),
    ):
        yield


def render_view(scene, camera, size: tuple[int, int], transparent: bool = True,
                box_pixels: bool = False) -> np.ndarray:
    """Render one camera with the scene's engine to float EXR (transparent film unless
    ``transparent`` is false) through a pinhole (its depth of field off), with the engines'
    default pixel filter (a box of one pixel under Cycles where ``box_pixels``); returns
    float32 [H,W,4], straight alpha, rows top-down. The scene's and the camera's settings are
    as they were when it returns, and the EXR is deleted."""
    with (
        tempfile.TemporaryDirectory(prefix="diffrec-") as directory,
        _render_output(scene, size, transparent, box_pixels),
        _temporarily(camera.data.dof, use_dof=False),
    ):
        scene.camera = camera
        scene.render.filepath = str(Path(directory) / "view.exr")
        bpy.ops.render.render(write_still=True, scene=scene.name)
        rendered = load_image_array(Path(scene.render.filepath))
        return protocol().images.premultiplied_to_straight(rendered)


def render_views(scene, cameras, size: tuple[int, int], transparent: bool = True,
                 box_pixels: bool = False):
    """``render_view`` for each camera, stacked: float32 [N,H,W,4]; the render data kept
    between them (``KeptRenderData``)."""
    with KeptRenderData(scene):
        return np.stack([render_view(scene, camera, size, transparent, box_pixels)
                         for camera in cameras])


class KeptRenderData:
    """Cycles' render data (the scene's BVH, shaders, the world's importance map) kept between
    the renders of a run, rather than built again for each: ``keep`` turns the scene's
    Persistent Data on (before each render of the run; once is enough), ``release`` ends this
    holder's run. The scene's own setting comes back when the last holder of that scene
    releases (two jobs may render one scene in turns), which frees the data when it was off.
    Pixels are the same as without; a 128 px, 16-sample view of a 3,277- or
    327,680-triangle object took 0.15-0.23 s instead of 1.2-1.5 s after the first.
    ``release`` is safe more than once, and after the scene is gone. Also a context manager:
    kept for the block. While held, the scene carries its own setting (``OWN``), so that where
    an undo, a redo or a saved file brings back a scene caught while held, ``put_back`` can
    give it back its own."""

    OWN = "diffrec_own_persistent_data"
    """The custom property a held scene carries its own Persistent Data setting in."""

    _held_scenes: ClassVar[dict[int, list]] = {}
    """Scene pointer -> [the scene's own setting, how many holders keep it]."""

    def __init__(self, scene: bpy.types.Scene):
        self.scene = scene
        self._key: int | None = None

    def keep(self) -> None:
        if self._key is not None:
            return
        self._key = self.scene.as_pointer()
        own = self.scene.get(self.OWN, self.scene.render.use_persistent_data)  # one not put back
        held = self._held_scenes.setdefault(self._key, [bool(own), 0])
        held[1] += 1
        self.scene[self.OWN] = held[0]
        self.scene.render.use_persistent_data = True

    def release(self) -> None:
        if self._key is None:
            return
        key, self._key = self._key, None
        held = self._held_scenes[key]
        held[1] -= 1
        if held[1] == 0:
            del self._held_scenes[key]
            with contextlib.suppress(ReferenceError):  # the scene was removed meanwhile
                self.scene.render.use_persistent_data = held[0]
                self.scene.pop(self.OWN, None)

    @classmethod
    def put_back(cls) -> None:
        """Give every scene of the file that carries its own setting (``OWN``) but is held by
        no holder now that setting back (after an undo, a redo or a file load)."""
        for scene in bpy.data.scenes:
            if cls.OWN in scene and scene.as_pointer() not in cls._held_scenes:
                scene.render.use_persistent_data = bool(scene.pop(cls.OWN))

    def __enter__(self):
        self.keep()
        return self

    def __exit__(self, *_exc):
        self.release()
        return False


def camera_background(camera: bpy.types.Object):
    """The camera's background image entry that holds its photo: the first whose source is
    an image and that has one (a movie clip's entry is not a photo), or None."""
    for background in camera.data.background_images:
        if background.source == "IMAGE" and background.image is not None:
            return background
    return None


def camera_image(camera: bpy.types.Object) -> bpy.types.Image | None:
    """The photo attached to a camera (``camera_background``'s image), or None."""
    background = camera_background(camera)
    return background.image if background is not None else None


def photo_array(image: bpy.types.Image) -> np.ndarray:
    """A photo as ``image_array``, with straight alpha as the protocol's images have it:
    Blender holds float images (16-bit PNG, EXR) premultiplied, unless their alpha is
    channel-packed or unused."""
    array = image_array(image)
    if image.is_float and image.alpha_mode not in ("CHANNEL_PACKED", "NONE"):
        array = protocol().images.premultiplied_to_straight(array)
    return array


def has_alpha_channel(image: bpy.types.Image) -> bool:
    """Whether ``image`` has an alpha channel, read from its bits a pixel (``depth``: 8-bit
    and float RGBA are 32 and 128, RGB 24 and 96; Blender holds 16-bit files as float). Blender
    loads the image to tell (once: it keeps it)."""
    return image.depth in (32, 128)


def camera_images(cameras) -> np.ndarray:
    """The cameras' attached images as float32 [N,H,W,4], straight alpha (all the same
    size)."""
    arrays = [photo_array(camera_image(camera)) for camera in cameras]
    if len({array.shape for array in arrays}) > 1:
        raise ValueError("the images attached to the cameras differ in size")
    return np.stack(arrays)


# -- world -----------------------------------------------------------------------------------


def environment_node(world: bpy.types.World):
    """The Environment Texture node feeding the world's Background colour directly (default
    mapping), with that Background node, the shader the active World Output renders; (None,
    None) when the world is anything else (a Background cut from the output included)."""
    if world is None or world.node_tree is None:
        return None, None
    for link in world.node_tree.links:
        source, target = link.from_node, link.to_node
        if (
            source.bl_idname == "ShaderNodeTexEnvironment"
            and target.bl_idname == "ShaderNodeBackground"
            and link.to_socket.name == "Color"
            and source.image is not None
            and not source.inputs["Vector"].is_linked
            and source.projection == "EQUIRECTANGULAR"
            and not target.inputs["Strength"].is_linked
            and _rendered(target)
        ):
            return source, target
    return None, None


def _rendered(background) -> bool:
    """Whether ``background``'s shader is what the world's active World Output renders."""
    return any(link.to_node.bl_idname == "ShaderNodeOutputWorld" and link.to_node.is_active_output
               and link.to_socket.name == "Surface" and not link.is_muted
               for link in background.outputs["Background"].links)


def export_world(scene, bake_height: int = 256, samples: int = 16) -> np.ndarray:
    """The world light as an equirectangular float32 [H,W,3] map, rows top-down.

    An Environment Texture image wired straight into the Background is read as is (times the
    Background strength); any other world (sky, colours, node setups) is rendered to an
    equirectangular map of ``bake_height`` rows with Cycles.
    """
    env, background = environment_node(scene.world)
    if env is not None:
        strength = background.inputs["Strength"].default_value
        return np.ascontiguousarray(image_array(env.image)[..., :3] * strength)
    return bake_world(scene.world, bake_height, samples)


def bake_world(world: bpy.types.World, height: int, samples: int) -> np.ndarray:
    """Render ``world`` alone through an equirectangular panoramic camera at the origin,
    oriented so the result reads as the Environment Texture node does: [H,W,3], 2H wide."""
    scene = bpy.data.scenes.new("diffrec world bake")
    camera_data = bpy.data.cameras.new("diffrec world bake")
    camera = bpy.data.objects.new("diffrec world bake", camera_data)
    try:
        scene.world = world
        scene.collection.objects.link(camera)
        scene.camera = camera
        camera_data.type = "PANO"
        camera_data.panorama_type = "EQUIRECTANGULAR"
        # the Environment Texture puts u = 0.5 at world +X, u = 0.75 at -Y, v = 1 at +Z:
        # the panoramic camera looks along +X with +Z up
        camera.rotation_euler = (np.pi / 2, 0.0, -np.pi / 2)
        scene.render.engine = "CYCLES"
        scene.cycles.device = "CPU"
        scene.cycles.samples = samples
        scene.cycles.use_denoising = False
        views = render_views(scene, [camera], (2 * height, height), transparent=False)
        return np.ascontiguousarray(views[0, ..., :3])
    finally:
        bpy.data.objects.remove(camera)
        bpy.data.cameras.remove(camera_data)
        bpy.data.scenes.remove(scene)
