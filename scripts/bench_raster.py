#!/usr/bin/env python3
"""Benchmark diffrec.raster: rasterize + interpolate + texture + antialias, forward and backward.

Prints two markdown tables and the growth of cost with pixels and with triangles:
1. Spot (5,856 triangles, its 1024^2 albedo; ../shared/assets/spot, or a UV sphere of similar
   size with a generated texture when that folder is absent) at 128^2, 256^2, 512^2, batch 1
   and 4;
2. a sweep over triangle count (UV spheres, 1k to 1M triangles) at 256^2 (``--sweep-resolution``),
   batch 1.

    scripts/bench_raster.py [--device cpu|cuda] [--engine torch|nvdiffrast] [--repeat 5]
        [--resolutions 128 256 512] [--batches 1 4] [--max-triangles 1000000]
        [--sweep-resolution 256]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.io import read_obj
from diffrec.mesh import Mesh
from diffrec.mesh.box import fit_to_box
from diffrec.mesh.primitives import uv_sphere
from diffrec.render.texture2d import flip_v

SPOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "assets" / "spot" / "spot.obj"


def load_spot() -> tuple[Mesh, torch.Tensor, str]:
    """Spot and its albedo texture [H, W, 3], or a sphere of similar size as a stand-in."""
    if SPOT.exists():
        asset = read_obj(SPOT)
        kd = torch.as_tensor(np.asarray(asset.materials[0].kd), dtype=torch.float32)
        return asset.mesh, kd[..., :3], "Spot"
    mesh = uv_sphere(segments=72, rings=42)
    u, v = torch.meshgrid(torch.arange(1024), torch.arange(1024), indexing="ij")
    checker = (((u // 64) + (v // 64)) % 2).float()
    kd = torch.stack([checker, 0.5 * checker + 0.25, 1 - checker], -1)
    return mesh, kd, "UV sphere (Spot not found)"


def time_step(ctx, mesh, kd, batch, resolution, repeat):
    """Median seconds of one forward and one forward+backward pass."""
    device = ctx.device
    mesh, _ = fit_to_box(mesh, size=2.0)
    cams = orbit_cameras(batch, radius=3.2, size=resolution, seed=1).to(device)
    homo = torch.cat([mesh.positions, torch.ones_like(mesh.positions[:, :1])], 1).to(device)
    tri = mesh.triangles.to(device=device, dtype=torch.int32)
    uvs = (mesh.uvs if mesh.uvs is not None else mesh.positions[:, :2] * 0.5 + 0.5).to(device)
    uv_tri = (mesh.uv_triangles if mesh.uvs is not None else mesh.triangles).to(device)
    uv_tri = uv_tri.to(torch.int32)
    tex = kd.to(device)[None].contiguous().requires_grad_()
    w2c = cams.world_to_clip()
    hash_ = raster.antialias_construct_topology_hash(tri, ctx=ctx)
    weights = torch.rand(batch, resolution, resolution, 3, device=device)

    def forward(pos):
        rast, rast_db = raster.rasterize(ctx, pos, tri, (resolution, resolution))
        uv, uv_da = raster.interpolate(uvs[None], rast, uv_tri, rast_db=rast_db, diff_attrs="all",
                                       ctx=ctx)
        uv, uv_da = flip_v(uv, uv_da)
        color = raster.texture(tex, uv, uv_da, filter_mode="linear-mipmap-linear", ctx=ctx)
        color = color * (rast[..., 3:] > 0)
        return raster.antialias(color, rast, pos, tri, topology_hash=hash_, ctx=ctx)

    def run(backward: bool) -> float:
        pos = (homo @ w2c.transpose(1, 2)).contiguous().requires_grad_(backward)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = forward(pos)
        if backward:
            (out * weights).sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    run(True)  # warm-up
    with torch.no_grad():
        fwd = statistics.median(run(False) for _ in range(repeat))
    full = statistics.median(run(True) for _ in range(repeat))
    return fwd, full


def slope(xs, ys) -> float:
    """Least-squares exponent k in y ~ x^k."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--engine", default="auto", choices=["auto", *raster.ENGINES])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-triangles", type=int, default=1_000_000)
    parser.add_argument("--resolutions", type=int, nargs="+", default=[128, 256, 512],
                        help="image sides of the first table")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4],
                        help="batch sizes of the first table")
    parser.add_argument("--sweep-resolution", type=int, default=256,
                        help="image side of the triangle sweep")
    args = parser.parse_args()

    ctx = raster.RasterContext(args.device, impl=args.engine)
    mesh, kd, name = load_spot()
    print(f"device {ctx.device}, engine {ctx.engine}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")
    print(f"\n{name}: {mesh.num_triangles} triangles, texture {kd.shape[1]}x{kd.shape[0]}\n")
    print("| resolution | batch | forward ms | forward+backward ms | ms per megapixel |")
    print("| --- | --- | --- | --- | --- |")
    pixels, costs = [], []
    for resolution in args.resolutions:
        for batch in args.batches:
            fwd, full = time_step(ctx, mesh, kd, batch, resolution, args.repeat)
            megapixels = batch * resolution * resolution / 1e6
            print(f"| {resolution}² | {batch} | {fwd * 1e3:.1f} | {full * 1e3:.1f} | "
                  f"{full * 1e3 / megapixels:.1f} |")
            pixels.append(batch * resolution**2)
            costs.append(full)
    print(f"\ncost grows as pixels^{slope(pixels, costs):.2f} (forward+backward)")

    print("\n| triangles | forward ms | forward+backward ms |")
    print("| --- | --- | --- |")
    counts, sweep = [], []
    for target in (1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000):
        if target > args.max_triangles:
            break
        rings = max(4, round(math.sqrt(target / 4)))
        sphere = uv_sphere(segments=2 * rings, rings=rings)
        fwd, full = time_step(ctx, sphere, kd, 1, args.sweep_resolution,
                              max(1, args.repeat // 2))
        print(f"| {sphere.num_triangles:,} | {fwd * 1e3:.1f} | {full * 1e3:.1f} |")
        counts.append(sphere.num_triangles)
        sweep.append(full)
    print(f"\ncost grows as triangles^{slope(counts, sweep):.2f} at {args.sweep_resolution}² "
          "(forward+backward)")


if __name__ == "__main__":
    main()
