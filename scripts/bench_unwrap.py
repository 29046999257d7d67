"""Unwrap time and texel use of pass 1's surfaces, as pass 2 gets them.

A stand-in for pass 1's result: DMTet extracts the surface of a bumpy sphere (with a little
noise on the SDF, as training leaves it) at each ``--grids`` value, then the same clean-up as
the pipeline (weld, drop slivers and floaters). For each surface, each of ``--budgets``
(0: unwrap the whole surface) is simplified to and unwrapped as ``reconstruct`` does
(``geometry.simplify``, then ``pipeline.unwrap.with_uvs``) and it prints the triangles, the
seconds (wall clock, and the CPU seconds of the unwrap's child process, which a loaded
machine inflates less), the method that made the layout and the texel use: the fraction of
the ``--texture-res``² texture that the charts cover. Unix only (``resource``).

    .venv/bin/python scripts/bench_unwrap.py --grids 64 128 --budgets 0 30000
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time

import torch

from diffrec.geometry import DMTetGeometry, clean_mesh, remove_small_pieces
from diffrec.geometry.simplify import simplify
from diffrec.mesh import Mesh
from diffrec.pipeline.unwrap import with_uvs
from diffrec.protocol.settings import Settings
from diffrec.protocol.uv_layout import texel_overlap


def surface(grid: int, seed: int = 0) -> Mesh:
    geometry = DMTetGeometry(grid, 2.1)
    with torch.no_grad():
        points = geometry.grid_vertices
        bumps = 0.09 * torch.sin(13 * points).prod(-1)
        noise = 0.002 * torch.randn(len(points), generator=torch.Generator().manual_seed(seed))
        geometry.sdf.copy_(points.norm(dim=-1) - 0.82 + bumps + noise)
        vertices, triangles = geometry.extract()
    return Mesh(*remove_small_pieces(*clean_mesh(vertices, triangles)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--budgets", type=int, nargs="+", default=[0, 30000])
    parser.add_argument("--texture-res", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    print("grid  triangles  budget  unwrapped  method         seconds  cpu_s  texel_use")
    for grid in args.grids:
        mesh = surface(grid)
        for budget in args.budgets:
            settings = dataclasses.replace(Settings(), texture_res=args.texture_res,
                                           unwrap_timeout_s=args.timeout)
            start = time.perf_counter()
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            unwrapped, how = with_uvs(Mesh(*simplify(mesh.positions, mesh.triangles, budget)),
                                      settings)
            seconds = time.perf_counter() - start
            done = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = done.ru_utime + done.ru_stime - children.ru_utime - children.ru_stime
            uvs = unwrapped.uvs.numpy()
            covered, _ = texel_overlap(uvs[unwrapped.uv_triangles.numpy()], args.texture_res)
            print(f"{grid:4d}  {mesh.num_triangles:9d}  {budget:6d}  "
                  f"{unwrapped.num_triangles:9d}  {how['method']:13s}  {seconds:7.1f}  {cpu:5.1f}  "
                  f"{covered / args.texture_res ** 2:9.3f}", flush=True)


if __name__ == "__main__":
    main()
