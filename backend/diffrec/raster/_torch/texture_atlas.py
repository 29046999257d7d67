"""Texel fetches for the torch ``texture``: all levels (and faces) in one padded atlas.

Every level (every face of every level, for cube maps) becomes a tile with a one-texel ring
that realises the boundary mode: wrap copies the opposite edge, clamp repeats the edge, zero
is zeros and cube reads the neighbouring faces (see ``cube``). Tiles are stacked, levels down
the rows and faces across the columns, into one ``[Bt, C, rows, cols]`` image, and
``torch.nn.functional.grid_sample`` (align_corners=False) does the bilinear or nearest fetch
for every pixel at its own level in one call. Its vectorised kernels and backward (to the
texels and to the coordinates) are what make this fast on a CPU; taps never leave a tile
except with zero weight or into zeros.

The atlas is built by a custom autograd function: one copy forward, one copy back, plus the
rings through small index tables (autograd's own slicing would allocate a full-size zero
gradient per slice).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from diffrec.raster._torch.cube import ring_sources


@dataclass(frozen=True)
class Atlas:
    """``image [Bt, C, rows, cols]``; tile ``level * faces + face`` has its padded top-left
    texel at ``(first_row[level], face * face_stride)`` and holds a level of ``sizes[level]``
    = (h, w) texels."""

    image: torch.Tensor
    first_row: tuple[int, ...]
    sizes: tuple[tuple[int, int], ...]
    faces: int
    face_stride: int


@functools.lru_cache(maxsize=64)
def _plane_ring(height: int, width: int, boundary: str):
    """Ring of a 2D tile: ``(row, col, src, weight)``, padded coordinates and flat sources."""
    rows, cols = torch.meshgrid(torch.arange(height + 2), torch.arange(width + 2), indexing="ij")
    on_ring = (rows == 0) | (rows == height + 1) | (cols == 0) | (cols == width + 1)
    row, col = rows[on_ring], cols[on_ring]
    if boundary == "wrap":
        src_row, src_col = (row - 1) % height, (col - 1) % width
    else:  # clamp
        src_row, src_col = (row - 1).clamp(0, height - 1), (col - 1).clamp(0, width - 1)
    return row, col, src_row * width + src_col, torch.ones(len(row))


def _ring(level: torch.Tensor, boundary: str, first_row: int, stride: int, cols: int):
    """``(dst, src, weight)`` of a level's ring: flat atlas positions, flat level texels."""
    return _ring_on_device(level.shape[-3], level.shape[-2], boundary, first_row, stride, cols,
                           level.device, level.dtype)


@functools.lru_cache(maxsize=256)
def _ring_on_device(height: int, width: int, boundary: str, first_row: int, stride: int,
                    cols: int, device: torch.device, dtype: torch.dtype):
    """``_ring``'s tables, copied to ``device`` once (a copy each call waits for the GPU)."""
    if boundary == "cube":
        face, row, col, src, weight = ring_sources(width)
    else:
        row, col, src, weight = _plane_ring(height, width, boundary)
        face = torch.zeros_like(row)
    dst = (first_row + row) * cols + face * stride + col
    return dst.to(device), src.to(device), weight.to(device=device, dtype=dtype)


def _interior(image: torch.Tensor, first_row: int, height: int, width: int, faces: int,
              stride: int) -> torch.Tensor:
    """View of a level's texels in the atlas, in the level's layout ``[Bt, (6,) h, w, C]``."""
    band = image[:, :, first_row + 1:first_row + 1 + height]  # [Bt, C, h, cols]
    if faces == 1:
        return band[..., 1:1 + width].permute(0, 2, 3, 1)
    band = band.unflatten(-1, (faces, stride))[..., 1:1 + width]  # [Bt, C, h, 6, w]
    return band.permute(0, 3, 2, 4, 1)


class _BuildAtlas(torch.autograd.Function):
    """``(layout, *levels) -> image``; see ``build_atlas``. First-order gradients only."""

    @staticmethod
    def forward(ctx, layout, *levels):
        boundary, first_row, faces, stride, rows, cols = layout
        batch, channels = levels[0].shape[0], levels[0].shape[-1]
        image = levels[0].new_empty(batch, channels, rows, cols)
        flat = image.view(batch, channels, -1)
        rings = []
        for level, row0 in zip(levels, first_row, strict=True):
            height, width = level.shape[-3], level.shape[-2]
            band = image[:, :, row0:row0 + height + 2].unflatten(-1, (faces, stride))
            band[:, :, 0] = 0.0  # everything outside the interior starts at zero
            band[:, :, -1] = 0.0
            band[..., 0] = 0.0
            band[..., width + 1:] = 0.0
            _interior(image, row0, height, width, faces, stride).copy_(level)
            ring = None if boundary == "zero" else _ring(level, boundary, row0, stride, cols)
            if ring is not None:
                dst, src, weight = ring
                values = level.reshape(batch, -1, channels)[:, src] * weight[:, None]
                flat.index_add_(2, dst, values.transpose(1, 2))
            rings.append(ring)
        ctx.layout, ctx.rings = layout, rings
        ctx.shapes = [level.shape for level in levels]
        return image

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        _, first_row, faces, stride, _, _ = ctx.layout
        grad = grad.contiguous()
        batch, channels = grad.shape[:2]
        flat = grad.view(batch, channels, -1)
        grads = []
        for shape, row0, ring, needed in zip(ctx.shapes, first_row, ctx.rings,
                                             ctx.needs_input_grad[1:], strict=True):
            if not needed:
                grads.append(None)
                continue
            level_grad = _interior(grad, row0, shape[-3], shape[-2], faces, stride).contiguous()
            if ring is not None:
                dst, src, weight = ring
                contrib = (flat[:, :, dst] * weight).transpose(1, 2)  # [Bt, n, C]
                level_grad.view(batch, -1, channels).index_add_(1, src, contrib)
            grads.append(level_grad)
        return None, *grads


def build_atlas(levels: list[torch.Tensor], boundary: str) -> Atlas:
    """Pack ``levels`` (level 0 first; ``[Bt, h, w, C]`` or cube ``[Bt, 6, s, s, C]``) with the
    boundary ``"wrap"``, ``"clamp"``, ``"zero"`` or ``"cube"`` into one atlas."""
    faces = 6 if boundary == "cube" else 1
    stride = levels[0].shape[-2] + 2
    first_row, rows = [], 0
    for level in levels:
        first_row.append(rows)
        rows += level.shape[-3] + 2
    layout = (boundary, tuple(first_row), faces, stride, rows, faces * stride)
    image = _BuildAtlas.apply(layout, *levels)
    sizes = tuple((level.shape[-3], level.shape[-2]) for level in levels)
    return Atlas(image, tuple(first_row), sizes, faces, stride)


def _tile_table(atlas: Atlas, boundary: str, like: torch.Tensor) -> torch.Tensor:
    return _tile_table_on_device(atlas.image.shape[-2:], atlas.sizes, atlas.faces,
                                 atlas.face_stride, atlas.first_row, boundary, like.dtype,
                                 like.device)


@functools.lru_cache(maxsize=256)
def _tile_table_on_device(image_size, sizes, faces, face_stride, first_row, boundary, dtype,
                          device) -> torch.Tensor:
    """Per tile, the affine map from face coordinates (s, t) to grid_sample's normalised
    coordinates and its clamp range: ``[tiles, 4, 2]`` = (scale, offset, low, high) x (x, y).

    Texel x = s * w - 0.5 sits at atlas column ``col0 + 1 + x``, whose normalised coordinate
    is ``(2 * column + 1) / cols - 1`` (align_corners=False). Clamp keeps x in [0, w - 1]
    (the ring repeats the edge), zero keeps it in [-1, w] (the ring is zeros); wrap and cube
    need no clamp (s, t are already in [0, 1]).
    """
    rows, cols = image_size
    low, high = (-1.0, 0.0) if boundary == "zero" else (0.0, -1.0)  # used by clamp and zero
    table = []
    for level, (height, width) in enumerate(sizes):
        for face in range(faces):
            per_axis = []
            for size, first, count in ((width, face * face_stride, cols),
                                       (height, first_row[level], rows)):
                offset = (2.0 * first + 2.0) / count - 1.0  # where s = 0 lands
                per_axis.append((2.0 * size / count, offset,
                                 offset + (2.0 * low + 1.0) / count,
                                 offset + (2.0 * (size + high) + 1.0) / count))
            table.append(list(zip(*per_axis, strict=True)))  # [4, 2]
    return torch.tensor(table, dtype=dtype, device=device)


def fetch(atlas: Atlas, st: torch.Tensor, boundary: str, level: torch.Tensor | None = None,
          face: torch.Tensor | None = None) -> torch.Tensor:
    """Bilinear lookups at face coordinates ``st [B, H, W, 2]`` (texel x = s * w - 0.5).

    ``level``: int64 ``[B, K, H, W]``, K lookups per pixel (None: one lookup at level 0);
    ``face``: int64 ``[B, H, W]`` for cube maps. Returns ``[B, K, H, W, C]``, differentiable
    w.r.t. the atlas image and ``st``.
    """
    if boundary == "wrap":
        st = st - torch.floor(st)
    if face is not None and level is None:
        level = torch.zeros_like(face).unsqueeze(1)
    clamped = boundary in ("clamp", "zero")
    table = _tile_table(atlas, boundary, st)
    if not clamped:
        table = table[:, :2].contiguous()  # scale and offset only: less to gather per pixel
    if level is None:
        params = table[0]
    else:
        tile = level if face is None else level * atlas.faces + face.unsqueeze(1)
        params = table.view(len(table), -1).index_select(0, tile.reshape(-1))
        params = params.view(*tile.shape, -1, 2)
    grid = torch.addcmul(params[..., 1, :], st.unsqueeze(1), params[..., 0, :])
    if clamped:
        grid = torch.clamp(grid, params[..., 2, :], params[..., 3, :])
    return _grid_sample(atlas.image, grid, "bilinear")


def fetch_nearest(atlas: Atlas, st: torch.Tensor, boundary: str,
                  face: torch.Tensor | None = None) -> torch.Tensor:
    """Nearest lookups on level 0: texel ``floor(s * w)``, ``floor(t * h)`` with the boundary
    mode applied to the index. Returns ``[B, 1, H, W, C]``, differentiable w.r.t. the image."""
    rows, cols = atlas.image.shape[-2:]
    height, width = atlas.sizes[0]
    size = st.new_tensor([width, height])
    index = torch.floor(st * size)
    if boundary == "wrap":
        index = torch.remainder(index, size)
    elif boundary == "zero":
        index = torch.minimum(index.clamp(min=-1.0), size)  # the ring of zeros
    else:
        index = torch.minimum(index.clamp(min=0.0), size - 1.0)
    position = index + 1.0  # padded texel coordinates in the level-0 tile
    if face is not None:
        position = position + torch.stack(
            ((face * atlas.face_stride).to(st.dtype), torch.zeros_like(st[..., 0])), -1)
    grid = (2.0 * position + 1.0) / st.new_tensor([cols, rows]) - 1.0
    return _grid_sample(atlas.image, grid.unsqueeze(1), "nearest")


def _grid_sample(image: torch.Tensor, grid: torch.Tensor, mode: str) -> torch.Tensor:
    """Sample ``image [Bt, C, rows, cols]`` at ``grid [B, K, H, W, 2]``; ``[B, K, H, W, C]``."""
    batch, lookups, height, width, _ = grid.shape
    grid = grid.reshape(image.shape[0], -1, width, 2)  # a shared texture sees one tall image
    out = F.grid_sample(image, grid, mode=mode, padding_mode="zeros", align_corners=False)
    return out.permute(0, 2, 3, 1).reshape(batch, lookups, height, width, -1)
