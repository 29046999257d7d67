"""One asset at one budget, end to end, in its own process (bpy keeps one session per
process): the truth (cached, ``truth``), the three routes from one decimated start, and each
result judged by Cycles on the held-out cameras under every judging light.

- **Blender's route**: ``addon.bake_start``: the reference decimated to the budget, Smart-UV
  unwrapped (``decimated_copy``), its base colour, roughness, metallic and tangent normals
  baked Selected to Active (``bake_maps``), a Principled material on the maps
  (``baked_material``); its wall time is these three calls.
- **diffrec's route**: that start as the add-on makes it (``fit_start``,
  ``bake_start.start_maps``: under a uniform clear coat, the base's own roughness and the coat
  as a layer, ``KHR_materials_clearcoat`` in the GLB, kept by the fit; under another coat, the
  roughness turned towards the coat's; else the same maps; the reference's IOR where it is one
  and not 1.5, ``bake_start.distinct_ior``, ``KHR_materials_ior`` in the GLB), exported by
  Blender's glTF exporter with that material (``start.glb``) and rendered alone by Cycles
  from the training cameras with the targets' seed (``start_renders/``, ``render_start``),
  then ``diffrec optimize --mode refine`` from it (``init_textures`` "base_mesh": the bake
  as its starting textures; ``--start-renders``: the fit learns how the reference differs
  from the start, not how Cycles differs from our rasterizer) on the reference's training
  renders, with the true light kept (``--light fixed --envmap``); its wall time is the
  bake's, the start renders' and the optimize child's.
- **Baseline**: the same start with a copy of the reference's own procedural material.

Judging: each result alone in the scene (the others unlinked), rendered with the judge's seed
(``job.judge_seed``; by default ``JUDGE_SEED``, which the bake also draws with) by
``relight.judge`` (every light, then the base colour; its picture ``<route>.png``); diffrec's
``mesh.glb`` through the add-on's import (Blender's glTF importer; its learned probe unused).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import bpy
import numpy as np

from diffrec_bench.checkout import REPO, addon_module
from diffrec_bench.demo import scene as demo_scene
from diffrec_bench.demo.console import quiet_stdout
from diffrec_bench.quality import dataset as datasets
from diffrec_bench.quality import relight
from diffrec_bench.quality.job import run_child
from diffrec_bench.quality.judging import JUDGE_SEED, held_out_cameras

from . import assets, catalogue, truth
from .jobs import PeerJob, checkout_commit

ROUTES = ("baseline", "bake", "diffrec")
TARGET_SEED = 0
"""Cycles' seed of the truth's renders (``truth.reference_scene``'s default): the start
renders share it, so that their noise follows the targets' where the two scenes agree."""


def budget_triangles(reference_triangles: int, fraction: float) -> int:
    """The triangle budget: ``fraction`` of the reference's triangles, at least 4."""
    return max(4, round(reference_triangles * fraction))


def supports_triangles() -> bool:
    """Whether this checkout's ``diffrec optimize`` takes ``--triangles``."""
    help_text = subprocess.run([sys.executable, "-m", "diffrec", "optimize", "--help"],
                               capture_output=True, text=True, cwd=REPO).stdout
    return "--triangles" in help_text


def optimize_command(job: PeerJob, dataset: Path, start: Path, config: Path, result: Path,
                     triangles: int | None, start_renders: Path | None = None) -> list[str]:
    """``diffrec optimize`` (``job.mode``) from the baked start on the truth's training views
    under the fitted HDRI, kept fixed; ``triangles``: the budget (None: the flag is not
    passed); ``start_renders``: the start's Cycles renders (None: not given)."""
    hdri = demo_scene.bundled_hdri(catalogue.ASSETS[job.asset]["hdri"])
    command = [sys.executable, "-m", "diffrec", "optimize", "--dataset", str(dataset),
               "--mode", job.mode, "--preset", job.preset, "--train-res", str(job.size),
               "--texture-res", str(job.texture_res), "--envmap", str(hdri),
               "--light", "fixed", "--base-mesh", str(start), "--config", str(config),
               "--out-dir", str(result), "--quiet"]
    if triangles is not None:
        command += ["--triangles", str(triangles)]
    if start_renders is not None:
        command += ["--start-renders", str(start_renders)]
    if job.iterations:
        command += ["--iterations", str(job.iterations)]
    if job.device:
        command += ["--device", job.device]
    return command


@contextlib.contextmanager
def alone(obj: bpy.types.Object):
    """Every other mesh object unlinked from its collections for the block (so renders, and
    ``relight.render_relit``'s base-colour step, touch ``obj`` alone), then linked back."""
    unlinked = [(other, collection) for other in bpy.data.objects
                if other.type == "MESH" and other != obj
                for collection in other.users_collection]
    for other, collection in unlinked:
        collection.objects.unlink(other)
    try:
        yield obj
    finally:
        for other, collection in unlinked:
            collection.objects.link(other)


def export_start(start: bpy.types.Object, path: Path) -> Path:
    """``start`` alone, with its material, to a GLB by Blender's glTF exporter (Y up)."""
    bpy.ops.object.select_all(action="DESELECT")
    start.select_set(True)
    bpy.context.view_layer.objects.active = start
    with quiet_stdout():
        bpy.ops.export_scene.gltf(filepath=str(path), export_format="GLB", use_selection=True,
                                  export_materials="EXPORT", export_yup=True)
    return path


def render_start(bl_scene, start: bpy.types.Object, job: PeerJob, folder: Path) -> Path:
    """``start`` alone rendered from the training cameras as the targets were (their seed,
    samples and size), written as a NeRF-style capture in ``folder`` with the targets' file
    names: what ``diffrec optimize --start-renders`` reads."""
    cameras = demo_scene.orbit_cameras(job.views, 0.0, "start")
    seed, bl_scene.cycles.seed = bl_scene.cycles.seed, TARGET_SEED
    try:
        with alone(start):
            datasets.write_split(folder, "train", bl_scene, cameras, job.size)
    finally:
        bl_scene.cycles.seed = seed
        for camera in cameras:
            bpy.data.objects.remove(camera)
    return folder


def start_texture_error(path: Path, maps: dict) -> dict:
    """How far the start's textures as the backend reads them (``diffrec.io.read_gltf``) lie
    from the bake: mean absolute difference per channel, both linear with rows top-down, the
    normal encoded in [0, 1] (a check of the GLB hand-over: 8-bit rounding is about 0.001;
    None where the channel is missing or sized otherwise)."""
    from diffrec.io import read_gltf

    material = read_gltf(path).materials[0]
    kd = material.kd.numpy()[..., :3] if material.kd is not None else None
    ks = material.ks.numpy() if material.ks is not None else None
    normal = material.normal.numpy() * 0.5 + 0.5 if material.normal is not None else None

    def error(read, baked):
        if read is None or read.ndim != 3 or read.shape[:2] != baked.shape[:2]:
            return None
        return float(np.abs(read - baked).mean())

    return {"base_color": error(kd, maps["base_color"]),
            "roughness": error(None if ks is None else ks[..., 1:2], maps["roughness"][..., None]),
            "metallic": error(None if ks is None else ks[..., 2:3], maps["metallic"][..., None]),
            "normal": error(normal, maps["normal"])}


def blender_route(bl_scene, reference, triangles: int, job: PeerJob, folder: Path) -> tuple:
    """(the start object with its baked material, the maps, wall seconds)."""
    bake_start = addon_module("bake_start")
    started = time.monotonic()
    start = bake_start.decimated_copy(reference, triangles, f"{job.asset} start")
    with quiet_stdout():
        maps = bake_start.bake_maps(bl_scene, reference, start, job.texture_res,
                                    samples=job.bake_samples)
    start.data.materials.clear()
    start.data.materials.append(bake_start.baked_material(f"{job.asset} baked", maps))
    seconds = time.monotonic() - started
    np.savez_compressed(folder / "bake_maps.npz", **maps)
    return start, maps, round(seconds, 2)


@contextlib.contextmanager
def fit_start(start, maps: dict, job: PeerJob, coat: tuple[float, float] | None = None,
              ior: float | None = None):
    """For the block, ``start`` wearing the maps diffrec's fit starts from
    (``bake_start.start_maps``: Blender's route's ``maps``, the base's roughness under a
    uniform clear coat, the roughness turned towards another coat's) under the reference's
    uniform coat ``coat`` (``bake_start.uniform_coat``; its glTF export carries it as
    ``KHR_materials_clearcoat``) at the reference's IOR ``ior`` (``bake_start.distinct_ior``;
    as ``KHR_materials_ior``), as the add-on sends them; yields those maps. Blender's material
    is back after it."""
    bake_start = addon_module("bake_start")
    fitted = bake_start.start_maps(maps)
    blender = start.data.materials[0]
    start.data.materials[0] = bake_start.baked_material(f"{job.asset} start", fitted, coat,
                                                        ior)
    try:
        yield fitted
    finally:
        start.data.materials[0] = blender


def baseline_copy(start, reference) -> bpy.types.Object:
    """The start's mesh again, wearing copies of the reference's own materials."""
    mesh = start.data.copy()
    mesh.materials.clear()
    for material in reference.data.materials:
        mesh.materials.append(material.copy())
    baseline = bpy.data.objects.new(f"{start.name} baseline", mesh)
    baseline.matrix_world = start.matrix_world
    bpy.context.scene.collection.objects.link(baseline)
    return baseline


def run_budget(job: PeerJob) -> dict:
    """The whole run; its record is also written to ``<out>/<label>/result.json``. A failed
    ``diffrec optimize`` gives a record with ``error`` (the log's tail) and the other routes'
    scores."""
    import_result = addon_module("import_result")
    out = job.out / job.label
    out.mkdir(parents=True, exist_ok=True)
    record = {"asset": job.asset, "kind": catalogue.ASSETS[job.asset]["kind"],
              "fraction": job.fraction, "commit": job.commit, "time_s": {},
              "job": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(job).items()}}
    started = time.monotonic()
    folder, record["truth_built"] = truth.ensure_truth(job)
    record["time_s"]["truth"] = round(time.monotonic() - started, 2)
    info, targets, ceiling = truth.load_truth(folder)
    record.update(truth=str(folder), reference_triangles=info["triangles"],
                  budget=budget_triangles(info["triangles"], job.fraction), ceiling=ceiling,
                  lights=job.lights())

    bl_scene, reference = truth.reference_scene(job, seed=JUDGE_SEED)
    start, maps, record["time_s"]["bake"] = blender_route(bl_scene, reference, record["budget"],
                                                          job, out)
    bake_start = addon_module("bake_start")
    record["start_coat"] = bake_start.uniform_coat(reference)
    record["start_ior"] = bake_start.distinct_ior(reference)
    with fit_start(start, maps, job, record["start_coat"], record["start_ior"]) as fitted:
        glb = export_start(start, out / "start.glb")
        record["start_texture_error"] = start_texture_error(glb, fitted)
        start_renders = None
        if job.start_renders:
            started = time.monotonic()
            start_renders = render_start(bl_scene, start, job, out / "start_renders")
            record["time_s"]["start_renders"] = round(time.monotonic() - started, 2)
    baseline = baseline_copy(start, reference)

    config = out / "diffrec_config.json"
    config.write_text(json.dumps({"init_textures": "base_mesh", **dict(job.settings)}))
    result = out / "diffrec"
    shutil.rmtree(result, ignore_errors=True)  # a previous run's checkpoints would resume
    budget = record["budget"] if supports_triangles() else None
    command = optimize_command(job, folder, glb, config, result, budget, start_renders)
    record["diffrec_command"] = " ".join(command)
    record["commit_at_fit"] = checkout_commit(REPO)  # others change diffrec's defaults meanwhile
    child = run_child(command, out / "optimize.log", job.threads)
    record["optimize"] = child
    record["time_s"]["optimize"] = child["wall_s"]
    record["time_s"]["blender_route"] = record["time_s"]["bake"]
    record["time_s"]["diffrec_route"] = round(record["time_s"]["bake"] + child["wall_s"]
                                              + record["time_s"].get("start_renders", 0), 2)

    for collection in list(reference.users_collection):  # the truth is cached: out of sight
        collection.objects.unlink(reference)
    cameras = held_out_cameras(folder)
    results = {"baseline": baseline, "bake": start}
    if child["returncode"] != 0:
        record["error"] = (out / "optimize.log").read_text()[-2000:]
    else:
        with quiet_stdout():
            results["diffrec"] = import_result.import_result(
                bpy.context, result, "diffrec", use_world=False).object
        metrics = json.loads((result / "metrics.json").read_text())
        record["backend_validation"] = {key: metrics.get(key) for key in
                                        ("psnr_mean", "ssim_mean", "device", "engine")}
        record["diffrec_settings"] = metrics.get("settings")  # every default as it ran
    started = time.monotonic()
    record["routes"] = {}
    bl_scene.cycles.samples = job.judge_samples
    bl_scene.cycles.seed = job.judge_seed
    for route, obj in results.items():
        with alone(obj):
            judged = relight.judge(bl_scene, cameras, job.lights(), targets, job.size,
                                   picture=out / f"{route}.png")
        record["routes"][route] = {**judged, "triangles": assets.triangles(obj)}
    record["time_s"]["judge"] = round(time.monotonic() - started, 2)
    (out / "result.json").write_text(json.dumps(record, indent=2))
    return record
