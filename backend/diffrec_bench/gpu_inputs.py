"""What ``scripts/gpu_check`` reads on a GPU machine without network, written here beforehand
(``scripts/gpu_prepare``): the benchmark's light and diffrec's own dependencies as wheels for
the GPU image's Python.

    python -m diffrec_bench.gpu_inputs light OUT.hdr       Blender's forest.exr as Radiance
    python -m diffrec_bench.gpu_inputs requirements        NAME==VERSION of each dependency
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from pathlib import Path

import numpy as np

from diffrec.io import read_image, write_image

MISSING_ON_THE_GPU_IMAGE = ("pygltflib", "dataclasses-json", "marshmallow", "deprecated",
                            "openexr", "pyzmq", "xatlas", "fast-simplification")
"""diffrec's dependencies (and pygltflib's) the GPU image lacks (docs/BENCHMARKS.md, "GPU
machine, fifth visit"; the image's list: the device tool's KINDS.md)."""


def requirements() -> list[str]:
    """``NAME==VERSION`` of each package the GPU image lacks, at the version installed here
    (so that, say, marshmallow stays below the 4.0 dataclasses-json refuses)."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in MISSING_ON_THE_GPU_IMAGE]


def write_radiance_light(exr: Path, out: Path) -> int:
    """Write the EXR light ``exr`` as a Radiance ``.hdr`` at ``out`` (nvdiffrec reads both, the
    benchmark has used .hdr since its first run); returns how many negative texels (an EXR can
    hold them, Radiance cannot: Blender's forest.exr has 826, down to -0.0022) were set to 0."""
    light = read_image(exr)[..., :3]
    negative = int((light < 0).any(-1).sum())
    write_image(out, np.clip(light, 0.0, None))
    return negative


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    light = commands.add_parser("light", help="Blender's forest.exr as a Radiance .hdr")
    light.add_argument("out", type=Path)
    light.add_argument("--exr", type=Path, default=None,
                       help="the EXR to convert (default: forest.exr from bpy's data files)")
    commands.add_parser("requirements", help="NAME==VERSION of each package to carry")
    args = parser.parse_args(argv)
    if args.command == "requirements":
        print("\n".join(requirements()))
        return 0
    exr = args.exr
    if exr is None:
        from diffrec_bench.demo.scene import bundled_hdri  # imports bpy

        exr = bundled_hdri()
    clipped = write_radiance_light(exr, args.out)
    print(f"{args.out}: {exr.name}, {clipped} negative texels set to 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
