"""One scene of the benchmark, end to end, in its own process (bpy keeps one session per
process): targets (cached), ``diffrec optimize`` as a child process (``job``), then the result
judged as a user sees it and its geometry measured against the true mesh (``judging``). With
``relight``, the same scene is then rendered under lights the result was not fitted under and
as base colour (``relight``). Nothing is imported before a job runs: the benchmark starts its
worker processes before any of them imports bpy.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from .job import SceneJob, optimize_command, run_child
from .judging import judge_result, judging_scene, measure_geometry


def run_scene(job: SceneJob) -> dict:
    """The whole scene; its record is also written to ``<out>/result.json``. A previous
    result in ``<out>/asset`` is removed first. A failed ``diffrec optimize`` gives a record
    with ``error`` (the log's tail) and no scores."""
    from diffrec_bench.checkout import addon_module
    from diffrec_bench.demo import scene as demo_scene

    from . import dataset as datasets
    from . import light_level, relight, remote
    from .recipes import RECIPES

    export_scene = addon_module("export_scene")

    job.out.mkdir(parents=True, exist_ok=True)
    record = {"scene": job.name, "mode": job.mode, "preset": job.preset, "size": job.size,
              "views": job.views, "holdout": job.holdout, "iterations": job.iterations,
              "light": job.light,
              "recipe": RECIPES[job.name], "time_s": {},
              "config": job.config.read_text() if job.config else None}
    started = time.monotonic()
    folder, built = datasets.ensure_dataset(job.cache, job.name, job.size, job.views,
                                            job.holdout, job.samples, use_gpu=job.on_cuda())
    record.update(dataset=str(folder), dataset_built=built)
    record["time_s"]["dataset"] = round(time.monotonic() - started, 2)
    lights = job.lights()
    if lights is not None:
        started = time.monotonic()
        relit_targets, record["relit_built"] = relight.ensure_targets(
            folder, job.name, job.size, job.samples, lights, use_gpu=job.on_cuda())
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
