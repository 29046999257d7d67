"""One scene of the benchmark, end to end, in its own process (bpy keeps one session per
process): targets (cached), ``diffrec optimize`` as a child process, then the result judged as
a user sees it and its geometry measured against the true mesh.

Judging: a factory-fresh Cycles scene; the held-out cameras come in through the add-on's NeRF
import (``diffrec.import_nerf``, each with its target image), the result through the add-on's
import (``mesh.glb`` by Blender's glTF importer, checked against the manifest, ``probe.hdr`` as
the world); Cycles renders each held-out camera and ``demo_lib.judge`` scores the renders
against the targets, as ``scripts/demo`` does. With ``relight``, the same scene is then
rendered under lights the result was not fitted under and as base colour (``relight``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JUDGE_SEED = 1
"""Cycles' seed for rendering results (the targets have ``demo_lib.scene``'s 0): with the
targets' own seed a result close to the truth drew the same random numbers for the same
pixels, so part of the targets' noise cancelled in its error and the truth itself scored over
60 dB; with its own seed every result carries noise of its own, as a new render would."""


@dataclass(frozen=True)
class SceneJob:
    """What to run for one scene. ``iterations`` None: the preset's; ``device`` None: the
    backend's choice; ``threads`` None: torch's default in the optimize child; ``config``: a
    settings file passed to ``diffrec optimize --config`` (None: none); ``relight``: also
    judge the result under other lights and its base colour (``relight``); ``albedo``: judge
    its base colour only; ``peer`` "mitsuba": fit with Mitsuba 3's own inverse rendering
    (``scripts/bench_mitsuba_peer.py``, materials mode) instead of ``diffrec optimize``;
    ``fitted``: the results folder of fits run on another machine (``remote``), judged here
    instead of fitting."""

    name: str
    out: Path
    cache: Path
    mode: str
    preset: str
    size: int
    views: int
    holdout: int
    samples: int
    iterations: int | None = None
    device: str | None = None
    threads: int | None = None
    config: Path | None = None
    relight: bool = False
    albedo: bool = False
    peer: str | None = None
    fitted: Path | None = None

    def lights(self) -> list[dict] | None:
        """The lights the result is judged under besides its own: None when neither they nor
        the base colour are judged, [] for the base colour alone."""
        from .lights import relight_lights

        if self.relight:
            return relight_lights(self.name)
        return [] if self.albedo else None


def optimize_command(job: SceneJob, dataset: Path, hdri: Path, asset: Path) -> list[str]:
    """The ``diffrec optimize`` command line: the scene's dataset at its own size, the HDRI
    as a fixed light (as the demo keeps it), the true mesh as the start in materials mode;
    with ``job.peer``, the peer's command on the same inputs."""
    if job.peer == "mitsuba":
        return [sys.executable, str(REPO / "scripts" / "bench_mitsuba_peer.py"),
                "--dataset", str(dataset), "--base-mesh", str(dataset / "true_mesh.obj"),
                "--envmap", str(hdri), "--out-dir", str(asset), "--train-res", str(job.size),
                "--quiet", *(["--iterations", str(job.iterations)] if job.iterations else [])]
    command = [sys.executable, "-m", "diffrec", "optimize", "--dataset", str(dataset),
               "--mode", job.mode, "--preset", job.preset, "--train-res", str(job.size),
               "--envmap", str(hdri), "--light", "fixed", "--out-dir", str(asset), "--quiet"]
    if job.mode == "materials":
        command += ["--base-mesh", str(dataset / "true_mesh.obj")]
    if job.iterations:
        command += ["--iterations", str(job.iterations)]
    if job.device:
        command += ["--device", job.device]
    if job.config:
        command += ["--config", str(job.config)]
    return command


def run_child(command: list[str], log: Path, threads: int | None) -> dict:
    """Run ``command`` with its output in ``log``: exit status, wall seconds, CPU seconds and
    peak resident memory (MiB) of that child alone (``os.wait4``'s resource usage)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "backend"),
                                                      env.get("PYTHONPATH")]))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    started = time.monotonic()
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {"returncode": process.returncode, "wall_s": round(time.monotonic() - started, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mib": round(usage.ru_maxrss / 1024, 1)}  # ru_maxrss is in KiB on Linux


def held_out_cameras(dataset: Path) -> list:
    """The held-out cameras, each with its target image, brought into the current scene by the
    add-on's NeRF import (``transforms_test.json``), sorted by name."""
    import addon_utils
    import bpy
    from demo_lib.console import quiet_stdout

    addon_utils.enable("addon", default_set=True)
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
    from demo_lib import scene as demo_scene
    from demo_lib.console import quiet_stdout

    from addon import import_result

    bl_scene = demo_scene.empty_scene(job.size, job.samples, use_gpu=_cuda(job))
    bl_scene.cycles.seed = JUDGE_SEED
    cameras = held_out_cameras(dataset)
    with quiet_stdout():
        world = import_result.import_result(bpy.context, asset, "result").world
    return bl_scene, cameras, world


def judge_result(job: SceneJob, bl_scene, cameras, world) -> dict:
    """Cycles renders of the imported result from the held-out cameras under ``world`` (the
    light it learned; None: the scene's), scored against the targets; writes
    ``comparison.png`` beside the asset."""
    from demo_lib import judge, report
    from demo_lib.console import quiet_stdout

    from addon import export_scene

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


def _cuda(job: SceneJob) -> bool:
    return bool(job.device and job.device.startswith("cuda"))


def run_scene(job: SceneJob) -> dict:
    """The whole scene; its record is also written to ``<out>/result.json``. A previous
    result in ``<out>/asset`` is removed first. A failed ``diffrec optimize`` gives a record
    with ``error`` (the log's tail) and no scores."""
    from demo_lib import scene as demo_scene

    from addon import export_scene

    from . import dataset as datasets
    from . import light_level, relight, remote
    from .recipes import RECIPES

    job.out.mkdir(parents=True, exist_ok=True)
    record = {"scene": job.name, "mode": job.mode, "preset": job.preset, "size": job.size,
              "views": job.views, "holdout": job.holdout, "iterations": job.iterations,
              "recipe": RECIPES[job.name], "time_s": {},
              "config": job.config.read_text() if job.config else None}
    started = time.monotonic()
    folder, built = datasets.ensure_dataset(job.cache, job.name, job.size, job.views,
                                            job.holdout, job.samples, use_gpu=_cuda(job))
    record.update(dataset=str(folder), dataset_built=built)
    record["time_s"]["dataset"] = round(time.monotonic() - started, 2)
    lights = job.lights()
    if lights is not None:
        started = time.monotonic()
        relit_targets, record["relit_built"] = relight.ensure_targets(
            folder, job.name, job.size, job.samples, lights, use_gpu=_cuda(job))
        record["time_s"]["relit_targets"] = round(time.monotonic() - started, 2)
    asset = job.out / "asset"
    shutil.rmtree(asset, ignore_errors=True)  # a previous run's checkpoints would resume
    hdri = demo_scene.bundled_hdri(RECIPES[job.name]["hdri"])
    if job.fitted:
        child = remote.take_fitted(job, asset)
    else:
        child = run_child(optimize_command(job, folder, hdri, asset), job.out / "optimize.log",
                          job.threads)
    record["time_s"]["optimize"] = child["wall_s"]
    record["optimize"] = child
    if child["returncode"] != 0:
        record["error"] = (job.out / "optimize.log").read_text()[-2000:]
    else:
        started = time.monotonic()
        bl_scene, cameras, world = judging_scene(job, folder, asset)
        record["cycles"] = judge_result(job, bl_scene, cameras, world)
        record["time_s"]["judge"] = round(time.monotonic() - started, 2)
        if lights is not None:
            started = time.monotonic()
            relit = relight.judge(bl_scene, cameras, lights, relit_targets, job.size,
                                  job.out / "relit.png" if job.relight else None)
            record["albedo"] = relit["albedo"]
            if job.relight:
                relit["expected_drop"] = light_level.expected_drop(
                    export_scene.camera_images(cameras), relit_targets, lights)
                record["relit"] = relit
            record["time_s"]["relight"] = round(time.monotonic() - started, 2)
        started = time.monotonic()
        record["geometry"] = measure_geometry(folder, asset)
        record["time_s"]["geometry"] = round(time.monotonic() - started, 2)
        backend = json.loads((asset / "metrics.json").read_text())
        record["backend_validation"] = {key: backend.get(key) for key in
                                        ("psnr_mean", "ssim_mean", "device", "engine")}
    record["job"] = {key: str(value) if isinstance(value, Path) else value
                     for key, value in asdict(job).items()}
    (job.out / "result.json").write_text(json.dumps(record, indent=2))
    return record
