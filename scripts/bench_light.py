#!/usr/bin/env python3
"""Time one step of a learned environment light: ``build_mips`` (box pyramid, GGX prefilter of
each specular level, cosine convolution) and its backward, which every iteration with a
learned light pays; and the first step, which also builds the prefilter's operators, with the
process's peak memory after it (run one resolution per process for a peak of its own).
With ``--hdri``, also how far each light's specular lookup at roughness between its levels is
from the lobe prefiltered at exactly that roughness (relative RMSE over random directions),
with the default GGX levels and with nvdiffrec's rule (levels down to 16^2 only).
``--backward`` sets ``$DIFFREC_LIGHT_BACKWARD`` for the run (``scatter``: no transpose held).

    scripts/bench_light.py [--res 64 256] [--repeat 3] [--device cpu] [--hdri FILE.exr]
                           [--backward auto|transpose|scatter]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import torch

from diffrec.io import read_image
from diffrec.light import prefilter
from diffrec.light.envmap import EnvironmentLight
from diffrec.raster import RasterContext, texture_points

LOBE_ROUGHNESS = (0.15, 0.2, 0.25, 0.35, 0.45)


def step_ms(light: EnvironmentLight, repeat: int) -> tuple[float, float]:
    """(seconds of the first build_mips + backward, which builds and caches the operators;
    median milliseconds of the later ones)."""
    def step() -> float:
        started = time.perf_counter()
        light.build_mips()
        sum(level.square().mean() for level in light.specular_levels).backward()
        if light.base.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    first = step()
    return first, statistics.median(1000 * step() for _ in range(repeat))


def operators_mib(light: EnvironmentLight) -> float:
    """MiB held by the cached GGX operators (matrix and, where the backward uses it, its
    transpose) of ``light``'s levels."""
    base, total = light.base, 0
    transposed = prefilter._backward() == "transpose"
    for i, roughness in enumerate(light.level_roughness()[:-1]):
        out_res = base.shape[1] >> i
        key = (base.shape[1], out_res, float(roughness), prefilter.samples_for_level(out_res),
               str(base.device), base.dtype)
        builders = (prefilter._ggx_matrix, prefilter._ggx_transpose)[:2 if transposed else 1]
        for matrix in (build(*key) for build in builders):
            total += sum(t.nbytes for t in (matrix.crow_indices(), matrix.col_indices(),
                                             matrix.values()))
    return total / 2**20


def peak_mib(device: str) -> float:
    """The process's peak resident memory, or on CUDA the allocator's peak, in MiB."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def exact_lobes(image: torch.Tensor, directions: torch.Tensor, ctx) -> list[torch.Tensor]:
    """The equirect ``image`` prefiltered at exactly each of ``LOBE_ROUGHNESS`` (at 128^2, from
    the image at 256^2), looked up in ``directions``."""
    pyramid = prefilter.box_pyramid(EnvironmentLight.from_equirect(image, 256).base.detach())
    return [texture_points(prefilter.ggx_prefilter(pyramid, 128, roughness)[None], directions,
                           filter_mode="linear", boundary_mode="cube", ctx=ctx)
            for roughness in LOBE_ROUGHNESS]


def lobe_errors(light: EnvironmentLight, exact: list[torch.Tensor], directions: torch.Tensor,
                ctx) -> list[float]:
    """Relative RMSE of ``light``'s specular lookup at each of ``LOBE_ROUGHNESS`` against
    ``exact`` (``exact_lobes``) in ``directions``."""
    light.build_mips()
    errors = []
    for roughness, want in zip(LOBE_ROUGHNESS, exact, strict=True):
        got = light.specular(directions, torch.full((len(directions), 1), roughness), ctx=ctx)
        errors.append(((got - want).square().mean() / want.square().mean()).sqrt().item())
    return errors


def print_lobe_table(hdri: str, resolutions: list[int]) -> None:
    image = torch.from_numpy(read_image(hdri)[..., :3]).float()
    ctx = RasterContext("cpu", impl="torch")
    generator = torch.Generator().manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(20000, 3, generator=generator), dim=-1)
    print(f"\nspecular lookup against the exact lobe, relative RMSE over 20,000 random "
          f"directions ({hdri})")
    print("| light_res | GGX levels | " + " | ".join(f"r {r}" for r in LOBE_ROUGHNESS) + " |")
    print("| --- | --- |" + " --- |" * len(LOBE_ROUGHNESS))
    with torch.no_grad():
        exact = exact_lobes(image, directions, ctx)
        for res in resolutions:
            # nvdiffrec's rule: GGX levels down to 32^2, the 16^2 level at roughness 1
            default, nvdiffrecs = EnvironmentLight(res).ggx_levels, max(1, res.bit_length() - 5)
            for levels in sorted({default, nvdiffrecs}):
                names = [name for name, n in (("default", default),
                                              ("nvdiffrec's rule", nvdiffrecs)) if n == levels]
                light = EnvironmentLight.from_equirect(image, res, ggx_levels=levels)
                errors = lobe_errors(light, exact, directions, ctx)
                print(f"| {res} | {levels} ({', '.join(names)}) | "
                      + " | ".join(f"{e:.2f}" for e in errors) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--res", type=int, nargs="+", default=[64, 256],
                        help="cube face sides (the light_res setting)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hdri", help="an equirect image: also print the lookup accuracy table")
    parser.add_argument("--backward", choices=("auto", "transpose", "scatter"),
                        help="the prefilter's backward ($DIFFREC_LIGHT_BACKWARD; default: as set)")
    args = parser.parse_args()
    if args.backward:
        os.environ[prefilter.BACKWARD_ENV] = args.backward
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"backward {prefilter._backward()}")
    peak = "peak allocated" if torch.device(args.device).type == "cuda" else "peak RSS"
    print(f"| light_res | first step (operators built), s | {peak} so far, MiB | "
          "operators held, MiB | build_mips + backward, ms |\n| --- | --- | --- | --- | --- |")
    for res in args.res:
        torch.manual_seed(0)
        base = torch.rand(6, res, res, 3, device=args.device) + 0.1
        light = EnvironmentLight(base=base)
        light.base.requires_grad_(True)
        first, later = step_ms(light, args.repeat)
        print(f"| {res} | {first:.1f} | {peak_mib(args.device):.0f} | "
              f"{operators_mib(light):.0f} | {later:.0f} |", flush=True)
    if args.hdri:
        print_lobe_table(args.hdri, args.res)


if __name__ == "__main__":
    main()
