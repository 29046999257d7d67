#!/usr/bin/env python3
"""Time one step of a learned environment light: ``build_mips`` (box pyramid, GGX prefilter of
each specular level, cosine convolution) and its backward, which every iteration with a
learned light pays; and the first step, which also builds the prefilter's operators, with the
process's peak memory after it (run one resolution per process for a peak of its own).

    scripts/bench_light.py [--res 64 256] [--repeat 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

from diffrec.light import prefilter
from diffrec.light.envmap import EnvironmentLight


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
    """MiB held by the cached GGX operators (matrix and transpose) of ``light``'s levels."""
    base, total = light.base, 0
    for i, roughness in enumerate(light.level_roughness()[:-1]):
        out_res = base.shape[1] >> i
        for matrix in prefilter._ggx_matrices(base.shape[1], out_res, float(roughness),
                                              prefilter.samples_for_level(out_res),
                                              str(base.device), base.dtype):
            total += sum(t.nbytes for t in (matrix.crow_indices(), matrix.col_indices(),
                                             matrix.values()))
    return total / 2**20


def peak_mib(device: str) -> float:
    """The process's peak resident memory, or on CUDA the allocator's peak, in MiB."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--res", type=int, nargs="+", default=[64, 256],
                        help="cube face sides (the light_res setting)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
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


if __name__ == "__main__":
    main()
