"""The photo-like capture of ``photo_capture`` rendered by Blender's Cycles: the same ball
(striped in a palette, the same radius and place) on the same wooden table in the same tiled
room, the same detail on every surface (Blender's Noise texture in place of the value noise),
seen by the same cameras, but lit as light goes: a soft key light (a square area light in
the sun's direction from the ball, under the ceiling) and what the room sends back, so the
shading, the ball's soft and contact shadows and the interreflections are Cycles'.

``render`` renders the scene by pinhole cameras a margin wider than the photos' (as wide as a
lens's distortion needs), scene-linear, with the ball's coverage from a second, cheap render
in which everything else is a holdout; ``Renders.photos`` then makes the photos as
``photo_capture.photos`` does: resampled through the lens (``photo_capture.pinhole_coordinates``,
bilinear with OpenCV's ``remap``), the true masks where the resampled coverage is >= 0.5, and
exposure and sensor noise by ``photo_capture.developed``. Write them with
``photo_capture.write_capture``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import bpy
import cv2
import numpy as np
from mathutils import Matrix, Vector

from diffrec.camera import Cameras
from diffrec_bench import photo_capture as scene
from diffrec_bench.checkout import addon_module
from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.demo.console import quiet_stdout

export_scene = addon_module("export_scene")

SAMPLES = 32  # per pixel, denoised by OpenImageDenoise
MASK_SAMPLES = 16  # per pixel of the coverage render (direct light only)
BOUNCES = 4
KEY_DISTANCE, KEY_SIZE, KEY_POWER = 2.2, 1.0, 100.0  # the area light: from the ball, side, W
DETAIL_SCALE = 1 / scene.DETAIL_PERIODS[0]  # the Noise texture's coarsest frequency, per unit
DETAIL_CONTRAST = 4.5  # the Noise texture stretched about 0.5 by this: its spread then the
# value noise's (the albedo's factor's standard deviation 0.21 against 0.22, detail 0.5)
ROUGHNESS = {"ball": 0.45, "table": 0.6, "room": 0.9}
_MARGIN = 2  # pixels beyond the widest any lens needs, for bilinear resampling


@dataclass(frozen=True)
class Renders:
    """Cycles' renders for the photos of ``cameras``: by the pinhole cameras ``wide`` (the
    same poses and focal lengths, ``margin`` pixels more on every side), ``colour``
    ``[N, H + 2 margin, W + 2 margin, 3]`` scene-linear and the ball's ``coverage`` (the same
    size, in [0, 1])."""

    cameras: Cameras
    wide: Cameras
    margin: int
    colour: np.ndarray
    coverage: np.ndarray

    def photos(self, seed: int = 0, *,
               distortion: tuple[float, float, float, float] | None = None,
               exposure_stops: float = 0.0, noise: float = 0.01
               ) -> tuple[np.ndarray, np.ndarray]:
        """``(linear RGB [N, H, W, 3] float32 in [0, 1], true masks [N, H, W] bool)`` as
        ``photo_capture.photos`` makes them from the same arguments; a ``distortion`` no
        stronger than the one the renders were made for."""
        if distortion is None:
            columns = np.arange(self.cameras.width) + 0.5 + self.margin
            rows = np.arange(self.cameras.height) + 0.5 + self.margin
            u = np.broadcast_to(columns, (len(self.cameras), len(rows), len(columns)))
            v = np.broadcast_to(rows[:, None], u.shape)
        else:
            u, v = _wide_positions(self.cameras, self.wide, distortion)
            if min(u.min(), v.min()) < 0.5 or max(u.max() - self.wide.width,
                                                  v.max() - self.wide.height) > -0.5:
                raise ValueError(f"the lens {distortion} needs wider renders than these")
        colour = np.stack([_resampled(image, view_u, view_v)
                           for image, view_u, view_v in zip(self.colour, u, v, strict=True)])
        coverage = np.stack([_resampled(image, view_u, view_v)
                             for image, view_u, view_v in zip(self.coverage, u, v, strict=True)])
        return scene.developed(colour, seed, exposure_stops, noise), coverage >= 0.5


def render(cameras: Cameras, palette: str = "warm", *, detail: float = 0.0,
           distortion: tuple[float, float, float, float] | None = None,
           samples: int = SAMPLES) -> Renders:
    """The scene (the ball striped in ``photo_capture.PALETTES[palette]``, ``detail`` as for
    ``photo_capture.photos``) built in a factory-fresh bpy session and rendered by Cycles on the
    CPU at ``samples`` per pixel for the photos of ``cameras`` (square pixels, one size),
    wide enough for photos through a lens of OpenCV ``distortion``."""
    margin = _MARGIN if distortion is None else _MARGIN + _overhang(cameras, distortion)
    wide = Cameras(cameras.camera_to_world, cameras.fx, cameras.fy, cameras.cx + margin,
                   cameras.cy + margin, cameras.width + 2 * margin,
                   cameras.height + 2 * margin)
    bl_scene = demo_scene.empty_scene(wide.width, samples, use_gpu=False)
    bl_scene.render.resolution_y = wide.height
    bl_scene.cycles.max_bounces = BOUNCES
    bl_scene.cycles.use_denoising = True
    ball = _build(palette, detail)
    views = _camera_objects(wide)
    size = (wide.width, wide.height)
    with quiet_stdout():
        colour = export_scene.render_views(bl_scene, views, size, transparent=False)[..., :3]
        for obj in bl_scene.objects:
            obj.is_holdout = obj.type == "MESH" and obj != ball
        bl_scene.cycles.samples, bl_scene.cycles.max_bounces = MASK_SAMPLES, 0
        bl_scene.cycles.use_denoising = False
        coverage = export_scene.render_views(bl_scene, views, size, transparent=True)[..., 3]
    return Renders(cameras, wide, margin, colour, np.clip(coverage, 0, 1))


def _overhang(cameras: Cameras, distortion) -> int:
    """How many pixels beyond the photos' edges the points a lens of ``distortion`` puts on
    them reach, at most (whole pixels, rounded up)."""
    u, v = _wide_positions(cameras, cameras, distortion)
    beyond = max(-u.min(), -v.min(), u.max() - cameras.width, v.max() - cameras.height, 0.0)
    return math.ceil(beyond)


def _wide_positions(cameras: Cameras, wide: Cameras, distortion
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(u, v)`` ``[N, H, W]`` pixels in the pinhole images of ``wide`` of the points a lens
    of ``distortion`` puts on each pixel centre of ``cameras``."""
    x, y = scene.pinhole_coordinates(cameras, distortion)
    fx, fy, cx, cy = (value.double().numpy()[:, None, None]
                      for value in (wide.fx, wide.fy, wide.cx, wide.cy))
    return fx * x + cx, fy * y + cy


def _resampled(image: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``image`` ``[H, W(, C)]`` sampled bilinearly at pixel positions ``(u, v)`` (pixel
    centres at half-integers)."""
    return cv2.remap(np.ascontiguousarray(image, np.float32), (u - 0.5).astype(np.float32),
                     (v - 0.5).astype(np.float32), cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REPLICATE)


def _camera_objects(cameras: Cameras) -> list[bpy.types.Object]:
    """Blender cameras with the poses (diffrec's camera-to-world: Blender's convention) and
    the pinhole intrinsics of ``cameras``."""
    objects = []
    width, height = cameras.width, cameras.height
    for index in range(len(cameras)):
        fx, fy, cx, cy = (float(value[index]) for value in
                          (cameras.fx, cameras.fy, cameras.cx, cameras.cy))
        if not math.isclose(fx, fy, rel_tol=1e-6):
            raise ValueError("Cycles' cameras have square pixels: fx must equal fy")
        data = bpy.data.cameras.new(f"photo_{index:03d}")
        data.sensor_fit, data.sensor_width = "HORIZONTAL", 36.0
        data.lens = fx * data.sensor_width / width
        data.shift_x = (width / 2 - cx) / max(width, height)
        data.shift_y = (cy - height / 2) / max(width, height)
        data.clip_start, data.clip_end = 0.05, 100.0
        camera = bpy.data.objects.new(data.name, data)
        camera.matrix_world = Matrix(cameras.camera_to_world[index].double().tolist())
        bpy.context.scene.collection.objects.link(camera)
        objects.append(camera)
    bpy.context.view_layer.update()
    return objects


def _build(palette: str, detail: float) -> bpy.types.Object:
    """The ball, the table, the room and the key light in the current scene; the ball."""
    bpy.ops.mesh.primitive_uv_sphere_add(segments=128, ring_count=64, radius=scene.BALL_RADIUS,
                                         location=tuple(scene.BALL_CENTRE))
    ball = bpy.context.view_layer.objects.active
    ball.data.shade_smooth()
    ball.data.materials.append(_material("ball", _stripes(scene.PALETTES[palette]), detail))
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0.0, 0.0, -0.025))
    table = bpy.context.view_layer.objects.active
    table.scale = (2 * scene.TABLE_HALF, 2 * scene.TABLE_HALF, 0.05)  # its top at z = 0
    table.data.materials.append(_material("table", _grain, detail))
    _room(detail)
    light = bpy.data.lights.new("key", "AREA")
    light.shape, light.size, light.energy = "SQUARE", KEY_SIZE, KEY_POWER
    key = bpy.data.objects.new("key", light)
    key.location = tuple(scene.BALL_CENTRE + KEY_DISTANCE * scene.SUN)
    key.rotation_euler = Vector(tuple(-scene.SUN)).to_track_quat("-Z", "Y").to_euler()
    bpy.context.scene.collection.objects.link(key)
    bpy.context.view_layer.update()
    return ball


def _room(detail: float) -> None:
    """The room's six faces (``photo_capture.ROOM``, faces in ``photo_capture.WALLS``'
    order), each its own material."""
    low, high = scene.ROOM
    corners = [(x, y, z) for x in (low[0], high[0]) for y in (low[1], high[1])
               for z in (low[2], high[2])]  # index: 4 x + 2 y + z, each 0 or 1
    faces = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4),
             (1, 5, 7, 3)]  # -x, +x, -y, +y, floor, ceiling
    mesh = bpy.data.meshes.new("room")
    mesh.from_pydata(corners, [], faces)
    for index, (polygon, albedo) in enumerate(zip(mesh.polygons, scene.WALLS, strict=True)):
        mesh.materials.append(_material(f"room_{index}", _tiles(albedo), detail))
        polygon.material_index = index
    room = bpy.data.objects.new("room", mesh)
    bpy.context.scene.collection.objects.link(room)


class _Nodes:
    """A material's node tree with terse helpers for arithmetic on its sockets."""

    def __init__(self, material: bpy.types.Material):
        self.nodes, self.links = material.node_tree.nodes, material.node_tree.links

    def math(self, operation: str, *inputs):
        """A Math node of ``operation`` on ``inputs`` (sockets or numbers); its output."""
        node = self.nodes.new("ShaderNodeMath")
        node.operation = operation
        for socket, value in zip(node.inputs, inputs, strict=False):
            self.feed(socket, value)
        return node.outputs[0]

    def feed(self, socket, value) -> None:
        if isinstance(value, bpy.types.NodeSocket):
            self.links.new(value, socket)
        else:
            socket.default_value = value

    def position(self):
        """The shaded point's world position, as separate x, y, z outputs."""
        separate = self.nodes.new("ShaderNodeSeparateXYZ")
        self.links.new(self.nodes.new("ShaderNodeNewGeometry").outputs["Position"],
                       separate.inputs[0])
        return separate.outputs

    def mix(self, factor, first, second):
        """``first`` to ``second`` (RGB triples or colour sockets) by ``factor``: the colour
        output."""
        node = self.nodes.new("ShaderNodeMix")
        node.data_type = "RGBA"
        self.feed(node.inputs["Factor"], factor)
        for socket, colour in ((node.inputs["A"], first), (node.inputs["B"], second)):
            self.feed(socket, colour if isinstance(colour, bpy.types.NodeSocket)
                      else (*colour, 1.0))
        return node.outputs["Result"]


def _material(name: str, albedo, detail: float) -> bpy.types.Material:
    """A Principled BSDF of roughness ``ROUGHNESS[name's kind]`` whose base colour is
    ``albedo(nodes)`` (a colour socket) times the detail's factor in ``1 ± detail``."""
    material = bpy.data.materials.new(name)
    nodes = _Nodes(material)
    bsdf = next(n for n in nodes.nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    bsdf.inputs["Roughness"].default_value = ROUGHNESS[name.split("_")[0]]
    colour = albedo(nodes)
    if detail:
        noise = nodes.nodes.new("ShaderNodeTexNoise")
        noise.inputs["Scale"].default_value = DETAIL_SCALE
        noise.inputs["Detail"].default_value = len(scene.DETAIL_PERIODS) - 1
        noise.inputs["Roughness"].default_value = 1.0  # octaves weighted alike, as the lattices
        nodes.links.new(nodes.nodes.new("ShaderNodeNewGeometry").outputs["Position"],
                        noise.inputs["Vector"])
        stretched = nodes.math("MULTIPLY_ADD", noise.outputs["Fac"], DETAIL_CONTRAST,
                               0.5 - 0.5 * DETAIL_CONTRAST)
        factor = nodes.math("MULTIPLY_ADD", nodes.math("MINIMUM", nodes.math(
            "MAXIMUM", stretched, 0.0), 1.0), 2 * detail, 1 - detail)
        scaled = nodes.nodes.new("ShaderNodeVectorMath")
        scaled.operation = "SCALE"
        nodes.links.new(colour, scaled.inputs["Vector"])
        nodes.links.new(factor, scaled.inputs["Scale"])
        colour = scaled.outputs["Vector"]
    nodes.links.new(colour, bsdf.inputs["Base Color"])
    return material


def _stripes(palette):
    """The ball's stripes (``photo_capture.STRIPES``) in the object's own normal."""
    def albedo(nodes: _Nodes):
        separate = nodes.nodes.new("ShaderNodeSeparateXYZ")
        nodes.links.new(nodes.nodes.new("ShaderNodeTexCoord").outputs["Normal"],
                        separate.inputs[0])
        x, y, z = separate.outputs
        around = nodes.math("FLOOR", nodes.math("MULTIPLY", nodes.math("ARCTAN2", y, x),
                                                scene.STRIPES[0] / math.pi))
        up = nodes.math("FLOOR", nodes.math("MULTIPLY", z, scene.STRIPES[1]))
        stripe = nodes.math("FLOORED_MODULO", nodes.math("ADD", around, up), 3.0)
        first = nodes.math("COMPARE", stripe, 0.0, 0.5)
        second = nodes.math("COMPARE", stripe, 1.0, 0.5)
        return nodes.mix(second, nodes.mix(first, palette[2], palette[0]), palette[1])
    return albedo


def _grain(nodes: _Nodes):
    """The table's wood (``photo_capture.GRAIN_*``)."""
    x, y, _ = nodes.position()
    a, b, c = scene.GRAIN_WAVES
    wave = nodes.math("SINE", nodes.math("MULTIPLY_ADD", x, a, nodes.math(
        "MULTIPLY", nodes.math("SINE", nodes.math("MULTIPLY", y, c)), b)))
    grain = nodes.math("MULTIPLY_ADD", wave, 0.5, 0.5)
    light = tuple(dark + rise for dark, rise in zip(scene.GRAIN_DARK, scene.GRAIN_RISE,
                                                    strict=True))
    return nodes.mix(grain, scene.GRAIN_DARK, light)


def _tiles(albedo):
    """A room face's tiles of half a unit (``photo_capture.TILE_CONTRAST``), read a little
    behind the face so that the face's own coordinate is one tile's throughout."""
    def colour(nodes: _Nodes):
        behind = nodes.nodes.new("ShaderNodeVectorMath")
        behind.operation = "MULTIPLY_ADD"
        geometry = nodes.nodes.new("ShaderNodeNewGeometry")
        nodes.links.new(geometry.outputs["Normal"], behind.inputs[0])
        behind.inputs[1].default_value = (-0.01, -0.01, -0.01)
        nodes.links.new(geometry.outputs["Position"], behind.inputs[2])
        separate = nodes.nodes.new("ShaderNodeSeparateXYZ")
        nodes.links.new(behind.outputs[0], separate.inputs[0])
        x, y, z = (nodes.math("FLOOR", nodes.math("MULTIPLY", axis, 2.0))
                   for axis in separate.outputs)
        total = nodes.math("ADD", nodes.math("ADD", x, y), z)
        tile = nodes.math("FLOORED_MODULO", total, 2.0)
        dark = tuple(value * (1 - scene.TILE_CONTRAST / 2) for value in albedo)
        bright = tuple(value * (1 + scene.TILE_CONTRAST / 2) for value in albedo)
        return nodes.mix(tile, dark, bright)
    return colour
