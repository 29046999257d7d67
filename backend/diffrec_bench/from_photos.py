"""Photos in, asset out (issue 52's reconstruction targets): ``diffrec optimize --mode
reconstruct`` on the photo-like capture of ``photo_capture`` (a detailed ball on a table in a
room, through a barrel lens, JPEG, exposure changing from view to view, no alpha; ray cast in
numpy, or with ``--capture blender`` the same scene rendered by Cycles, ``cycles_capture``),
three ways:

- ``truth``: the true masks (``mask_path``) and the true cameras;
- ``auto``: the true cameras, no masks (``diffrec optimize`` makes them, ``auto_masks``);
- ``poses``: the photos alone, taken without the lens (``diffrec poses`` fits COLMAP's
  ``SIMPLE_PINHOLE``), posed by ``diffrec poses`` (pycolmap), masks made as for ``auto``.

Each result (``mesh.glb`` under ``probe.hdr``) is rendered at ``HELD_OUT`` views that no
run sees (random azimuths and elevations in the ring's range, ``held_out_cameras``) and
scored against the scene rendered there (by the capture's renderer) without the lens or
noise, inside the true masks:
PSNR on the object (sRGB, peak 1, the pixels of the true masks only). The runs' own
validation (``metrics.json``) holds out one of their photos by its own rule. The poses run's
world is COLMAP's: the true cameras are moved into it by the similarity that best maps the
true centres of the photos it posed onto the found ones (Umeyama), and its box
(``mesh_scale``) is scaled by that similarity's scale, which a user would set by eye. Made
masks are scored by IoU against the true ones of the photos without the lens (they are drawn
on the undistorted photos). Each run is scored twice: at the scored views as placed, and with
each of them registered against the result first (``registered``), and the targets are read
off the second.

    python scripts/bench_from_photos.py [--views 16] [--size 256] [--train-res 96]
        [--iterations 100] [--dmtet-grid 64] [--register-rounds 5] [--runs truth,auto,poses]
        [--capture numpy|blender] [--scratch DIR]

Runs one after another; prints one table row a run (with the machine's load average over it)
and how far the ``auto`` and ``poses`` runs are from ``truth`` against the issue's targets
(2 dB and 3 dB).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from diffrec import cli, raster
from diffrec.camera import Cameras
from diffrec.io import read_image
from diffrec.pipeline.captures import read_any_capture
from diffrec.pipeline.inputs import read_mesh
from diffrec.pipeline.pose_refinement import rotation_matrices
from diffrec.pipeline.reference_views import ReferenceScene
from diffrec.pipeline.scoring import VALIDATION_SPP
from diffrec.render.metrics import display
from diffrec_bench import photo_capture
from diffrec_bench.runs import names
from diffrec_bench.textured_room import similarity, write_photos

RUNS = ("truth", "auto", "poses")
CAPTURES = ("numpy", "blender")  # the capture's renderer: photo_capture's or cycles_capture's
LENS = (-0.15, 0.04, 0.001, -0.001)  # k1, k2, p1, p2: a phone's main camera, uncorrected
EXPOSURE_STOPS = 0.15  # each view's exposure within this many stops of the scene's
DETAIL = 0.5  # the surfaces' albedo within 1 +- this (enough for SIFT at 256 px)
MESH_SCALE = 1.2  # the box's side in true units: the ball (radius 0.5) and a margin
HELD_OUT, HELD_OUT_SEED = 3, 52  # the views no run sees, scored
TEXTURE_RES = 128  # the baked textures' side: ample for views of 96 px
TRUE_MASKS = "true_masks.npy"  # in the scratch folder: the photos' true masks, for --score-only
CAPTURE_NAME = "capture.txt"  # in the scratch folder: the renderer of its photos (--capture)
REGISTER_STEPS = (1.0, 0.01)  # the scored views' first turn (degrees) and move (of their distance)
REGISTER_ROUNDS = 5  # the steps halved this many times
TARGETS_DB = {"auto": 2.0, "poses": 3.0}  # the issue's: within this of ``truth``


def held_out_cameras(size: int) -> Cameras:
    """The ``HELD_OUT`` views no run sees, scored."""
    return photo_capture.object_cameras(HELD_OUT, size, seed=HELD_OUT_SEED)


def camera(capture: str, cameras: Cameras, lens: tuple[float, ...] | None = None
           ) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """The photos of ``cameras`` as ``capture`` (a name in ``CAPTURES``) makes them, with the
    benchmark's ``DETAIL``: a function of ``photo_capture.photos``' keyword arguments
    ``seed``, ``distortion`` (none stronger than ``lens``), ``exposure_stops`` and ``noise``.
    Cycles renders the views once, here, and each call develops them."""
    if capture == "numpy":
        return functools.partial(photo_capture.photos, cameras, detail=DETAIL)
    from diffrec_bench import cycles_capture  # bpy, imported only for the renders that need it

    return cycles_capture.render(cameras, detail=DETAIL, distortion=lens).photos


def make_captures(scratch: Path, views: int, size: int, capture: str = "numpy") -> np.ndarray:
    """The three runs' folders under ``scratch``, of ``views`` photos in a ring made by
    ``capture`` (``camera``): ``truth`` and ``auto`` (the photos through the lens as JPEG, in
    a ``transforms.json`` with the lens; ``truth`` with its masks) and ``poses`` (the photos
    without the lens, in ``images/`` alone). Returns the true masks of the photos without the
    lens ``[views, size, size]``, also kept in ``scratch / TRUE_MASKS``."""
    cameras = photo_capture.object_cameras(views, size)
    photos = camera(capture, cameras, LENS)
    through_lens, lens_masks = photos(distortion=LENS, exposure_stops=EXPOSURE_STOPS)
    photo_capture.write_capture(scratch / "truth", cameras, through_lens, distortion=LENS,
                                suffix=".jpg", masks=lens_masks)
    photo_capture.write_capture(scratch / "auto", cameras, through_lens, distortion=LENS,
                                suffix=".jpg")
    pinhole, masks = photos(exposure_stops=EXPOSURE_STOPS)
    write_photos(scratch / "poses", pinhole)
    np.save(scratch / TRUE_MASKS, masks)
    return masks


def optimize(folder: Path, out: Path, train_res: int, iterations: int, dmtet_grid: int,
             mesh_scale: float, refine_poses: str = "auto") -> tuple[int, float]:
    """``diffrec optimize --mode reconstruct --preset preview`` on ``folder`` into ``out``
    (the box ``mesh_scale`` about the capture's centre; ``TEXTURE_RES`` textures, no fit of
    their mip levels: neither changes what is scored; ``refine_poses`` as given); its exit
    status and seconds taken."""
    config = out.parent / f"{out.name}.json"
    config.write_text(json.dumps({"mesh_scale": mesh_scale, "dmtet_grid": dmtet_grid,
                                  "texture_res": TEXTURE_RES, "mip_iterations": 0,
                                  "refine_poses": refine_poses}))
    start = time.perf_counter()
    status = cli.main(["optimize", "--config", str(config), "--mode", "reconstruct",
                       "--preset", "preview", "--device", "cpu", "--dataset", str(folder),
                       "--train-res", str(train_res), "--iterations", str(iterations),
                       "--out-dir", str(out), "--quiet"])
    return status, time.perf_counter() - start


def photo_number(path: Path) -> int:
    """The view index a photo's file is named with (the last number in its name)."""
    return int(re.findall(r"\d+", path.stem)[-1])


def alignment(folder: Path, true: Cameras) -> tuple[float, np.ndarray, np.ndarray, int]:
    """The similarity ``(scale, rotation, translation)`` that best maps the centres of the
    ``true`` cameras onto those of the capture ``folder`` as the reader reads them (recentred;
    COLMAP's frame and scale for a found model; ``textured_room.similarity``), and how many
    cameras the capture has (photos matched by the number in their names)."""
    frames = read_any_capture(folder).frames
    order = [photo_number(frame.image) for frame in frames]
    read = np.stack([frame.camera_to_world[:3, 3] for frame in frames])
    return (*similarity(true.camera_to_world.double().numpy()[order, :3, 3], read), len(frames))


def cameras_in_run(folder: Path, true: Cameras, scored: Cameras) -> Cameras:
    """The cameras ``scored`` moved into the world of the capture ``folder`` by the
    ``alignment`` of the cameras ``true`` of its photos."""
    scale, rotation, translation, _ = alignment(folder, true)
    moved = scored.camera_to_world.double().numpy().copy()
    moved[:, :3, :3] = rotation @ moved[:, :3, :3]
    moved[:, :3, 3] = scale * moved[:, :3, 3] @ rotation.T + translation
    return Cameras(torch.from_numpy(moved).float(), scored.fx, scored.fy, scored.cx, scored.cy,
                   scored.width, scored.height)


class Judge:
    """The result in ``out`` (``mesh.glb`` under ``probe.hdr``) rendered by diffrec's
    rasterizer over black, linear RGB."""

    def __init__(self, out: Path):
        probe = torch.from_numpy(np.ascontiguousarray(read_image(out / "probe.hdr")[..., :3]))
        settings = json.loads((out / "metrics.json").read_text())["settings"]
        self.scene = ReferenceScene.of(raster.RasterContext(torch.device("cpu")),
                                       read_mesh(out / "mesh.glb"), probe,
                                       light_resolution=settings.get("light_res", 64))

    def render(self, cameras: Cameras) -> torch.Tensor:
        """``[N, H, W, 3]`` the result seen by ``cameras``, over black."""
        rendered = self.scene.render(cameras, spp=VALIDATION_SPP).images
        return rendered[..., :3] * rendered[..., 3:]


def object_psnr(judge: Judge, cameras: Cameras, targets: np.ndarray, masks: np.ndarray) -> float:
    """PSNR (dB) of the result rendered at ``cameras`` against ``targets`` ``[N, H, W, 3]``
    linear, over the pixels of ``masks`` ``[N, H, W]`` alone (sRGB, peak 1)."""
    error = (display(judge.render(cameras)) - display(torch.from_numpy(targets))).square()
    return float(-10 * torch.log10(error[torch.from_numpy(masks)].mean()))


def registered(judge: Judge, cameras: Cameras, targets: np.ndarray, masks: np.ndarray,
               rounds: int = REGISTER_ROUNDS) -> Cameras:
    """``cameras`` each turned about its own axes and moved along them, a step either way at
    a time, while the result rendered there comes nearer its target by the score's own
    measure (sRGB squared error over the pixels of its true mask), steps halved ``rounds``
    times from ``REGISTER_STEPS`` (none: ``cameras`` as they are). What NeRF benchmarks do
    for a result whose world was found from its photos: the scoring then measures the
    result, not how well one similarity places new cameras in that world."""
    shown = display(torch.from_numpy(targets))
    matrices = [_registered_view(judge, cameras[view], shown[view],
                                 torch.from_numpy(masks[view]), rounds)
                for view in range(len(cameras))]
    return dataclasses.replace(cameras, camera_to_world=torch.stack(matrices).float())


def _registered_view(judge: Judge, camera: Cameras, target: torch.Tensor, mask: torch.Tensor,
                     rounds: int) -> torch.Tensor:
    """``registered``'s search for the one ``camera``, its sRGB ``target [H, W, 3]`` and its
    true ``mask [H, W]``: the camera-to-world matrix found (float64)."""
    def error(matrix: torch.Tensor) -> float:
        moved = dataclasses.replace(camera, camera_to_world=matrix[None].float())
        return float((display(judge.render(moved)[0]) - target).square()[mask].mean())

    matrix = camera.camera_to_world[0].double()
    best = error(matrix)
    distance = float(matrix[:3, 3].norm())  # to the capture's centre, the origin
    turn, move = math.radians(REGISTER_STEPS[0]), REGISTER_STEPS[1] * distance
    for _ in range(rounds):
        for axis, sign in itertools.product(range(6), (-1.0, 1.0)):
            candidate = _nudged(matrix, axis, sign * (turn if axis < 3 else move))
            candidate_error = error(candidate)
            if candidate_error < best:
                matrix, best = candidate, candidate_error
        turn, move = turn / 2, move / 2
    return matrix


def _nudged(matrix: torch.Tensor, axis: int, amount: float) -> torch.Tensor:
    """``matrix`` (camera to world, float64) turned by ``amount`` radians about its own axis
    ``axis`` (0-2: x, y, z) or moved by ``amount`` along axis ``axis - 3``."""
    nudged = matrix.clone()
    if axis >= 3:
        nudged[:3, 3] += amount * matrix[:3, axis - 3]
        return nudged
    turn = torch.zeros(1, 3, dtype=torch.float64)
    turn[0, axis] = amount
    nudged[:3, :3] = matrix[:3, :3] @ rotation_matrices(turn)[0]
    return nudged


def mask_ious(folder: Path, truth: np.ndarray) -> np.ndarray:
    """IoU per view of the masks made in ``folder/masks_auto`` against ``truth`` ``[N, H, W]``,
    paired by the number in the photo's name (a posed run makes masks of its posed photos
    alone)."""
    paths = sorted((folder / "masks_auto" / "images").iterdir())
    made = np.stack([read_image(path, data=True)[..., 0] > 0.5 for path in paths])
    truth = truth[[photo_number(path) for path in paths]]
    return photo_capture.mask_iou(made, truth)


def benchmark(args) -> Iterator[str]:
    """Make the captures, run and score each of ``args.runs``; the report's lines, each as
    soon as it is known."""
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="bench_from_photos_"))
    start = time.perf_counter()
    if args.score_only:
        if not (scratch / TRUE_MASKS).is_file():
            raise SystemExit(f"--score-only: {scratch} holds no earlier run of this benchmark")
        full_masks = np.load(scratch / TRUE_MASKS)
        made_by = (scratch / CAPTURE_NAME).read_text() if (scratch / CAPTURE_NAME).is_file() \
            else "numpy"
        if made_by != args.capture:
            raise SystemExit(f"--score-only: the photos in {scratch} were made with --capture "
                             f"{made_by}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        full_masks = make_captures(scratch, args.views, args.size, args.capture)
        (scratch / CAPTURE_NAME).write_text(args.capture)
    cameras = photo_capture.object_cameras(args.views, args.train_res)
    held = held_out_cameras(args.train_res)
    targets, masks = camera(args.capture, held)(exposure_stops=EXPOSURE_STOPS, noise=0.0)
    made = "scored again" if args.score_only else f"made in {time.perf_counter() - start:.0f} s"
    renderer = {"numpy": "ray cast in numpy", "blender": "rendered by Cycles"}[args.capture]
    yield (f"{args.views} views of {args.size} px {renderer} (lens {LENS}, JPEG, exposure +-"
           f"{EXPOSURE_STOPS} stops, detail {DETAIL}), {made}; scored at {HELD_OUT} other views; "
           f"trained at {args.train_res} px, {args.iterations} iterations a pass, DMTet grid "
           f"{args.dmtet_grid}")
    yield from ["", "| run | masks | cameras | PSNR on the object | the same, views registered "
                "| the run's own PSNR | time | load |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    psnrs = {}
    for run in args.runs:
        folder, out = scratch / run, scratch / f"{run}_out"
        mesh_scale, cameras_said = MESH_SCALE, "true"
        if run == "poses":
            status = 0 if args.score_only else cli.main(
                ["poses", str(folder), "--max-image-size", str(args.size), "--max-features",
                 "4096"])
            if status != 0:
                yield f"| poses | made | not found (diffrec poses: status {status}) | | | | | |"
                continue
            scale, *_, posed = alignment(folder, cameras)
            cameras_said, mesh_scale = f"found, {posed} of {args.views}", mesh_scale * scale
        timing = scratch / f"{run}_timing.json"
        if not args.score_only:
            load = os.getloadavg()[0]
            # the true cameras are exact: truth and auto keep them (a capture tool's layout
            # would have them refined), so that each row isolates what it is about
            status, seconds = optimize(folder, out, args.train_res, args.iterations,
                                       args.dmtet_grid, mesh_scale,
                                       "auto" if run == "poses" else "off")
            timing.write_text(json.dumps({"status": status, "seconds": seconds,
                                          "load": (load + os.getloadavg()[0]) / 2}))
        if not timing.is_file():
            yield f"| {run} | | {cameras_said} | not run in {scratch} | | | | |"
            continue
        status, seconds, load = json.loads(timing.read_text()).values()
        if status != 0:
            yield (f"| {run} | | {cameras_said} | diffrec optimize stopped (status {status}) | | "
                   f"| {seconds:.0f} s | {load:.1f} |")
            continue
        judge, scored = Judge(out), cameras_in_run(folder, cameras, held)
        placed = object_psnr(judge, scored, targets, masks)
        psnrs[run] = object_psnr(judge, registered(judge, scored, targets, masks,
                                                   args.register_rounds), targets, masks)
        own = json.loads((out / "metrics.json").read_text())["psnr_mean"]
        said = "true" if run == "truth" else "made"
        if run != "truth":
            ious = mask_ious(folder, full_masks)
            said += f" (IoU {ious.mean():.3f}, least {ious.min():.3f})"
        yield (f"| {run} | {said} | {cameras_said} | {placed:.2f} dB | {psnrs[run]:.2f} dB | "
               f"{own:.2f} dB | {seconds:.0f} s | {load:.1f} |")
    yield ""
    for run, target in TARGETS_DB.items():
        if run in psnrs and "truth" in psnrs:
            gap = psnrs["truth"] - psnrs[run]
            yield (f"{run}: {gap:+.2f} dB below truth (target: within {target:g} dB): "
                   f"{'met' if gap <= target else 'missed'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--views", type=int, default=16)
    parser.add_argument("--size", type=int, default=256, help="the photos' side, px")
    parser.add_argument("--train-res", type=int, default=96)
    parser.add_argument("--iterations", type=int, default=100, help="per pass")
    parser.add_argument("--dmtet-grid", type=int, default=64)
    parser.add_argument("--register-rounds", type=int, default=REGISTER_ROUNDS,
                        help="rounds of halved steps registering each scored view (0: none)")
    parser.add_argument("--runs", default=list(RUNS),
                        type=lambda text: names(text, RUNS, "run"),
                        help=f"comma-separated, of {', '.join(RUNS)} (default: all)")
    parser.add_argument("--capture", choices=CAPTURES, default="numpy",
                        help="the capture's renderer: photo_capture's ray casting in numpy, or "
                        "Cycles through bpy (cycles_capture; some minutes); the scored views' "
                        "targets are rendered by the same")
    parser.add_argument("--scratch", type=Path, help="where the captures and results go "
                        "(replaced; default: a new temporary folder)")
    parser.add_argument("--score-only", action="store_true",
                        help="score the results an earlier run left in --scratch again "
                        "(no photos made, no runs)")
    for line in benchmark(parser.parse_args(argv)):
        print(line, flush=True)
    return 0
