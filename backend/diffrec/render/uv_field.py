"""Per-vertex values spread over a mesh's UV layout: a texture that follows the surface.

``UVField(ctx, mesh, resolution)`` rasterizes the UV layout once: every texel a triangle
covers keeps that triangle and its barycentrics, and texels within ``pad`` texels of a chart
take those of a covered neighbour (so that bilinear reads at chart edges see the chart, as
``pipeline.bake`` pads baked textures). Calling it with values per vertex ``[V, C]`` gives the
``[R, R, C]`` texture (rows top-down, as textures are stored), linear and differentiable in
the values; texels of no chart get ``empty``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diffrec import raster
from diffrec.mesh import Mesh

__all__ = ["DEFAULT_PAD", "UVField"]

DEFAULT_PAD = 4  # texels, xatlas's chart padding here


def _grown(index: torch.Tensor, rings: int) -> torch.Tensor:
    """``index`` ``[R, R]`` (-1 empty) with each empty texel within ``rings`` (Chebyshev) of a
    filled one given the largest index among its filled 8-neighbours, ring by ring."""
    grid = index[None, None].float()
    for _ in range(rings):
        neighbour = F.max_pool2d(grid, 3, stride=1, padding=1)
        grid = torch.where(grid < 0, neighbour, grid)
    return grid[0, 0].long()


class UVField:
    """See the module docstring. ``mesh`` needs UVs; ``resolution`` texels a side."""

    def __init__(self, ctx: raster.RasterContext, mesh: Mesh, resolution: int,
                 pad: int = DEFAULT_PAD):
        if mesh.uvs is None:
            raise ValueError("a UV field needs a mesh with UVs")
        uvs = mesh.uvs.detach()
        clip = torch.cat([uvs * 2 - 1, torch.zeros_like(uvs[:, :1]),
                          torch.ones_like(uvs[:, :1])], -1)[None].contiguous()
        rast, _ = raster.rasterize(ctx, clip, mesh.uv_triangles.to(torch.int32).contiguous(),
                                   (resolution, resolution), grad_db=False)
        rast = rast[0].flip(0).reshape(-1, 4)  # rows top-down, flattened
        covered = rast[:, 3] > 0
        texel = torch.where(covered, torch.arange(len(rast), device=rast.device), -1)
        source = _grown(texel.reshape(resolution, resolution), pad).reshape(-1)
        self.filled = source >= 0
        picked = rast[source.clamp(min=0)]
        self.corners = mesh.triangles.to(rast.device)[(picked[:, 3].long() - 1).clamp(min=0)]
        self.weights = torch.stack([picked[:, 0], picked[:, 1], 1 - picked[:, 0] - picked[:, 1]],
                                   -1)
        self.resolution = resolution

    def __call__(self, values: torch.Tensor, empty: float = 0.0) -> torch.Tensor:
        """The ``[R, R, C]`` texture of per-vertex ``values`` ``[V, C]``."""
        texels = (self.weights[..., None] * values[self.corners]).sum(1)
        texels = torch.where(self.filled[:, None], texels, torch.full_like(texels, empty))
        return texels.reshape(self.resolution, self.resolution, -1)
