"""Blender's own route from a heavy object to a real-time one: Decimate (collapse) to a
triangle budget, Smart UV Project, and a Cycles bake "Selected to Active" of the high-poly's
base colour, roughness, metallic and tangent-space normals onto the low-poly.

Two users: the add-on, whose fit starts its textures from the baked maps (``MapBaker`` is
pumped one bake per step on the main thread, as target renders are), and the peer benchmark,
for which ``decimated_copy`` + ``bake_maps`` + ``baked_material`` is "Blender's route".

How each map is baked (Cycles, with the scene's device; CPU in the tests):

- ``base_color``: the DIFFUSE pass, Color only. Cycles' diffuse colour is the diffuse closure's
  weight, which a Principled BSDF scales down by its metallic, transmission, specular, coat and
  sheen layers (a metal bakes black, a dielectric 4 % dark), so the high-poly bakes with copies
  of its materials in which those inputs of every Principled BSDF are 0: what is left is the
  base colour, procedural or not, and any other diffuse shader's colour.
- ``roughness``: the ROUGHNESS pass, with the reference's own materials.
- ``metallic``: Cycles has no metallic pass; copies of the materials send the Metallic of the
  Principled BSDF feeding the output (through Mix and Add shaders) into an Emission shader,
  baked with the EMIT pass.
- ``coat``: where the reference has a clear coat (``has_coat``), the same bake carries the
  coat's weight and roughness in its green and blue. Blender's own material on the maps
  (``baked_material``) does not use them: it has one specular lobe, whose roughness the
  ROUGHNESS pass bakes as a blend of the coat's and the base's (a glaze of 0.05 over a base of
  0.65 bakes about 0.31). A start for the fit does (``start_maps``): where a coat covers the
  surface, its reflections are what a single lobe must show.
- ``base_roughness``: where the coat is one weight and one roughness over the whole reference
  (``uniform_coat``: the inputs unlinked, the same in every Principled BSDF), the fit's
  material keeps it as a layer of its own, and the same bake carries the Roughness input of
  the Principled BSDF beneath it in its green instead: the base's own roughness, which the
  coat's does not blur (``start_maps``).
- ``normal``: the NORMAL pass in tangent space, R+ G+ B+ (OpenGL, Blender's convention),
  relative to the start's smooth normals and its UV map's tangents.

The rays leave the start's surface pushed out by an extrusion and run inward up to a maximum
distance, both fitted to the measured deviation between the two surfaces (``cage_distance``).
The high-poly bakes as a temporary linked copy of the reference (same mesh, modifiers and
texture space, so procedural textures on Generated coordinates read the same), the low-poly as a
temporary copy of the start's mesh with one material holding the target image: neither the
reference nor the start is touched, and neither copy is in the scene between steps.
"""

from __future__ import annotations

import contextlib
import math

import bmesh
import bpy
import numpy as np
from mathutils.bvhtree import BVHTree

from . import corner_normals, selection, subjects, temporaries
from .core.wire import protocol
from .export_scene import _temporarily, image_array
from .import_result import new_image, with_nodes

MAPS = ("base_color", "roughness", "metallic", "normal")
"""The baked maps, in baking order (the metallic bake gives ``coat`` too, where there is one)."""
BAKE_SAMPLES = 4
"""Cycles samples per texel of a bake: on a million-triangle sculpt at 1024 texels, 4.6 s a map
where 16 took 10.4-12.3 s, the maps alike to a mean of 0.0001 (99th percentile at most 0.0018;
docs/BENCHMARKS.md, "Heavy objects")."""
ISLAND_MARGIN = 0.004
"""Smart UV Project's gap between charts, in UV units: 4 texels at 1024 px, 2 at 512, so that
bilinear lookups at a chart's edge never read a neighbour's texels."""
SMART_UV_ANGLE = math.radians(66.0)
"""Smart UV Project's angle limit (Blender's default)."""
CAGE_SLACK = 1.25
"""Extrusion = deviation x this + CAGE_FLOOR x the reference's bounding-box diagonal: rays along
the start's interpolated normals run longer than the nearest-point distances measured."""
CAGE_FLOOR = 0.002
DEVIATION_SAMPLES = 20000
"""At most this many reference vertices are measured against the start."""
NEUTRALISED = ("Metallic", "Transmission Weight", "Specular IOR Level", "Coat Weight",
               "Sheen Weight")
"""The Principled BSDF inputs zeroed for the base-colour bake (each scales the diffuse weight)."""
PRINCIPLED = "ShaderNodeBsdfPrincipled"
GLASS_IOR = 1.5
"""A Principled BSDF's default IOR, and glTF's where a file gives none."""
NO_UV_MAP = "it has no UV map"
"""``unfit_uvs``'s phrase for a mesh without UVs."""


def triangle_count(mesh: bpy.types.Mesh) -> int:
    """The triangles ``mesh``'s faces make (a face of n corners makes n - 2)."""
    totals = np.empty(len(mesh.polygons), np.int64)
    mesh.polygons.foreach_get("loop_total", totals)
    return int((totals - 2).sum())


def _check_reference(reference) -> None:
    if reference is None or reference.type != "MESH":
        name = "nothing" if reference is None else repr(reference.name)
        raise ValueError(f"the reference must be a mesh object, not {name}")


# -- the low-poly ----------------------------------------------------------------------------


def decimated_copy(reference: bpy.types.Object, triangles: int, name: str,
                   collection: bpy.types.Collection | None = None, *,
                   keep_shading: bool = False, keep_uvs: bool = False) -> bpy.types.Object:
    """A new mesh object named ``name``: ``reference``'s evaluated mesh (its modifiers applied)
    in world space (``_in_world_space``: the object's matrix is the identity), decimated by
    collapse (the Decimate modifier, as an artist does) to at most ``triangles`` triangles (a
    budget at or above the reference's count copies it whole), triangulated, shaded smooth,
    unwrapped with Smart UV Project (``ISLAND_MARGIN``), no materials; linked to
    ``collection`` (default: the first of the reference's collections that is local and in the
    scene, else the scene's collection). A mesh copied whole keeps its shading with
    ``keep_shading``, and with ``keep_uvs`` its active UV map (the one it exports, bakes into
    and renders through; the others removed) where it has one: the artist's own low-poly. The
    reference is left exactly as it was (mesh, modifiers, selection, active object, mode)."""
    _check_reference(reference)
    if triangles < 4:
        raise ValueError(f"a budget of {triangles} triangles is too small: at least 4")
    context = bpy.context
    collection = collection or _home_collection(reference, context.scene)
    with selection.kept(context.view_layer):
        depsgraph = context.evaluated_depsgraph_get()
        mesh = bpy.data.meshes.new_from_object(reference.evaluated_get(depsgraph),
                                               depsgraph=depsgraph)
        mesh.name = name
        if not mesh.polygons:
            bpy.data.meshes.remove(mesh)
            raise ValueError(f"the reference {reference.name!r} has no faces")
        mesh.materials.clear()
        _in_world_space(mesh, reference.matrix_world)
        obj = bpy.data.objects.new(name, mesh)
        context.scene.collection.objects.link(obj)  # in the view layer while it is made
        whole = triangle_count(mesh) <= triangles
        try:
            _decimate(obj, triangles)
            if not (keep_shading and whole):
                with _custom_normals_kept(obj.data):
                    obj.data.shade_smooth()
            if keep_uvs and whole and obj.data.uv_layers:
                _only_active_uvs(obj.data)
            else:
                _smart_unwrap(obj, context.view_layer)
            if collection != context.scene.collection:
                collection.objects.link(obj)
                context.scene.collection.objects.unlink(obj)
        except Exception:
            made = obj.data
            bpy.data.objects.remove(obj)
            bpy.data.meshes.remove(made)
            raise
    return obj


def _in_world_space(mesh: bpy.types.Mesh, matrix) -> None:
    """Move ``mesh``'s vertices by the world ``matrix``, its faces flipped where ``matrix``
    mirrors so that they still face out, its custom normals turned with it. An object's own
    matrix could not hold every world matrix: a parent scaled unevenly shears its rotated
    child's, which an object without that parent cannot keep."""
    turn = np.array(matrix.to_3x3())
    # turned here and set again after: a transform and a flip would garble custom normals
    turned = (corner_normals.turned(corner_normals.read(mesh), turn)
              if mesh.has_custom_normals else None)
    with _custom_normals_kept(mesh, turned):
        mesh.transform(matrix)
        if np.linalg.det(turn) < 0:
            mesh.flip_normals()
    mesh.update()


def _home_collection(reference: bpy.types.Object, scene) -> bpy.types.Collection:
    """The first of ``reference``'s collections that this file can add objects to and that
    ``scene`` shows (not linked from a library, not an override, in the scene's tree); else
    the scene's own collection."""
    in_scene = {scene.collection, *scene.collection.children_recursive}
    for collection in reference.users_collection:
        if (collection in in_scene and collection.library is None
                and collection.override_library is None):
            return collection
    return scene.collection


def _triangulate(mesh: bpy.types.Mesh) -> None:
    """Split ``mesh``'s quads and n-gons into triangles (nothing to do for a triangle mesh),
    its custom normals kept where it has them (a hard-surface model's weighted normals)."""
    if triangle_count(mesh) == len(mesh.polygons):
        return
    with _custom_normals_kept(mesh):
        work = bmesh.new()
        work.from_mesh(mesh)
        bmesh.ops.triangulate(work, faces=work.faces, quad_method="BEAUTY",
                              ngon_method="BEAUTY")
        work.to_mesh(mesh)
        work.free()
    mesh.update()


def _custom_normals_kept(mesh: bpy.types.Mesh, normals: np.ndarray | None = None):
    """``corner_normals.kept`` (of ``normals``, default the mesh's own) where ``mesh`` has
    custom normals; else nothing to keep (its normals follow from its faces and sharp edges,
    whatever the block does)."""
    if not mesh.has_custom_normals:
        return contextlib.nullcontext()
    return corner_normals.kept(mesh, normals)


def _decimate(obj: bpy.types.Object, triangles: int, attempts: int = 8) -> None:
    """Collapse ``obj``'s mesh (no modifiers) to at most ``triangles`` triangles, triangulated;
    the ratio shrinks until the Decimate modifier's result fits (collapse may miss slightly),
    and a ValueError says the fewest it reached where smaller ratios stop helping (loose
    parts keep a few triangles each, whatever the ratio) or the attempts run out."""
    _triangulate(obj.data)
    count = triangle_count(obj.data)
    ratio = triangles / count
    fewest, stalled = count, 0
    for _ in range(attempts if count > triangles else 0):
        modifier = obj.modifiers.new("decimate", "DECIMATE")
        modifier.decimate_type = "COLLAPSE"
        modifier.ratio = ratio
        modifier.use_collapse_triangulate = True
        depsgraph = bpy.context.evaluated_depsgraph_get()
        result = bpy.data.meshes.new_from_object(obj.evaluated_get(depsgraph),
                                                 depsgraph=depsgraph)
        obj.modifiers.remove(modifier)
        _triangulate(result)
        reached = triangle_count(result)
        if reached <= triangles:
            previous, obj.data = obj.data, result
            name = previous.name
            bpy.data.meshes.remove(previous)
            result.name = name
            return
        bpy.data.meshes.remove(result)
        stalled = stalled + 1 if reached >= fewest else 0
        if stalled == 2:
            break  # two smaller ratios in a row took none off
        fewest = min(fewest, reached)
        ratio *= 0.98 * triangles / reached
    if count > triangles:
        raise ValueError(
            f"Decimate brings the {count:,} triangles down to {fewest:,} at the "
            f"fewest, not to the {triangles:,} of Triangles (its loose parts keep a few "
            f"triangles each): set Triangles to {fewest:,} or more, or join or remove small "
            "parts.")


def _only_active_uvs(mesh: bpy.types.Mesh) -> None:
    """Remove every UV map of ``mesh`` but its active one, which becomes the render's too."""
    kept = mesh.uv_layers.active.name
    for name in [layer.name for layer in mesh.uv_layers if layer.name != kept]:
        mesh.uv_layers.remove(mesh.uv_layers[name])
    mesh.uv_layers[kept].active_render = True


def unfit_uvs(obj: bpy.types.Object, depsgraph) -> list[str]:
    """Why ``obj``'s UVs (its evaluated mesh's active UV map, the one it exports) are not fit
    to bake into, by the rule the server keeps a mesh's own UVs by (the protocol's
    ``uv_layout.problems``: overlapping, far outside the texture, collapsed), one phrase each;
    ``[NO_UV_MAP]`` where it has none; empty: they are fit, and the server keeps them."""
    evaluated = obj.evaluated_get(depsgraph)
    mesh = evaluated.to_mesh()
    try:
        if mesh.uv_layers.active is None:
            return [NO_UV_MAP]
        mesh.calc_loop_triangles()
        corners = np.empty(len(mesh.loop_triangles) * 3, np.int32)
        mesh.loop_triangles.foreach_get("loops", corners)
        vertices = np.empty(len(mesh.loop_triangles) * 3, np.int32)
        mesh.loop_triangles.foreach_get("vertices", vertices)
        positions = np.empty(len(mesh.vertices) * 3, np.float32)
        mesh.vertices.foreach_get("co", positions)
        uvs = np.empty(len(mesh.loops) * 2, np.float32)
        mesh.uv_layers.active.data.foreach_get("uv", uvs)
        matrix = np.array([list(row) for row in evaluated.matrix_world])
    finally:
        evaluated.to_mesh_clear()
    world = positions.reshape(-1, 3) @ matrix[:3, :3].T  # areas in the scene's units
    return protocol().uv_layout.problems(world[vertices].reshape(-1, 3, 3),
                                         uvs.reshape(-1, 2)[corners].reshape(-1, 3, 2))


def unwrap_anew(obj: bpy.types.Object) -> None:
    """Replace ``obj``'s UV maps by one from Smart UV Project (``_smart_unwrap``); its shading,
    and the view layer's selection, active object and mode, are left as they were."""
    view_layer = bpy.context.view_layer
    with selection.kept(view_layer):
        _smart_unwrap(obj, view_layer)


def _smart_unwrap(obj: bpy.types.Object, view_layer) -> None:
    """Give ``obj`` one UV map 'UVMap' from Smart UV Project."""
    mesh = obj.data
    while mesh.uv_layers:
        mesh.uv_layers.remove(mesh.uv_layers[0])
    mesh.uv_layers.new(name="UVMap")
    selection.only(view_layer, [obj], obj)
    bpy.ops.object.mode_set(mode="EDIT")
    try:
        bpy.ops.mesh.select_all(action="SELECT")
        bpy.ops.uv.smart_project(angle_limit=SMART_UV_ANGLE, island_margin=ISLAND_MARGIN,
                                 area_weight=0.0, correct_aspect=True, scale_to_bounds=False)
    finally:
        bpy.ops.object.mode_set(mode="OBJECT")


# -- the cage --------------------------------------------------------------------------------


def _world_triangles(obj, depsgraph) -> tuple[np.ndarray, np.ndarray]:
    """``obj``'s evaluated mesh as world-space vertices [V,3] and triangles [T,3]."""
    mesh = obj.evaluated_get(depsgraph).to_mesh()
    try:
        vertices = np.empty(len(mesh.vertices) * 3, np.float64)
        mesh.vertices.foreach_get("co", vertices)
        mesh.calc_loop_triangles()
        triangles = np.empty(len(mesh.loop_triangles) * 3, np.int64)
        mesh.loop_triangles.foreach_get("vertices", triangles)
    finally:
        obj.evaluated_get(depsgraph).to_mesh_clear()
    matrix = np.array(obj.matrix_world)
    vertices = vertices.reshape(-1, 3) @ matrix[:3, :3].T + matrix[:3, 3]
    return vertices, triangles.reshape(-1, 3)


def _farthest(points: np.ndarray, tree: BVHTree) -> float:
    """The largest distance from ``points`` to the surface in ``tree``."""
    farthest = 0.0
    for point in points:
        hit = tree.find_nearest(point)
        if hit[0] is not None:
            farthest = max(farthest, hit[3])
    return farthest


def cage_distance(reference, start, depsgraph) -> tuple[float, float]:
    """(extrusion, max ray distance) for baking ``reference`` onto ``start``: the measured
    deviation between the surfaces (both ways: the start's vertices and triangle centres to the
    reference, up to DEVIATION_SAMPLES reference vertices to the start), with slack."""
    high_vertices, high_triangles = _world_triangles(reference, depsgraph)
    if not len(high_triangles):
        raise ValueError(f"the reference {reference.name!r} has no faces")
    low_vertices, low_triangles = _world_triangles(start, depsgraph)
    high = BVHTree.FromPolygons(high_vertices.tolist(), high_triangles.tolist())
    low = BVHTree.FromPolygons(low_vertices.tolist(), low_triangles.tolist())
    low_points = np.concatenate([low_vertices, low_vertices[low_triangles].mean(axis=1)])
    stride = max(1, len(high_vertices) // DEVIATION_SAMPLES)
    deviation = max(_farthest(low_points, high), _farthest(high_vertices[::stride], low))
    diagonal = float(np.linalg.norm(high_vertices.max(0) - high_vertices.min(0)))
    extrusion = CAGE_SLACK * deviation + CAGE_FLOOR * diagonal
    return extrusion, 2.0 * extrusion


# -- material copies -------------------------------------------------------------------------


def _output_node(tree):
    output = tree.get_output_node("CYCLES")
    if output is None:
        output = tree.nodes.new("ShaderNodeOutputMaterial")
    return output


def _neutral_copy(material):
    """A copy of ``material`` whose Principled BSDFs have the NEUTRALISED inputs at 0 (so the
    DIFFUSE colour pass reads the base colour)."""
    copy = material.copy()
    tree = copy.node_tree
    for node in tree.nodes:
        if node.bl_idname != PRINCIPLED:
            continue
        for name in NEUTRALISED:
            socket = node.inputs.get(name)
            if socket is None:
                continue
            for link in list(socket.links):
                tree.links.remove(link)
            socket.default_value = 0.0
    return copy


def _source(socket):
    """What feeds ``socket``: the linked output socket, or its default value."""
    return socket.links[0].from_socket if socket.is_linked else socket.default_value


def _feed(tree, socket, source) -> None:
    if isinstance(source, float):
        socket.default_value = source
    else:
        tree.links.new(source, socket)


def _by_identifier(sockets, identifier: str):
    return next(socket for socket in sockets if socket.identifier == identifier)


def _principled_input(tree, shader_socket, name: str):
    """Input ``name`` of the Principled BSDF feeding ``shader_socket``, as an output socket or
    a float: Mix and Add shaders mix and add it; anything else gives 0."""
    if not shader_socket.is_linked:
        return 0.0
    node = shader_socket.links[0].from_node
    if node.bl_idname == "NodeReroute":
        return _principled_input(tree, node.inputs[0], name)
    if node.bl_idname == PRINCIPLED:
        return _source(node.inputs[name])
    if node.bl_idname == "ShaderNodeMixShader":
        mix = tree.nodes.new("ShaderNodeMix")
        mix.data_type = "FLOAT"
        _feed(tree, _by_identifier(mix.inputs, "Factor_Float"), _source(node.inputs[0]))
        _feed(tree, _by_identifier(mix.inputs, "A_Float"),
              _principled_input(tree, node.inputs[1], name))
        _feed(tree, _by_identifier(mix.inputs, "B_Float"),
              _principled_input(tree, node.inputs[2], name))
        return _by_identifier(mix.outputs, "Result_Float")
    if node.bl_idname == "ShaderNodeAddShader":
        add = tree.nodes.new("ShaderNodeMath")
        add.operation, add.use_clamp = "ADD", True
        _feed(tree, add.inputs[0], _principled_input(tree, node.inputs[0], name))
        _feed(tree, add.inputs[1], _principled_input(tree, node.inputs[1], name))
        return add.outputs[0]
    return 0.0


def _emission_copy(material, *names: str):
    """A copy of ``material`` whose surface is an Emission (strength 1) of its Principled
    inputs ``names`` (``_principled_input``; at most three) in red, green and blue, 0 past
    them."""
    copy = material.copy()
    tree = copy.node_tree
    output = _output_node(tree)
    combine = tree.nodes.new("ShaderNodeCombineColor")
    for socket, name in zip(combine.inputs, names, strict=False):
        _feed(tree, socket, _principled_input(tree, output.inputs["Surface"], name))
    emission = tree.nodes.new("ShaderNodeEmission")
    emission.inputs["Strength"].default_value = 1.0
    tree.links.new(combine.outputs["Color"], emission.inputs["Color"])
    tree.links.new(emission.outputs["Emission"], output.inputs["Surface"])
    return copy


def _shaders(shader_socket):
    """The shader nodes that feed ``shader_socket`` through Reroutes and Mix and Add shaders,
    as ``_principled_input`` walks them (read only: nothing is added to the tree)."""
    if not shader_socket.is_linked:
        return []
    node = shader_socket.links[0].from_node
    if node.bl_idname == "NodeReroute":
        return _shaders(node.inputs[0])
    if node.bl_idname == "ShaderNodeMixShader":
        return _shaders(node.inputs[1]) + _shaders(node.inputs[2])
    if node.bl_idname == "ShaderNodeAddShader":
        return _shaders(node.inputs[0]) + _shaders(node.inputs[1])
    return [node]


def _surface_shaders(reference) -> list[list | None]:
    """Per material slot of ``reference``, the shader nodes its material's Cycles output reads
    (``_shaders``); None where the slot has no material, node tree or output (it renders
    Blender's default surface)."""
    found = []
    for slot in reference.material_slots:
        tree = slot.material.node_tree if slot.material is not None else None
        output = tree.get_output_node("CYCLES") if tree is not None else None
        found.append(None if output is None else _shaders(output.inputs["Surface"]))
    return found


def _coat_inputs(node):
    """A Principled BSDF's (Coat Weight, Coat Roughness) sockets; None for another shader."""
    if node.bl_idname != PRINCIPLED or node.inputs.get("Coat Weight") is None:
        return None
    return node.inputs["Coat Weight"], node.inputs["Coat Roughness"]


def has_coat(reference) -> bool:
    """Whether a Principled BSDF of ``reference``'s materials (as ``_principled_input`` reads
    them) has a clear coat: its Coat Weight linked or above 0."""
    for nodes in _surface_shaders(reference):
        for node in nodes or ():
            inputs = _coat_inputs(node)
            if inputs is not None and (inputs[0].is_linked or inputs[0].default_value > 0):
                return True
    return False


READ_SHADERS = frozenset({PRINCIPLED, "ShaderNodeBsdfDiffuse"})
"""The shaders a bake reads: every input of a Principled BSDF the maps hold, and a Diffuse
BSDF's colour (the DIFFUSE pass)."""


def unread_shaders(reference) -> list[str]:
    """The shaders ``reference``'s materials' outputs read (``_shaders``) that a bake does not
    read whole (not ``READ_SHADERS``), as Blender names them ("Glossy BSDF", a node group by
    its group's name): their look reaches the start through no map of its own. Each name
    once, sorted."""
    return sorted({node.node_tree.name if getattr(node, "node_tree", None) else node.bl_label
                   for nodes in _surface_shaders(reference) for node in nodes or ()
                   if node.bl_idname not in READ_SHADERS})


def _uniform_inputs(reference, names: tuple[str, ...]) -> tuple[float, ...] | None:
    """The values of the inputs ``names`` where they are one over the whole of ``reference``:
    every shader its materials' outputs read (``_shaders``) is a Principled BSDF with those
    inputs unlinked, all with the same values (to 1e-6); else None."""
    found = set()
    for nodes in _surface_shaders(reference):
        for node in (None,) if nodes is None else nodes:
            sockets = None if node is None or node.bl_idname != PRINCIPLED else \
                [node.inputs.get(name) for name in names]
            if sockets is None or any(s is None or s.is_linked for s in sockets):
                return None
            found.add(tuple(round(socket.default_value, 6) for socket in sockets))
    return found.pop() if len(found) == 1 else None


def uniform_coat(reference) -> tuple[float, float] | None:
    """``(weight, roughness)`` of ``reference``'s clear coat where it is one coat over the
    whole object (``_uniform_inputs``: Coat Weight and Coat Roughness) with a weight above 0;
    else None."""
    coat = _uniform_inputs(reference, ("Coat Weight", "Coat Roughness"))
    return coat if coat is not None and coat[0] > 0 else None


def distinct_ior(reference) -> float | None:
    """``reference``'s IOR where it is one over the whole object (``_uniform_inputs``: the
    Principled BSDF's IOR) and not glass's ``GLASS_IOR`` (to 1e-4): what a start has to
    carry, as glTF's ``KHR_materials_ior`` does; else None."""
    ior = _uniform_inputs(reference, ("IOR",))
    return None if ior is None or abs(ior[0] - GLASS_IOR) < 1e-4 else ior[0]


def start_maps(maps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``maps`` as a fit should start from them: under a uniform coat, which the fit keeps as
    a layer (``uniform_coat``), the base's own roughness (``base_roughness``); under another
    coat, the roughness turned towards the coat's by the coat's weight, ``(1 - w) r + w
    r_coat`` (one specular lobe shows a coat's reflections where a coat covers the surface);
    the same arrays where no coat was baked."""
    if "base_roughness" in maps:
        return {**maps, "roughness": maps["base_roughness"]}
    if "coat" not in maps:
        return maps
    weight, coat = maps["coat"][..., 0], maps["coat"][..., 1]
    roughness = ((1 - weight) * maps["roughness"] + weight * coat).astype(np.float32)
    return {**maps, "roughness": roughness}


# -- the bake --------------------------------------------------------------------------------


def _check_cycles(scene) -> None:
    if not (bpy.app.build_options.cycles and hasattr(scene, "cycles")):
        raise RuntimeError("baking needs Cycles, which is not available in this Blender")


def _check_start(start) -> None:
    if start is None or start.type != "MESH":
        raise ValueError("the start must be a mesh object")
    if not start.data.polygons:
        raise ValueError(f"the start {start.name!r} has no faces")
    if not start.data.uv_layers:
        raise ValueError(f"the start {start.name!r} has no UV map to bake onto")


def _bake_margin(size: int) -> int:
    """Cycles' margin in texels: how far past the charts baked texels are dilated."""
    return max(2, size // 64)


class MapBaker:
    """Bakes ``reference``'s appearance onto ``start``'s UVs with Cycles, Selected to Active,
    one map of ``MAPS`` per ``step()`` (main thread only). Maps: 'base_color' linear
    [H, W, 3], 'roughness' [H, W], 'metallic' [H, W], with it 'base_roughness' [H, W] where
    the reference has a uniform coat (``coat_layer``, ``uniform_coat``), else 'coat' [H, W, 2]
    (weight, roughness) where it has one (``has_coat``), 'normal' tangent-space [H, W, 3]
    encoded in [0, 1] (OpenGL +Y), all float32, rows top-down, ``size`` x ``size``; texels
    past the UV charts are dilated by Cycles' margin. ``ior``: the reference's IOR where it is
    one and not 1.5 (``distinct_ior``), which no map holds. Nothing of the scene is changed between
    steps nor after ``close()`` (which the last step calls): render settings, the reference's
    materials, selection, active object; the temporary images, materials and objects are
    removed."""

    def __init__(self, scene, reference, start, size: int, samples: int = BAKE_SAMPLES):
        _check_reference(reference)
        _check_start(start)
        _check_cycles(scene)
        if scene != bpy.context.scene:
            raise ValueError(f"the bake runs in the current scene, not in {scene.name!r}")
        if size < 1 or samples < 1:
            raise ValueError(f"size ({size}) and samples ({samples}) must be positive")
        self.scene, self.size, self.samples = scene, size, samples
        self.coat = has_coat(reference)
        self.coat_layer = uniform_coat(reference) if self.coat else None
        self.ior = distinct_ior(reference)
        self.maps: dict[str, np.ndarray] = {}
        self.done = 0
        self._made = temporaries.Made()  # removed on close
        try:
            self._prepare(reference, start)
        except Exception:
            self.close()
            raise

    def _prepare(self, reference, start) -> None:
        depsgraph = bpy.context.evaluated_depsgraph_get()
        self.extrusion, self.max_ray = cage_distance(reference, start, depsgraph)
        self._image = self._made.keep(bpy.data.images.new(
            "diffrec bake", self.size, self.size, alpha=False, float_buffer=True, is_data=True))
        target = self._made.keep(with_nodes(bpy.data.materials.new("diffrec bake target")))
        node = target.node_tree.nodes.new("ShaderNodeTexImage")
        node.image = self._image
        target.node_tree.nodes.active = node
        mesh = self._made.keep(bpy.data.meshes.new_from_object(
            start.evaluated_get(depsgraph), depsgraph=depsgraph))
        mesh.materials.clear()
        mesh.materials.append(target)
        mesh.polygons.foreach_set("material_index", np.zeros(len(mesh.polygons), np.int32))
        _in_world_space(mesh, start.matrix_world)
        self._low = self._made.keep(bpy.data.objects.new("diffrec bake low", mesh))
        self._high = self._made.keep(reference.copy())
        self._high.name = "diffrec bake high"
        self._high.hide_viewport = self._high.hide_render = self._high.hide_select = False
        originals = [slot.material for slot in reference.material_slots]
        self._materials = {
            "roughness": originals,
            "normal": originals,
            "base_color": [self._copy(_neutral_copy, material) for material in originals],
            "metallic": [self._copy(self._metallic_emission_copy, material)
                         for material in originals],
        }
        for slot in self._high.material_slots:
            slot.link = "OBJECT"

    def _metallic_emission_copy(self, material):
        """``material`` emitting its metallic, and under a uniform coat the base's roughness,
        under another coat the coat's weight and roughness."""
        if self.coat_layer is not None:
            return _emission_copy(material, "Metallic", "Roughness")
        coat = ("Coat Weight", "Coat Roughness") if self.coat else ()
        return _emission_copy(material, "Metallic", *coat)

    def _copy(self, make, material):
        return None if material is None else self._made.keep(make(material))

    @property
    def steps(self) -> int:
        """How many ``step`` calls bake all the maps."""
        return len(MAPS)

    @property
    def finished(self) -> bool:
        """Whether every map is baked."""
        return self.done >= self.steps

    @property
    def text(self) -> str:
        """What the next step does, e.g. 'baking roughness 2/4'."""
        if self.finished:
            return "baked"
        return f"baking {MAPS[self.done].replace('_', ' ')} {self.done + 1}/{self.steps}"

    def step(self) -> bool:
        """Bake the next map into ``maps``; whether all are done (then closed)."""
        if not self.finished:
            if not self._made:
                raise RuntimeError("this bake was closed before its last map")
            try:
                name = MAPS[self.done]
                pixels = self._bake(name)
                if name == "metallic" and self.coat_layer is not None:
                    self.maps["base_roughness"] = np.ascontiguousarray(pixels[..., 1])
                elif name == "metallic" and self.coat:
                    self.maps["coat"] = np.ascontiguousarray(pixels[..., 1:3])
                self.maps[name] = np.ascontiguousarray(
                    pixels[..., :3] if name in ("base_color", "normal") else pixels[..., 0])
                self.done += 1
            except Exception:
                self.close()
                raise
            if self.finished:
                self.close()
        return self.finished

    def _bake(self, name: str) -> np.ndarray:
        for slot, material in zip(self._high.material_slots, self._materials[name], strict=True):
            slot.material = material
        scene, view_layer = self.scene, bpy.context.view_layer
        # the scene's objects hidden from the bake's render, the reference's too (its copy is
        # baked from): Cycles then loads none of them (a bake 2.6x faster beside two heavy
        # objects; the maps are of the two selected objects either way)
        others = [obj for obj in scene.objects if subjects.draws_in_render(obj)]
        with (
            _temporarily(scene.render, engine="CYCLES"),
            _temporarily(scene.cycles, samples=self.samples, use_denoising=False),
            selection.kept(view_layer),
            subjects.hidden_from_render(others),
            self._linked(),
        ):
            selection.only(view_layer, [self._high, self._low], self._low)
            bpy.ops.object.bake(**self._settings(name))
        return image_array(self._image)

    @contextlib.contextmanager
    def _linked(self):
        """The two temporary objects in the scene for the block."""
        objects = self.scene.collection.objects
        objects.link(self._high)
        objects.link(self._low)
        try:
            yield
        finally:
            objects.unlink(self._low)
            objects.unlink(self._high)

    def _settings(self, name: str) -> dict:
        """The bake operator's arguments for map ``name`` (given to the operator, so the
        scene's own bake settings stay as they are)."""
        settings = dict(
            use_selected_to_active=True, use_cage=False, cage_extrusion=self.extrusion,
            max_ray_distance=self.max_ray, margin=_bake_margin(self.size),
            margin_type="ADJACENT_FACES", use_clear=True, target="IMAGE_TEXTURES",
            save_mode="INTERNAL",
        )
        if name == "base_color":
            return settings | dict(type="DIFFUSE", pass_filter={"COLOR"})
        if name == "roughness":
            return settings | dict(type="ROUGHNESS")
        if name == "metallic":
            return settings | dict(type="EMIT")
        return settings | dict(type="NORMAL", normal_space="TANGENT", normal_r="POS_X",
                               normal_g="POS_Y", normal_b="POS_Z")

    def close(self) -> None:
        """Remove the temporary objects, meshes, materials and image (idempotent; a bake
        cancelled half-way is closed the same)."""
        self._made.remove_all()


def bake_maps(scene, reference, start, size: int,
              samples: int = BAKE_SAMPLES) -> dict[str, np.ndarray]:
    """All maps at once (``MapBaker`` stepped to the end, closed even on error)."""
    baker = MapBaker(scene, reference, start, size, samples)
    try:
        while not baker.step():
            pass
        return baker.maps
    finally:
        baker.close()


def baked_material(name: str, maps: dict[str, np.ndarray],
                   coat: tuple[float, float] | None = None,
                   ior: float | None = None) -> bpy.types.Material:
    """Blender's route's result material: a Principled BSDF reading the maps as images packed
    into the .blend (base colour 8-bit sRGB; roughness, metallic and normal 8-bit Non-Color,
    the normal through a Normal Map node in tangent space); ``coat`` ``(weight, roughness)``:
    a clear coat over it, on the same normals (the material a fit with that coat starts
    from); ``ior``: its IOR (None: the Principled BSDF's default, ``GLASS_IOR``)."""
    material = with_nodes(bpy.data.materials.new(name))
    tree = material.node_tree
    principled = next(node for node in tree.nodes if node.bl_idname == PRINCIPLED)

    def texture(key: str, colorspace: str, location: tuple[float, float]):
        array = maps[key] if maps[key].ndim == 3 else np.repeat(maps[key][..., None], 3, -1)
        node = tree.nodes.new("ShaderNodeTexImage")
        node.image = new_image(f"{name} {key.replace('_', ' ')}", array, colorspace)
        node.location = location
        return node

    tree.links.new(texture("base_color", "sRGB", (-600, 300)).outputs["Color"],
                   principled.inputs["Base Color"])
    tree.links.new(texture("roughness", "Non-Color", (-600, 0)).outputs["Color"],
                   principled.inputs["Roughness"])
    tree.links.new(texture("metallic", "Non-Color", (-600, -300)).outputs["Color"],
                   principled.inputs["Metallic"])
    normal_map = tree.nodes.new("ShaderNodeNormalMap")
    normal_map.space = "TANGENT"
    normal_map.location = (-250, -600)
    tree.links.new(texture("normal", "Non-Color", (-600, -600)).outputs["Color"],
                   normal_map.inputs["Color"])
    tree.links.new(normal_map.outputs["Normal"], principled.inputs["Normal"])
    if coat is not None:
        principled.inputs["Coat Weight"].default_value = coat[0]
        principled.inputs["Coat Roughness"].default_value = coat[1]
        tree.links.new(normal_map.outputs["Normal"], principled.inputs["Coat Normal"])
    if ior is not None:
        principled.inputs["IOR"].default_value = ior
    return material
