"""Judge a reconstruction's files on a config's own held-out views: one judge for diffrec's
result and the reference system's (nvdiffrec), so that their PSNR compare.

Each system's own figure judges its own views: nvdiffrec orbits the reference mesh as it is in
its file at one elevation, diffrec fits the mesh into the box [-1, 1]^3 and draws its held-out
cameras at random elevations, so the object covers more of diffrec's images and the two PSNR
differ before either fit does. This script renders the result's files instead, under the light
they came with, at the views ``bench_passes.py`` scores with the same config (``load_inputs``:
the reference mesh fit into the box, rendered under ``envmap`` at the config's seed), and
scores them as ``metrics.json`` does (PSNR and SSIM over the config's background, per view).

    scripts/judge_result.py CONFIG MESH PROBE [--nvdiffrec] [--label NAME]
                            [--device auto] [--json FILE] [--image FILE]

MESH: an OBJ (with its MTL and textures) or a GLB; PROBE: the light the run learned, an
equirect HDR (both systems write ``probe.hdr``). ``--nvdiffrec``: the files are nvdiffrec's:
MESH lies in the reference mesh's own coordinates, so it is moved by the same fit into the box
as the reference, and PROBE is in nvdiffrec's lat-long layout, a quarter turn from Blender's
(``diffrec.light.equirect``). The result is shaded by diffrec's split-sum renderer with the
config's ``bsdf`` and light resolution. ``--image`` writes the first view, result beside target.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from diffrec import raster
from diffrec.devices import resolve_device
from diffrec.io import read_image, write_image
from diffrec.light.equirect import from_nvdiffrec_layout
from diffrec.mesh.box import fit_to_box
from diffrec.pipeline.config import build_config, read_config_reading
from diffrec.pipeline.inputs import load_inputs, read_mesh
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.scoring import VALIDATION_SPP
from diffrec.render.backgrounds import background_for, composite
from diffrec.render.metrics import psnr, ssim


def judge(config_path: str, mesh_path: str, probe_path: str, *, nvdiffrec: bool = False,
          device: str = "auto") -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Score the result ``mesh_path`` lit by ``probe_path`` (nvdiffrec's files when
    ``nvdiffrec``) on ``config_path``'s held-out views. Returns ``{"psnr": mean dB, "ssim":
    mean, "views": [{"name", "psnr", "ssim"}]}`` and the composited renders and targets
    ``[N, H, W, 3]`` (linear, CPU)."""
    config = build_config(read_config_reading(config_path).values(), {"device": device})
    settings = config.settings
    ctx = raster.RasterContext(resolve_device(config.device))
    test = load_inputs(config, ctx).test
    asset = read_mesh(mesh_path)
    probe = torch.from_numpy(np.ascontiguousarray(read_image(probe_path)[..., :3]))
    if nvdiffrec:
        _, to_box = fit_to_box(read_mesh(config.sources.ref_mesh).mesh)
        asset.mesh = asset.mesh.replace(positions=to_box.apply(asset.mesh.positions))
        probe = from_nvdiffrec_layout(probe)
    rendered = render_reference_views(ctx, asset, probe, test.cameras.to(ctx.device),
                                      spp=VALIDATION_SPP, light_resolution=settings.size.light_res,
                                      layered=settings.layered_bsdf())
    background = background_for(settings.rendering.background, test.images).cpu()
    renders = composite(rendered.images.cpu(), background)
    targets = composite(test.images.cpu(), background)
    view_psnr, view_ssim = psnr(renders, targets).tolist(), ssim(renders, targets).tolist()
    views = [{"name": name, "psnr": p, "ssim": s}
             for name, p, s in zip(test.names, view_psnr, view_ssim, strict=True)]
    scores = {"psnr": float(np.mean(view_psnr)), "ssim": float(np.mean(view_ssim)),
              "views": views}
    return scores, renders, targets


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="the config both systems ran")
    parser.add_argument("mesh", help="the result's mesh: OBJ (+ MTL, textures) or GLB")
    parser.add_argument("probe", help="the result's light: an equirect .hdr")
    parser.add_argument("--nvdiffrec", action="store_true",
                        help="nvdiffrec's files: the mesh in the reference mesh's coordinates, "
                             "the probe in its lat-long layout")
    parser.add_argument("--label", default="result", help="the row's name")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, help="append the scores as a JSON line here")
    parser.add_argument("--image", type=Path, help="write the first view, result | target")
    args = parser.parse_args(argv)
    for path in (args.mesh, args.probe):
        if not Path(path).is_file():
            raise SystemExit(f"judge_result: {path} does not exist (did the run finish?)")

    scores, renders, targets = judge(args.config, args.mesh, args.probe,
                                     nvdiffrec=args.nvdiffrec, device=args.device)
    print("| result | held-out views | PSNR dB (one judge) | SSIM |")
    print("| --- | --- | --- | --- |")
    print(f"| {args.label} | {len(scores['views'])} | {scores['psnr']:.2f} | "
          f"{scores['ssim']:.4f} |")
    if args.image:
        write_image(args.image, torch.cat([renders[0], targets[0]], dim=1).clamp(0, 1).numpy())
    if args.json:
        with args.json.open("a") as out:
            out.write(json.dumps({"judged": args.label, "mesh": str(args.mesh), **scores}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
