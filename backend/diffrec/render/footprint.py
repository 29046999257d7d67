"""How finely views read a texture: the mip level of the pixels' footprints in its texels."""

from __future__ import annotations

import math

import torch

from diffrec import raster
from diffrec.camera import Cameras
from diffrec.mesh import Mesh
from diffrec.render.renderer import clip_positions

__all__ = ["nearest_level", "seen_texture_level"]

_CHUNK = 8  # cameras rasterized at once


@torch.no_grad()
def seen_texture_level(ctx: raster.RasterContext, mesh: Mesh, cameras: Cameras,
                       texture_res: int) -> float:
    """The median, over every covered pixel of ``cameras``' views of ``mesh`` (which has UVs),
    of the mip level a ``texture_res``-square texture is read at there: log2 of the major axis
    of the pixel's footprint in texels, the rule ``diffrec.raster.texture`` mipmaps by
    (negative where texels are larger than pixels). NaN when no view covers a pixel."""
    if mesh.uvs is None:
        raise ValueError("seen_texture_level needs a mesh with UVs")
    triangles = mesh.triangles.to(torch.int32).contiguous()
    uv_triangles = mesh.uv_triangles.to(torch.int32).contiguous()
    levels = []
    for start in range(0, len(cameras), _CHUNK):
        views = cameras[start:start + _CHUNK]
        rast, rast_db = raster.rasterize(ctx, clip_positions(mesh.positions, views), triangles,
                                         (views.height, views.width))
        _, uv_da = raster.interpolate(mesh.uvs.contiguous(), rast, uv_triangles,
                                      rast_db=rast_db, diff_attrs="all", ctx=ctx)
        covered = rast[..., 3] > 0
        jacobian = uv_da[covered].reshape(-1, 2, 2) * texture_res  # texels per pixel
        major = torch.linalg.matrix_norm(jacobian.double(), ord=2)
        levels.append(torch.log2(major.clamp_min(1e-12)))
    levels = torch.cat(levels)
    return float(levels.median()) if len(levels) else float("nan")


def nearest_level(level: float) -> int:
    """The whole mip level nearest to ``level``, at least 0 (0 where ``level`` is NaN: no
    view covered a pixel)."""
    return max(0, round(level)) if math.isfinite(level) else 0
