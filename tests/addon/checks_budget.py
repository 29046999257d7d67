"""Issue 50's one click, high to low, under bpy beside a real ``diffrec serve`` (DIFFREC_SERVER,
started by test_budget.py): select the heavy object, set Triangles, press Optimize.

The reference is never changed; a low-poly copy the artist placed beside it, the results and
the live mesh are hidden from every target render (and only then); the fit starts from the
reference's Cycles bake, and the decimated copy wearing the baked maps is rendered alone from the
target cameras (the start renders, sent as ``start_images``); the result is within the budget
and stands beside the reference; a second press with the result selected optimises the original
again, and its result stands past the first; nothing the job made for itself is left in the
scene.
"""

import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np
import scenes

from addon import (
    bake_start,
    export_scene,
    import_result,
    panel,
    submission,
    subjects,
    validate,
)
from addon.core.wire import protocol

BUDGET = 120
VIEWS = 6
COPY = "heavy diffrec start"
"""The decimated copy's name (``SubmissionBuilder._start_copy``)."""
SEEN: list[dict[str, bool]] = []
"""Per render: each mesh object's ``hide_render`` as the render began."""


def _target_renders() -> list[dict[str, bool]]:
    """The renders made before the copy exists: the targets'."""
    return [flags for flags in SEEN if COPY not in flags]


def _start_renders() -> list[dict[str, bool]]:
    return [flags for flags in SEEN if COPY in flags]


def _record_render(scene, *_args):
    SEEN.append({obj.name: obj.hide_render for obj in scene.objects if obj.type == "MESH"})


def _enable():
    import addon_utils

    addon_utils.enable("addon", default_set=True)
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint = os.environ["DIFFREC_SERVER"]
    preferences.timeout = 10.0


def _heavy_object() -> bpy.types.Object:
    """A subdivided sphere (about 2,000 triangles) whose material's base colour is red above
    z = 0 and blue below, roughness 0.4."""
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=4, radius=1.0)
    heavy = bpy.context.active_object
    heavy.name = "heavy"
    material = bpy.data.materials.new("heavy paint")
    material.use_nodes = True  # Blender 4.x makes a material without nodes
    nodes, links = material.node_tree.nodes, material.node_tree.links
    bsdf = nodes["Principled BSDF"]
    position = nodes.new("ShaderNodeNewGeometry")
    split = nodes.new("ShaderNodeSeparateXYZ")
    above = nodes.new("ShaderNodeMath")
    above.operation = "GREATER_THAN"
    mix = nodes.new("ShaderNodeMix")
    mix.data_type = "RGBA"
    mix.inputs["A"].default_value = (0.05, 0.1, 0.8, 1.0)
    mix.inputs["B"].default_value = (0.8, 0.1, 0.05, 1.0)
    links.new(position.outputs["Position"], split.inputs["Vector"])
    links.new(split.outputs["Z"], above.inputs[0])
    links.new(above.outputs["Value"], mix.inputs["Factor"])
    links.new(mix.outputs["Result"], bsdf.inputs["Base Color"])
    bsdf.inputs["Roughness"].default_value = 0.4
    heavy.data.materials.append(material)
    return heavy


def _fingerprint(obj) -> tuple:
    """What 'unchanged' means for the reference: its mesh, modifiers, materials, visibility."""
    coordinates = np.empty(len(obj.data.vertices) * 3, np.float32)
    obj.data.vertices.foreach_get("co", coordinates)
    material = obj.data.materials[0]
    return (len(obj.data.polygons), hashlib.sha256(coordinates.tobytes()).hexdigest(),
            [modifier.name for modifier in obj.modifiers], tuple(obj.matrix_world.col[3]),
            len(material.node_tree.nodes), len(material.node_tree.links), obj.hide_render,
            obj.hide_viewport)


def _scene():
    _enable()
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    scene.cycles.device, scene.cycles.samples = "CPU", 2
    scene.render.resolution_x = scene.render.resolution_y = 32
    heavy = _heavy_object()
    bpy.ops.mesh.primitive_cube_add(size=0.5, location=(3.0, 0.0, 0.0))
    beside = bpy.context.active_object
    beside.name = "low copy"
    scenes.cameras_around(scene, VIEWS, radius=4.5, height=1.0)
    scenes.sky_world(scene, np.linspace(2.0, 0.4, 8), width=16)
    for obj in scene.objects:
        obj.select_set(obj == heavy)
    bpy.context.view_layer.objects.active = heavy
    settings = scene.diffrec
    settings.mode, settings.preset = "refine", "CUSTOM"
    settings.iterations, settings.batch, settings.train_resolution = 4, 2, 32
    settings.texture_resolution, settings.light_resolution = "256", 32
    settings.reference_object = heavy
    settings.triangles = BUDGET
    if _record_render not in bpy.app.handlers.render_pre:
        bpy.app.handlers.render_pre.append(_record_render)
    SEEN.clear()
    return scene, heavy, beside


def _press() -> None:
    result = bpy.ops.diffrec.optimize()
    assert result == {"FINISHED"}, (result, bpy.context.scene.diffrec.status)


def check_live_one_click_makes_a_result_within_budget_beside_an_untouched_reference():
    scene, heavy, beside = _scene()
    before, objects_before = _fingerprint(heavy), set(scene.objects)
    settings = scene.diffrec
    settings.reference = "OBJECT"
    _press()
    assert _fingerprint(heavy) == before
    entry = settings.jobs[-1]
    assert entry.state == "done" and entry.object_name == "heavy", (entry.state, settings.status)
    assert entry.light == "fixed"  # Auto keeps the world: the targets are its renders
    result = bpy.data.objects[f"{heavy.name} optimised"]
    assert len(result.data.polygons) <= BUDGET, len(result.data.polygons)
    assert import_result.original_mark(result) == heavy and entry.result == result
    heavy_right = max((heavy.matrix_world @ v.co).x for v in heavy.data.vertices)
    assert min((result.matrix_world @ v.co).x for v in result.data.vertices) > heavy_right
    # the targets: six renders, the reference alone in each, then the start's six, the copy
    # alone in each; the scene's flags back after
    assert len(_target_renders()) == len(_start_renders()) == VIEWS, SEEN
    assert SEEN[:VIEWS] == _target_renders()
    for flags in _target_renders():
        assert flags["heavy"] is False and flags["low copy"] is True, flags
    for flags in _start_renders():
        assert flags[COPY] is False and flags["heavy"] is True and flags["low copy"] is True
    assert not beside.hide_render and not heavy.hide_render
    left = {obj.name for obj in set(scene.objects) - objects_before} - {result.name}
    assert not left, left  # no decimated copy, no live mesh left behind


def check_live_the_scene_reference_hides_results_and_a_second_press_optimises_the_original():
    scene, heavy, _beside = _scene()
    settings = scene.diffrec
    settings.reference = "SCENE"
    _press()
    first = bpy.data.objects[f"{heavy.name} optimised"]
    assert bpy.context.active_object == first  # the import selects the result
    SEEN.clear()
    _press()  # with the result selected
    assert settings.jobs[-1].object_name == "heavy", settings.jobs[-1].object_name
    assert len(_target_renders()) == len(_start_renders()) == VIEWS, SEEN
    for flags in _target_renders():  # the scene as rendered, but never what diffrec made
        assert flags["heavy"] is False and flags["low copy"] is False, flags
        assert flags[first.name] is True, flags
    for flags in _start_renders():  # the start alone, whatever the targets show
        assert flags[COPY] is False and flags[first.name] is True, flags
        assert flags["heavy"] is True and flags["low copy"] is True, flags
    second = next(obj for obj in bpy.data.objects
                  if import_result.original_mark(obj) == heavy and obj != first)
    first_right = max((first.matrix_world @ v.co).x for v in first.data.vertices)
    assert min((second.matrix_world @ v.co).x for v in second.data.vertices) > first_right


def _contents(scene) -> tuple:
    """What the builder could leave behind: objects, meshes, images and materials."""
    return (set(scene.objects), set(bpy.data.meshes), set(bpy.data.materials),
            {image for image in bpy.data.images if image.type != "RENDER_RESULT"})


def check_the_start_renders_show_the_baked_copy_alone_from_the_target_cameras():
    """Built without a server: ``start_images`` has the targets' shape, covers what the
    reference alone covers (the start stands where it stands; the cube beside, which some
    cameras see, is hidden), and is not the targets (a faceted copy of 120 triangles has its own
    silhouette); the scene holds nothing more afterwards."""
    scene, _heavy, _beside = _scene()
    scene.diffrec.reference = "OBJECT"
    before = _contents(scene)
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    texts = []
    while not builder.step(bpy.context):
        texts.append(builder.text)
    assert builder.done == builder.steps, (builder.done, builder.steps)
    assert f"rendering the start 1/{VIEWS}" in texts and "exporting the mesh" in texts
    arrays = builder.submission.arrays
    targets, start = arrays["images"], arrays["start_images"]
    assert start.shape == targets.shape and start.dtype == np.float32, start.shape
    coverage = start[..., 3].sum(axis=(1, 2)) / targets[..., 3].sum(axis=(1, 2))
    assert np.all(np.abs(coverage - 1) < 0.1), coverage
    assert np.abs(start[..., 3] - targets[..., 3]).max() > 0.05
    assert _contents(scene) == before


def check_the_artists_own_low_poly_is_baked_onto_with_its_uvs_and_left_as_it_was():
    """Built without a server: the artist's own low-poly (an icosahedron with its own UV map,
    a second one beside it, and flat shading) selected, the heavy object its Reference
    Object, no budget: the reference is baked onto a copy of it that keeps its active UV map,
    as Blender's own route bakes onto the artist's low-poly; the job gets that mesh as the
    low-poly exports, the bake's maps (both of the reference's colours, red and blue) and the
    copy's start renders; the low-poly itself is unchanged and the scene holds nothing more
    afterwards."""
    scene, heavy, _beside = _scene()
    low = _own_low_poly(scene, heavy)
    low.data.uv_layers.new(name="lightmap", do_init=False)  # not active: not the one baked
    low.data.uv_layers.active = low.data.uv_layers[0]
    uvs_before = _active_uvs(low)
    exported = export_scene.export_mesh(low, bpy.context.evaluated_depsgraph_get())
    before = _contents(scene)
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    assert builder.bakes and builder.renders_start
    assert builder.unfit_uvs == [] and builder.take_notes() == []
    texts = _built(builder)
    assert "copying the selected mesh: its UVs and shading kept" in texts, texts
    arrays = builder.submission.arrays
    np.testing.assert_allclose(arrays["uvs"], exported.uvs, atol=1e-6)
    _assert_sent_as_exported_and_baked(arrays, exported)
    np.testing.assert_array_equal(_active_uvs(low), uvs_before)
    assert not low.data.materials and not low.hide_render and _contents(scene) == before


def check_an_own_low_poly_whose_uvs_overlap_is_baked_onto_a_copy_unwrapped_anew():
    """Built without a server: the artist's own low-poly with its UV map folded onto itself
    (both halves on the same texels, as mirrored game assets share them). Baked into as it is,
    two places of the surface would write one texel, and the server, whose rule refuses such
    UVs, would unwrap anew and start from the maps' averages. So the copy baked onto gets
    Smart UV Project's UVs, which the rule keeps, and keeps its shading; the artist is told
    why; the low-poly is unchanged."""
    scene, heavy, _beside = _scene()
    low = _own_low_poly(scene, heavy)
    folded = _fold_uvs(low)
    exported = export_scene.export_mesh(low, bpy.context.evaluated_depsgraph_get())
    before = _contents(scene)
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    assert builder.bakes and builder.renders_start
    (problem,) = builder.unfit_uvs
    assert "belong to more than one triangle" in problem, problem
    (note,) = builder.take_notes()
    assert note.startswith("The UVs of 'own low' are not baked into") and problem in note, note
    texts = _built(builder)
    assert "copying the selected mesh and unwrapping the copy (Smart UV Project)" in texts
    arrays = builder.submission.arrays
    uv_rule = protocol().uv_layout
    assert uv_rule.problems(arrays["vertices"][arrays["faces"]],
                            arrays["uvs"][arrays["uv_faces"]]) == []
    _assert_sent_as_exported_and_baked(arrays, exported)
    np.testing.assert_array_equal(_active_uvs(low), folded)
    assert _contents(scene) == before


def check_an_own_low_poly_without_uvs_is_unwrapped_keeping_its_shading():
    """Built without a server: the artist's own low-poly with no UV map: the copy baked onto
    gets Smart UV Project's, keeps its flat shading, and the note says so."""
    scene, heavy, _beside = _scene()
    low = _own_low_poly(scene, heavy)
    while low.data.uv_layers:
        low.data.uv_layers.remove(low.data.uv_layers[0])
    low.data.update()  # as an edit in the UI tags it: the evaluated mesh follows
    exported = export_scene.export_mesh(low, bpy.context.evaluated_depsgraph_get())
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    assert builder.unfit_uvs == [bake_start.NO_UV_MAP], builder.unfit_uvs
    assert builder.take_notes() == ["'own low' has no UV map: the start is a copy of it "
                                    "unwrapped by Smart UV Project, and the result has those "
                                    "UVs."]
    _built(builder)
    arrays = builder.submission.arrays
    assert protocol().uv_layout.problems(arrays["vertices"][arrays["faces"]],
                                         arrays["uvs"][arrays["uv_faces"]]) == []
    _assert_sent_as_exported_and_baked(arrays, exported)
    assert not low.data.uv_layers


def check_uvs_found_unfit_only_on_the_copy_are_unwrapped_there_and_said_then():
    """Built without a server: the low-poly's folded UVs pass the check made when Optimize is
    pressed (patched to find nothing, as where Blender's triangulation of a quad differs from
    the copy's); the copy, triangulated as it is sent, is checked again, found unfit,
    unwrapped anew, and the step that made it has the note to tell."""
    scene, heavy, _beside = _scene()
    low = _own_low_poly(scene, heavy)
    _fold_uvs(low)
    checked, real = [], bake_start.unfit_uvs

    def blind_at_first(obj, depsgraph):
        checked.append(obj.name)
        return [] if len(checked) == 1 else real(obj, depsgraph)

    bake_start.unfit_uvs = blind_at_first
    try:
        builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
        assert builder.take_notes() == []
        notes = []
        while not builder.step(bpy.context):
            notes += builder.take_notes()
    finally:
        bake_start.unfit_uvs = real
    assert checked == ["own low", "own low diffrec start"], checked
    (note,) = notes
    assert note.startswith("The UVs of 'own low' are not baked into"), note
    arrays = builder.submission.arrays
    assert protocol().uv_layout.problems(arrays["vertices"][arrays["faces"]],
                                         arrays["uvs"][arrays["uv_faces"]]) == []


def check_an_own_low_poly_over_triangles_is_decimated_and_unwrapped_and_left_as_it_was():
    """Built without a server: the artist's own low-poly of 320 triangles beside the Reference
    Object, Triangles at 100, Start From Auto: the copy baked onto is the low-poly's (not the
    reference's), decimated to the budget and unwrapped by Smart UV Project (its own UVs do
    not survive a collapse), and the low-poly is unchanged. With Camera images as targets,
    where the panel hides the Reference Object, the low-poly is its own reference."""
    scene, heavy, _beside = _scene()
    low = _own_low_poly(scene, heavy, subdivisions=3)
    scene.diffrec.triangles = 100  # Start From Auto: the selected mesh, not the reference
    uvs_before, faces_before = _active_uvs(low), len(low.data.polygons)
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    assert builder.start == "SELECTED" and builder.original == low
    assert builder.bakes and builder.unfit_uvs == []  # not asked: the copy is unwrapped anew
    texts = _built(builder)
    assert "decimating the selected mesh" in texts, texts
    arrays = builder.submission.arrays
    assert 4 <= len(arrays["faces"]) <= 100 < faces_before, len(arrays["faces"])
    assert protocol().uv_layout.problems(arrays["vertices"][arrays["faces"]],
                                         arrays["uvs"][arrays["uv_faces"]]) == []
    assert arrays["start_images"].shape == arrays["images"].shape
    np.testing.assert_array_equal(_active_uvs(low), uvs_before)
    assert len(low.data.polygons) == faces_before
    scene.diffrec.target_source = "DATASET"
    assert subjects.reference_object(bpy.context, scene.diffrec) == low
    assert subjects.start_kind(bpy.context, scene.diffrec) == "BAKED"


def _own_low_poly(scene, heavy, subdivisions: int = 1) -> bpy.types.Object:
    """An icosphere 'own low' (its own UV map, flat shading) over the heavy object, selected
    and active, the heavy object its Reference Object, Triangles 0."""
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=subdivisions, radius=1.0)
    low = bpy.context.active_object
    low.name = "own low"
    assert low.data.uv_layers, "the primitive has a UV map of its own"
    for obj in scene.objects:
        obj.select_set(obj == low)
    bpy.context.view_layer.objects.active = low
    scene.diffrec.reference_object, scene.diffrec.triangles = heavy, 0
    return low


def _fold_uvs(obj) -> np.ndarray:
    """Fold ``obj``'s active UV map onto itself across u = 0.5 (both halves on the same
    texels); its new UVs, flat [2 L]."""
    folded = _active_uvs(obj).reshape(-1, 2)
    folded[:, 0] = np.abs(2 * folded[:, 0] - 1)
    obj.data.uv_layers.active.data.foreach_set("uv", folded.ravel())
    obj.data.update()  # as an edit in the UI tags it (Blender 4.2 evaluates it stale else)
    return folded.ravel()


def _active_uvs(obj) -> np.ndarray:
    uvs = np.empty(len(obj.data.loops) * 2, np.float32)
    obj.data.uv_layers.active.data.foreach_get("uv", uvs)
    return uvs


def _built(builder) -> list[str]:
    """Step ``builder`` to its submission; the status texts it showed on the way."""
    texts = []
    while not builder.step(bpy.context):
        texts.append(builder.text)
    return texts


def _assert_sent_as_exported_and_baked(arrays, exported) -> None:
    """The job has the low-poly's own vertices, faces and (flat) shading, its start renders,
    and maps baked from both of the reference's colours (red above, blue below)."""
    np.testing.assert_allclose(arrays["vertices"], exported.vertices, atol=1e-5)
    np.testing.assert_array_equal(arrays["faces"], exported.faces)
    np.testing.assert_allclose(arrays["normals"][arrays["normal_faces"]],
                               exported.normals[exported.normal_faces], atol=1e-5)  # flat kept
    assert arrays["start_images"].shape == arrays["images"].shape
    kd = arrays["start_kd"]
    assert (kd[..., 0] - kd[..., 2]).max() > 0.3 and (kd[..., 2] - kd[..., 0]).max() > 0.3


def check_a_coated_reference_sends_its_coat_and_its_bodys_roughness():
    """Built without a server: a reference under one clear coat (weight 1, roughness 0.05,
    over the 0.4 body) sends that coat as ``start_coat``, which the job keeps, and the body's
    roughness, read with the metallic, as the start's (Blender's own roughness bake blends
    the two: checks_bake_start.py)."""
    scene, heavy, _beside = _scene()
    bsdf = heavy.data.materials[0].node_tree.nodes["Principled BSDF"]
    bsdf.inputs["Coat Weight"].default_value = 1.0
    bsdf.inputs["Coat Roughness"].default_value = 0.05
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    texts = []
    while not builder.step(bpy.context):
        texts.append(builder.text)
    assert builder.done == builder.steps, (builder.done, builder.steps)
    assert "baking metallic 3/4" in texts, texts  # the body's roughness comes with it
    arrays = builder.submission.arrays
    assert arrays["start_coat"].dtype == np.float32
    assert np.abs(arrays["start_coat"] - (1.0, 0.05)).max() < 1e-6, arrays["start_coat"]
    roughness = arrays["start_ks"][..., 1]
    charted = arrays["start_kd"].sum(-1) > 0  # texels the charts cover
    assert abs(np.median(roughness[charted]) - 0.4) < 0.01, np.median(roughness[charted])
    settings = scene.diffrec  # a coat path-traced Materials cannot shade: said before a render
    settings.mode, settings.shading = "materials", "path-traced"
    coat = ("'heavy' has one clear coat over it, which the fit keeps as a layer of its own and "
            "path-traced Shading does not shade: set Shading to Fast, or remove the coat.")
    assert coat in validate.problems(bpy.context, settings), validate.problems(bpy.context,
                                                                                settings)
    settings.shading = "rasterized"
    assert coat not in validate.problems(bpy.context, settings)


def check_a_reference_of_another_ior_sends_it_where_the_job_rasterizes():
    """Built without a server: a reference of IOR 2.4 sends it as ``start_ior`` (the job
    starts from it) and renders the start at it; with Shading path-traced, which shades 1.5
    and would refuse another, it sends none."""
    scene, heavy, _beside = _scene()
    bsdf = heavy.data.materials[0].node_tree.nodes["Principled BSDF"]
    bsdf.inputs["IOR"].default_value = 2.4
    iors = {}
    for shading in ("rasterized", "path-traced"):
        scene.diffrec.shading = shading
        builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
        while not builder.step(bpy.context):
            if builder._baked_material is not None:
                principled = builder._baked_material.node_tree.nodes["Principled BSDF"]
                iors[shading] = principled.inputs["IOR"].default_value
        iors[shading, "sent"] = builder.submission.arrays.get("start_ior")
    assert iors["rasterized", "sent"].dtype == np.float32
    assert np.abs(iors["rasterized", "sent"] - 2.4).max() < 1e-6, iors
    assert abs(iors["rasterized"] - 2.4) < 1e-6 and abs(iors["path-traced"] - 1.5) < 1e-6, iors
    assert iors["path-traced", "sent"] is None, iors


def check_the_panel_names_the_shaders_a_bake_cannot_read():
    """A reference whose surface mixes a Diffuse BSDF with a Glossy BSDF (no Principled
    BSDF): a baked start's panel says that the bake cannot read the Glossy BSDF; an Emission
    added is named too; not with a start as selected, nor for a Principled BSDF alone."""
    scene, heavy, _beside = _scene()
    settings = scene.diffrec
    principled_only = heavy.data.materials[0]
    assert bake_start.unread_shaders(heavy) == []
    assert panel.bake_note(bpy.context, settings) is None
    material = bpy.data.materials.new("diffuse and glossy")
    material.use_nodes = True  # Blender 4.x makes a material without nodes
    tree = material.node_tree
    tree.nodes.remove(tree.nodes["Principled BSDF"])
    mix = tree.nodes.new("ShaderNodeMixShader")
    tree.links.new(tree.nodes.new("ShaderNodeBsdfDiffuse").outputs[0], mix.inputs[1])
    tree.links.new(tree.nodes.new("ShaderNodeBsdfAnisotropic").outputs[0], mix.inputs[2])
    tree.links.new(mix.outputs[0], tree.nodes["Material Output"].inputs["Surface"])
    heavy.data.materials[0] = material
    assert bake_start.unread_shaders(heavy) == ["Glossy BSDF"]
    note = panel.bake_note(bpy.context, settings)
    assert note == "The bake cannot read Glossy BSDF: the fit learns its look", note
    settings.start_from = "SELECTED"
    assert panel.bake_note(bpy.context, settings) is None
    settings.start_from = "BAKED"
    add = tree.nodes.new("ShaderNodeAddShader")
    tree.links.new(mix.outputs[0], add.inputs[0])
    tree.links.new(tree.nodes.new("ShaderNodeEmission").outputs[0], add.inputs[1])
    tree.links.new(add.outputs[0], tree.nodes["Material Output"].inputs["Surface"])
    heavy.data.materials.append(principled_only)
    assert bake_start.unread_shaders(heavy) == ["Emission", "Glossy BSDF"]
    assert panel.bake_note(bpy.context, settings).endswith("the fit learns their look")


def check_a_cancelled_bake_leaves_the_scene_as_it_was():
    scene, _heavy, _beside = _scene()
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    while builder._targets is None:  # the renders (which leave Blender's Render Result)
        builder.step(bpy.context)
    objects, meshes, images = set(scene.objects), set(bpy.data.meshes), set(bpy.data.images)
    materials = set(bpy.data.materials)
    builder.step(bpy.context)  # the decimated copy
    assert builder._copy is not None and builder._copy.name in scene.objects
    assert len(builder._copy.data.polygons) <= BUDGET
    builder.step(bpy.context)  # one map baked
    assert builder.text.startswith("baking"), builder.text
    builder.close()
    assert set(scene.objects) == objects and set(bpy.data.meshes) == meshes
    assert set(bpy.data.images) == images and set(bpy.data.materials) == materials


def check_a_start_render_cancelled_half_way_leaves_the_scene_as_it_was():
    """Closed after the first start render: the baked copy and its baked material (and the
    material's images) are gone, every object's render flag is back."""
    scene, _heavy, _beside = _scene()
    before = _contents(scene)
    flags = {obj.name: obj.hide_render for obj in scene.objects}
    builder = submission.SubmissionBuilder(bpy.context, scene.diffrec)
    while not builder.text.startswith("rendering the start"):
        builder.step(bpy.context)
    builder.step(bpy.context)
    assert builder.text == f"rendering the start 2/{VIEWS}", builder.text
    builder.close()
    assert _contents(scene) == before
    assert {obj.name: obj.hide_render for obj in scene.objects} == flags


def check_an_unforeseen_error_in_the_bake_leaves_the_scene_as_it_was():
    """A build step raising what no build step means to (a MemoryError in the cage's
    distances, as a sculpt too big for this machine gives) fails the press, and still
    removes the decimated copy and what the bake made, and gives the render flags and
    Persistent Data back."""
    scene, _heavy, _beside = _scene()
    scene.diffrec.reference = "OBJECT"
    before = _contents(scene)
    flags = {obj.name: obj.hide_render for obj in scene.objects}
    persistent = scene.render.use_persistent_data

    def too_big(*_args):
        raise MemoryError("no memory left for the cage")

    real, bake_start.cage_distance = bake_start.cage_distance, too_big
    try:
        bpy.ops.diffrec.optimize()
    except RuntimeError as exc:
        assert "memory" in str(exc), exc
    else:
        raise AssertionError("the press went through")
    finally:
        bake_start.cage_distance = real
    assert _contents(scene) == before
    assert {obj.name: obj.hide_render for obj in scene.objects} == flags
    assert scene.render.use_persistent_data == persistent


def check_the_reference_alone_hides_a_collection_instance():
    """An Empty instancing a collection (how a linked asset stands in a scene) draws in a
    render: the reference alone hides it as it hides a mesh, and the start renders too."""
    scene, heavy, beside = _scene()
    asset = bpy.data.collections.new("asset")
    asset.objects.link(beside)
    scene.collection.objects.unlink(beside)
    instance = bpy.data.objects.new("asset instance", None)
    instance.instance_type, instance.instance_collection = "COLLECTION", asset
    scene.collection.objects.link(instance)
    assert instance in subjects.hidden_from_targets(scene, heavy, alone=True)
    assert instance not in subjects.hidden_from_targets(scene, heavy, alone=False)
    plain = bpy.data.objects.new("plain empty", None)
    assert subjects.draws_in_render(heavy) and not subjects.draws_in_render(plain)


harness.main(globals())
