"""A job's result folder into the scene: ``mesh.glb`` through Blender's own glTF importer,
``probe.hdr`` as a world, both checked against the folder's ``manifest.json`` first. The
object goes into the "diffrec results" collection, beside the original; the world is not made
the scene's here (``worlds.adopt`` decides). The original object, its materials and images and
the scene's world are never changed.

The result format is docs/protocol.md's "Results" (``diffrec.protocol.manifest``, written by the
backend's ``pipeline/outputs.py``). ``mesh.glb`` holds the mesh and a glTF metallic-roughness
material: base colour (sRGB), one linear texture that is both the metallic-roughness texture
(G roughness, B metallic) and the occlusion texture (R = 1 - occlusion), and a tangent-space
normal map. Blender's importer builds the Principled BSDF from it and routes occlusion into its
"glTF Material Output" group, which no renderer reads; the backend shades
``(diffuse + specular) * (1 - occlusion)``, so the import sends the BSDF to the output through
a Mix Shader whose factor is that visibility and whose first shader is empty (black).
Images stay packed in the .blend.

``new_image`` (arrays into Blender images) serves the operators' previews and NeRF export.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import bpy
import numpy as np
from mathutils import Matrix

from . import corner_normals
from .core import pixels, wire
from .core.world_bounds import world_box
from .object_links import ORIGINAL, placed

LINEAR = "Linear Rec.709"
IMPORTED_ROLES = ("mesh", "light")
"""The manifest roles the add-on imports, hence all it fetches."""
RESULTS = "diffrec results"
"""The name of the collection results are imported into (one per scene)."""
RESULTS_MARK = "diffrec_results"
"""The custom property that marks a collection as a scene's results collection."""


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
        data[..., :3] = wire.protocol().images.linear_to_srgb(np.clip(data[..., :3], 0.0, 1.0))
    image.pixels.foreach_set(pixels.to_blender_rows(data))
    if pack:
        image.pack()
    return image


def _node(nodes, idname: str):
    """The first node of type ``idname`` (e.g. one of a new material's defaults)."""
    return next(node for node in nodes if node.bl_idname == idname)


class Imported(NamedTuple):
    """What ``import_result`` made: the object (None: the result has no mesh) and the world
    of its learned light (None: no light, or not asked for), not made the scene's."""

    object: bpy.types.Object | None
    world: bpy.types.World | None


def import_result(context, folder: Path, name: str, use_world: bool = True,
                  beside: bpy.types.Object | None = None) -> Imported:
    """Import the result in ``folder`` as ``name``: the object (made the only selected and the
    active one, in the RESULTS collection, moved along X to stand beside ``beside`` and its
    earlier results when given, and marked as ``beside``'s with the ORIGINAL property)
    and, if ``use_world`` and the result has a light, a world lit by it. Neither ``beside`` nor
    the scene's world is changed. Raises the protocol's ManifestError when the manifest is
    missing or the files it lists for import do not match it (nothing is imported then)."""
    manifest = wire.protocol().manifest
    folder = Path(folder)
    entries = manifest.select(manifest.read_manifest(folder), IMPORTED_ROLES)
    manifest.verify(folder, entries)
    paths = {entry.role: folder / entry.name for entry in entries}
    if "mesh" not in paths:
        return Imported(None, None)
    obj = import_glb(context, paths["mesh"], name)
    _into_results(context, obj)
    if beside is not None:
        place_beside(obj, beside)
        obj[ORIGINAL] = beside
    world = build_world(name, paths["light"]) if use_world and "light" in paths else None
    return Imported(obj, world)


def original_mark(obj: bpy.types.Object) -> bpy.types.Object | None:
    """The object ``obj`` is a result of, by its ORIGINAL property (a pointer, or in older
    files a name), or None: not a result, or its original is gone (in no scene: deleted, kept
    only by the mark; ``object_links``)."""
    mark = obj.get(ORIGINAL)
    if isinstance(mark, str):
        mark = bpy.data.objects.get(mark)
    return placed(mark) if isinstance(mark, bpy.types.Object) else None


def results_of(original: bpy.types.Object) -> list[bpy.types.Object]:
    """The objects imported as results of ``original`` (``original_mark``)."""
    return [obj for obj in bpy.data.objects
            if obj != original and original_mark(obj) == original]


def place_beside(obj: bpy.types.Object, original: bpy.types.Object) -> None:
    """Move ``obj`` along X so that its bounding box starts a tenth of the original's width
    (at least 0.1 m) past the original's and past every earlier result of it: side by side,
    never overlapping, never stacked on an earlier result."""
    bpy.context.view_layer.update()  # matrix_world of a just-imported object
    low = world_box(obj)[:, 0].min()
    original_x = world_box(original)[:, 0]
    right = max([original_x.max(), *(world_box(other)[:, 0].max()
                                     for other in results_of(original) if other != obj)])
    gap = max(0.1, 0.1 * (original_x.max() - original_x.min()))
    obj.location.x += right + gap - low


def results_collection(scene, create: bool = False) -> bpy.types.Collection | None:
    """``scene``'s own results collection: the first local collection in its tree (wherever
    the artist moved it) that is marked RESULTS_MARK or named RESULTS (files from before the
    mark); with ``create``, a new one under the scene's collection when it has none, else
    None. A collection linked from a library or overridden, or another scene's, is never it."""
    for collection in scene.collection.children_recursive:
        if (collection.library is None and collection.override_library is None
                and (collection.get(RESULTS_MARK) or collection.name == RESULTS)):
            return collection
    if not create:
        return None
    collection = bpy.data.collections.new(RESULTS)
    collection[RESULTS_MARK] = True
    scene.collection.children.link(collection)
    return collection


def _into_results(context, obj: bpy.types.Object) -> None:
    """Move ``obj`` into the scene's results collection (made on first use): linked there
    before it leaves the others, so that it is never left in none."""
    collection = results_collection(context.scene, create=True)
    if collection not in obj.users_collection:
        collection.objects.link(obj)
    for other in list(obj.users_collection):
        if other != collection:
            other.objects.unlink(obj)


def save_glb_beside_blend(paths: list[Path], name: str) -> Path | None:
    """Copy the result's mesh.glb next to the saved .blend as ``<name>.glb`` (None: the
    result has no mesh.glb or the .blend was never saved)."""
    glb = next((Path(path) for path in paths if Path(path).name == "mesh.glb"), None)
    if glb is None or not bpy.data.filepath:
        return None
    target = Path(bpy.data.filepath).parent / f"{bpy.path.clean_name(name)}.glb"
    target.write_bytes(glb.read_bytes())
    return target


def import_glb(context, path: Path, name: str) -> bpy.types.Object:
    """The one mesh object of a diffrec ``mesh.glb``, imported by Blender's glTF importer with
    vertices split only for the file's sake welded again, renamed ``name`` (object, mesh,
    material, and its images ``<name> kd|ks|normal``), its material faded by occlusion."""
    before = set(bpy.data.objects)
    if bpy.ops.import_scene.gltf(filepath=str(path), merge_vertices=True) != {"FINISHED"}:
        raise RuntimeError(f"Blender's glTF importer could not read {path}")
    new = [obj for obj in bpy.data.objects if obj not in before]
    meshes = [obj for obj in new if obj.type == "MESH"]
    if len(meshes) != 1 or len(new) != 1:
        raise RuntimeError(f"{path} holds {len(meshes)} meshes in {len(new)} objects; a diffrec "
                           "result holds one mesh")
    obj = meshes[0]
    obj.name = obj.data.name = name
    _undo_unit_scale(obj, context.scene.unit_settings.scale_length)
    _weld_keeping_shading(obj.data)
    for other in context.selected_objects:
        other.select_set(False)
    obj.select_set(True)
    context.view_layer.objects.active = obj
    material = obj.active_material
    if material is not None:
        material.name = name
        _name_images(material, name)
        _fade_by_occlusion(material)
    return obj


def _undo_unit_scale(obj: bpy.types.Object, scale_length: float) -> None:
    """Give back what the glTF importer divided by the scene's Unit Scale: it reads a file's
    lengths as metres, and a diffrec result's are Blender units, as the add-on sent them."""
    if scale_length != 1.0:
        obj.data.transform(Matrix.Scale(scale_length, 4))
        obj.location *= scale_length


def _weld_keeping_shading(mesh: bpy.types.Mesh) -> None:
    """Weld the vertices that the glTF file split where the shading normals differ (flat
    faces, sharp edges: the importer merges only vertices that share a normal), keeping each
    corner's normal as a custom normal (``corner_normals.kept``): the mesh is one piece again
    and shades as it did. Only exact duplicates merge (the file's copies are bit for bit the
    same; ``remove_doubles`` at distance 0 merges nothing in Blender 4.x)."""
    import bmesh

    positions = np.empty(len(mesh.vertices) * 3, np.float32)
    mesh.vertices.foreach_get("co", positions)
    _, first, copy_of = np.unique(positions.reshape(-1, 3), axis=0, return_index=True,
                                  return_inverse=True)
    original = first[copy_of.reshape(-1)]  # each vertex's first copy (itself if it is one)
    with corner_normals.kept(mesh):
        welded = bmesh.new()
        try:
            welded.from_mesh(mesh)
            welded.verts.ensure_lookup_table()
            verts = welded.verts
            bmesh.ops.weld_verts(welded, targetmap={
                verts[index]: verts[original[index]]
                for index in np.flatnonzero(original != np.arange(len(original)))})
            welded.to_mesh(mesh)
        finally:
            welded.free()


_IMAGE_ROLES = {"ShaderNodeBsdfPrincipled": "kd", "ShaderNodeSeparateColor": "ks",
                "ShaderNodeNormalMap": "normal"}


def _name_images(material, name: str) -> None:
    """``<name> kd``, ``<name> ks``, ``<name> normal``: each image by the node it feeds."""
    for link in material.node_tree.links:
        role = _IMAGE_ROLES.get(link.to_node.bl_idname)
        if link.from_node.bl_idname == "ShaderNodeTexImage" and role is not None:
            link.from_node.image.name = f"{name} {role}"


def _fade_by_occlusion(material) -> None:
    """Send the Principled BSDF to the output through a Mix Shader: factor the visibility the
    importer routed to the glTF group's Occlusion input, first shader empty (black), second the
    BSDF, i.e. ``BSDF x (1 - occlusion)``. Nothing when the material has no occlusion."""
    tree = material.node_tree
    visibility = next((link.from_socket for link in tree.links
                       if link.to_socket.name == "Occlusion"), None)
    if visibility is None:
        return
    output = _node(tree.nodes, "ShaderNodeOutputMaterial")
    bsdf = _node(tree.nodes, "ShaderNodeBsdfPrincipled")
    fade = tree.nodes.new("ShaderNodeMixShader")
    fade.label = "occlusion"
    fade.location = tuple(output.location)
    output.location = (output.location[0] + 200, output.location[1])
    tree.links.new(visibility, fade.inputs[0])
    tree.links.new(bsdf.outputs["BSDF"], fade.inputs[2])
    tree.links.new(fade.outputs["Shader"], output.inputs["Surface"])


def with_nodes(block):
    """``block`` (a new material or world) with its node tree made: before Blender 5.0 a new
    one has none until ``use_nodes`` is set."""
    if bpy.app.version < (5, 0, 0):
        block.use_nodes = True
    return block


def build_world(name: str, probe: Path) -> bpy.types.World:
    """A world lit by the equirectangular HDR image at ``probe`` (linear, packed) through an
    Environment Texture."""
    world = with_nodes(bpy.data.worlds.new(name))
    nodes, links = world.node_tree.nodes, world.node_tree.links
    background = _node(nodes, "ShaderNodeBackground")
    env = nodes.new("ShaderNodeTexEnvironment")
    env.image = bpy.data.images.load(str(probe))
    env.image.name = f"{name} environment"
    env.image.colorspace_settings.name = LINEAR
    env.image.pack()
    env.projection = "EQUIRECTANGULAR"
    env.location = (-300, 300)
    links.new(env.outputs["Color"], background.inputs["Color"])
    return world
