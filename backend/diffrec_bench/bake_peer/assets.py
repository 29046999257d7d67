"""The peer benchmark's heavy assets, built with bpy: four kinds an artist would make
real-time, each one mesh object of 200k-350k triangles with one procedural Principled material
(evaluated by Blender at render time in object coordinates, so the reference needs no UVs).

- ``sculpt``: an organic displaced sculpt (an icosphere displaced by two noise textures),
  base colour in sharp bands and spots (Voronoi and noise through constant colour ramps),
  roughness varying from 0.2 to 0.8;
- ``hard_surface``: a bevelled housing with a bevelled metal cap and metal feet (metallic 1),
  a striped decal masked on its front face (image-free), paint and metal roughness apart;
- ``chair``: a small chair with thin legs and back slats (parts joined, not united), a wood
  grain of constant bands;
- ``glazed``: a glazed ceramic pot (a displaced egg), painted stripes and dots on a matte body
  under a clear coat (the Principled BSDF's coat layer): a layer the baked maps cannot hold.

Every builder leaves the object's modifiers applied, triangulated, its transform applied and
its bounding box within the unit sphere at the origin
(``diffrec_bench.demo.scene.fit_to_unit_sphere``).
Their names and lights are in ``catalogue``.
"""

from __future__ import annotations

import bpy
from mathutils import Matrix

from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.quality.shapes import active_object, apply_modifiers


def _finish(obj: bpy.types.Object) -> bpy.types.Object:
    """Apply ``obj``'s modifiers (in order) plus a final triangulation, and its transform."""
    obj.modifiers.new("Triangulate", "TRIANGULATE")
    apply_modifiers(obj)
    bpy.context.view_layer.update()  # its bounding box as the mesh now is
    return obj


def _join(parts: list[bpy.types.Object]) -> bpy.types.Object:
    bpy.ops.object.select_all(action="DESELECT")
    for part in parts:
        part.select_set(True)
    bpy.context.view_layer.objects.active = parts[0]
    bpy.ops.object.join()
    return active_object()


def _bevelled_box(size, location, width: float, segments: int, cuts: int) -> bpy.types.Object:
    """A box with bevelled edges, then ``cuts`` levels of simple subdivision (dense but
    keeping its shape)."""
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=location, scale=size)
    box = active_object()
    bpy.ops.object.transform_apply(location=False, rotation=False, scale=True)
    bevel = box.modifiers.new("Bevel", "BEVEL")
    bevel.width, bevel.segments = width, segments
    subdivide = box.modifiers.new("Dense", "SUBSURF")
    subdivide.subdivision_type = "SIMPLE"
    subdivide.levels = subdivide.render_levels = cuts
    return _finish(box)


def _cylinder(radius: float, depth: float, location, vertices: int, cuts: int,
              bevel: float = 0.0) -> bpy.types.Object:
    bpy.ops.mesh.primitive_cylinder_add(vertices=vertices, radius=radius, depth=depth,
                                        location=location)
    cylinder = active_object()
    if bevel:
        modifier = cylinder.modifiers.new("Bevel", "BEVEL")
        modifier.width, modifier.segments = bevel, 4
    subdivide = cylinder.modifiers.new("Dense", "SUBSURF")
    subdivide.subdivision_type = "SIMPLE"
    subdivide.levels = subdivide.render_levels = cuts
    cylinder.data.shade_smooth()
    return _finish(cylinder)


# -- materials ---------------------------------------------------------------------------


class _Nodes:
    """A material's node tree with the few builders the assets' materials need."""

    def __init__(self, name: str):
        self.material = bpy.data.materials.new(name)
        self.tree = self.material.node_tree
        self.bsdf = next(n for n in self.tree.nodes
                         if n.bl_idname == "ShaderNodeBsdfPrincipled")
        self.coords = self.tree.nodes.new("ShaderNodeTexCoord").outputs["Object"]

    def link(self, output, socket) -> None:
        self.tree.links.new(output, socket)

    def node(self, kind: str, **inputs):
        node = self.tree.nodes.new(kind)
        for name, value in inputs.items():
            node.inputs[name].default_value = value
        return node

    def noise(self, scale: float, detail: float = 2.0):
        node = self.node("ShaderNodeTexNoise", Scale=scale, Detail=detail)
        self.link(self.coords, node.inputs["Vector"])
        return node.outputs["Fac"]

    def bands(self, factor, stops: list[tuple[float, tuple]]):
        """A constant colour ramp: ``stops`` (position, RGB or value), sharp steps."""
        ramp = self.node("ShaderNodeValToRGB")
        ramp.color_ramp.interpolation = "CONSTANT"
        elements = ramp.color_ramp.elements
        while len(elements) < len(stops):
            elements.new(1.0)
        for element, (position, colour) in zip(elements, stops, strict=True):
            colour = (colour,) * 3 if isinstance(colour, float) else colour
            element.position, element.color = position, (*colour, 1.0)
        self.link(factor, ramp.inputs["Fac"])
        return ramp.outputs["Color"]

    def math(self, operation: str, a, b=None):
        node = self.node("ShaderNodeMath")
        node.operation = operation
        for socket, value in zip(node.inputs, (a, b), strict=False):
            if value is None:
                continue
            if isinstance(value, float):
                socket.default_value = value
            else:
                self.link(value, socket)
        return node.outputs["Value"]

    def mix(self, factor, a, b):
        """Colour ``a`` where ``factor`` is 0, ``b`` where it is 1."""
        node = self.node("ShaderNodeMix")
        node.data_type = "RGBA"
        self.link(factor, node.inputs["Factor"])
        for socket, value in ((node.inputs["A"], a), (node.inputs["B"], b)):
            if isinstance(value, tuple):
                socket.default_value = (*value, 1.0)
            else:
                self.link(value, socket)
        return node.outputs["Result"]

    def wave(self, kind: str, direction: str | None = None, **inputs):
        """A Wave texture's factor: ``kind`` "BANDS" (along ``direction``) or "RINGS", over the
        object coordinates, with ``inputs`` (Scale, Distortion, Detail ...)."""
        node = self.node("ShaderNodeTexWave", **inputs)
        node.wave_type = kind
        if direction is not None:
            node.bands_direction = direction
        self.link(self.coords, node.inputs["Vector"])
        return node.outputs["Fac"]

    def spots(self, scale: float, radius: float):
        """1 within ``radius`` of a Voronoi lattice's points (of ``scale``), else 0."""
        voronoi = self.node("ShaderNodeTexVoronoi", Scale=scale)
        self.link(self.coords, voronoi.inputs["Vector"])
        return self.math("LESS_THAN", voronoi.outputs["Distance"], radius)

    def ranged(self, factor, low: float, high: float):
        """``factor`` (0-1) mapped onto ``low``-``high``."""
        node = self.node("ShaderNodeMapRange")
        node.inputs["To Min"].default_value, node.inputs["To Max"].default_value = low, high
        self.link(factor, node.inputs["Value"])
        return node.outputs["Result"]

    def axis(self, index: int):
        """The object coordinate along axis ``index`` (0 x, 1 y, 2 z)."""
        separate = self.node("ShaderNodeSeparateXYZ")
        self.link(self.coords, separate.inputs["Vector"])
        return separate.outputs[index]


def _sculpt_material() -> bpy.types.Material:
    """Bands of three colours from a noise, dark spots from a Voronoi lattice on top, roughness
    in [0.2, 0.8] from another noise: sharp edges everywhere a bake must resolve."""
    m = _Nodes("sculpt")
    bands = m.bands(m.noise(2.5, 3.0), [(0.0, (0.55, 0.12, 0.04)), (0.45, (0.85, 0.66, 0.3)),
                                        (0.56, (0.06, 0.22, 0.35))])
    m.link(m.mix(m.spots(7.0, 0.22), bands, (0.02, 0.02, 0.025)), m.bsdf.inputs["Base Color"])
    m.link(m.ranged(m.noise(5.0), 0.2, 0.8), m.bsdf.inputs["Roughness"])
    return m.material


def _hard_surface_material() -> bpy.types.Material:
    """Painted housing (roughness 0.45), metal parts (faces whose ``METAL`` attribute is 1:
    metallic 1, roughness 0.22), yellow and black stripes on the front face (+Y; masked by
    the face's normal), a thin dark panel line around the middle."""
    m = _Nodes("hard_surface")
    z = m.axis(2)
    attribute = m.node("ShaderNodeAttribute")
    attribute.attribute_name = METAL
    metal = attribute.outputs["Fac"]
    geometry = m.node("ShaderNodeNewGeometry")
    normal = m.node("ShaderNodeSeparateXYZ")
    m.link(geometry.outputs["Normal"], normal.inputs["Vector"])
    front = m.math("GREATER_THAN", normal.outputs[1], 0.9)
    wave = m.wave("BANDS", "DIAGONAL", Scale=3.0, Distortion=0.0)
    decal_area = m.math("LESS_THAN", m.math("ABSOLUTE", m.axis(0)), 0.3)
    decal = m.math("MULTIPLY", front, decal_area)
    stripes = m.bands(wave, [(0.0, (0.9, 0.65, 0.02)), (0.5, (0.02, 0.02, 0.02))])
    line = m.math("LESS_THAN", m.math("ABSOLUTE", m.math("SUBTRACT", z, 0.02)), 0.012)
    paint = m.mix(line, (0.08, 0.3, 0.12), (0.01, 0.01, 0.01))
    colour = m.mix(metal, m.mix(decal, paint, stripes), (0.91, 0.92, 0.92))
    m.link(colour, m.bsdf.inputs["Base Color"])
    m.link(metal, m.bsdf.inputs["Metallic"])
    m.link(m.ranged(metal, 0.45, 0.22), m.bsdf.inputs["Roughness"])
    return m.material


def _chair_material() -> bpy.types.Material:
    """Wood: grain bands of three tones along the wave's rings, roughness 0.35-0.7 by band."""
    m = _Nodes("chair")
    grain = m.wave("RINGS", Scale=4.0, Distortion=4.0, Detail=2.0)
    m.link(m.bands(grain, [(0.0, (0.42, 0.2, 0.07)), (0.4, (0.62, 0.36, 0.14)),
                           (0.75, (0.2, 0.08, 0.03))]), m.bsdf.inputs["Base Color"])
    roughness = m.bands(grain, [(0.0, 0.5), (0.4, 0.35), (0.75, 0.7)])
    m.link(roughness, m.bsdf.inputs["Roughness"])
    return m.material


def _glazed_material() -> bpy.types.Material:
    """Blue and ochre stripes along the height, wavy, white dots between them, on a matte body
    (roughness 0.55-0.75 from a noise), all under a clear coat (weight 1, roughness 0.05)."""
    m = _Nodes("glazed")
    stripes = m.bands(m.wave("BANDS", "Z", Scale=2.5, Distortion=3.0, Detail=1.0),
                      [(0.0, (0.03, 0.08, 0.45)), (0.35, (0.85, 0.83, 0.78)),
                       (0.7, (0.7, 0.42, 0.08))])
    m.link(m.mix(m.spots(9.0, 0.15), stripes, (0.9, 0.88, 0.84)), m.bsdf.inputs["Base Color"])
    m.link(m.ranged(m.noise(4.0), 0.55, 0.75), m.bsdf.inputs["Roughness"])
    m.bsdf.inputs["Coat Weight"].default_value = 1.0
    m.bsdf.inputs["Coat Roughness"].default_value = 0.05
    return m.material


def _mixed_material() -> bpy.types.Material:
    """No Principled BSDF, as many older assets are made: a Diffuse BSDF of plum, sand and teal
    bands from a noise, with a few dark flecks, mixed a quarter with a warm white Glossy BSDF
    (roughness 0.15). A bake reads the diffuse colour and the roughness, and has no channel
    for a gloss that is not a dielectric's."""
    m = _Nodes("mixed")
    m.tree.nodes.remove(m.bsdf)
    bands = m.bands(m.noise(3.0, 2.0), [(0.0, (0.32, 0.08, 0.18)), (0.5, (0.8, 0.7, 0.5)),
                                        (0.62, (0.05, 0.3, 0.32))])
    diffuse = m.node("ShaderNodeBsdfDiffuse")
    m.link(m.mix(m.spots(11.0, 0.12), bands, (0.03, 0.03, 0.03)), diffuse.inputs["Color"])
    glossy = m.node("ShaderNodeBsdfAnisotropic", Roughness=0.15, Color=(0.9, 0.85, 0.75, 1.0))
    mix = m.node("ShaderNodeMixShader", Fac=0.25)
    m.link(diffuse.outputs["BSDF"], mix.inputs[1])
    m.link(glossy.outputs["BSDF"], mix.inputs[2])
    output = next(n for n in m.tree.nodes if n.bl_idname == "ShaderNodeOutputMaterial")
    m.link(mix.outputs["Shader"], output.inputs["Surface"])
    return m.material


# -- shapes ------------------------------------------------------------------------------

METAL = "metal"  # the hard-surface object's face attribute: 1 on its metal parts


def _mark_metal(obj: bpy.types.Object) -> bpy.types.Object:
    """Set ``obj``'s ``METAL`` face attribute to 1 (joined parts without it read 0)."""
    attribute = obj.data.attributes.new(METAL, "FLOAT", "FACE")
    attribute.data.foreach_set("value", [1.0] * len(obj.data.polygons))
    return obj


def _displaced_icosphere(name: str, bumps, scale) -> bpy.types.Object:
    """An icosphere of 8 subdivisions (327,680 triangles), smooth-shaded, displaced by a Clouds
    noise per ``bumps`` entry (noise size, strength, depth), then scaled by ``scale``."""
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=8, radius=1.0)
    obj = active_object()
    obj.data.shade_smooth()
    for index, (size, strength, depth) in enumerate(bumps):
        texture = bpy.data.textures.new(f"{name} bumps {index}", "CLOUDS")
        texture.noise_scale, texture.noise_depth = size, depth
        displace = obj.modifiers.new(f"Displace {index}", "DISPLACE")
        displace.texture, displace.strength, displace.mid_level = texture, strength, 0.5
    obj.scale = scale
    return _finish(obj)


def _sculpt() -> bpy.types.Object:
    """An icosphere displaced by a broad and a fine noise."""
    return _displaced_icosphere("sculpt", [(0.7, 0.45, 2), (0.12, 0.05, 2)], (1.0, 0.8, 0.9))


def _hard_surface() -> bpy.types.Object:
    """A bevelled housing, a bevelled round cap on top and four round feet, joined."""
    parts = [_bevelled_box((1.4, 0.9, 0.7), (0, 0, 0), 0.08, 5, 4),
             _mark_metal(_cylinder(0.3, 0.25, (0.15, 0.0, 0.45), 48, 4, bevel=0.04))]
    parts += [_mark_metal(_cylinder(0.09, 0.12, (x, y, -0.4), 24, 2)) for x in (-0.55, 0.55)
              for y in (-0.3, 0.3)]
    return _join(parts)


def _chair() -> bpy.types.Object:
    """A seat, four thin legs, two back posts and three slats; parts overlap, joined."""
    leg, seat_z = 0.025, 0.0
    parts = [_bevelled_box((0.9, 0.8, 0.06), (0, 0, seat_z), 0.01, 2, 4)]
    for x in (-0.4, 0.4):
        for y in (-0.35, 0.35):
            parts.append(_cylinder(leg, 0.8, (x, y, seat_z - 0.4), 24, 4))
    for x in (-0.4, 0.4):
        parts.append(_cylinder(leg, 0.85, (x, 0.37, seat_z + 0.425), 24, 4))
    for index in range(3):
        parts.append(_bevelled_box((0.8, 0.03, 0.06), (0, 0.37, seat_z + 0.45 + 0.17 * index),
                                   0.008, 2, 4))
    return _join(parts)


def _glazed() -> bpy.types.Object:
    """An egg (an icosphere taller than wide) with broad smooth bulges: a glaze shows its
    reflections on a smooth body."""
    return _displaced_icosphere("glazed", [(0.9, 0.25, 1)], (0.75, 0.75, 1.0))


def _mixed() -> bpy.types.Object:
    """A squat round vessel with a broad swell and fine ripples finer than a 1 % budget
    keeps."""
    return _displaced_icosphere("mixed", [(0.8, 0.3, 1), (0.15, 0.04, 2)], (1.0, 1.0, 0.7))


def _centre(obj: bpy.types.Object) -> None:
    """Move ``obj``'s mesh so its bounding box is centred at the origin."""
    low = [min(corner[axis] for corner in obj.bound_box) for axis in range(3)]
    high = [max(corner[axis] for corner in obj.bound_box) for axis in range(3)]
    obj.data.transform(Matrix.Translation([-(a + b) / 2 for a, b in zip(low, high, strict=True)]))
    obj.data.update()
    bpy.context.view_layer.update()


BUILDERS = {"sculpt": (_sculpt, _sculpt_material),
            "hard_surface": (_hard_surface, _hard_surface_material),
            "chair": (_chair, _chair_material),
            "glazed": (_glazed, _glazed_material),
            "mixed": (_mixed, _mixed_material)}


def build(name: str) -> bpy.types.Object:
    """Asset ``name`` in the current scene: one triangulated mesh object named ``name`` with
    its material, inside the unit sphere."""
    shape, material = BUILDERS[name]
    obj = shape()
    obj.name = name
    obj.data.materials.clear()
    _centre(obj)  # fit_to_unit_sphere moves by the centre before it scales: centred first
    demo_scene.fit_to_unit_sphere(obj)
    obj.data.materials.append(material())
    bpy.context.view_layer.update()
    return obj


def triangles(obj: bpy.types.Object) -> int:
    """Triangles of ``obj``'s evaluated mesh."""
    evaluated = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    mesh = evaluated.to_mesh()
    mesh.calc_loop_triangles()
    count = len(mesh.loop_triangles)
    evaluated.to_mesh_clear()
    return count
