"""The add-on's import of a result folder under bpy (see harness.py and test_import_result.py).

Needs DIFFREC_TEST_RESULT: a folder holding ``result/`` (a result as the backend writes it:
mesh.glb, probe.hdr, validation images, metrics.json, manifest.json) and ``expected.npz`` (what
the pytest side knows of it: ``kd``, ``ks`` [H,W,3] linear, rows top-down, ``probe`` [H,W,3]
as the backend reads probe.hdr, ``corners`` [T*3, 5] of (position, uv) per triangle corner,
``triangles`` and ``vertices`` counts).
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
from mathutils import Vector

from addon import import_result
from addon.core import wire

FOLDER = Path(os.environ.get("DIFFREC_TEST_RESULT", "."))
BSDF, TEX, SPLIT = "ShaderNodeBsdfPrincipled", "ShaderNodeTexImage", "ShaderNodeSeparateColor"


def _expected():
    return np.load(FOLDER / "expected.npz")


def _linked(tree, from_type, from_socket, to_type, to_socket) -> bool:
    return any(
        link.from_node.bl_idname == from_type and link.from_socket.name == from_socket
        and link.to_node.bl_idname == to_type and link.to_socket.name == to_socket
        for link in tree.links
    )


def _source_image(tree, to_type: str, to_socket: str):
    return next(link.from_node.image for link in tree.links
                if link.from_node.bl_idname == TEX and link.to_node.bl_idname == to_type
                and link.to_socket.name == to_socket)


def _pixels(image) -> np.ndarray:
    width, height = image.size
    flat = np.empty(width * height * 4, np.float32)
    image.pixels.foreach_get(flat)
    return flat.reshape(height, width, 4)[::-1]  # rows top-down


def _imported(folder=None, use_world=True, beside=None):
    return import_result.import_result(bpy.context, folder or FOLDER / "result", "result",
                                       use_world=use_world, beside=beside)


def _import(folder=None, use_world=True):
    return _imported(folder, use_world).object


def check_import_builds_the_object_where_the_backend_put_it():
    expected = _expected()
    obj = _import()
    assert obj.name == "result" and obj.data.name == "result"
    assert bpy.context.view_layer.objects.active == obj and obj.select_get()
    mesh = obj.data
    assert len(mesh.polygons) == int(expected["triangles"])
    assert len(mesh.vertices) == int(expected["vertices"]), "welded again after the GLB split"
    assert mesh.uv_layers.active is not None
    uvs = np.empty(len(mesh.loops) * 2, np.float32)
    mesh.uv_layers.active.data.foreach_get("uv", uvs)
    vertex_of_loop = np.empty(len(mesh.loops), np.int32)
    mesh.loops.foreach_get("vertex_index", vertex_of_loop)
    positions = np.empty(len(mesh.vertices) * 3, np.float32)
    mesh.vertices.foreach_get("co", positions)
    world = np.array(obj.matrix_world)
    points = positions.reshape(-1, 3)[vertex_of_loop] @ world[:3, :3].T + world[:3, 3]
    corners = np.concatenate([points, uvs.reshape(-1, 2)], -1)

    def ordered(rows):
        rows = np.round(rows, 4) + 0.0  # -0.0 sorts like 0.0
        return rows[np.lexsort(rows.T[::-1])]

    assert np.allclose(ordered(corners), ordered(expected["corners"]), atol=2e-4), \
        "positions in Blender's frame, uv origin bottom-left, as the backend's"


def check_import_builds_the_material_from_the_glb_textures():
    expected = _expected()
    tree = _import().active_material.node_tree
    assert _linked(tree, TEX, "Color", BSDF, "Base Color")
    assert _linked(tree, SPLIT, "Green", BSDF, "Roughness")
    assert _linked(tree, SPLIT, "Blue", BSDF, "Metallic")
    assert _linked(tree, TEX, "Color", "ShaderNodeNormalMap", "Color")
    assert _linked(tree, "ShaderNodeNormalMap", "Normal", BSDF, "Normal")
    normal_map = next(n for n in tree.nodes if n.bl_idname == "ShaderNodeNormalMap")
    assert normal_map.space == "TANGENT"
    kd = _source_image(tree, BSDF, "Base Color")
    ks = _source_image(tree, SPLIT, "Color")
    normal = _source_image(tree, "ShaderNodeNormalMap", "Color")
    assert (kd.name, ks.name, normal.name) == ("result kd", "result ks", "result normal")
    assert kd.colorspace_settings.name == "sRGB"
    assert ks.colorspace_settings.is_data and normal.colorspace_settings.is_data
    for image in (kd, ks, normal):
        assert image.packed_file is not None, image.name
    # values survive: kd stored sRGB-encoded (8 bit); ks as data, R holding 1 - occlusion
    linear = expected["kd"]
    srgb = np.where(linear <= 0.0031308, linear * 12.92, 1.055 * linear ** (1 / 2.4) - 0.055)
    assert np.abs(_pixels(kd)[..., :3] - srgb).max() < 1 / 255 + 1e-6
    stored = _pixels(ks)[..., :3]
    assert np.abs(stored[..., 0] - (1 - expected["ks"][..., 0])).max() < 1 / 255 + 1e-6
    assert np.abs(stored[..., 1:] - expected["ks"][..., 1:]).max() < 1 / 255 + 1e-6


def check_import_fades_the_material_by_occlusion():
    tree = _import().active_material.node_tree
    mix, output = "ShaderNodeMixShader", "ShaderNodeOutputMaterial"
    fade = next(node for node in tree.nodes if node.bl_idname == mix)
    factor = fade.inputs[0].name  # Factor; Fac before Blender 5
    assert _linked(tree, SPLIT, "Red", mix, factor)  # the visibility, 1 - occlusion
    assert _linked(tree, BSDF, "BSDF", mix, "Shader")
    assert _linked(tree, mix, "Shader", output, "Surface")
    assert not fade.inputs[1].is_linked and fade.inputs[2].is_linked  # black, then the BSDF
    split = fade.inputs[0].links[0].from_node
    assert split.inputs["Color"].links[0].from_node.image.name == "result ks"


def check_import_makes_a_world_from_the_probe_and_leaves_the_scenes():
    probe = _expected()["probe"]
    mine = bpy.data.worlds.new("mine")
    bpy.context.scene.world = mine
    world = _imported().world
    assert bpy.context.scene.world == mine, "the scene's world is the artist's to change"
    assert world.name == "result"
    env = next(n for n in world.node_tree.nodes if n.bl_idname == "ShaderNodeTexEnvironment")
    assert _linked(world.node_tree, "ShaderNodeTexEnvironment", "Color",
                   "ShaderNodeBackground", "Color")
    assert env.projection == "EQUIRECTANGULAR" and env.image.name == "result environment"
    assert env.image.is_float and env.image.colorspace_settings.name == "Linear Rec.709"
    assert env.image.packed_file is not None
    assert np.allclose(_pixels(env.image)[..., :3], probe, rtol=1e-2, atol=1e-3)


def check_import_makes_no_world_when_asked():
    worlds = set(bpy.data.worlds)
    assert _imported(use_world=False).world is None
    assert set(bpy.data.worlds) == worlds


def check_import_puts_the_result_beside_the_original_in_its_collection():
    """Issue 24.2: the result sat exactly on the original. It now starts a tenth of the
    original's width past its +X side, in 'diffrec results'; the original is untouched."""
    bpy.ops.mesh.primitive_cube_add(size=3.0, location=(0.5, 0.0, 0.0))
    original = bpy.context.active_object
    before = (np.array(original.matrix_world), len(original.data.vertices),
              [collection.name for collection in original.users_collection])
    obj = _imported(beside=original).object
    bpy.context.view_layer.update()
    corners = np.array([list(obj.matrix_world @ Vector(c)) for c in obj.bound_box])
    assert abs(corners[:, 0].min() - (2.0 + 0.3)) < 1e-4, corners[:, 0].min()
    assert [c.name for c in obj.users_collection] == [import_result.RESULTS]
    assert import_result.RESULTS in bpy.context.scene.collection.children
    after = (np.array(original.matrix_world), len(original.data.vertices),
             [collection.name for collection in original.users_collection])
    assert np.array_equal(before[0], after[0]) and before[1:] == after[1:], (before, after)


def _world_vertices(obj) -> np.ndarray:
    """``obj``'s vertices in world space, sorted by row [V, 3]."""
    bpy.context.view_layer.update()
    world = np.array(obj.matrix_world)
    points = np.array([tuple(vertex.co) for vertex in obj.data.vertices])
    points = np.round(points @ world[:3, :3].T + world[:3, 3], 4) + 0.0
    return points[np.lexsort(points.T[::-1])]


def check_a_scene_in_centimetres_gets_the_result_at_the_size_sent():
    """The glTF importer divides a file's lengths by the scene's Unit Scale; a result's are
    Blender units, as the add-on sent them, so it comes in where it was at Unit Scale 1."""
    plain = _world_vertices(_import())
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.context.scene.unit_settings.scale_length = 0.01
    assert np.allclose(_world_vertices(_import()), plain, atol=2e-4)


def check_each_scene_has_its_own_local_results_collection_wherever_it_was_moved():
    """A library's 'diffrec results' is never imported into (this file cannot add to it), a
    results collection the artist moved under another is found there, and another scene gets
    its own collection, not the first scene's."""
    directory = Path(tempfile.mkdtemp())
    shelf = bpy.data.collections.new(import_result.RESULTS)
    bpy.data.libraries.write(str(directory / "library.blend"), {shelf}, fake_user=True)
    bpy.data.collections.remove(shelf)
    with bpy.data.libraries.load(str(directory / "library.blend"), link=True) as (_, linked):
        linked.collections = [import_result.RESULTS]
    scene = bpy.context.scene
    scene.collection.children.link(linked.collections[0])
    first = _import()
    home = first.users_collection
    assert len(home) == 1 and home[0].library is None and home[0] != linked.collections[0]
    props = bpy.data.collections.new("props")  # the artist tidies the results away
    scene.collection.children.link(props)
    props.children.link(home[0])
    scene.collection.children.unlink(home[0])
    second = _import()
    assert second.users_collection == home
    assert home[0] not in list(scene.collection.children), "linked a second time"
    other = bpy.data.scenes.new("other")
    with bpy.context.temp_override(scene=other, view_layer=other.view_layers[0]):
        third = _import()
    assert third.users_collection[0] != home[0]
    assert home[0] not in other.collection.children_recursive
    assert third.users_collection[0] in other.collection.children_recursive
    assert import_result.results_collection(other) == third.users_collection[0]


def check_a_result_arriving_in_edit_mode_leaves_the_artist_editing():
    """The glTF importer works in Object Mode; a result that arrives while the artist edits a
    mesh leaves them editing it, with their selection, the result unselected beside."""
    from addon import scene_updates

    bpy.ops.mesh.primitive_cube_add(size=1.0)
    edited = bpy.context.active_object
    bpy.ops.object.mode_set(mode="EDIT")
    with scene_updates._artist_kept_at_work(bpy.context):
        obj = _import()
    assert bpy.context.mode == "EDIT_MESH" and edited.mode == "EDIT"
    assert bpy.context.view_layer.objects.active == edited
    assert not obj.select_get() and edited.select_get()
    bpy.ops.object.mode_set(mode="OBJECT")
    with scene_updates._artist_kept_at_work(bpy.context):
        obj = _import()  # in Object Mode the result is picked, as before
    assert bpy.context.view_layer.objects.active == obj and obj.select_get()


def check_an_original_renamed_while_its_job_ran_gets_the_result_beside_it():
    """The job's entry follows its object through a rename: the result stands beside the
    renamed original (not beside a newcomer that took its old name), is named after it, and
    stands for it when picked (``original_of``)."""
    import addon
    from addon import scene_updates, subjects

    addon.register()
    try:
        bpy.ops.mesh.primitive_cube_add(size=2.0, location=(0.0, 5.0, 0.0))
        original = bpy.context.active_object
        original.name = "Cube"
        entry = bpy.context.scene.diffrec.jobs.add()
        entry.job_id, entry.object_name, entry.original = "job", "Cube", original
        original.name = "Hero"
        bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0.0, -5.0, 0.0))
        bpy.context.active_object.name = "Cube"  # a newcomer takes the old name
        reports = []
        scene_updates._import_fetched(bpy.context, entry, [FOLDER / "result" / "mesh.glb"],
                                      lambda kinds, text: reports.append(text))
        assert entry.imported, reports
        result = bpy.data.objects["Hero optimised"]
        assert entry.result == result, "a script finds the result through its job"
        assert subjects.original_of(result) == original
        assert import_result.results_of(original) == [result]
        assert _box_x(result).min() > _box_x(original).max()
        result[import_result.ORIGINAL] = "Hero"  # as files from before the pointer mark it
        assert subjects.original_of(result) == original
    finally:
        addon.unregister()


def check_a_deleted_original_is_let_go_on_save_and_no_longer_stood_for():
    """The result's mark and the job's pointer are users of the original: deleted, it would
    stay in the file outside every scene. It counts as gone at once (picking the result means
    the result), and the next save lets the file forget it."""
    import addon
    from addon import scene_updates, subjects

    addon.register()
    try:
        bpy.ops.mesh.primitive_cube_add(size=2.0)
        original = bpy.context.active_object
        original.name = "heavy"
        entry = bpy.context.scene.diffrec.jobs.add()
        entry.job_id, entry.object_name, entry.original = "job", "heavy", original
        scene_updates._import_fetched(bpy.context, entry, [FOLDER / "result" / "mesh.glb"],
                                      lambda kinds, text: None)
        result = entry.result
        assert subjects.original_of(result) == original
        for obj in bpy.context.view_layer.objects:
            obj.select_set(obj == original)
        bpy.ops.object.delete()
        assert "heavy" in bpy.data.objects, "kept by the pointers until the file is saved"
        assert subjects.original_of(result) == result
        assert scene_updates.job_original(entry) is None
        path = Path(tempfile.mkdtemp()) / "deleted.blend"
        bpy.ops.wm.save_as_mainfile(filepath=str(path))
        bpy.ops.wm.open_mainfile(filepath=str(path))
        assert "heavy" not in bpy.data.objects, "the saved file let it go"
        assert "heavy optimised" in bpy.data.objects
    finally:
        addon.unregister()


def _box_x(obj) -> np.ndarray:
    bpy.context.view_layer.update()
    return np.array([(obj.matrix_world @ Vector(corner)).x for corner in obj.bound_box])


def check_a_corrupted_file_is_refused_and_nothing_imported():
    folder = Path(tempfile.mkdtemp()) / "result"
    shutil.copytree(FOLDER / "result", folder)
    data = bytearray((folder / "mesh.glb").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "mesh.glb").write_bytes(bytes(data))
    _assert_refused(folder, "mesh.glb does not match the manifest", "a corrupted mesh.glb")
    assert not bpy.data.objects and not bpy.data.materials
    (folder / "manifest.json").unlink()
    _assert_refused(folder, "incomplete", "a result without its manifest")


def _assert_refused(folder: Path, reason: str, what: str) -> None:
    """Importing ``folder`` raises ManifestError saying ``reason``."""
    try:
        _import(folder)
    except wire.protocol().ManifestError as error:
        assert reason in str(error), error
    else:
        raise AssertionError(f"{what} was imported")


def check_a_result_without_a_mesh_imports_nothing():
    folder = Path(tempfile.mkdtemp())
    (folder / "metrics.json").write_text("{}")
    wire.protocol().manifest.write_manifest(folder, {"metrics.json": "metrics"})
    assert _imported(folder) == (None, None)
    assert not bpy.data.objects


harness.main(globals())
