"""Relighting (issue 25): a scene and a result judged under lights they were not fitted under.

Targets: the true scene (``scenes.build``) rendered by Cycles from the held-out cameras under
each of ``lights.relight_lights`` and, as its true albedo, with every material's base colour
shown as emission; cached in ``<dataset>/relit-<key>/targets.npz`` (float32 ``[N, H, W, 4]``,
linear, straight alpha, one array per light name and ``albedo``), the key hashing the dataset's
folder name (its own content key), the lights and this code. Judging: the imported result's
``mesh.glb`` (its textures; its learned probe is not used) rendered the same way, scored per
light by ``diffrec_bench.demo.judge.score`` and its base colour by ``albedo.albedo_error``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from pathlib import Path

import bpy
import numpy as np

from diffrec_bench.checkout import addon_module
from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.demo.console import quiet_stdout

from . import lights as relight_lights

export_scene = addon_module("export_scene")

SUN_OBJECT = "relight sun"
ALBEDO_SAMPLES = 64  # emission only, cheap: samples just antialias the edges


def _black_world(bl_scene) -> None:
    world = bpy.data.worlds.new("relight black")
    bl_scene.world = world
    world.use_nodes = True
    nodes, links = world.node_tree.nodes, world.node_tree.links
    nodes.clear()
    background = nodes.new("ShaderNodeBackground")
    background.inputs["Color"].default_value = (0.0, 0.0, 0.0, 1.0)
    links.new(background.outputs["Background"], nodes.new("ShaderNodeOutputWorld").inputs[0])


def use_light(bl_scene, light: dict) -> None:
    """Light ``bl_scene`` by ``light`` alone: its HDRI as the world, or the sun over a black
    world (a previous sun is removed either way)."""
    old = bpy.data.objects.get(SUN_OBJECT)
    if old is not None:
        bpy.data.objects.remove(old)
    if light["kind"] == "hdri":
        demo_scene.set_world(bl_scene, demo_scene.bundled_hdri(light["hdri"]))
        return
    _black_world(bl_scene)
    data = bpy.data.lights.new(SUN_OBJECT, "SUN")
    data.energy, data.angle = light["strength"], math.radians(light["angle"])
    sun = bpy.data.objects.new(SUN_OBJECT, data)
    # a sun shines along its -Z: tilt it from straight down to the light's elevation
    sun.rotation_euler = (math.radians(90.0 - light["elevation"]), 0.0,
                          math.radians(light["azimuth"]))
    bl_scene.collection.objects.link(sun)
    bpy.context.view_layer.update()


BASE_COLOUR_INPUTS = (("ShaderNodeBsdfPrincipled", "Base Color"),
                      ("ShaderNodeBsdfDiffuse", "Color"))
"""Where a material's base colour is read: the first of these shaders it has, in this order."""


def show_base_colour(material) -> None:
    """Replace ``material``'s surface by an emission of its base colour (whatever feeds the
    Principled BSDF's Base Color, or without one, the Diffuse BSDF's Color), so a render
    shows the linear base colour, unlit."""
    tree = material.node_tree
    base = next((node.inputs[name] for kind, name in BASE_COLOUR_INPUTS
                 for node in tree.nodes if node.bl_idname == kind), None)
    if base is None:
        raise ValueError(f"material {material.name!r} has no Principled or Diffuse BSDF")
    emission = tree.nodes.new("ShaderNodeEmission")
    if base.is_linked:
        tree.links.new(base.links[0].from_socket, emission.inputs["Color"])
    else:
        emission.inputs["Color"].default_value = base.default_value
    for output in (n for n in tree.nodes if n.bl_idname == "ShaderNodeOutputMaterial"):
        tree.links.new(emission.outputs["Emission"], output.inputs["Surface"])


def render_relit(bl_scene, cameras, lights: list[dict], size: int) -> dict[str, np.ndarray]:
    """{light name: renders [N, H, W, 4]} for each light, then ``albedo``: the base colour of
    every material in the scene (changed for good: call this last)."""
    renders = {}
    with quiet_stdout():
        for light in lights:
            use_light(bl_scene, light)
            renders[light["name"]] = export_scene.render_views(bl_scene, cameras, (size, size))
        materials = {slot.material for obj in bl_scene.objects if obj.type == "MESH"
                     for slot in obj.material_slots if slot.material is not None}
        for material in materials:
            show_base_colour(material)
        samples, bl_scene.cycles.samples = bl_scene.cycles.samples, ALBEDO_SAMPLES
        renders["albedo"] = export_scene.render_views(bl_scene, cameras, (size, size))
        bl_scene.cycles.samples = samples
    return renders


def targets_key(dataset: Path, lights: list[dict]) -> str:
    """16 hex digits of SHA-256 over the dataset's folder name, the lights and the code that
    renders targets (the modules it uses, this module's rendering functions: judging code
    can change without rendering the targets again)."""
    digest = hashlib.sha256(json.dumps({"dataset": Path(dataset).name, "lights": lights,
                                        "albedo_samples": ALBEDO_SAMPLES},
                                       sort_keys=True).encode())
    for module in (relight_lights, export_scene):
        digest.update(Path(module.__file__).read_bytes())
    for function in (_black_world, use_light, show_base_colour, render_relit):
        digest.update(inspect.getsource(function).encode())
    return digest.hexdigest()[:16]


def ensure_targets(dataset: Path, name: str, size: int, samples: int, lights: list[dict],
                   use_gpu: bool = False) -> tuple[dict[str, np.ndarray], bool]:
    """(scene ``name``'s targets under ``lights`` (``lights.relight_lights``, or none for the
    true albedo alone) and its true albedo, whether they were rendered now rather than found
    beside its ``dataset``). Leaves the bpy session with the true scene in it."""
    from . import scenes
    from .judging import held_out_cameras

    path = Path(dataset) / f"relit-{targets_key(dataset, lights)}" / "targets.npz"
    if path.is_file():
        with np.load(path) as stored:
            return dict(stored), False
    bl_scene, _ = scenes.build(name, size, samples, use_gpu=use_gpu)
    renders = render_relit(bl_scene, held_out_cameras(dataset), lights, size)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    np.savez(partial, **renders)
    partial.replace(path)  # whole or absent
    return renders, True


def judge(bl_scene, cameras, lights: list[dict], targets: dict[str, np.ndarray],
          size: int, picture: Path | None = None) -> dict:
    """The scene's result (the only mesh in ``bl_scene``) rendered under each light and as
    base colour: {light name: ``judge.score`` + the light}, and ``albedo``: the error against
    the true albedo. The result's materials are changed for good. With ``picture``, also
    writes there the first held-out view under each light and as base colour, one row each
    (target | result | error, ``report.comparison_image``)."""
    from diffrec_bench.demo import judge as scoring
    from diffrec_bench.demo import report

    from .albedo import albedo_error

    renders = render_relit(bl_scene, cameras, lights, size)
    if picture is not None:
        rows = [light["name"] for light in lights] + ["albedo"]
        report.write_comparison(picture, np.stack([renders[row][0] for row in rows]),
                                np.stack([targets[row][0] for row in rows]),
                                [row if row != "albedo" else "base colour" for row in rows])
    names = [camera.name for camera in cameras]
    scores = {light["name"]: {"light": light,
                              **scoring.score(renders[light["name"]], targets[light["name"]],
                                              names)}
              for light in lights}
    return {"lights": scores, "albedo": albedo_error(renders["albedo"], targets["albedo"])}
