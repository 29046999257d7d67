#!/usr/bin/env python3
"""Calibrate the add-on's pre-submit time estimate (addon/estimate.py): seconds per iteration
of a materials run for a few batch sizes, training resolutions and triangle counts, and
seconds per iteration per megapixel of a batch (batch x width x height / 10^6), per pass:
with ``--renderer path-traced`` each run adds the path-traced pass (``--iterations`` of it),
whose speed against the rasterized pass's is the estimate's ``PATH_TRACED_COST``.

Runs the pipeline itself (``pipeline.run.optimize``) on grey-disc targets (speed does not
depend on what the images show) with ``--iterations`` per run; time per iteration is
measured between the first and the last progress report, so start-up work is left out.
Prints one markdown row per run.

    scripts/bench_estimate.py [--iterations 12] [--device cpu] [--renderer path-traced] [--runs 7]
        [--texture-res 256] [--light-res 64]
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from diffrec.camera import orbit_cameras
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import RENDERERS, parse_settings

RUNS = [  # (batch, train_res, sphere segments): the sphere has 2 * segments * (segments/2 - 1)
    (1, 64, 32), (2, 64, 32), (2, 128, 32), (4, 128, 32), (2, 256, 32),
    (2, 128, 256), (2, 128, 512),
]


class Timing(Reporter):
    def __init__(self):
        super().__init__()
        self.reports = []

    def progress(self, progress):
        self.reports.append((progress.pass_name, progress.iteration, progress.elapsed_s))

    def seconds_per_iteration(self) -> dict[str, float]:
        """Each pass's time per iteration between its first and last progress report."""
        passes = {}
        for name, iteration, elapsed in self.reports:
            passes.setdefault(name, []).append((iteration, elapsed))
        return {name: (reports[-1][1] - reports[0][1]) / (reports[-1][0] - reports[0][0])
                for name, reports in passes.items() if len(reports) > 1}


def targets(size: int, count: int = 8) -> Views:
    rows = torch.linspace(-1, 1, size)
    disc = ((rows[:, None] ** 2 + rows[None] ** 2) < 0.5).float()
    images = torch.cat([torch.full((count, size, size, 3), 0.5),
                        disc.expand(count, size, size)[..., None]], -1)
    return Views(orbit_cameras(count, 3.2, size, seed=1), images.contiguous())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--renderer", default="rasterized", choices=RENDERERS)
    parser.add_argument("--runs", type=int, default=len(RUNS),
                        help="the first RUNS rows only (1: the smallest, a smoke test)")
    parser.add_argument("--texture-res", type=int, default=256)
    parser.add_argument("--light-res", type=int, default=64)
    args = parser.parse_args()
    print("| batch | train_res | triangles | pass | s / iteration | s / iteration / megapixel |")
    print("|---:|---:|---:|---|---:|---:|")
    for batch, size, segments in RUNS[:args.runs]:
        mesh = uv_sphere(segments, segments // 2, radius=0.8)
        settings = parse_settings({
            "preset": "preview", "mode": "materials", "iterations": args.iterations,
            "batch": batch, "train_res": size, "texture_res": args.texture_res,
            "light_res": args.light_res, "light": "learn", "log_every": 2,
            "checkpoint_every": 0, "validation": False,
            "renderer": args.renderer, "path_iterations": args.iterations})
        timing = Timing()
        with tempfile.TemporaryDirectory():
            optimize(settings, Inputs(targets(size), None, mesh, None), timing,
                     device=args.device)
        megapixels = batch * size * size / 1e6
        for name, per_iteration in timing.seconds_per_iteration().items():
            print(f"| {batch} | {size} | {mesh.num_triangles} | {name} | {per_iteration:.3f} | "
                  f"{per_iteration / megapixels:.2f} |", flush=True)


if __name__ == "__main__":
    main()
