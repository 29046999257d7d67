"""Judging a fitted result as a user sees it: a factory-fresh Cycles scene; the held-out cameras
come in through the add-on's NeRF import (``diffrec.import_nerf``, each with its target image),
the result through the add-on's import (``mesh.glb`` by Blender's glTF importer, checked
against the manifest, ``probe.hdr`` as the world); Cycles renders each held-out camera and
``diffrec_bench.demo.judge`` scores the renders against the targets, as ``scripts/demo`` does.
Its geometry is measured against the true mesh."""

from __future__ import annotations

from pathlib import Path

from .job import SceneJob

JUDGE_SEED = 1
"""Cycles' seed for rendering results (the targets have ``diffrec_bench.demo.scene``'s 0): with the
targets' own seed a result close to the truth drew the same random numbers for the same
pixels, so part of the targets' noise cancelled in its error and the truth itself scored over
60 dB; with its own seed every result carries noise of its own, as a new render would."""


def held_out_cameras(dataset: Path) -> list:
    """The held-out cameras, each with its target image, brought into the current scene by the
    add-on's NeRF import (``transforms_test.json``), sorted by name."""
    import bpy

    from diffrec_bench.checkout import enable_addon
    from diffrec_bench.demo.console import quiet_stdout

    enable_addon()
    before = set(bpy.data.objects)
    with quiet_stdout():
        imported = bpy.ops.diffrec.import_nerf(filepath=str(dataset / "transforms_test.json"))
    if imported != {"FINISHED"}:
        raise RuntimeError(f"the add-on could not import {dataset}/transforms_test.json")
    return sorted((o for o in bpy.data.objects if o not in before and o.type == "CAMERA"),
                  key=lambda camera: camera.name)


def judging_scene(job: SceneJob, dataset: Path, asset: Path) -> tuple:
    """A factory-fresh Cycles scene (seed ``JUDGE_SEED``) with the held-out cameras and the
    imported result: (scene, cameras, the result's learned world or None; not made the
    scene's)."""
    import bpy

    from diffrec_bench.checkout import addon_module
    from diffrec_bench.demo import scene as demo_scene
    from diffrec_bench.demo.console import quiet_stdout

    import_result = addon_module("import_result")

    bl_scene = demo_scene.empty_scene(job.size, job.samples, use_gpu=job.on_cuda())
    bl_scene.cycles.seed = JUDGE_SEED
    cameras = held_out_cameras(dataset)
    with quiet_stdout():
        world = import_result.import_result(bpy.context, asset, "result").world
    return bl_scene, cameras, world


def judge_result(job: SceneJob, bl_scene, cameras, world) -> dict:
    """Cycles renders of the imported result from the held-out cameras under ``world`` (the
    light it learned; None: the scene's), scored against the targets; writes
    ``comparison.png`` beside the asset."""
    from diffrec_bench.checkout import addon_module
    from diffrec_bench.demo import judge, report
    from diffrec_bench.demo.console import quiet_stdout

    export_scene = addon_module("export_scene")

    if world is not None:  # judged under the light it learned
        bl_scene.world = world
    with quiet_stdout():
        results = export_scene.render_views(bl_scene, cameras, (job.size, job.size))
    targets = export_scene.camera_images(cameras)
    names = [camera.name for camera in cameras]
    report.write_comparison(job.out / "comparison.png", results, targets, names)
    return judge.score(results, targets, names)


def measure_geometry(dataset: Path, asset: Path) -> dict:
    """``geometry.compare`` of ``mesh.glb`` against the true mesh, and the result's size."""
    from diffrec.io import read_gltf, read_obj

    from . import geometry

    mesh = read_gltf(asset / "mesh.glb").mesh
    result = geometry.as_trimesh(mesh.positions.numpy(), mesh.triangles.numpy())
    true_mesh = read_obj(dataset / "true_mesh.obj").mesh
    truth = geometry.as_trimesh(true_mesh.positions.numpy(), true_mesh.triangles.numpy())
    return {"triangles": int(mesh.triangles.shape[0]), **geometry.compare(result, truth)}
