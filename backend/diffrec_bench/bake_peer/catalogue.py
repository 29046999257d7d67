"""The peer benchmark's assets and budgets as plain data (no bpy: the benchmark's parent
process reads them, and must not import bpy before it starts its workers)."""

from __future__ import annotations

ASSETS = {
    "sculpt": {"hdri": "forest.exr", "kind": "organic displaced sculpt, sharp colour bands "
                                             "and spots, varying roughness"},
    "hard_surface": {"hdri": "city.exr", "kind": "bevelled housing, striped decal, metal cap "
                                                 "and feet"},
    "chair": {"hdri": "courtyard.exr", "kind": "small chair with thin legs and slats"},
    "glazed": {"hdri": "studio.exr", "kind": "glazed ceramic pot, painted stripes and dots "
                                            "under a clear coat"},
    "mixed": {"hdri": "sunset.exr", "kind": "rippled vessel, a Diffuse BSDF's bands mixed "
                                           "with a Glossy BSDF, no Principled BSDF"},
}
"""Asset name -> its fitted light (one of Blender's studio HDRIs) and what it is."""

BUDGETS = (0.01, 0.05)
"""Triangle budgets as fractions of the reference's triangles."""
