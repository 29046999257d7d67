"""The benchmark's materials: a Principled BSDF whose base colour is a two-colour procedural
pattern (Blender evaluates it at render time, in object coordinates, so no UVs are needed),
with constant roughness and metallic and an optional procedural bump.

A material is described by a plain dict (part of a scene's recipe, hence of its cache key):

- ``pattern``: ``plain`` | ``dots`` | ``stripes`` | ``checker`` | ``text`` (rows of small
  brick-like glyph blocks) | ``glyphs`` (thin strokes around long blocks) | ``noise``;
  ``scale``: the pattern's frequency (per unit length);
- ``colors``: two linear RGB triples (the pattern's background and foreground);
- ``roughness``, ``metallic``: in [0, 1];
- ``bump``: 0 for none, else the strength of a bump whose height is ``bump_pattern``
  (``noise`` | ``dots``) at ``bump_scale``.
"""

from __future__ import annotations

import bpy

from .recipes import DOT_RADIUS, GLYPH_ROW, GLYPH_STROKE


def _coords(nodes):
    return nodes.new("ShaderNodeTexCoord").outputs["Object"]


def _two_colours(nodes, links, factor, colours):
    """A constant-interpolated ramp: ``colours[0]`` below 0.5, ``colours[1]`` above."""
    ramp = nodes.new("ShaderNodeValToRGB")
    ramp.color_ramp.interpolation = "CONSTANT"
    low, high = ramp.color_ramp.elements
    low.position, low.color = 0.0, (*colours[0], 1.0)
    high.position, high.color = 0.5, (*colours[1], 1.0)
    links.new(factor, ramp.inputs["Fac"])
    return ramp.outputs["Color"]


def _pattern(nodes, links, name: str, scale: float):
    """A scalar output that is high (> 0.5) on the pattern's foreground."""
    coords = _coords(nodes)
    if name == "dots":  # round dots on a Voronoi lattice: distance to the cell's point < radius
        voronoi = nodes.new("ShaderNodeTexVoronoi")
        voronoi.inputs["Scale"].default_value = scale
        voronoi.inputs["Randomness"].default_value = 0.0
        links.new(coords, voronoi.inputs["Vector"])
        less = nodes.new("ShaderNodeMath")
        less.operation, less.inputs[1].default_value = "LESS_THAN", DOT_RADIUS
        links.new(voronoi.outputs["Distance"], less.inputs[0])
        return less.outputs["Value"]
    if name == "stripes":
        wave = nodes.new("ShaderNodeTexWave")
        wave.wave_type, wave.bands_direction = "BANDS", "Z"
        wave.inputs["Scale"].default_value = scale
        wave.inputs["Distortion"].default_value = 0.0
        links.new(coords, wave.inputs["Vector"])
        return wave.outputs["Fac"]
    if name == "checker":
        checker = nodes.new("ShaderNodeTexChecker")
        checker.inputs["Scale"].default_value = scale
        checker.inputs["Color1"].default_value = (1, 1, 1, 1)
        checker.inputs["Color2"].default_value = (0, 0, 0, 1)
        links.new(coords, checker.inputs["Vector"])
        return checker.outputs["Fac"]
    if name == "text":  # short bricks separated by wide mortar read as lines of glyphs
        brick = nodes.new("ShaderNodeTexBrick")
        brick.inputs["Scale"].default_value = scale
        brick.inputs["Mortar Size"].default_value = 0.08
        brick.inputs["Brick Width"].default_value = 0.3
        brick.inputs["Row Height"].default_value = 0.3
        brick.inputs["Color1"].default_value = brick.inputs["Color2"].default_value = (1, 1, 1, 1)
        brick.inputs["Mortar"].default_value = (0, 0, 0, 1)
        links.new(coords, brick.inputs["Vector"])
        invert = nodes.new("ShaderNodeMath")  # glyphs (foreground) are the bricks' gaps
        invert.operation, invert.inputs[0].default_value = "SUBTRACT", 1.0
        links.new(brick.outputs["Fac"], invert.inputs[1])
        return invert.outputs["Value"]
    if name == "glyphs":  # thin ink strokes around long blocks: ruled rows of words
        brick = nodes.new("ShaderNodeTexBrick")
        brick.inputs["Scale"].default_value = scale
        # mortar lines each side of a seam: a stroke is twice the mortar size
        brick.inputs["Mortar Size"].default_value = GLYPH_STROKE / 2
        brick.inputs["Brick Width"].default_value = 2 * GLYPH_ROW
        brick.inputs["Row Height"].default_value = GLYPH_ROW
        links.new(coords, brick.inputs["Vector"])
        return brick.outputs["Fac"]  # 1 on the mortar: the strokes
    if name == "noise":
        noise = nodes.new("ShaderNodeTexNoise")
        noise.inputs["Scale"].default_value = scale
        noise.inputs["Detail"].default_value = 3.0
        links.new(coords, noise.inputs["Vector"])
        return noise.outputs["Fac"]
    raise ValueError(f"unknown pattern {name!r}")


def make_material(name: str, spec: dict) -> bpy.types.Material:
    """A node material as the module docstring describes ``spec``."""
    material = bpy.data.materials.new(name)
    material.use_nodes = True
    nodes, links = material.node_tree.nodes, material.node_tree.links
    bsdf = next(n for n in nodes if n.bl_idname == "ShaderNodeBsdfPrincipled")
    colours = spec["colors"]
    if spec["pattern"] == "plain":
        bsdf.inputs["Base Color"].default_value = (*colours[0], 1.0)
    else:
        factor = _pattern(nodes, links, spec["pattern"], spec["scale"])
        links.new(_two_colours(nodes, links, factor, colours), bsdf.inputs["Base Color"])
    bsdf.inputs["Roughness"].default_value = spec["roughness"]
    bsdf.inputs["Metallic"].default_value = spec["metallic"]
    if spec.get("bump", 0.0) > 0:
        bump = nodes.new("ShaderNodeBump")
        bump.inputs["Strength"].default_value = spec["bump"]
        bump.inputs["Distance"].default_value = 0.02
        height = _pattern(nodes, links, spec["bump_pattern"], spec["bump_scale"])
        links.new(height, bump.inputs["Height"])
        links.new(bump.outputs["Normal"], bsdf.inputs["Normal"])
    return material
