"""Blender's route (addon/bake_start.py) checks, run under bpy (see harness.py): the decimated
copy within budget with the reference untouched, baked maps against a material whose values
are known at every point, flat and bumpy normal maps, the scene as it was after the bake."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001  (puts the repository on sys.path)
import bpy
import numpy as np

from addon import bake_start

SIZE = 64
NEIGHBOURHOOD = 0.3
"""How far (object space) a texel's neighbours' points may lie for it to count as interior."""
RED, BLUE = (0.8, 0.1, 0.05), (0.05, 0.2, 0.9)


def _sphere(name="reference", segments=32, rings=16, location=(0.4, -0.3, 0.2)):
    """A smooth UV sphere of radius 1, moved and turned (the copies must follow its matrix)."""
    bpy.ops.mesh.primitive_uv_sphere_add(segments=segments, ring_count=rings, radius=1.0,
                                         location=location, rotation=(0.3, 0.0, 0.7))
    sphere = bpy.context.active_object
    sphere.name = name
    sphere.data.shade_smooth()
    return sphere


def _node(tree, idname, **inputs):
    node = tree.nodes.new(idname)
    for key, value in inputs.items():
        node.inputs[key].default_value = value
    return node


def _split(tree, axis: str):
    """A node output that is 1 where the object-space ``axis`` coordinate is > 0, else 0."""
    coordinates = tree.nodes.new("ShaderNodeTexCoord")
    separate = tree.nodes.new("ShaderNodeSeparateXYZ")
    tree.links.new(coordinates.outputs["Object"], separate.inputs[0])
    greater = tree.nodes.new("ShaderNodeMath")
    greater.operation = "GREATER_THAN"
    greater.inputs[1].default_value = 0.0
    tree.links.new(separate.outputs[axis], greater.inputs[0])
    return greater.outputs[0]


def _known_material(name="known"):
    """Base colour RED above z = 0 and BLUE below, roughness 0.3, metallic 1 where x > 0, all
    procedural (node links), not defaults."""
    material = bpy.data.materials.new(name)
    material.use_nodes = True  # Blender 4.x makes a material without nodes
    tree = material.node_tree
    principled = tree.nodes["Principled BSDF"]
    mix = tree.nodes.new("ShaderNodeMix")
    mix.data_type = "RGBA"
    tree.links.new(_split(tree, "Z"), mix.inputs["Factor"])
    mix.inputs[6].default_value = (*BLUE, 1.0)  # A (colour)
    mix.inputs[7].default_value = (*RED, 1.0)  # B (colour)
    tree.links.new(mix.outputs[2], principled.inputs["Base Color"])
    tree.links.new(_split(tree, "X"), principled.inputs["Metallic"])
    principled.inputs["Roughness"].default_value = 0.3
    return material


def _constant_material(name, colour, roughness, metallic):
    material = bpy.data.materials.new(name)
    material.use_nodes = True  # Blender 4.x makes a material without nodes
    principled = material.node_tree.nodes["Principled BSDF"]
    principled.inputs["Base Color"].default_value = (*colour, 1.0)
    principled.inputs["Roughness"].default_value = roughness
    principled.inputs["Metallic"].default_value = metallic
    return material


def _mesh_arrays(mesh):
    """Vertices [V,3], triangles [T,3] and their corners' UVs [T,3,2] of a triangle mesh."""
    mesh.calc_loop_triangles()
    vertices = np.empty(len(mesh.vertices) * 3)
    mesh.vertices.foreach_get("co", vertices)
    triangles = np.empty(len(mesh.loop_triangles) * 3, np.int64)
    mesh.loop_triangles.foreach_get("vertices", triangles)
    corners = np.empty(len(mesh.loop_triangles) * 3, np.int64)
    mesh.loop_triangles.foreach_get("loops", corners)
    uvs = np.empty(len(mesh.loops) * 2)
    mesh.uv_layers.active.data.foreach_get("uv", uvs)
    return (vertices.reshape(-1, 3), triangles.reshape(-1, 3),
            uvs.reshape(-1, 2)[corners.reshape(-1, 3)])


def _covered_texels(start, reference, size, interior=True):
    """(rows, columns, points): every texel of a ``size``-px map whose centre lies in one of
    ``start``'s UV triangles, and the point of that centre on the start's surface
    (barycentric in the triangle) in ``reference``'s object space, pushed onto the unit sphere
    around its origin.
    ``interior``: only texels whose eight neighbours are covered by nearby surface too (at
    test sizes the charts' gap is under a texel, and a texel at a chart's edge may blend in
    its neighbour chart)."""
    vertices, triangles, uvs = _mesh_arrays(start.data)
    into_reference = np.linalg.inv(np.array(reference.matrix_world)) @ np.array(start.matrix_world)
    vertices = vertices @ into_reference[:3, :3].T + into_reference[:3, 3]
    rows, columns = np.mgrid[0:size, 0:size].reshape(2, -1)
    centres = np.stack([(columns + 0.5) / size, 1 - (rows + 0.5) / size], -1)
    a, b, c = uvs[:, 0], uvs[:, 1], uvs[:, 2]  # [T,2] each
    ab, ac, ap = b - a, c - a, centres[:, None] - a  # ap [N,T,2]
    det = ab[:, 0] * ac[:, 1] - ab[:, 1] * ac[:, 0]
    safe = np.where(np.abs(det) > 1e-12, det, np.inf)
    v = (ap[..., 0] * ac[:, 1] - ap[..., 1] * ac[:, 0]) / safe
    w = (ab[:, 0] * ap[..., 1] - ab[:, 1] * ap[..., 0]) / safe
    inside = (v >= 0) & (w >= 0) & (v + w <= 1)
    texel, triangle = np.nonzero(inside)
    texel, first = np.unique(texel, return_index=True)
    triangle = triangle[first]
    weights = np.stack([1 - v[texel, triangle] - w[texel, triangle], v[texel, triangle],
                        w[texel, triangle]], -1)
    points = np.einsum("nk,nkd->nd", weights, vertices[triangles[triangle]])
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    rows, columns = rows[texel], columns[texel]
    if interior:
        grid = np.full((size + 2, size + 2, 3), np.nan)
        grid[rows + 1, columns + 1] = points
        shifts = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
        spread = np.max([np.linalg.norm(grid[rows + 1 + dr, columns + 1 + dc] - points, axis=1)
                         for dr, dc in shifts], axis=0)
        keep = spread < NEIGHBOURHOOD  # false where a neighbour is NaN (uncovered)
        rows, columns, points = rows[keep], columns[keep], points[keep]
    return rows, columns, points


def _away(points, axes, gap=0.1):
    """Which ``points`` lie at least ``gap`` from the planes x = 0 (etc.) of ``axes``."""
    return np.all(np.abs(points[:, ["xyz".index(axis) for axis in axes]]) > gap, axis=1)


def _known_scene():
    reference = _sphere()
    reference.data.materials.append(_known_material())
    start = bake_start.decimated_copy(reference, 300, "start")
    return reference, start


# -- decimated_copy --------------------------------------------------------------------------


def _coordinates(obj):
    flat = np.empty(len(obj.data.vertices) * 3)
    obj.data.vertices.foreach_get("co", flat)
    return flat


def check_decimated_copy_is_within_budget_and_leaves_the_reference():
    reference = _sphere()
    subdivision = reference.modifiers.new("subdivision", "SUBSURF")
    subdivision.levels = 1
    reference.data.materials.append(_known_material())
    bpy.ops.mesh.primitive_cube_add(location=(4, 0, 0))
    other = bpy.context.active_object
    reference.select_set(True)  # two selected, the cube active
    before = (len(reference.data.vertices), _coordinates(reference).tobytes(),
              [modifier.name for modifier in reference.modifiers], len(reference.data.materials))
    low = bake_start.decimated_copy(reference, 500, "low")
    after = (len(reference.data.vertices), _coordinates(reference).tobytes(),
             [modifier.name for modifier in reference.modifiers], len(reference.data.materials))
    assert after == before, "the reference's mesh, modifiers or materials changed"
    assert bpy.context.view_layer.objects.active == other
    assert sorted(obj.name for obj in bpy.context.selected_objects) == ["Cube", "reference"]
    assert bpy.context.mode == "OBJECT"
    triangles = bake_start.triangle_count(low.data)
    assert 250 < triangles <= 500, f"{triangles} triangles for a budget of 500"
    assert all(len(polygon.vertices) == 3 for polygon in low.data.polygons)
    assert not low.modifiers and not low.data.materials
    assert [layer.name for layer in low.data.uv_layers] == ["UVMap"]
    uvs = np.empty(len(low.data.loops) * 2)
    low.data.uv_layers[0].data.foreach_get("uv", uvs)
    assert uvs.min() >= 0 and uvs.max() <= 1 and np.ptp(uvs) > 0.5
    assert low.users_collection[0] == reference.users_collection[0]
    assert np.allclose(np.array(low.matrix_world), np.eye(4)), "the copy is in world space"
    # the copy lies on the reference's surface (world space): radius about 1 around its centre
    world = np.array(low.matrix_world)
    points = _coordinates(low).reshape(-1, 3) @ world[:3, :3].T + world[:3, 3]
    radii = np.linalg.norm(points - np.array(reference.location), axis=1)
    assert np.all(np.abs(radii - 1) < 0.05), (radii.min(), radii.max())


def check_budget_covering_the_reference_copies_it_whole():
    reference = _sphere(segments=12, rings=6)
    count = bake_start.triangle_count(reference.data)
    whole = bake_start.decimated_copy(reference, count, "whole")
    assert bake_start.triangle_count(whole.data) == count
    assert len(whole.data.vertices) == len(reference.data.vertices)


def _corner_normals_by_position(obj) -> dict:
    """{rounded world position: [corner normals there]} of ``obj``'s exported mesh."""
    from addon import export_scene

    mesh = export_scene.export_mesh(obj, bpy.context.evaluated_depsgraph_get())
    found: dict = {}
    for position, normal in zip(mesh.vertices[mesh.faces].reshape(-1, 3),
                                mesh.normals[mesh.normal_faces].reshape(-1, 3), strict=True):
        found.setdefault(tuple(np.round(position, 4)), []).append(normal)
    return found


def check_a_whole_copy_keeps_a_hard_surface_references_weighted_normals():
    """A bevelled cube shaded by a Weighted Normal modifier (flat faces, rounded bevels),
    copied whole, as it is and mirrored and turned: every corner of the copy shades with one
    of the reference's normals at that point, within a degree (its quads triangulated and
    shaded smooth would round the faces; a mirror's flip would garble them)."""
    bpy.ops.mesh.primitive_cube_add(size=2.0)
    reference = bpy.context.active_object
    bevel = reference.modifiers.new("bevel", "BEVEL")
    bevel.width, bevel.segments = 0.1, 2
    reference.modifiers.new("weighted", "WEIGHTED_NORMAL").keep_sharp = True
    reference.data.shade_smooth()
    for scale, turn in (((1.0, 1.0, 1.0), 0.0), ((-1.0, 1.0, 2.0), 0.4)):
        reference.scale, reference.rotation_euler = scale, (0.0, 0.0, turn)
        bpy.context.view_layer.update()
        truth = _corner_normals_by_position(reference)
        whole = bake_start.decimated_copy(reference, 100_000, "whole")
        copied = _corner_normals_by_position(whole)
        assert copied.keys() == truth.keys()
        worst = max(np.degrees(np.arccos(np.clip(max(np.dot(normal, other)
                                                       for other in truth[position]), -1, 1)))
                    for position, normals in copied.items() for normal in normals)
        assert worst < 1.0, f"{scale}: a corner's normal is {worst:.1f} degrees off"
        bpy.data.objects.remove(whole)


def check_decimated_copy_restores_edit_mode():
    reference = _sphere(segments=12, rings=6)
    bpy.ops.object.mode_set(mode="EDIT")
    bake_start.decimated_copy(reference, 40, "low")
    assert bpy.context.view_layer.objects.active == reference
    assert reference.mode == "EDIT"


def _world_points(obj) -> np.ndarray:
    """``obj``'s evaluated vertices in world space [V, 3]."""
    evaluated = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    return np.array([tuple(evaluated.matrix_world @ vertex.co)
                     for vertex in evaluated.data.vertices])


def check_the_copy_of_a_sheared_or_mirrored_reference_lies_on_it_facing_out():
    """A sphere turned under a parent scaled unevenly (its world matrix shears, which no
    unparented object can hold), then mirrored: the copy covers the same box, and its faces
    point away from the centre."""
    bpy.ops.object.empty_add(location=(0.5, 0.0, 0.0))
    parent = bpy.context.active_object
    parent.scale = (3.0, 1.0, 1.0)
    reference = _sphere(segments=16, rings=8, location=(0.0, 0.0, 0.0))
    reference.parent = parent
    reference.rotation_euler = (0.0, 0.0, 0.7)
    for mirror in (1.0, -1.0):
        reference.scale = (mirror, 1.0, 1.0)
        bpy.context.view_layer.update()
        low = bake_start.decimated_copy(reference, 10_000, "low")
        truth, copy = _world_points(reference), _world_points(low)
        assert np.abs(copy.min(0) - truth.min(0)).max() < 1e-4, (copy.min(0), truth.min(0))
        assert np.abs(copy.max(0) - truth.max(0)).max() < 1e-4, (copy.max(0), truth.max(0))
        centre = truth.mean(0)
        for polygon in low.data.polygons:
            assert np.dot(np.array(polygon.normal), np.array(polygon.center) - centre) > 0
        bpy.data.objects.remove(low)


def _linked_sphere(directory: Path) -> bpy.types.Object:
    """A sphere in a collection linked from a library .blend written to ``directory``: the
    object and its collection are library data, which this file cannot add objects to."""
    sphere = _sphere(segments=12, rings=6)
    shelf = bpy.data.collections.new("shelf")
    shelf.objects.link(sphere)
    library = directory / "library.blend"
    bpy.data.libraries.write(str(library), {shelf}, fake_user=True)
    bpy.data.objects.remove(sphere)
    bpy.data.collections.remove(shelf)
    with bpy.data.libraries.load(str(library), link=True) as (_, linked):
        linked.collections = ["shelf"]
    bpy.context.scene.collection.children.link(linked.collections[0])
    return linked.collections[0].objects[0]


def check_a_linked_reference_gets_its_copy_in_the_scenes_own_collection():
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        reference = _linked_sphere(Path(directory))
        assert reference.library is not None
        low = bake_start.decimated_copy(reference, 40, "low")
        assert low.library is None and low.users_collection == (bpy.context.scene.collection,)
        assert bake_start.triangle_count(low.data) <= 40
        assert [obj.name for obj in reference.users_collection[0].objects] == [reference.name]


def _raises(error, call, words):
    try:
        call()
    except error as raised:
        assert words in str(raised), str(raised)
        return
    raise AssertionError(f"no {error.__name__} ({words})")


def check_a_budget_below_what_loose_parts_keep_says_the_fewest_reached():
    """Collapse keeps a few triangles of each loose part whatever the ratio: the copy stops
    trying once a smaller ratio takes none off, and says how few it reached (before: eight
    full Decimate runs, then a count without a reason)."""
    corners = np.array([(x, y, z) for x in (0, 0.1) for y in (0, 0.1) for z in (0, 0.1)])
    sides = np.array([(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4),
                      (1, 5, 7, 3)])
    mesh = bpy.data.meshes.new("pebbles")  # 60 loose cubes
    offsets = [np.array((index % 8 * 0.2, index // 8 * 0.2, 0)) for index in range(60)]
    mesh.from_pydata([tuple(corner + offset) for offset in offsets for corner in corners], [],
                     [tuple(side + 8 * index) for index in range(60) for side in sides])
    pebbles = bpy.data.objects.new("pebbles", mesh)
    bpy.context.scene.collection.objects.link(pebbles)
    before = set(bpy.data.meshes)
    try:
        bake_start.decimated_copy(pebbles, 100, "low")
    except ValueError as error:
        words = str(error)
    else:
        raise AssertionError("no ValueError")
    assert "brings the 720 triangles down to " in words and "at the fewest" in words, words
    fewest = int(words.split(" down to ")[1].split(" ")[0].replace(",", ""))
    assert 100 < fewest < 720 and f"set Triangles to {fewest:,} or more" in words, words
    assert set(bpy.data.meshes) == before and "low" not in bpy.data.objects, "nothing left"


def check_errors_are_one_sentence():
    camera = bpy.data.objects.new("camera", bpy.data.cameras.new("camera"))
    bpy.context.scene.collection.objects.link(camera)
    _raises(ValueError, lambda: bake_start.decimated_copy(camera, 100, "low"), "mesh object")
    points = bpy.data.meshes.new("points")
    points.from_pydata([(0, 0, 0), (1, 0, 0)], [], [])
    loose = bpy.data.objects.new("points", points)
    bpy.context.scene.collection.objects.link(loose)
    _raises(ValueError, lambda: bake_start.decimated_copy(loose, 100, "low"), "no faces")
    assert "low" not in bpy.data.objects and "low" not in bpy.data.meshes
    reference = _sphere(segments=8, rings=4)
    _raises(ValueError, lambda: bake_start.decimated_copy(reference, 3, "low"), "at least 4")
    scene = bpy.context.scene
    _raises(ValueError, lambda: bake_start.MapBaker(scene, reference, loose, 16), "no faces")
    no_uvs = bpy.data.objects.new("no uvs", bpy.data.meshes.new("no uvs"))
    no_uvs.data.from_pydata([(0, 0, 0), (1, 0, 0), (0, 1, 0)], [], [(0, 1, 2)])
    scene.collection.objects.link(no_uvs)
    _raises(ValueError, lambda: bake_start.MapBaker(scene, reference, no_uvs, 16), "UV map")
    _raises(RuntimeError, lambda: bake_start._check_cycles(object()), "Cycles")
    other = bpy.data.scenes.new("other")
    _raises(ValueError, lambda: bake_start.MapBaker(other, reference, reference, 16),
            "current scene")


# -- the maps --------------------------------------------------------------------------------


def check_maps_match_the_known_material():
    reference, start = _known_scene()
    maps = bake_start.bake_maps(bpy.context.scene, reference, start, SIZE, samples=1)
    assert maps["base_color"].shape == (SIZE, SIZE, 3) and maps["roughness"].shape == (SIZE, SIZE)
    assert all(array.dtype == np.float32 for array in maps.values())
    rows, columns, points = _covered_texels(start, reference, SIZE, interior=False)
    assert len(rows) > 0.4 * SIZE**2, f"the charts cover {len(rows)} texels"
    brightness = maps["base_color"][rows, columns].sum(-1)
    assert brightness.min() > 0.5, "a texel missed the reference (black)"
    rows, columns, points = _covered_texels(start, reference, SIZE)
    known = _away(points, "xz")
    rows, columns, points = rows[known], columns[known], points[known]
    expected = np.where(points[:, 2:] > 0, RED, BLUE)
    base = maps["base_color"][rows, columns]
    assert np.abs(base - expected).max() < 0.02, np.abs(base - expected).max()
    assert np.abs(maps["roughness"][rows, columns] - 0.3).max() < 0.01
    metallic = maps["metallic"][rows, columns]
    assert np.abs(metallic - (points[:, 0] > 0)).max() < 0.01, metallic
    # no clear coat: none baked, and the fit starts from the roughness as baked
    assert not bake_start.has_coat(reference) and "coat" not in maps
    assert bake_start.uniform_coat(reference) is None and "base_roughness" not in maps
    assert bake_start.start_maps(maps) is maps
    # a smooth sphere onto its decimation: no bumps, the normals close to the start's own
    normal = maps["normal"][rows, columns]
    assert np.abs(normal - (0.5, 0.5, 1.0)).max() < 0.15


def check_a_clear_coat_turns_the_starts_roughness_towards_its_own():
    reference = _sphere()
    material = _constant_material("glazed above", RED, 0.6, 0.0)
    tree = material.node_tree
    principled = tree.nodes["Principled BSDF"]
    tree.links.new(_split(tree, "Z"), principled.inputs["Coat Weight"])
    principled.inputs["Coat Roughness"].default_value = 0.05
    reference.data.materials.append(material)
    start = bake_start.decimated_copy(reference, 300, "start")
    assert bake_start.has_coat(reference)
    assert bake_start.uniform_coat(reference) is None  # its weight varies: not one layer
    maps = bake_start.bake_maps(bpy.context.scene, reference, start, SIZE, samples=1)
    rows, columns, points = _covered_texels(start, reference, SIZE)
    known = _away(points, "z")
    rows, columns, points = rows[known], columns[known], points[known]
    top = points[:, 2] > 0
    assert maps["coat"].shape == (SIZE, SIZE, 2) and "base_roughness" not in maps
    coat = maps["coat"][rows, columns]
    assert np.abs(coat[:, 0] - top).max() < 0.01 and np.abs(coat[:, 1] - 0.05).max() < 0.01
    baked = maps["roughness"][rows, columns]
    assert np.abs(baked[~top] - 0.6).max() < 0.01
    assert baked[top].min() > 0.15  # Blender's own map: one lobe, the coat's and the base's blended
    started = bake_start.start_maps(maps)["roughness"][rows, columns]
    assert np.abs(started - np.where(top, 0.05, 0.6)).max() < 0.02


def check_a_uniform_clear_coat_is_kept_as_a_layer_over_the_bases_own_roughness():
    """One coat over the whole reference (weight 1, roughness 0.05, unlinked) over a body of
    roughness 0.6: the coat is read from the node, the metallic bake carries the body's
    roughness (Blender's own map blends the two), the start wears the body's roughness under
    the coat, and the start's material has the coat on the normal map's normals. A second
    material with another coat makes it two layers, not one."""
    reference = _sphere()
    material = _constant_material("glazed", RED, 0.6, 0.0)
    principled = material.node_tree.nodes["Principled BSDF"]
    principled.inputs["Coat Weight"].default_value = 1.0
    principled.inputs["Coat Roughness"].default_value = 0.05
    reference.data.materials.append(material)
    start = bake_start.decimated_copy(reference, 300, "start")
    assert bake_start.uniform_coat(reference) == (1.0, 0.05)  # rounded to 6 decimals
    maps = bake_start.bake_maps(bpy.context.scene, reference, start, SIZE, samples=1)
    assert "coat" not in maps
    rows, columns, _points = _covered_texels(start, reference, SIZE)
    assert np.abs(maps["base_roughness"][rows, columns] - 0.6).max() < 0.01
    assert maps["roughness"][rows, columns].max() < 0.45  # Blender's: the two lobes blended
    started = bake_start.start_maps(maps)
    assert started["roughness"] is maps["base_roughness"]
    made = bake_start.baked_material("start", started, bake_start.uniform_coat(reference))
    inputs = made.node_tree.nodes["Principled BSDF"].inputs
    assert abs(inputs["Coat Weight"].default_value - 1.0) < 1e-6
    assert abs(inputs["Coat Roughness"].default_value - 0.05) < 1e-6
    assert inputs["Coat Normal"].links[0].from_node.bl_idname == "ShaderNodeNormalMap"
    other = _constant_material("varnished", BLUE, 0.6, 0.0)
    other.node_tree.nodes["Principled BSDF"].inputs["Coat Weight"].default_value = 0.5
    reference.data.materials.append(other)
    assert bake_start.uniform_coat(reference) is None


def check_an_ior_is_read_where_it_is_one_over_the_object_and_not_glasss():
    """The Principled BSDF's IOR, unlinked and the same in every material, is what a start
    carries (``distinct_ior``); 1.5, a second material of another IOR, an IOR linked to a
    node, or a shader that is not a Principled BSDF give None. The start's material wears
    it."""
    reference = _sphere()
    material = _constant_material("gem", RED, 0.2, 0.0)
    principled = material.node_tree.nodes["Principled BSDF"]
    reference.data.materials.append(material)
    principled.inputs["IOR"].default_value = 1.5
    assert bake_start.distinct_ior(reference) is None
    principled.inputs["IOR"].default_value = 2.4
    assert abs(bake_start.distinct_ior(reference) - 2.4) < 1e-6
    maps = {name: np.full((4, 4, 3) if name in ("base_color", "normal") else (4, 4), 0.5,
                          np.float32) for name in bake_start.MAPS}
    made = bake_start.baked_material("start", maps, ior=bake_start.distinct_ior(reference))
    assert abs(made.node_tree.nodes["Principled BSDF"].inputs["IOR"].default_value - 2.4) < 1e-6
    plain = bake_start.baked_material("plain", maps).node_tree.nodes["Principled BSDF"]
    assert abs(plain.inputs["IOR"].default_value - bake_start.GLASS_IOR) < 1e-6
    other = _constant_material("glass", BLUE, 0.2, 0.0)
    reference.data.materials.append(other)
    assert bake_start.distinct_ior(reference) is None  # 1.5 beside 2.4: not one IOR
    other.node_tree.nodes["Principled BSDF"].inputs["IOR"].default_value = 2.4
    assert abs(bake_start.distinct_ior(reference) - 2.4) < 1e-6
    value = material.node_tree.nodes.new("ShaderNodeValue")
    material.node_tree.links.new(value.outputs[0], principled.inputs["IOR"])
    assert bake_start.distinct_ior(reference) is None  # linked: it may vary
    material.node_tree.links.remove(principled.inputs["IOR"].links[0])
    tree = other.node_tree
    diffuse = tree.nodes.new("ShaderNodeBsdfDiffuse")
    tree.links.new(diffuse.outputs[0], tree.nodes["Material Output"].inputs["Surface"])
    assert bake_start.distinct_ior(reference) is None  # a Diffuse BSDF has no IOR


def check_multi_material_reference():
    reference = _sphere()
    reference.data.materials.append(_constant_material("top", RED, 0.2, 0.0))
    reference.data.materials.append(_constant_material("bottom", BLUE, 0.7, 1.0))
    centres = np.empty(len(reference.data.polygons) * 3)
    reference.data.polygons.foreach_get("center", centres)
    reference.data.polygons.foreach_set("material_index",
                                        (centres.reshape(-1, 3)[:, 2] < 0).astype(np.int32))
    start = bake_start.decimated_copy(reference, 300, "start")
    maps = bake_start.bake_maps(bpy.context.scene, reference, start, SIZE, samples=1)
    rows, columns, points = _covered_texels(start, reference, SIZE)
    known = _away(points, "z")
    rows, columns, points = rows[known], columns[known], points[known]
    top = points[:, 2] > 0
    assert np.abs(maps["base_color"][rows, columns] - np.where(top[:, None], RED, BLUE)).max() \
        < 0.02
    assert np.abs(maps["roughness"][rows, columns] - np.where(top, 0.2, 0.7)).max() < 0.01
    assert np.abs(maps["metallic"][rows, columns] - np.where(top, 0.0, 1.0)).max() < 0.01


def check_metallic_through_mix_shader():
    reference = _sphere(segments=16, rings=8)
    material = _constant_material("mixed", RED, 0.5, 1.0)
    tree = material.node_tree
    diffuse = tree.nodes.new("ShaderNodeBsdfDiffuse")
    mix = _node(tree, "ShaderNodeMixShader", Fac=0.25)
    output = tree.nodes["Material Output"]
    tree.links.new(tree.nodes["Principled BSDF"].outputs[0], mix.inputs[2])
    tree.links.new(diffuse.outputs[0], mix.inputs[1])
    tree.links.new(mix.outputs[0], output.inputs["Surface"])
    reference.data.materials.append(material)
    start = bake_start.decimated_copy(reference, 10_000, "start")
    maps = bake_start.bake_maps(bpy.context.scene, reference, start, 32, samples=1)
    rows, columns, _ = _covered_texels(start, reference, 32)
    assert np.abs(maps["metallic"][rows, columns] - 0.25).max() < 0.01


def check_identical_start_bakes_a_flat_normal_map():
    reference = _sphere()
    start = bake_start.decimated_copy(reference, 10_000, "start")
    maps = bake_start.bake_maps(bpy.context.scene, reference, start, SIZE, samples=1)
    rows, columns, _ = _covered_texels(start, reference, SIZE, interior=False)
    normal = maps["normal"][rows, columns]
    assert np.abs(normal - (0.5, 0.5, 1.0)).max() < 0.02, np.abs(normal - (0.5, 0.5, 1)).max()


def _bump_slope(points):
    """|tangential gradient| of the bumps 0.06 sin 7x sin 7y sin 7z on the unit sphere: the
    tilt (radians, small) of the bumpy surface's normal from the sphere's."""
    waves, slopes = np.sin(7 * points), 0.06 * 7 * np.cos(7 * points)
    gradient = np.stack([slopes[:, 0] * waves[:, 1] * waves[:, 2],
                         waves[:, 0] * slopes[:, 1] * waves[:, 2],
                         waves[:, 0] * waves[:, 1] * slopes[:, 2]], -1)
    tangential = gradient - (gradient * points).sum(-1, keepdims=True) * points
    return np.linalg.norm(tangential, axis=1)


def check_bumpy_reference_bakes_its_bumps():
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=5, radius=1.0)
    reference = bpy.context.active_object
    points = _coordinates(reference).reshape(-1, 3)
    bumps = 1 + 0.06 * np.prod(np.sin(7 * points), axis=1)
    reference.data.vertices.foreach_set("co", (points * bumps[:, None]).reshape(-1))
    reference.data.update()
    reference.data.shade_smooth()
    start = bake_start.decimated_copy(reference, 160, "start")
    maps = bake_start.bake_maps(bpy.context.scene, reference, start, SIZE, samples=1)
    rows, columns, points = _covered_texels(start, reference, SIZE)
    baked = 2 * np.linalg.norm(maps["normal"][rows, columns, :2] - 0.5, axis=1)  # sin(tilt)
    expected = _bump_slope(points)
    assert np.median(baked) > 0.05, "the normal map is flat where the bumps are"
    assert np.corrcoef(baked, expected)[0, 1] > 0.8
    assert 0.7 < np.median(baked) / np.median(expected) < 1.3


# -- the scene afterwards --------------------------------------------------------------------


def _settings(block) -> dict:
    return {prop.identifier: getattr(block, prop.identifier)
            for prop in block.bl_rna.properties
            if prop.type in ("BOOLEAN", "INT", "FLOAT", "ENUM", "STRING")
            and not getattr(prop, "is_array", False)}


def _snapshot(scene, reference) -> dict:
    tree = reference.data.materials[0].node_tree
    return {
        "render": _settings(scene.render), "bake": _settings(scene.render.bake),
        "cycles": _settings(scene.cycles),
        "nodes": sorted(node.name for node in tree.nodes),
        "links": sorted((link.from_socket.identifier, link.from_node.name,
                         link.to_node.name, link.to_socket.identifier) for link in tree.links),
        "principled": [tuple(s.default_value) if hasattr(s.default_value, "__len__")
                       else s.default_value for s in tree.nodes["Principled BSDF"].inputs
                       if hasattr(s, "default_value")],
        "slots": [(slot.link, slot.material.name) for slot in reference.material_slots],
        "selected": sorted(obj.name for obj in bpy.context.selected_objects),
        "active": bpy.context.view_layer.objects.active.name,
        "objects": sorted(bpy.data.objects.keys()), "meshes": sorted(bpy.data.meshes.keys()),
        "materials": sorted(bpy.data.materials.keys()), "images": sorted(bpy.data.images.keys()),
        "collection": sorted(scene.collection.all_objects.keys()),
    }


DATA = ("objects", "meshes", "materials", "images")
"""The snapshot's data-block lists: the baker's own blocks are there between steps."""


def _assert_same(before, after, keys=None):
    changed = [key for key in keys or before if before[key] != after[key]]
    assert not changed, {key: (before[key], after[key]) for key in changed}


def check_scene_is_as_before_after_the_bake():
    scene = bpy.context.scene
    engines = scene.render.bl_rna.properties["engine"].enum_items.keys()
    scene.render.engine = "BLENDER_EEVEE" if "BLENDER_EEVEE" in engines else "BLENDER_EEVEE_NEXT"
    scene.cycles.samples = 77
    scene.render.bake.cage_extrusion = 0.123
    reference, start = _known_scene()
    bpy.ops.object.select_all(action="DESELECT")
    reference.select_set(True)
    bpy.context.view_layer.objects.active = start
    before = _snapshot(scene, reference)
    baker = bake_start.MapBaker(scene, reference, start, 32, samples=1)
    texts, shown = [], []
    settings = baker._settings  # read by each bake inside its block, as the bake starts

    def seen(name):  # which of the scene's own objects the bake's render loads
        shown.append(sorted(obj.name for obj in scene.objects
                            if not obj.hide_render and not obj.name.startswith("diffrec bake")))
        return settings(name)

    baker._settings = seen
    while True:
        texts.append(baker.text)
        over = baker.step()
        if over:
            break
        scene_only = [key for key in before if key not in DATA]
        _assert_same(before, _snapshot(scene, reference), scene_only)  # between steps too
    assert shown == [[]] * 4, shown  # Cycles loads the two baked objects only
    assert texts == ["baking base color 1/4", "baking roughness 2/4", "baking metallic 3/4",
                     "baking normal 4/4"] and baker.steps == 4  # no coat to bake
    _assert_same(before, _snapshot(scene, reference))
    baker.close()  # again: idempotent
    half = bake_start.MapBaker(scene, reference, start, 32, samples=1)
    half.step()
    half.close()
    _assert_same(before, _snapshot(scene, reference))
    assert set(half.maps) == {"base_color"}
    _raises(RuntimeError, half.step, "closed")


def check_baked_material_reads_the_maps():
    rng = np.random.default_rng(0)
    maps = {"base_color": rng.uniform(0, 1, (8, 8, 3)).astype(np.float32),
            "roughness": rng.uniform(0, 1, (8, 8)).astype(np.float32),
            "metallic": rng.uniform(0, 1, (8, 8)).astype(np.float32),
            "normal": rng.uniform(0, 1, (8, 8, 3)).astype(np.float32)}
    material = bake_start.baked_material("baked", maps)
    principled = material.node_tree.nodes["Principled BSDF"]

    def image_into(socket):
        node = socket.links[0].from_node
        if node.bl_idname == "ShaderNodeNormalMap":
            assert node.space == "TANGENT"
            node = node.inputs["Color"].links[0].from_node
        assert node.image.packed_file is not None
        return node.image

    from addon.export_scene import image_array

    base = image_into(principled.inputs["Base Color"])
    assert base.colorspace_settings.name == "sRGB"
    assert np.abs(image_array(base)[..., :3] - maps["base_color"]).max() < 0.01
    for key, socket in (("roughness", "Roughness"), ("metallic", "Metallic"),
                        ("normal", "Normal")):
        image = image_into(principled.inputs[socket])
        assert image.colorspace_settings.name == "Non-Color"
        read = image_array(image)[..., :3]
        expected = maps[key] if maps[key].ndim == 3 else maps[key][..., None]
        assert np.abs(read - expected).max() < 1 / 255 + 1e-6, key


if __name__ == "__main__":
    harness.main(globals())
