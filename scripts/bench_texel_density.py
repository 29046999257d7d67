"""Texel density of diffrec's unwrap of a mesh (issue 30): for each texture size, the atlas
utilisation (the UV area), texels per scene unit (sqrt(utilisation x size² / surface area)) and
the mip level a square view of ``--res`` pixels at ``--distance`` reads head-on (log2 of texels
per pixel; ``bench_quality``'s cameras: 36-degree field of view, 4 units away).

Usage: ``python scripts/bench_texel_density.py MESH.obj [--sizes 256,512,1024] [--res 128]``.
"""

from __future__ import annotations

import argparse
import math

from diffrec.io import read_obj
from diffrec.pipeline.unwrap import unwrap
from diffrec.protocol.uv_layout import triangle_areas

FIELD_OF_VIEW = 0.6325722506985587  # radians: bench_quality's 55 mm lens on a 36 mm sensor


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mesh")
    parser.add_argument("--sizes", default="256,512,1024")
    parser.add_argument("--res", type=int, default=128)
    parser.add_argument("--distance", type=float, default=4.0)
    args = parser.parse_args(argv)
    mesh = read_obj(args.mesh).mesh
    positions, triangles = mesh.positions.float(), mesh.triangles
    surface = float(triangle_areas(positions[triangles].numpy()).sum())
    pixels_per_unit = args.res / (2 * args.distance * math.tan(FIELD_OF_VIEW / 2))
    for size in map(int, args.sizes.split(",")):
        layout = unwrap(positions, triangles, resolution_hint=size)
        used = float(triangle_areas(layout.uvs[layout.uv_triangles].numpy()).sum())
        density = math.sqrt(used * size * size / surface)
        print(f"texture {size}: utilisation {used:.3f}, {density:.0f} texels/unit, "
              f"{pixels_per_unit:.0f} px/unit at {args.res} px, mip level "
              f"{math.log2(density / pixels_per_unit):+.2f}")


if __name__ == "__main__":
    main()
