"""The ``optimize`` task: the reconstruction pipeline on the arrays a client submitted.

Spec: ``{"task": "optimize", "settings": {...}}`` where settings are
``diffrec.protocol.settings.Settings``' fields (``mode``, ``preset``, ``iterations``,
``texture_res``, ``light``...; a wrong name, type or value is refused naming the field;
files, the device and the output folder are the server's business). Inputs: ``images``,
``cameras``, ``intrinsics`` (required);
``vertices`` + ``faces`` (required for materials and refine), ``uvs`` + ``uv_faces``,
``normals`` + ``normal_faces``
(optional), ``envmap`` (required when the light is kept or starts from the HDRI),
``start_kd``, ``start_ks``, ``start_normal`` (optional, over the base mesh's UVs: the textures
the job starts from, ``pipeline.job_arrays``), ``start_coat`` (optional: the start's clear
coat, kept), ``start_ior`` (optional: the index of refraction it starts from),
``start_images`` (optional, materials and refine: the start rendered by the targets' renderer,
one per image; ``pipeline.renderer_gap``).

Results: the result folder of ``pipeline.outputs`` as the run wrote it (``mesh.glb``,
``probe.hdr``, ``validation_view_NN.png``, ``metrics.json``) and its ``manifest.json``, copied
last. The run's own checkpoints live in the job's state folder, so a killed server resumes
the job.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from diffrec.errors import Cancelled
from diffrec.pipeline.reporter import PreviewFrame, Progress, Reporter
from diffrec.protocol import events
from diffrec.protocol.limits import MAX_INLINE_BYTES
from diffrec.protocol.settings import Settings, SettingsError, parse_settings

from . import lifeline
from .runner import EmitFn, JobContext, JobFailed, Runner, StopTakes

PREVIEW_SIZE = 128
OUTPUT_FIXED_BYTES = 64 * 2**20
OUTPUT_TRIANGLE_BYTES = 256


def _check_inputs(settings: Settings, inputs: Mapping[str, np.ndarray]) -> None:
    missing = [name for name in ("images", "cameras", "intrinsics") if name not in inputs]
    if settings.run.mode != "reconstruct":
        missing += [name for name in ("vertices", "faces") if name not in inputs]
    if settings.light.mode != "learn" and "envmap" not in inputs:
        missing.append("envmap")
    if missing:
        raise JobFailed(f"mode {settings.run.mode!r} with light {settings.light.mode!r} needs the "
                        f"inputs {', '.join(missing)}")
    if inputs["images"].shape[-1] != 4:
        raise JobFailed("optimize needs RGBA images (N, H, W, 4): alpha is the object's mask")
    count = len(inputs["images"])
    if len(inputs["cameras"]) != count or len(inputs["intrinsics"]) != count:
        raise JobFailed(f"{count} images but {len(inputs['cameras'])} cameras and "
                        f"{len(inputs['intrinsics'])} intrinsics: send one of each per image")
    if count < 2:
        raise JobFailed("at least two images are needed (one is held out for validation)")
    for values, index in (("vertices", "faces"), ("uvs", "uv_faces"),
                          ("normals", "normal_faces")):
        if (values in inputs) != (index in inputs):
            raise JobFailed(f"{values} and {index} go together")
    _check_start_textures(settings, inputs)
    _check_start_images(settings, inputs)
    if "faces" in inputs and len(inputs["faces"]) == 0:
        raise JobFailed("the mesh sent has no faces: send a mesh with at least one triangle")
    if "faces" in inputs:
        faces, vertices = inputs["faces"], inputs.get("vertices")
        if vertices is None or faces.min() < 0 or faces.max() >= len(vertices):
            raise JobFailed("faces index vertices that were not sent")
        for values, index in (("uvs", "uv_faces"), ("normals", "normal_faces")):
            rows = inputs.get(index)
            if rows is not None and (len(rows) != len(faces) or rows.min() < 0
                                     or rows.max() >= len(inputs[values])):
                raise JobFailed(f"{index} must have one row per face and index the {values} "
                                "sent")


def _check_start_textures(settings: Settings, inputs: Mapping[str, np.ndarray]) -> None:
    """Start textures (and a start's coat) come with a base mesh that has UVs, in a mode that
    keeps that mesh, within the triangle budget (decimation would lose the UVs they were baked
    over)."""
    from diffrec.pipeline.job_arrays import (
        START_COAT,
        START_IOR,
        START_MATERIAL,
        path_traced_refusal,
    )
    from diffrec.shading.bsdf import GLASS_IOR

    sent = [name for name in START_MATERIAL if name in inputs]
    if not sent:
        return
    names = ", ".join(sent)
    if settings.run.mode == "reconstruct":
        raise JobFailed(f"{names}: start textures cover a base mesh's UVs, and mode "
                        "'reconstruct' finds its own surface: use materials or refine, or "
                        "leave them out")
    if "uvs" not in inputs or "faces" not in inputs:
        raise JobFailed(f"{names}: start textures cover the base mesh's UVs: send the mesh "
                        "(vertices, faces) with its uvs and uv_faces")
    budget, triangles = settings.surface.target_triangles, len(inputs["faces"])
    if budget and triangles > budget:
        raise JobFailed(f"{names}: the base mesh has {triangles:,} triangles, over "
                        f"target_triangles {budget:,}; decimating it would lose the UVs the "
                        "start textures cover: send a mesh within the budget")
    refusal = path_traced_refusal(
        START_COAT in inputs, float(inputs[START_IOR][0]) if START_IOR in inputs else GLASS_IOR)
    if settings.path_tracing.renderer == "path-traced" and refusal:
        raise JobFailed(f"{names}: {refusal}")


def _check_start_images(settings: Settings, inputs: Mapping[str, np.ndarray]) -> None:
    """Start renders come in a mode that keeps a given start, with the material they show
    (the start textures, which the job starts from), one per image at the images' size
    (``job_arrays.check_start_images``)."""
    from diffrec.errors import UserError
    from diffrec.pipeline.job_arrays import START_IMAGES, START_TEXTURES, check_start_images
    from diffrec.pipeline.renderer_gap import WITHOUT_THEIR_MATERIAL

    if START_IMAGES not in inputs:
        return
    if settings.run.mode == "reconstruct":
        raise JobFailed(f"{START_IMAGES}: start renders correct the targets for a given start, "
                        "and mode 'reconstruct' finds its own surface: use materials or refine, "
                        "or leave them out")
    try:
        check_start_images(inputs)
    except UserError as error:
        raise JobFailed(str(error)) from None
    if (not any(name in inputs for name in START_TEXTURES)  # a coat or an IOR alone: grey
            or settings.material.init_textures == "random"):
        raise JobFailed(f"{START_IMAGES}: {WITHOUT_THEIR_MATERIAL}")


def _small(image) -> np.ndarray:
    """An ``[h, w, 3]`` tensor as float32 numpy, at most PREVIEW_SIZE pixels on a side."""
    import torch.nn.functional as F

    from diffrec.protocol.images import longest_side_size

    height, width = image.shape[:2]
    if max(height, width) <= PREVIEW_SIZE:
        return image.float().numpy()
    width, height = longest_side_size(width, height, PREVIEW_SIZE)
    size = (height, width)
    chw = image.permute(2, 0, 1)[None].float()
    return F.interpolate(chw, size=size, mode="area")[0].permute(1, 2, 0).numpy()


def _preview_arrays(preview: PreviewFrame) -> dict[str, np.ndarray]:
    """``render`` and ``target`` (float32 [h, w, 3], linear, at most PREVIEW_SIZE pixels on a
    side) and, when the geometry moves, the current ``vertices`` and ``faces`` if each fits in
    one frame (MAX_INLINE_BYTES: about 350k vertices); a bigger mesh is not previewed."""
    arrays = {"render": _small(preview.render), "target": _small(preview.target)}
    if preview.vertices is not None:
        vertices = preview.vertices.numpy().astype(np.float32)
        faces = preview.faces.numpy().astype(np.int32)
        if max(vertices.nbytes, faces.nbytes) <= MAX_INLINE_BYTES:
            arrays.update(vertices=vertices, faces=faces)
    return arrays


class JobReporter(Reporter):
    """A run's reports as job events through ``emit(event)`` (the job's ``ctx.emit``, or a
    queue to it from another process): the trainer's own ``Progress``, its ``PreviewFrame`` with
    the images it shows, a ``Log``, a ``StopTakes``; ``should_stop`` polls for a stop. The
    run's checkpoints go to the job's ``ctx.checkpoints`` (in its state folder)."""

    def __init__(self, emit: EmitFn, should_stop: Callable[[], bool]):
        self.emit = emit
        self._should_stop = should_stop

    @classmethod
    def of(cls, ctx: JobContext) -> JobReporter:
        return cls(ctx.emit, ctx.should_stop)

    def progress(self, progress: Progress) -> None:
        self.emit(progress)

    def preview(self, preview: PreviewFrame) -> None:
        self.emit(dataclasses.replace(preview.event, images=_preview_arrays(preview)))

    def log(self, message: str, level: str = "info", **fields) -> None:
        self.emit(events.Log(message, level, **fields))

    def should_stop(self) -> bool:
        return self._should_stop()

    def stop_takes(self, seconds: float) -> None:
        self.emit(StopTakes(seconds))


class OptimizeRunner(Runner):
    """``optimize`` jobs on ``device``, whose memory bounds their settings."""

    task = "optimize"

    def __init__(self, device: str = "cpu"):
        self.device = device

    def parse(self, spec: Mapping) -> Settings:
        """The spec's settings, typed and checked (``JobFailed`` naming a bad field)."""
        unknown = sorted(set(spec) - {"task", "settings"})
        if unknown:
            raise JobFailed(f"unknown spec key(s) {', '.join(map(repr, unknown))}: an optimize "
                            "spec holds 'task' and 'settings' only")
        values = spec.get("settings") or {}
        if not isinstance(values, Mapping):
            raise JobFailed("spec 'settings' must be an object of diffrec optimize settings")
        try:
            return parse_settings(values)
        except SettingsError as error:
            raise JobFailed(f"setting {error}") from None

    def check_inputs(self, settings: Settings, inputs: Mapping[str, np.ndarray]) -> None:
        """The inputs the settings need, consistent with each other, and a job that fits
        this server's device (its memory and GPUs)."""
        from diffrec.errors import UserError
        from diffrec.pipeline.bounds import (
            check_bounds,
            check_image_size,
            check_ranks,
            device_memory_bytes,
        )

        _check_inputs(settings, inputs)
        triangles = len(inputs["faces"]) if "faces" in inputs else None
        _, height, width, _ = inputs["images"].shape
        try:
            check_ranks(settings, self.device)
            check_bounds(settings, device_memory_bytes(self.device), triangles)
            check_image_size(settings, width, height)
        except UserError as error:
            raise JobFailed(str(error)) from None

    def iterations(self, settings: Settings) -> int:
        return settings.size.iterations

    def processes(self, settings: Settings) -> int:
        return settings.limits.ranks

    def output_bytes(self, settings: Settings, inputs: Mapping[str, np.ndarray]) -> int:
        """An upper estimate: per texel, kd, ks and the normal map in the GLB and, with
        ``export_obj``, as PNGs (48 B, generously) plus two checkpoints of them with Adam's
        moments (216 B); the light probe and its checkpoints (OUTPUT_FIXED_BYTES); the mesh
        files (OUTPUT_TRIANGLE_BYTES per triangle, a reconstructed surface taken as 2 per grid
        cell); the validation images."""
        size, given = settings.size, "faces" in inputs and settings.run.mode != "reconstruct"
        triangles = len(inputs["faces"]) if given else 2 * size.grid ** 2
        _, height, width, _ = inputs["images"].shape
        return (size.texture_res ** 2 * (48 + 216) + OUTPUT_FIXED_BYTES
                + triangles * OUTPUT_TRIANGLE_BYTES + size.test_views * height * width * 9)

    def run(self, ctx: JobContext) -> None:
        from diffrec.errors import UserError
        from diffrec.pipeline.auto_masks import masked_when_opaque
        from diffrec.pipeline.inputs import Inputs
        from diffrec.pipeline.job_arrays import (
            from_job_arrays,
            sent_start_renders,
            settings_for_start,
            start_material,
        )
        from diffrec.pipeline.outputs import write_result
        from diffrec.pipeline.renderer_gap import matching_start_renders
        from diffrec.pipeline.run import optimize
        from diffrec.pipeline.views import hold_out_views

        run_dir = ctx.state_dir / "run"
        try:
            views, base, envmap = from_job_arrays(ctx.inputs)
            views = masked_when_opaque(  # photos sent without being cut out
                views, warn=lambda message: ctx.emit(events.Log(message, "warning")))
            start_renders = sent_start_renders(ctx.inputs)
            material = start_material(ctx.inputs)
            settings = settings_for_start(ctx.settings, material)
            train, test = hold_out_views(views, settings.size.test_views, settings.run.seed)
            if start_renders is not None:  # the training views' own, by name
                start_renders = matching_start_renders(start_renders, train)
            inputs = Inputs(train, test, base, envmap, material, start_renders)
            if settings.limits.ranks > 1:
                if not run_ranks(ctx, settings, inputs, run_dir):
                    return  # stopped
            else:
                result = optimize(settings, inputs, JobReporter.of(ctx),
                                  checkpoints=ctx.checkpoints, device=ctx.device)
                write_result(run_dir, result, export_obj=settings.reporting.export_obj)
        except Cancelled:
            return
        except UserError as error:
            raise JobFailed(str(error)) from None
        _collect_results(run_dir, ctx.results_dir)


RELAY_POLL_S = 0.2


def run_ranks(ctx: JobContext, settings: Settings, inputs, run_dir: Path) -> bool:
    """The job on ``settings.limits.ranks`` processes (``pipeline.distributed``: NCCL on the
    worker's GPUs ``cuda:0..``, gloo on a CPU worker), rank 0 writing the result into ``run_dir``.
    Rank 0's events come back through a queue and go out as this job's; a stop asked of the
    job reaches rank 0, which stops every rank. Returns False when stopped; raises JobFailed
    (a rank's error, or too few GPUs)."""
    import multiprocessing
    import queue
    import threading

    import torch
    import torch.multiprocessing as mp

    from diffrec.devices import ranks_device_type
    from diffrec.pipeline import distributed

    kind, count = ranks_device_type(ctx.device), settings.limits.ranks
    if kind == "cuda" and torch.cuda.device_count() < count:
        raise JobFailed(f"ranks {count} needs {count} GPUs and this worker "
                        f"has {torch.cuda.device_count()}")
    # the job's own process is a daemon of the worker, and daemons may not start processes;
    # the ranks end with it all the same (lifeline.die_with_parent)
    multiprocessing.current_process().daemon = False
    spawn = mp.get_context("spawn")
    relay, stop, outcome = spawn.Queue(), spawn.Event(), {}

    def ranks() -> None:
        try:
            distributed.spawn(_job_rank, count, kind,
                              (settings, inputs, run_dir, ctx.checkpoints, relay, stop,
                               os.getpid()))
        except Exception as error:  # a rank's failure: reported by the job below
            outcome["error"] = error

    runner = threading.Thread(target=ranks, name="ranks", daemon=True)
    runner.start()
    failure, stopped = None, False
    while runner.is_alive() or not relay.empty():
        if ctx.should_stop():
            stop.set()
        try:
            event = relay.get(timeout=RELAY_POLL_S)
        except queue.Empty:
            continue
        if isinstance(event, events.Finished):  # how rank 0 ended: failed, or stopped
            failure = event.message if event.outcome is events.Outcome.FAILED else failure
            stopped = stopped or event.outcome is events.Outcome.CANCELLED
        else:
            ctx.emit(event)
    runner.join()
    if failure is not None or "error" in outcome:
        raise JobFailed(failure or f"a rank of the job failed: {outcome['error']}")
    return not stopped


def _job_rank(world, settings: Settings, inputs, run_dir: Path, checkpoints, relay, stop,
              job_pid: int) -> None:
    """One rank of a multi-rank job (in a process of its own, a child of the job's process
    ``job_pid``, and ending with it): train, and on rank 0 report through ``relay`` (a queue
    of the job's events, as ``JobReporter`` emits them) and write the result. A stop goes back
    as a cancelled ``Finished``, a UserError as a failed one."""
    from diffrec.errors import UserError
    from diffrec.pipeline.outputs import write_result
    from diffrec.pipeline.run import optimize

    lifeline.die_with_parent(job_pid)
    lifeline.hold(checkpoints.directory)
    reporter = JobReporter(relay.put, stop.is_set)
    try:
        result = optimize(settings, inputs, reporter, checkpoints=checkpoints,
                          device=str(world.device), world=world)
    except Cancelled:
        relay.put(events.Finished(events.Outcome.CANCELLED))
        return
    except UserError as error:
        relay.put(events.Finished(events.Outcome.FAILED, f"rank {world.rank}: {error}"))
        raise SystemExit(2) from None
    if result is not None:
        write_result(run_dir, result, export_obj=settings.reporting.export_obj)


def _collect_results(run_dir: Path, results_dir: Path) -> None:
    """Copy the files the run's manifest lists into the job's results, the manifest last (so
    there too its presence means the result is complete)."""
    from diffrec.protocol.manifest import MANIFEST_NAME, read_manifest

    results_dir.mkdir(parents=True, exist_ok=True)
    for entry in read_manifest(run_dir):
        shutil.copy2(run_dir / entry.name, results_dir / entry.name)
    shutil.copy2(run_dir / MANIFEST_NAME, results_dir / MANIFEST_NAME)
