#!/usr/bin/env python3
"""Time one step of a learned environment light: ``build_mips`` (box pyramid, GGX prefilter of
each specular level, cosine convolution) and its backward, which every iteration with a
learned light pays.

    scripts/bench_light.py [--res 64 256] [--repeat 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from diffrec.light.envmap import EnvironmentLight


def step_ms(light: EnvironmentLight, repeat: int) -> float:
    """Median milliseconds of build_mips + backward of a loss on every level."""
    def step() -> None:
        light.build_mips()
        sum(level.square().mean() for level in light.specular_levels).backward()
        if light.base.device.type == "cuda":
            torch.cuda.synchronize()

    step()  # builds and caches the operators
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        step()
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--res", type=int, nargs="+", default=[64, 256],
                        help="cube face sides (the light_res setting)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("| light_res | build_mips + backward, ms |\n| --- | --- |")
    for res in args.res:
        torch.manual_seed(0)
        base = torch.rand(6, res, res, 3, device=args.device) + 0.1
        light = EnvironmentLight(base=base)
        light.base.requires_grad_(True)
        print(f"| {res} | {step_ms(light, args.repeat):.0f} |")


if __name__ == "__main__":
    main()
