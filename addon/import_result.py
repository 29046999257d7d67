"""A reconstruction result into the scene: mesh object, PBR material and world.

Inputs are arrays in the wire's conventions (DESIGN.md): positions in Blender world space,
UVs with a bottom-left origin, images [H,W,C] float with rows top-down; ``kd`` linear base
colour (stored as an sRGB image), ``ks`` linear (R occlusion; G roughness; B metallic),
``normal`` a tangent-space OpenGL normal map encoded in [0,1], ``envmap`` a linear
equirectangular [H,W,3] map. Images are packed into the .blend.

The material reproduces the backend's shading: ``(diffuse + specular) * (1 - occlusion)``, so
where ``ks`` holds occlusion the Principled BSDF reaches the output through a Mix Shader that
fades it to black (the Mix Shader's empty input) by the occlusion.
"""

from __future__ import annotations

from dataclasses import dataclass

import bpy
import numpy as np

from . import pixels

LINEAR = "Linear Rec.709"


@dataclass
class Asset:
    """vertices [V,3], faces [F,3] int; uvs [U,2] with uv_faces [F,3] (rows of ``uvs`` per
    corner), or None; textures [H,W,3] or None."""

    vertices: np.ndarray
    faces: np.ndarray
    uvs: np.ndarray | None = None
    uv_faces: np.ndarray | None = None
    kd: np.ndarray | None = None
    ks: np.ndarray | None = None
    normal: np.ndarray | None = None
    envmap: np.ndarray | None = None


def _linear_to_srgb(values: np.ndarray) -> np.ndarray:
    values = np.clip(values, 0.0, 1.0)
    return np.where(values <= 0.0031308, values * 12.92, 1.055 * values ** (1 / 2.4) - 0.055)


def new_image(name: str, array: np.ndarray, colorspace: str, pack: bool = True):
    """An image from [H,W,3|4] (rows top-down; alpha kept), packed into the .blend unless
    ``pack`` is false. ``colorspace`` 'sRGB' stores 8-bit sRGB from linear values;
    'Non-Color' stores 8-bit data; LINEAR stores float."""
    height, width = array.shape[:2]
    is_float = colorspace == LINEAR
    image = bpy.data.images.new(name, width, height, alpha=True, float_buffer=is_float)
    image.colorspace_settings.name = colorspace  # before the pixels: setting it resets them
    data = pixels.rgba(np.asarray(array, np.float32)).copy()
    if colorspace == "sRGB":
        data[..., :3] = _linear_to_srgb(data[..., :3])
    image.pixels.foreach_set(pixels.to_blender_rows(data))
    if pack:
        image.pack()
    return image


def build_mesh(name: str, asset: Asset) -> bpy.types.Mesh:
    """A smooth-shaded mesh with a 'UVMap' layer when the asset has UVs."""
    vertices = np.asarray(asset.vertices, np.float32)
    faces = np.asarray(asset.faces, np.int32)
    if vertices.ndim != 2 or vertices.shape[1] != 3 or faces.ndim != 2 or faces.shape[1] != 3:
        raise ValueError(
            f"expected vertices [V,3] and faces [F,3], got {vertices.shape} and {faces.shape}"
        )
    if len(faces) == 0 or faces.min() < 0 or faces.max() >= len(vertices):
        raise ValueError("the result mesh is empty or has face indices out of range")
    mesh = bpy.data.meshes.new(name)
    mesh.vertices.add(len(vertices))
    mesh.vertices.foreach_set("co", vertices.reshape(-1))
    mesh.loops.add(faces.size)
    mesh.loops.foreach_set("vertex_index", faces.reshape(-1))
    mesh.polygons.add(len(faces))
    mesh.polygons.foreach_set("loop_start", np.arange(0, faces.size, 3, dtype=np.int32))
    mesh.polygons.foreach_set("use_smooth", np.ones(len(faces), dtype=bool))
    if asset.uvs is not None:
        uv_layer = mesh.uv_layers.new(name="UVMap")
        uv_faces = faces if asset.uv_faces is None else np.asarray(asset.uv_faces)
        uv_layer.data.foreach_set("uv", np.asarray(asset.uvs, np.float32)[uv_faces].reshape(-1))
    mesh.update()
    mesh.validate()
    return mesh


def _image_node(nodes, image, location):
    node = nodes.new("ShaderNodeTexImage")
    node.image = image
    node.location = location
    return node


def _node(nodes, idname: str):
    """The first node of type ``idname`` (e.g. one of a new material's defaults)."""
    return next(node for node in nodes if node.bl_idname == idname)


def _fade_by_occlusion(nodes, links, shader_socket, occlusion_socket) -> None:
    """Route ``shader_socket`` to the material output through a Mix Shader whose factor is
    ``occlusion_socket`` and whose second shader stays empty (black): ``shader * (1 - occ)``."""
    output = _node(nodes, "ShaderNodeOutputMaterial")
    fade = nodes.new("ShaderNodeMixShader")
    fade.label = "occlusion"
    fade.location = tuple(output.location)
    output.location = (output.location[0] + 200, output.location[1])
    links.new(occlusion_socket, fade.inputs[0])
    links.new(shader_socket, fade.inputs[1])
    links.new(fade.outputs["Shader"], output.inputs["Surface"])


def build_material(name: str, asset: Asset) -> bpy.types.Material:
    """Principled BSDF fed by the kd (sRGB), ks (roughness = G, metallic = B; Non-Color) and
    normal (tangent-space Normal Map node; Non-Color) textures present in ``asset``; scaled by
    ``1 - occlusion`` (ks R) when the ks image keeps any occlusion."""
    material = bpy.data.materials.new(name)
    if bpy.app.version < (5, 0, 0):
        material.use_nodes = True
    nodes, links = material.node_tree.nodes, material.node_tree.links
    bsdf = _node(nodes, "ShaderNodeBsdfPrincipled")
    if asset.kd is not None:
        kd = _image_node(nodes, new_image(f"{name} kd", asset.kd, "sRGB"), (-600, 300))
        links.new(kd.outputs["Color"], bsdf.inputs["Base Color"])
    if asset.ks is not None:
        ks = _image_node(nodes, new_image(f"{name} ks", asset.ks, "Non-Color"), (-600, 0))
        split = nodes.new("ShaderNodeSeparateColor")
        split.location = (-300, 0)
        links.new(ks.outputs["Color"], split.inputs["Color"])
        links.new(split.outputs["Green"], bsdf.inputs["Roughness"])
        links.new(split.outputs["Blue"], bsdf.inputs["Metallic"])
        if np.max(np.asarray(asset.ks)[..., 0]) >= 0.5 / 255:  # some occlusion survives in 8 bits
            _fade_by_occlusion(nodes, links, bsdf.outputs["BSDF"], split.outputs["Red"])
    if asset.normal is not None:
        image = new_image(f"{name} normal", asset.normal, "Non-Color")
        normal = _image_node(nodes, image, (-600, -300))
        normal_map = nodes.new("ShaderNodeNormalMap")
        normal_map.space = "TANGENT"
        normal_map.uv_map = "UVMap"
        normal_map.location = (-300, -300)
        links.new(normal.outputs["Color"], normal_map.inputs["Color"])
        links.new(normal_map.outputs["Normal"], bsdf.inputs["Normal"])
    return material


def build_world(name: str, envmap: np.ndarray) -> bpy.types.World:
    """A world lit by ``envmap`` through an equirectangular Environment Texture."""
    world = bpy.data.worlds.new(name)
    if bpy.app.version < (5, 0, 0):
        world.use_nodes = True
    nodes, links = world.node_tree.nodes, world.node_tree.links
    background = _node(nodes, "ShaderNodeBackground")
    env = nodes.new("ShaderNodeTexEnvironment")
    env.image = new_image(f"{name} environment", envmap, LINEAR)
    env.projection = "EQUIRECTANGULAR"
    env.location = (-300, 300)
    links.new(env.outputs["Color"], background.inputs["Color"])
    return world


def import_asset(context, name: str, asset: Asset, use_world: bool = True) -> bpy.types.Object:
    """Link a new object (mesh + material) into the scene's active collection, make it active,
    and, if the asset has an environment map and ``use_world``, make it the scene's world."""
    mesh = build_mesh(name, asset)
    mesh.materials.append(build_material(name, asset))
    obj = bpy.data.objects.new(name, mesh)
    context.collection.objects.link(obj)
    for other in context.selected_objects:
        other.select_set(False)
    obj.select_set(True)
    context.view_layer.objects.active = obj
    if asset.envmap is not None and use_world:
        context.scene.world = build_world(name, asset.envmap)
    return obj
