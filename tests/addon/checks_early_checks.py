"""Checks that come before anything is rendered (issue 56.9), and a result that cannot be
imported yet (56.7), under bpy (see harness.py): a mesh with no faces, a Resolution too small
for the server to score, a world whose node tree was emptied, an orthographic camera, a
reference disabled in viewports (its modifiers lost) or in renders, or not in the scene, are
each refused by ``validate.problems`` (what Optimize asks before it renders) with a sentence
naming them and what to do; a non-manifold mesh exports every face; a half-written manifest
leaves the job "done, not imported" with a sentence."""

import contextlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
import scenes

import addon
from addon import export_scene, scene_updates, subjects, validate
from addon.core import job_session
from addon.core.wire import protocol


@contextlib.contextmanager
def _registered():
    addon.register()
    try:
        yield
    finally:
        addon.unregister()


def _scene_with(obj=None):
    """Four cameras around the origin, a lit world and ``obj`` (a cube when None), selected
    and active (the add-on registered)."""
    scene = bpy.context.scene
    if obj is None:
        bpy.ops.mesh.primitive_cube_add(size=1.0)
        obj = bpy.context.active_object
    else:
        scene.collection.objects.link(obj)
    for other in scene.objects:
        other.select_set(other == obj)
    bpy.context.view_layer.objects.active = obj
    scenes.cameras_around(scene, 4, 6.0, 1.0)
    world = bpy.data.worlds.new("world")
    world.use_nodes = True
    scene.world = world
    bpy.context.view_layer.update()
    return scene, obj


def _problems() -> list[str]:
    return validate.problems(bpy.context, bpy.context.scene.diffrec)


def _mesh_object(name, vertices, edges=(), faces=()):
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata([tuple(v) for v in vertices], list(edges), list(faces))
    mesh.update()
    return bpy.data.objects.new(name, mesh)


def check_the_setup_used_below_has_no_problems():
    with _registered():
        _scene_with()
        assert _problems() == []


def check_a_mesh_without_faces_is_refused_naming_it():
    with _registered():
        wire = _mesh_object("wire", [(0, 0, 0), (1, 0, 0), (0, 1, 0)], edges=[(0, 1), (1, 2)])
        _scene_with(wire)
        problems = _problems()
        assert "'wire' has no faces (only vertices or edges): add faces to it, or select a mesh " \
               "that has some." in problems, problems


def check_a_reference_disabled_in_viewports_is_refused_and_one_hidden_with_the_eye_is_not():
    with _registered():
        scene, cube = _scene_with()
        scene.diffrec.reference_object, scene.diffrec.triangles = cube, 100
        cube.modifiers.new("subdivision", "SUBSURF")
        cube.hide_viewport = True
        wanted = ("'Cube' is disabled in viewports (the monitor icon, on it or on a collection "
                  "holding it, or its collection is excluded), so Blender would give diffrec its "
                  "mesh without modifiers: enable it in viewports (to keep the viewport light, "
                  "hide it with the eye icon instead).")
        assert _problems() == [wanted], _problems()
        # why: disabled, its evaluated mesh is the bare cube's 12 triangles, not the 48 rendered
        assert subjects.triangle_count(cube, bpy.context.evaluated_depsgraph_get()) == 12
        cube.hide_viewport = False
        cube.hide_set(True)
        assert _problems() == []
        assert subjects.triangle_count(cube, bpy.context.evaluated_depsgraph_get()) == 48
        shelf = bpy.data.collections.new("shelf")  # now a collection disabled in viewports
        bpy.context.scene.collection.children.link(shelf)
        shelf.objects.link(cube)
        bpy.context.scene.collection.objects.unlink(cube)
        shelf.hide_viewport = True
        assert _problems() == [wanted], _problems()


def check_a_reference_alone_disabled_in_renders_is_refused():
    with _registered():
        scene, cube = _scene_with()
        scene.diffrec.reference = "OBJECT"
        wanted = ("'Cube' is disabled in renders (the camera icon, on it or on a collection "
                  "holding it, or its collection is excluded), so the target renders would not "
                  "show it: enable it in renders.")
        cube.hide_render = True
        assert _problems() == [wanted], _problems()
        cube.hide_render = False
        shelf = bpy.data.collections.new("shelf")
        scene.collection.children.link(shelf)
        shelf.objects.link(cube)
        scene.collection.objects.unlink(cube)
        shelf.hide_render = True
        assert _problems() == [wanted], _problems()
        shelf.hide_render = False
        assert _problems() == []
        scene.diffrec.reference = "SCENE"  # the scene as it renders: a start hidden is fine
        cube.hide_render = True
        assert _problems() == []


def check_a_reference_object_from_another_scene_is_refused():
    with _registered():
        scene, _ = _scene_with()
        elsewhere = bpy.data.scenes.new("elsewhere")
        bpy.ops.mesh.primitive_uv_sphere_add()
        sphere = bpy.context.active_object
        elsewhere.collection.objects.link(sphere)
        scene.collection.objects.unlink(sphere)
        scene.objects["Cube"].select_set(True)
        bpy.context.view_layer.objects.active = scene.objects["Cube"]
        scene.diffrec.reference_object = sphere
        not_here = ("'Sphere' is not in the scene 'Scene': link it into this scene, or pick an "
                    "object that is.")
        assert not_here in _problems(), _problems()
        for reference, triangles in (("OBJECT", 0), ("SCENE", 300)):  # rendered alone, baked
            scene.diffrec.reference, scene.diffrec.triangles = reference, triangles
            assert _problems() == [not_here], _problems()  # not "disabled in renders" too


def check_a_resolution_too_small_to_score_is_refused_with_the_one_that_does():
    with _registered():
        scene, _ = _scene_with()
        scene.render.resolution_x, scene.render.resolution_y = 1920, 1080
        scene.diffrec.train_resolution = 16
        wanted = ("Resolution 16 makes the training images 16x9 pixels, and the server needs at "
                  "least 11 on each side to score the result: set Resolution to 19 or more.")
        assert wanted in _problems()
        scene.diffrec.train_resolution = 19
        assert _problems() == []


def check_a_panel_value_the_server_refuses_is_named():
    with _registered():
        scene, _ = _scene_with()
        scene.diffrec.mode = "reconstruct"
        scene.diffrec.grid = 33  # the server's grid must be even
        problems = _problems()
        assert any(problem.startswith("Grid: the server refuses this value (grid: must be "
                                      "even)") for problem in problems), problems


def check_a_triangle_budget_below_4_is_said_once():
    with _registered():
        scene, _ = _scene_with()
        scene.diffrec.triangles = 2
        assert _problems() == [validate.FEW_TRIANGLES], _problems()


def check_a_selection_without_an_active_mesh_is_named_with_or_without_a_budget():
    """Whatever Triangles says (a budget bakes the reference), an active object that is not
    a mesh is named as such, and a mesh selected but not active is named with how to make it
    active; with nothing selected a budget asks for something to bake from."""
    with _registered():
        scene, cube = _scene_with()
        for kind, data in (("LIGHT", bpy.data.lights.new("lamp", "POINT")),
                           ("FONT", bpy.data.curves.new("words", "FONT")), ("EMPTY", None)):
            obj = bpy.data.objects.new(kind.lower(), data)
            scene.collection.objects.link(obj)
        cube_not_active = ("'Cube' is selected but not active, and Optimize works on the "
                           "active object: click it to make it active.")
        for triangles, nothing in ((0, validate.NOTHING_SELECTED), (100, validate.NO_REFERENCE)):
            scene.diffrec.triangles = triangles
            for name, kind in (("empty", "an empty"), ("light", "a light"),
                               ("font", "a text object"), ("cam0", "a camera")):
                for obj in scene.objects:
                    obj.select_set(obj.name == name)
                bpy.context.view_layer.objects.active = scene.objects[name]
                assert _problems() == [f"'{name}' is {kind}, not a mesh: select a mesh "
                                       "object."], (triangles, _problems())
            scene.objects["cam0"].select_set(False)
            cube.select_set(True)  # the camera still active, unselected
            assert _problems() == [cube_not_active], (triangles, _problems())
            bpy.context.view_layer.objects.active = None
            assert _problems() == [cube_not_active], (triangles, _problems())
            cube.select_set(False)
            bpy.context.view_layer.objects.active = cube
            cube.hide_set(True)  # the eye icon: it deselects the object, which stays active
            assert not cube.select_get() and bpy.context.active_object == cube
            hidden = _problems()
            assert hidden[0].startswith("'Cube' is hidden (the eye icon), and a hidden object "
                                        "is not selected: ") and "Reference Object" in hidden[0]
            scene.diffrec.reference_object = cube
            assert _problems() == ([] if triangles else hidden), (triangles, _problems())
            scene.diffrec.reference_object = None
            cube.hide_set(False)
            cube.select_set(False)
            bpy.context.view_layer.objects.active = None
            assert _problems() == [nothing], (triangles, _problems())
        scene.diffrec.target_source = "DATASET"  # the panel hides the Reference Object
        assert validate.NOTHING_SELECTED in _problems(), _problems()
        bpy.context.view_layer.objects.active = cube
        cube.hide_set(True)
        said = " ".join(_problems())
        assert "is hidden (the eye icon)" in said and "Reference Object" not in said, said


def check_an_emptied_world_is_refused_naming_it():
    with _registered():
        scene, _ = _scene_with()
        scene.world.node_tree.nodes.clear()
        problems = _problems()
        assert any(problem.startswith("The world 'world' has no shader linked to a World Output")
                   and "render black" in problem for problem in problems), problems


def check_an_hdri_cut_from_the_world_output_is_refused_and_not_read_as_the_light():
    """An Environment Texture into a Background that no longer reaches the World Output: the
    renders are black, so the setup is refused, and the export does not read the image as
    the light the renders had."""
    with _registered():
        scene, _ = _scene_with()
        world = scenes.sky_world(scene, np.full(4, 0.5), 8)
        assert _problems() == [] and export_scene.environment_node(world)[0] is not None
        background = world.node_tree.nodes["Background"]
        world.node_tree.links.remove(background.outputs["Background"].links[0])
        problems = _problems()
        assert any(problem.startswith("The world 'sky' has no shader linked to a World Output")
                   for problem in problems), problems
        assert export_scene.environment_node(world) == (None, None)


def check_an_orthographic_camera_is_named_with_how_to_leave_it_out():
    with _registered():
        scene, _ = _scene_with()
        scene.objects["cam1"].data.type = "ORTHO"
        problems = _problems()
        assert problems == [
            "Camera 'cam1' is orthographic, and diffrec renders through perspective cameras only: "
            "set its Type to Perspective, or leave it out (select the other cameras and set "
            "Cameras to Selected)."], problems
        for name in ("cam0", "cam2", "cam3"):  # as the sentence says
            scene.objects[name].select_set(True)
        scene.diffrec.cameras = "SELECTED"
        assert _problems() == []


def check_a_non_manifold_mesh_exports_every_face_at_its_height():
    """A fin (three faces on one edge), a face on its own and a loose edge: the export keeps
    every face's triangles and the mesh's full 3.1 m height."""
    vertices = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1),
                (3, 3, 2.0), (4, 3, 2.0), (3, 4, 3.1), (5, 5, 0), (6, 6, 0)]
    faces = [(0, 1, 2), (0, 1, 3), (0, 1, 4), (5, 6, 7)]
    import bmesh  # once bpy is loaded

    fin = _mesh_object("fin", vertices, edges=[(8, 9)], faces=faces)
    bpy.context.scene.collection.objects.link(fin)
    bm = bmesh.new()
    bm.from_mesh(fin.data)
    assert sum(not edge.is_manifold for edge in bm.edges) > 0
    bm.free()
    arrays = export_scene.export_mesh(fin, bpy.context.evaluated_depsgraph_get())
    assert len(arrays.faces) == len(faces), arrays.faces
    used = arrays.vertices[np.unique(arrays.faces)]
    assert np.isclose(used[:, 2].max() - used[:, 2].min(), 3.1), used


def check_a_half_written_manifest_leaves_the_job_done_not_imported_with_a_sentence():
    addon.register()
    try:
        folder = Path(tempfile.mkdtemp())
        (folder / "mesh.glb").write_bytes(b"glTF")
        manifest = protocol().manifest
        path = manifest.write_manifest(folder, {"mesh.glb": "mesh"})
        path.write_text(path.read_text() * 2)  # two writers of one part file
        settings = bpy.context.scene.diffrec
        entry = settings.jobs.add()
        entry.job_id, entry.state, entry.object_name = "j", "done", "ball"
        reports = []
        update = job_session.Update("fetched", {"files": [str(folder / "mesh.glb"), str(path)]})
        scene_updates.apply_update(bpy.context, "j", update, lambda *report: reports.append(
            report))
        assert not entry.imported and entry.state == "done"
        assert entry.message.startswith("done, not imported: ") and "Extra data" in \
            entry.message and entry.message.endswith("Re-attach and Fetch tries again."), \
            entry.message
        assert settings.status == entry.message, settings.status
        assert not bpy.data.objects
    finally:
        addon.unregister()


harness.main(globals())
