"""diffrec's demo, end to end: build a scene in Blender, render its targets with Cycles, run
Optimize on a local backend, import the result and judge it with Cycles on held-out views.

Run through ``scripts/demo`` (which sets up the environment), or with the test environment's
Python: ``python scripts/demo.py --out out/demo``. See ``--help`` for the options.
Outputs in ``--out``: ``demo.blend``, ``asset/`` (the job's whole result as ``diffrec fetch``
gets it: mesh.glb, probe.hdr, the backend's metrics.json and validation images, manifest.json),
``dataset/`` (the targets as a NeRF-style dataset: the training views the add-on rendered and
the held-out views, for ``diffrec optimize --dataset``), ``comparison.png``, ``curves.png``,
``metrics.json`` and ``serve.log`` (the local backend's stderr; its job data is deleted).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import bpy
import torch

from diffrec_bench.checkout import addon_module, enable_addon
from diffrec_bench.demo import backend, dataset, judge, out_folder, report, scene
from diffrec_bench.demo.console import quiet_stdout, without_lines

export_scene = addon_module("export_scene")

MODES = ("materials", "refine", "reconstruct")
REFINE_DECIMATION = 0.1  # refine starts from the mesh collapsed to 10 % of its triangles


def defaults(cuda: bool) -> dict:
    """Sizes for a CPU (each mode within 10 minutes on two cores) or a CUDA machine; the
    iterations are the preset's (``preview``: at most 1000 for the one pass of materials and
    refine, 300 a pass for reconstruct, whose surface starts from the views' visual hull;
    docs/BENCHMARKS.md)."""
    if cuda:
        return {"preset": "standard", "size": 512, "views": 64, "holdout": 8, "samples": 128}
    return {"preset": "preview", "size": 128, "views": 24, "holdout": 4, "samples": 128}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default="materials",
                        help="materials: bake the appearance onto the same mesh (default); "
                             "refine: start from a 10%% decimated mesh and move its vertices "
                             "too; reconstruct: find the surface from the images alone")
    parser.add_argument("--mesh", type=Path, help="your own object (.obj, .glb, .gltf) instead "
                                                  "of Suzanne; keeps its materials if it has any")
    parser.add_argument("--hdri", type=Path, help="your own equirectangular HDRI (.exr, .hdr) "
                                                  "instead of Blender's forest.exr")
    parser.add_argument("--out", type=Path, default=Path("out/demo"),
                        help="output folder: new, empty, or one an earlier demo run made "
                             "(emptied first); any other folder is refused")
    parser.add_argument("--preset", choices=("preview", "standard", "high"),
                        help="backend preset (default: preview on a CPU, standard with CUDA)")
    parser.add_argument("--size", type=int, help="image size in pixels (default 128 on a CPU, "
                                                 "512 with CUDA)")
    parser.add_argument("--views", type=int, help="training cameras (default 24 / 64)")
    parser.add_argument("--holdout", type=int, help="held-out cameras judged by Cycles "
                                                    "(default 4 / 8)")
    parser.add_argument("--samples", type=int, help="Cycles samples per pixel (default 128)")
    parser.add_argument("--iterations", type=int,
                        help="iterations per pass at most (default: the preset's; on a "
                             "CPU preview's 1000 for materials and refine, 300 for "
                             "reconstruct); the preset ends a pass earlier once its PSNR "
                             "levels off (its stopping rule, docs/guide.md: Suzanne's "
                             "materials pass stops at about 300)")
    parser.add_argument("--texture-res", type=int, help="texture size (default: preset)")
    parser.add_argument("--light", choices=("fixed", "learn"), default="fixed",
                        help="keep the HDRI as the light (default) or learn it")
    parser.add_argument("--device", help="backend device (default: cuda:0 if available, else cpu)")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available() if args.device is None else args.device.startswith("cuda")
    for key, value in defaults(cuda).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.size < 16 or args.views < 2 or args.holdout < 1:
        parser.error("--size must be at least 16, --views at least 2 and --holdout at least 1")
    args.cuda = cuda
    return args


class Clock:
    """Seconds spent per stage, in order."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self.started = time.monotonic()

    def stage(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.times[name] = round(now - since, 2)
        print(f"   {name}: {now - since:.1f} s", flush=True)
        return now


def build_scene(args):
    """(scene, object, training cameras, held-out cameras); the object's world transform is
    baked into its mesh, and fits a unit sphere at the origin."""
    bl_scene = scene.empty_scene(args.size, args.samples, use_gpu=args.cuda)
    scene.set_world(bl_scene, args.hdri or scene.bundled_hdri())
    if args.mesh:
        obj = scene.import_mesh(args.mesh)
        if not obj.data.materials:
            obj.data.materials.append(scene.procedural_material())
    else:
        obj = scene.suzanne()
        obj.data.materials.append(scene.procedural_material())
    scene.fit_to_unit_sphere(obj)
    train = scene.orbit_cameras(args.views, 0.0, "train")
    held_out = scene.orbit_cameras(args.holdout, 0.37, "heldout")
    return bl_scene, obj, train, held_out


def optimize_with_addon(args, subject, train, endpoint: str):
    """Press Optimize, as an artist would: the add-on renders the training cameras, sends the
    job to the backend, follows it (the blocking path Blender takes in background mode) and
    imports the result. Returns (job id, imported object)."""
    enable_addon()
    preferences = bpy.context.preferences.addons["addon"].preferences
    preferences.endpoint, preferences.timeout = endpoint, 60.0
    preferences.use_learned_world = args.light == "learn"  # judged under the light it learned
    settings = bpy.context.scene.diffrec
    settings.target_source, settings.cameras, settings.mode = "RENDER", "SELECTED", args.mode
    settings.preset = args.preset.upper()  # fills iterations, texture size and resolution
    settings.train_resolution = args.size
    if args.iterations:
        settings.iterations = args.iterations
    if args.texture_res:
        settings.texture_resolution = str(args.texture_res)
    settings.light = "KEEP" if args.light == "fixed" else "LEARN"
    for obj in bpy.context.scene.objects:
        obj.select_set(obj in train)
    if subject is not None:
        subject.select_set(True)
    bpy.context.view_layer.objects.active = subject
    try:
        finished = bpy.ops.diffrec.optimize()
    except RuntimeError as error:  # the operator's ERROR report, in background mode
        said = str(error).strip().removeprefix("Error: ").strip()
        raise SystemExit(f"scripts/demo: Optimize failed: {said}") from None
    if finished != {"FINISHED"} or settings.jobs[-1].state != "done":
        raise SystemExit(f"scripts/demo: Optimize did not finish: {settings.status}")
    job = settings.jobs[-1]
    result = bpy.data.objects[f"{job.object_name or 'diffrec'} optimised"]
    result.name = "diffrec result"
    result.location = (0.0, 0.0, 0.0)  # judged where the backend put it, not beside the object
    return job.job_id, result


def fetch_result(endpoint: str, job: str, folder: Path) -> None:
    """The job's whole result into ``folder``, as ``diffrec fetch`` gets it (the add-on fetched
    only what it imports), each file checked against the result's manifest."""
    from diffrec.protocol import Client

    with Client(endpoint, timeout=60.0) as client:
        client.fetch(job, folder)


def save_blend(path: Path, obj, result) -> None:
    """Original and result side by side (the result moved along +X), world kept."""
    obj.hide_render = False
    result.hide_render = False
    for other in bpy.context.scene.objects:  # e.g. refine's decimated start: out of the way
        if other.type == "MESH" and other.hide_render:
            other.hide_set(True)
    width = obj.dimensions.x
    result.location.x += 1.25 * width
    bpy.ops.file.pack_all()
    bpy.ops.wm.save_as_mainfile(filepath=str(path.resolve()), check_existing=False)


def main(argv=None) -> int:
    """The demo (``run``); a Ctrl-C ends it with a sentence and status 130."""
    try:
        return run(parse_args(argv))
    except KeyboardInterrupt:
        print("scripts/demo: interrupted (Ctrl-C); run it again to start over",
              file=sys.stderr, flush=True)
        return 130


def run(args) -> int:
    """Build, optimise, judge and report, as the module says, into ``args.out``."""
    out = args.out
    out_folder.prepare(out)
    clock = Clock()
    print(f"diffrec demo: mode {args.mode}, preset {args.preset}, {args.views} views + "
          f"{args.holdout} held out at {args.size} px, Cycles {args.samples} spp", flush=True)

    t = time.monotonic()
    print("== building the scene and rendering the targets with Cycles", flush=True)
    bl_scene, obj, train, held_out = build_scene(args)
    size = (args.size, args.size)
    with quiet_stdout():  # the training views are rendered by the add-on, as Optimize does
        held_out_images = export_scene.render_views(bl_scene, held_out, size)
    t = clock.stage("render_targets", t)

    print(f"== Optimize ({args.mode}) through the add-on, on a local backend", flush=True)
    asset_dir = out / "asset"
    subject = {"materials": obj, "reconstruct": None}.get(args.mode)
    if args.mode == "refine":
        subject = scene.decimated_copy(obj, REFINE_DECIMATION)
    with (backend.LocalBackend(out / "server", out / "serve.log", device=args.device) as server,
          dataset.keep_targets() as targets, without_lines()):
        print(f"   backend {server.endpoint} (log {server.log_path})", flush=True)
        job, result = optimize_with_addon(args, subject, train, server.endpoint)
        fetch_result(server.endpoint, job, asset_dir)
    shutil.rmtree(out / "server")  # the job's copy of its inputs and results: in asset/
    backend_metrics = json.loads((asset_dir / "metrics.json").read_text())
    for name, stop in backend_metrics["stopped_early"].items():
        print(f"   {name} stopped at {stop['iteration']}/{backend_metrics['iterations']}: "
              f"{stop['why']}", flush=True)
    t = clock.stage("optimize", t)
    with quiet_stdout():
        dataset.write(out / "dataset", targets[-1], bl_scene, held_out, held_out_images)
    t = clock.stage("dataset", t)

    print("== judging the imported result with Cycles on held-out views", flush=True)
    with quiet_stdout():
        for other in (obj, subject):
            if other is not None:
                other.hide_render = True
        result_images = export_scene.render_views(bl_scene, held_out, size)
    names = [camera.name for camera in held_out]
    scores = judge.score(result_images, held_out_images, names)
    report.write_comparison(out / "comparison.png", result_images, held_out_images, names)
    report.write_curves(out / "curves.png", backend_metrics["history"])
    with quiet_stdout():
        save_blend(out / "demo.blend", obj, result)
    clock.stage("judge", t)
    clock.times["total"] = round(time.monotonic() - clock.started, 2)

    metrics = {
        "mode": args.mode, "preset": args.preset, "size": args.size, "views": args.views,
        "holdout": args.holdout, "cycles_samples": args.samples, "light": args.light,
        "path": "add-on Optimize operator",
        "cycles": scores,
        "backend_validation": {key: backend_metrics.get(key)
                               for key in ("psnr_mean", "ssim_mean", "device", "engine",
                                           "iterations", "stopped_early")},
        "triangles": {"result": len(result.data.polygons)},
        "time_s": clock.times,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))

    print(f"\nheld-out views judged by Cycles ({args.holdout}): "
          f"PSNR {scores['psnr_mean']:.2f} dB (object pixels {scores['psnr_object_mean']:.2f} dB)"
          f", SSIM {scores['ssim_mean']:.4f}, silhouette IoU {scores['iou_mean']:.4f}")
    print(f"total time {clock.times['total']:.0f} s")
    for label, path in (("scene", "demo.blend"), ("asset (glTF)", "asset/mesh.glb"),
                        ("light", "asset/probe.hdr"), ("comparison", "comparison.png"),
                        ("curves", "curves.png"), ("metrics", "metrics.json"),
                        ("dataset", "dataset/")):
        print(f"  {label:13} {out / path}")
    print(f"\nnext, the surface from the images alone: .venv/bin/diffrec optimize --mode "
          f"reconstruct --dataset {out / 'dataset'} --preset preview")
    return 0

