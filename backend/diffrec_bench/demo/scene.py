"""The demo's scene, built with bpy: the object, its procedural material, the HDRI world and
the cameras around it.

The built-in example is Suzanne, subdivided, wearing a node material Blender evaluates
procedurally (noise-driven base colour, noise-driven roughness, a noise bump), lit by one of
the studio HDRIs Blender ships. ``--mesh`` swaps in the user's own OBJ/glTF (keeping its
materials when it has any) and ``--hdri`` the user's own environment map.
"""

from __future__ import annotations

import math
from pathlib import Path

import bpy
import numpy as np

DEFAULT_HDRI = "forest.exr"
OBJECT_RADIUS = 1.0  # the object is scaled so its bounding box fits a sphere of this radius
CAMERA_DISTANCE = 4.0
CAMERA_LENS_MM = 55.0  # 36 mm sensor: 36 degrees; the unit sphere (29 degrees) fills the frame


def bundled_hdri(name: str = DEFAULT_HDRI) -> Path:
    """One of the studio-light HDRIs in Blender's data files."""
    folder = Path(bpy.utils.system_resource("DATAFILES", path="studiolights/world"))
    path = folder / name
    if not path.is_file():
        names = sorted(p.name for p in folder.glob("*.exr"))
        raise FileNotFoundError(f"no {name} among Blender's studio lights ({', '.join(names)})")
    return path


def empty_scene(size: int, samples: int, use_gpu: bool) -> bpy.types.Scene:
    """A factory-fresh, empty scene rendering square ``size`` images with Cycles."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device = "GPU" if use_gpu and _enable_cycles_gpu() else "CPU"
    scene.cycles.samples = samples
    scene.cycles.use_adaptive_sampling = False
    scene.cycles.use_denoising = False
    scene.cycles.max_bounces = 4
    scene.cycles.seed = 0
    scene.render.resolution_x = scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.view_settings.view_transform = "Standard"  # sRGB display, like diffrec's images
    return scene


def _enable_cycles_gpu() -> bool:
    """Switch Cycles to a CUDA/OptiX device when Blender finds one."""
    preferences = bpy.context.preferences.addons["cycles"].preferences
    for kind in ("OPTIX", "CUDA"):
        try:
            preferences.compute_device_type = kind
        except TypeError:
            continue
        preferences.get_devices()
        devices = [d for d in preferences.devices if d.type == kind]
        for device in devices:
            device.use = True
        if devices:
            return True
    return False


def set_world(scene: bpy.types.Scene, hdri: Path) -> None:
    """World = the HDRI in an Environment Texture node (default mapping), strength 1."""
    world = bpy.data.worlds.new("diffrec demo world")
    scene.world = world
    world.use_nodes = True
    nodes, links = world.node_tree.nodes, world.node_tree.links
    nodes.clear()
    env = nodes.new("ShaderNodeTexEnvironment")
    env.image = bpy.data.images.load(str(hdri), check_existing=True)
    background = nodes.new("ShaderNodeBackground")
    output = nodes.new("ShaderNodeOutputWorld")
    links.new(env.outputs["Color"], background.inputs["Color"])
    links.new(background.outputs["Background"], output.inputs["Surface"])


def procedural_material() -> bpy.types.Material:
    """Principled BSDF with noise-driven base colour, roughness in [0.25, 0.8] and a bump."""
    material = bpy.data.materials.new("procedural")
    material.use_nodes = True
    nodes, links = material.node_tree.nodes, material.node_tree.links
    bsdf = next(n for n in nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    coords = nodes.new("ShaderNodeTexCoord")

    def noise(scale: float, detail: float):
        node = nodes.new("ShaderNodeTexNoise")
        node.inputs["Scale"].default_value = scale
        node.inputs["Detail"].default_value = detail
        links.new(coords.outputs["Object"], node.inputs["Vector"])
        return node

    ramp = nodes.new("ShaderNodeValToRGB")
    elements = ramp.color_ramp.elements
    elements[0].position, elements[0].color = 0.35, (0.60, 0.08, 0.03, 1.0)
    elements[1].position, elements[1].color = 0.65, (0.85, 0.70, 0.35, 1.0)
    middle = elements.new(0.5)
    middle.color = (0.05, 0.25, 0.45, 1.0)
    links.new(noise(3.0, 3.0).outputs["Fac"], ramp.inputs["Fac"])
    links.new(ramp.outputs["Color"], bsdf.inputs["Base Color"])

    roughness = nodes.new("ShaderNodeMapRange")
    roughness.inputs["To Min"].default_value = 0.25
    roughness.inputs["To Max"].default_value = 0.8
    links.new(noise(6.0, 2.0).outputs["Fac"], roughness.inputs["Value"])
    links.new(roughness.outputs["Result"], bsdf.inputs["Roughness"])

    bump = nodes.new("ShaderNodeBump")
    bump.inputs["Strength"].default_value = 0.4
    bump.inputs["Distance"].default_value = 0.02
    links.new(noise(12.0, 2.0).outputs["Fac"], bump.inputs["Height"])
    links.new(bump.outputs["Normal"], bsdf.inputs["Normal"])
    bsdf.inputs["Metallic"].default_value = 0.0
    return material


def suzanne(subdivisions: int = 2) -> bpy.types.Object:
    """Suzanne with a Subdivision Surface modifier, smooth shaded, with its UVs."""
    bpy.ops.mesh.primitive_monkey_add(size=2.0, calc_uvs=True)
    obj = bpy.context.view_layer.objects.active
    mesh = obj.data
    mesh.shade_smooth()
    modifier = obj.modifiers.new("Subdivision", "SUBSURF")
    modifier.levels = modifier.render_levels = subdivisions
    return obj


def import_mesh(path: Path) -> bpy.types.Object:
    """The user's OBJ or glTF as one object (several meshes are joined)."""
    before = set(bpy.data.objects)
    suffix = path.suffix.lower()
    if suffix == ".obj":
        bpy.ops.wm.obj_import(filepath=str(path))
    elif suffix in (".glb", ".gltf"):
        bpy.ops.import_scene.gltf(filepath=str(path))
    else:
        raise ValueError(f"--mesh {path}: use an .obj, .glb or .gltf file")
    meshes = [o for o in set(bpy.data.objects) - before if o.type == "MESH"]
    if not meshes:
        raise ValueError(f"--mesh {path}: the file holds no mesh")
    bpy.ops.object.select_all(action="DESELECT")
    for obj in meshes:
        obj.select_set(True)
    bpy.context.view_layer.objects.active = meshes[0]
    if len(meshes) > 1:
        bpy.ops.object.join()
    obj = bpy.context.view_layer.objects.active
    bpy.ops.object.parent_clear(type="CLEAR_KEEP_TRANSFORM")
    return obj


def fit_to_unit_sphere(obj: bpy.types.Object) -> None:
    """Scale and move ``obj`` so its bounding box is centred at the origin and its corners lie
    within ``OBJECT_RADIUS``; the transform is applied to the mesh data."""
    corners = np.array([obj.matrix_world @ _vector(c) for c in obj.bound_box])
    centre = (corners.min(0) + corners.max(0)) / 2
    radius = np.linalg.norm(corners - centre, axis=1).max()
    obj.location = obj.location - _vector(centre)
    obj.scale = obj.scale * (OBJECT_RADIUS / radius)
    bpy.context.view_layer.update()
    bpy.ops.object.select_all(action="DESELECT")
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.transform_apply(location=True, rotation=True, scale=True)


def _vector(values):
    from mathutils import Vector

    return Vector(tuple(float(v) for v in values))


def decimated_copy(obj: bpy.types.Object, ratio: float) -> bpy.types.Object:
    """A copy of ``obj`` with its modifiers applied and then collapsed to ``ratio`` of its
    triangles (the starting mesh of ``refine``); hidden from renders."""
    depsgraph = bpy.context.evaluated_depsgraph_get()
    mesh = bpy.data.meshes.new_from_object(obj.evaluated_get(depsgraph))
    copy = bpy.data.objects.new(f"{obj.name} decimated", mesh)
    copy.matrix_world = obj.matrix_world
    bpy.context.scene.collection.objects.link(copy)
    modifier = copy.modifiers.new("Decimate", "DECIMATE")
    modifier.ratio = ratio
    copy.hide_render = True
    return copy


def orbit_cameras(count: int, offset: float, prefix: str) -> list[bpy.types.Object]:
    """``count`` cameras on a golden-angle spiral around the origin, from 30 degrees below to
    60 degrees above the horizon, looking at the origin; ``offset`` (0..1) turns the spiral so
    that held-out cameras fall between the training ones."""
    golden = math.pi * (3.0 - math.sqrt(5.0))
    low, high = math.sin(math.radians(-30)), math.sin(math.radians(60))
    cameras = []
    for index in range(count):
        z = low + (high - low) * (index + 0.5) / count
        azimuth = golden * index + 2 * math.pi * offset
        ring = math.sqrt(1 - z * z)
        location = CAMERA_DISTANCE * np.array([ring * math.cos(azimuth),
                                               ring * math.sin(azimuth), z])
        data = bpy.data.cameras.new(f"{prefix}_{index:02d}")
        data.lens, data.sensor_width, data.sensor_fit = CAMERA_LENS_MM, 36.0, "AUTO"
        data.clip_start, data.clip_end = 0.1, 100.0
        camera = bpy.data.objects.new(data.name, data)
        camera.location = location.tolist()
        direction = _vector(-location)
        camera.rotation_euler = direction.to_track_quat("-Z", "Y").to_euler()
        bpy.context.scene.collection.objects.link(camera)
        cameras.append(camera)
    bpy.context.view_layer.update()
    return cameras
