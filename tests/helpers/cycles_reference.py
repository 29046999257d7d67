"""Render a scene description with Blender's Cycles, as an independent reference.

Run in its own process (bpy and torch each bring their own threading runtimes):

    python cycles_reference.py SCENE.json

SCENE.json holds: ``mesh`` (an .npz with positions [V,3], triangles [T,3], uvs [U,2],
uv_triangles [T,3], world space, metres), ``hdri`` (an equirectangular EXR, used through an
Environment Texture node exactly as an artist would), ``material`` (``kd`` RGB or ``kd_image``
sRGB PNG, ``roughness``, ``metallic``, optional ``normal_image``: a tangent-space OpenGL
normal map PNG, optional ``ior``: the Principled BSDF's IOR, 1.5 by default), ``cameras``
(camera_to_world 4x4 lists), ``fx``, ``size``, ``samples``, ``out_dir`` and optionally
``max_bounces`` (default 0). Writes ``out_dir/view_NN.exr`` (RGBA, scene-linear,
premultiplied, rows as Blender writes them). Light from the world only, direct unless
``max_bounces`` allows bounces, transparent film.
"""

import json
import sys
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix


def build_world(scene, hdri: str) -> None:
    world = bpy.data.worlds.new("reference world")
    world.use_nodes = True
    nodes, links = world.node_tree.nodes, world.node_tree.links
    env = nodes.new("ShaderNodeTexEnvironment")
    env.image = bpy.data.images.load(hdri)
    links.new(env.outputs["Color"], nodes["Background"].inputs["Color"])
    scene.world = world


def build_mesh(path: str) -> bpy.types.Mesh:
    data = np.load(path)
    mesh = bpy.data.meshes.new("reference mesh")
    mesh.from_pydata(data["positions"].tolist(), [], data["triangles"].tolist())
    uv_layer = mesh.uv_layers.new(name="UVMap")
    corner_uvs = data["uvs"][data["uv_triangles"]].reshape(-1).astype(np.float32)
    uv_layer.data.foreach_set("uv", corner_uvs)
    mesh.polygons.foreach_set("use_smooth", np.ones(len(mesh.polygons), dtype=bool))
    mesh.update()
    return mesh


def build_material(spec: dict) -> bpy.types.Material:
    material = bpy.data.materials.new("reference material")
    material.use_nodes = True
    nodes, links = material.node_tree.nodes, material.node_tree.links
    bsdf = nodes["Principled BSDF"]
    bsdf.distribution = "GGX"  # single-scattering GGX, as the split-sum model
    bsdf.inputs["Roughness"].default_value = spec["roughness"]
    bsdf.inputs["Metallic"].default_value = spec["metallic"]
    bsdf.inputs["IOR"].default_value = spec.get("ior", 1.5)
    if "kd_image" in spec:
        tex = nodes.new("ShaderNodeTexImage")
        tex.image = bpy.data.images.load(spec["kd_image"])
        links.new(tex.outputs["Color"], bsdf.inputs["Base Color"])
    else:
        bsdf.inputs["Base Color"].default_value = (*spec["kd"], 1.0)
    if "normal_image" in spec:
        image = bpy.data.images.load(spec["normal_image"])
        image.colorspace_settings.is_data = True
        tex = nodes.new("ShaderNodeTexImage")
        tex.image = image
        normal_map = nodes.new("ShaderNodeNormalMap")
        normal_map.space = "TANGENT"
        normal_map.uv_map = "UVMap"
        links.new(tex.outputs["Color"], normal_map.inputs["Color"])
        links.new(normal_map.outputs["Normal"], bsdf.inputs["Normal"])
    return material


def configure_cycles(scene, size: int, samples: int, max_bounces: int = 0) -> None:
    """Cycles on the CPU, direct world light only by default (no bounces: what split-sum
    models on a convex object), no denoising, a fixed seed, transparent film, ``size`` square
    pixels, 32-bit RGBA EXR output."""
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = samples
    scene.cycles.use_denoising = False
    scene.cycles.max_bounces = max_bounces
    scene.cycles.seed = 1
    scene.render.film_transparent = True
    scene.render.resolution_x = scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "OPEN_EXR"
    scene.render.image_settings.color_depth = "32"
    scene.render.image_settings.color_mode = "RGBA"


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    configure_cycles(scene, spec["size"], spec["samples"], spec.get("max_bounces", 0))
    build_world(scene, spec["hdri"])

    mesh = build_mesh(spec["mesh"])
    mesh.materials.append(build_material(spec["material"]))
    obj = bpy.data.objects.new("reference object", mesh)
    scene.collection.objects.link(obj)

    camera_data = bpy.data.cameras.new("reference camera")
    camera_data.sensor_fit = "HORIZONTAL"
    camera_data.sensor_width = 36.0
    camera_data.lens = spec["fx"] * 36.0 / spec["size"]
    camera_data.clip_start, camera_data.clip_end = 0.1, 1000.0
    camera = bpy.data.objects.new("reference camera", camera_data)
    scene.collection.objects.link(camera)
    scene.camera = camera
    out_dir = Path(spec["out_dir"])
    for index, matrix in enumerate(spec["cameras"]):
        camera.matrix_world = Matrix(matrix)  # rows
        scene.render.filepath = str(out_dir / f"view_{index:02d}.exr")
        bpy.ops.render.render(write_still=True)


if __name__ == "__main__":
    main(sys.argv[1])
