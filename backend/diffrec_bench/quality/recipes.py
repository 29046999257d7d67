"""The benchmark's scenes as plain data (no bpy here: the benchmark's parent process reads
them, and must not import bpy before it starts its workers): a shape, a material, one of
Blender's bundled HDRIs.

Together the eight cover genus >= 1 (``ring``, ``mug``), thin parts (``fish``, ``critter``),
deep concavities (``mug``, ``bowl``), sharp edges and flat faces (``box``, ``prism``), smooth
organic shapes (``blob``, ``critter``); fine texture detail (dots, stripes, checker, text-like
glyph rows), glossy, metallic and rough materials, bumps, very dark and very bright albedo; and
all eight studio-light HDRIs Blender ships. Two more (issue 30) test fine texture detail on its
own: small sharp dots on a torus (``dots``) and thin glyph strokes on a box (``glyphs``), both
ink on white with features 2-3 % of the object's size (``feature_size``).
"""

from __future__ import annotations


def _material(pattern, colors, scale=0.0, roughness=0.5, metallic=0.0, bump=0.0,
              bump_pattern="noise", bump_scale=0.0) -> dict:
    return {"pattern": pattern, "colors": colors, "scale": scale, "roughness": roughness,
            "metallic": metallic, "bump": bump, "bump_pattern": bump_pattern,
            "bump_scale": bump_scale}


RED, CREAM, NAVY, WHITE = (0.6, 0.05, 0.03), (0.85, 0.75, 0.5), (0.03, 0.08, 0.3), (0.9, 0.9, 0.9)
INK, GOLD, GREEN = (0.02, 0.02, 0.02), (1.0, 0.71, 0.29), (0.1, 0.4, 0.1)
PAPER = (0.8, 0.78, 0.7)

# fine patterns' sizes in the pattern's own units (scene units times its scale): a dot's
# radius on the Voronoi lattice (cells 1 apart); a glyph stroke's width and the rows' spacing
# (blocks twice as long as the rows are high)
DOT_RADIUS, GLYPH_STROKE, GLYPH_ROW = 0.3, 0.08, 0.3

RECIPES = {
    "ring": {"shape": "ring_with_head", "hdri": "city.exr",
             "material": _material("dots", [CREAM, RED], scale=9.0, roughness=0.45)},
    "mug": {"shape": "mug", "hdri": "interior.exr",
            "material": _material("stripes", [WHITE, NAVY], scale=6.0, roughness=0.12)},
    "bowl": {"shape": "bowl", "hdri": "studio.exr",
             "material": _material("plain", [(0.015, 0.015, 0.018), INK], roughness=0.85)},
    "box": {"shape": "bevelled_box", "hdri": "courtyard.exr",
            "material": _material("checker", [WHITE, INK], scale=4.0, roughness=0.6)},
    "prism": {"shape": "prism", "hdri": "sunset.exr",
              "material": _material("plain", [GOLD, GOLD], roughness=0.25, metallic=1.0)},
    "blob": {"shape": "blob", "hdri": "forest.exr",
             "material": _material("plain", [(0.95, 0.95, 0.93), WHITE], roughness=0.5,
                                   bump=0.5, bump_pattern="noise", bump_scale=8.0)},
    "fish": {"shape": "fish", "hdri": "sunrise.exr",
             "material": _material("text", [WHITE, INK], scale=5.0, roughness=0.35)},
    "critter": {"shape": "critter", "hdri": "night.exr",
                "material": _material("noise", [GREEN, CREAM], scale=4.0, roughness=0.9,
                                      bump=0.6, bump_pattern="dots", bump_scale=10.0)},
    # fine detail (issue 30): the object is 2 units across, so 0.06 units is 3 % of it
    "dots": {"shape": "torus", "hdri": "studio.exr",
             "material": _material("dots", [WHITE, INK], scale=10.0, roughness=0.5)},
    "glyphs": {"shape": "tilted_box", "hdri": "city.exr",
               "material": _material("glyphs", [PAPER, INK], scale=2.0, roughness=0.5)},
}
"""Scene name -> recipe: ``shape`` (a ``shapes.SHAPES`` builder), ``material`` (see
``materials``), ``hdri`` (a file among Blender's studio-light worlds)."""


def feature_size(material: dict) -> float:
    """The width of the pattern's foreground features in scene units (the object fits the unit
    sphere): a dot's largest diameter, a glyph stroke's width; ValueError for other patterns."""
    widths = {"dots": 2 * DOT_RADIUS, "glyphs": GLYPH_STROKE}
    if material["pattern"] not in widths:
        raise ValueError(f"pattern {material['pattern']!r} has no single feature size")
    return widths[material["pattern"]] / material["scale"]
