"""The KTX2 export's cost: seconds and bytes of ``io.ktx2_textures.write_ktx2_variant`` for
base colour, ks and normal textures of each ``--sizes`` (square, smooth patterns as baked
textures mostly are), with their box mip chains. Prints one line per size: the seconds (wall
clock, basisu included) and each file's size.

    .venv/bin/python scripts/bench_ktx2.py --sizes 256 1024 2048
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from diffrec.io import Material
from diffrec.io.ktx2_textures import write_ktx2_variant
from diffrec.mesh import with_tangents, with_vertex_normals
from diffrec.mesh.primitives import uv_sphere


def patterned_material(size: int) -> Material:
    """Smooth waves in every channel of ``size`` x ``size`` textures."""
    y, x = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    wave = 0.5 + 0.4 * torch.sin(40 * x) * torch.cos(30 * y)
    normal = torch.stack([0.4 * torch.sin(50 * x), 0.3 * torch.cos(30 * y), torch.ones_like(x)],
                         -1)
    return Material(kd=torch.stack([0.2 + 0.6 * x, wave, 0.7 - 0.5 * y], -1),
                    ks=torch.stack([0.3 * y, 0.2 + 0.6 * wave, 0.8 * x], -1),
                    normal=torch.nn.functional.normalize(normal, dim=-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    args = parser.parse_args()
    mesh = with_tangents(with_vertex_normals(uv_sphere(16, 8)))
    for size in args.sizes:
        material = patterned_material(size)
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            files, notes = write_ktx2_variant(Path(folder), mesh, material)
            seconds = time.perf_counter() - start
            sizes = ", ".join(f"{name} {(Path(folder) / name).stat().st_size / 1e6:.2f} MB"
                              for name in files)
        print(f"{size}x{size}: {seconds:.1f} s; {sizes or 'nothing written'}"
              + "".join(f"; {note}" for note in notes))


if __name__ == "__main__":
    main()
