"""Building one of the benchmark's scenes (``recipes.RECIPES``) into the current bpy session."""

from __future__ import annotations

import bpy

from diffrec_bench.demo import scene as demo_scene

from .materials import make_material
from .recipes import RECIPES
from .shapes import SHAPES


def build(name: str, size: int, samples: int, use_gpu: bool = False) -> tuple:
    """Build scene ``name`` from a factory-fresh session: (bpy scene, object). The object's
    transform is applied to its mesh, which fits the unit sphere at the origin; the world is
    the recipe's HDRI; Cycles renders square ``size`` images at ``samples`` per pixel."""
    recipe = RECIPES[name]
    bl_scene = demo_scene.empty_scene(size, samples, use_gpu=use_gpu)
    demo_scene.set_world(bl_scene, demo_scene.bundled_hdri(recipe["hdri"]))
    obj = SHAPES[recipe["shape"]]()
    obj.name = name
    obj.data.materials.clear()
    obj.data.materials.append(make_material(name, recipe["material"]))
    demo_scene.fit_to_unit_sphere(obj)
    bpy.context.view_layer.update()
    return bl_scene, obj
