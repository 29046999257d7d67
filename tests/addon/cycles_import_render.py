"""Import a diffrec result with the add-on and render it with Cycles (``test_cycles_import.py``).

Runs in its own process (bpy and torch stay apart), either way:

    python tests/addon/cycles_import_render.py -- SPEC.json
    blender --background --python tests/addon/cycles_import_render.py -- SPEC.json

SPEC.json holds ``result_dir`` (a job's result files as the backend writes them), ``transforms``
(a NeRF ``transforms_train.json`` with the cameras and their images), ``size``, ``samples``,
``out_dir`` and ``variants``: ``"as imported"`` and names from ``BREAKAGES``. For each variant
the scene starts from factory settings; the add-on builds the object, material and world from
the result folder as the Optimize operator does (``import_result.import_result``: mesh.glb
through Blender's glTF importer, probe.hdr), brings in the cameras with its NeRF import, and
renders them with Cycles through ``export_scene.render_views`` (the path that renders the
add-on's targets).
Writes ``out_dir/cameras.npz`` (the cameras as the add-on exports them: ``poses`` [N,4,4],
``intrinsics`` [N,6]) and ``out_dir/<variant>.npy`` (renders [N,H,W,4], scene-linear, straight
alpha, rows top-down).
"""

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # for helpers.cycles_reference
sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: F401, I001  (puts the repository on sys.path)
import bpy
import numpy as np
from helpers.cycles_reference import configure_cycles

import addon
from addon import export_scene, import_result


def _node(tree, bl_idname: str):
    return next(node for node in tree.nodes if node.bl_idname == bl_idname)


def _source(tree, node, socket: str):
    """The node linked into ``node.inputs[socket]``."""
    return next(link.from_node for link in tree.links
                if link.to_node == node and link.to_socket.name == socket)


def kd_read_as_data(material, world) -> None:
    """The base colour texture read as Non-Color (its sRGB encoding left in)."""
    tree = material.node_tree
    image = _source(tree, _node(tree, "ShaderNodeBsdfPrincipled"), "Base Color").image
    image.colorspace_settings.name = "Non-Color"


def roughness_metallic_swapped(material, world) -> None:
    """Roughness from the texture's blue channel and metallic from its green channel."""
    tree = material.node_tree
    bsdf, split = _node(tree, "ShaderNodeBsdfPrincipled"), _node(tree, "ShaderNodeSeparateColor")
    tree.links.new(split.outputs["Blue"], bsdf.inputs["Roughness"])
    tree.links.new(split.outputs["Green"], bsdf.inputs["Metallic"])


def occlusion_ignored(material, world) -> None:
    """The Principled BSDF straight into the output, without the ``1 - occlusion`` fade."""
    tree = material.node_tree
    tree.links.new(_node(tree, "ShaderNodeBsdfPrincipled").outputs["BSDF"],
                   _node(tree, "ShaderNodeOutputMaterial").inputs["Surface"])


def world_quarter_turn(material, world) -> None:
    """The environment turned a quarter about world Z (a wrong longitude origin)."""
    tree = world.node_tree
    coordinates = tree.nodes.new("ShaderNodeTexCoord")
    mapping = tree.nodes.new("ShaderNodeMapping")
    mapping.inputs["Rotation"].default_value = (0.0, 0.0, math.pi / 2)
    tree.links.new(coordinates.outputs["Generated"], mapping.inputs["Vector"])
    tree.links.new(mapping.outputs["Vector"], _node(tree, "ShaderNodeTexEnvironment").inputs[0])


def coat_dropped(material, world) -> None:
    """The clear coat the glTF importer read (``KHR_materials_clearcoat``) taken off."""
    _node(material.node_tree, "ShaderNodeBsdfPrincipled").inputs["Coat Weight"].default_value = 0


def glass_ior(material, world) -> None:
    """The IOR the glTF importer read (``KHR_materials_ior``) put back to glass's 1.5."""
    _node(material.node_tree, "ShaderNodeBsdfPrincipled").inputs["IOR"].default_value = 1.5


BREAKAGES = {
    "coat dropped": coat_dropped,
    "glass IOR": glass_ior,
    "kd read as data": kd_read_as_data,
    "roughness and metallic swapped": roughness_metallic_swapped,
    "occlusion ignored": occlusion_ignored,
    "world a quarter turn": world_quarter_turn,
}


def render_variant(spec: dict, variant: str, out_dir: Path) -> None:
    bpy.ops.wm.read_factory_settings(use_empty=True)
    addon.register()
    try:
        scene = bpy.context.scene
        configure_cycles(scene, spec["size"], spec["samples"])
        obj, scene.world = import_result.import_result(bpy.context, Path(spec["result_dir"]),
                                                       "result", use_world=True)
        assert bpy.ops.diffrec.import_nerf(filepath=spec["transforms"]) == {"FINISHED"}
        cameras = sorted((o for o in scene.objects if o.type == "CAMERA"), key=lambda o: o.name)
        size = (spec["size"], spec["size"])
        if variant == "as imported":
            poses, intrinsics = export_scene.export_cameras(cameras, scene, size)
            np.savez(out_dir / "cameras.npz", poses=poses, intrinsics=intrinsics)
        else:
            BREAKAGES[variant](obj.active_material, scene.world)
        images = export_scene.render_views(scene, cameras, size)
        np.save(out_dir / f"{variant}.npy", images.astype(np.float32))
    finally:
        addon.unregister()


def main() -> None:
    spec = json.loads(Path(sys.argv[sys.argv.index("--") + 1]).read_text())
    out_dir = Path(spec["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    for variant in spec["variants"]:
        render_variant(spec, variant, out_dir)


if __name__ == "__main__":
    main()
