"""Torch ``texture`` and ``texture_construct_mip`` with nvdiffrast's contract.

Addressing: the texel coordinate of ``u`` is ``x = u * w - 0.5`` (texel centres at integers),
``v`` likewise with ``h`` and indexes rows, row 0 first. Bilinear taps are ``floor(x)`` and
``floor(x) + 1``; nearest takes texel ``floor(u * w)``. Boundary modes: wrap (repeat), clamp
(clamp to edge), zero (taps outside the texture read 0) and cube (see ``cube``).

Level of detail (mipmapped modes): with ``J`` the screen-space Jacobian of the texel
coordinates at level 0 (``uv_da`` = (du/dX, du/dY, dv/dX, dv/dY) scaled by (w, w, h, h); for
cube maps the derivatives of the face coordinates s, t obtained from the direction
derivatives, scaled by the face size), the level is ``log2`` of the footprint's major axis,
the largest singular value of ``J``, plus ``mip_level_bias``, clamped to [0, max level].
"linear-mipmap-nearest" takes level ``floor(level)`` (nvdiffrast rounds down; measured against it
on an H100); "linear-mipmap-linear"
blends levels ``floor(level)`` and the next one by the fractional part, which is what carries
gradients to ``uv_da`` and ``mip_level_bias``. Degenerate footprints (zero derivatives) give
level 0 with zero gradient.

Cube maps: directions that address no face (zero vector, non-finite) return 0.
Gradients reach ``tex`` (through a constructed or given mip chain too), ``uv``, and in
"linear-mipmap-linear" mode ``uv_da`` and ``mip_level_bias``.

Texels are fetched from one atlas of the levels (``texture_atlas``), packed from the lowest
level a lookup reads: on a CPU, packing a large level 0 that no pixel reads, and its
gradient, costs more than the lookups do. A given level left out gets a zero gradient.
"""

from __future__ import annotations

import torch

from diffrec.raster._torch import texture_mip
from diffrec.raster._torch.cube import face_coordinates
from diffrec.raster._torch.texture_atlas import build_atlas, fetch, fetch_nearest

FILTER_MODES = ("auto", "nearest", "linear", "linear-mipmap-nearest", "linear-mipmap-linear")
BOUNDARY_MODES = ("wrap", "clamp", "zero", "cube")
MIPMAP_MODES = ("linear-mipmap-nearest", "linear-mipmap-linear")


def _check_tensor(name: str, value, tex: torch.Tensor, shape: tuple[int, ...]) -> None:
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be a tensor")
    if value.dtype != tex.dtype or value.device != tex.device:
        raise TypeError(f"{name} must match tex's dtype and device ({tex.dtype}, {tex.device}), "
                        f"got ({value.dtype}, {value.device})")
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")


def _check_inputs(tex, uv, uv_da, mip_level_bias, filter_mode, boundary_mode) -> bool:
    """Validate everything; return whether ``tex`` is a cube map."""
    if filter_mode not in FILTER_MODES:
        raise ValueError(f"filter_mode must be one of {FILTER_MODES}, got {filter_mode!r}")
    if boundary_mode not in BOUNDARY_MODES:
        raise ValueError(f"boundary_mode must be one of {BOUNDARY_MODES}, got {boundary_mode!r}")
    if not torch.is_tensor(tex) or tex.dtype not in (torch.float32, torch.float64):
        raise TypeError("tex must be a float32 tensor (float64 is accepted by the torch engine)")
    cube = boundary_mode == "cube"
    if cube and (tex.ndim != 5 or tex.shape[1] != 6 or tex.shape[2] != tex.shape[3]):
        raise ValueError("boundary_mode='cube' needs tex of shape [B, 6, s, s, C] (square "
                         f"faces), got {tuple(tex.shape)}")
    if not cube and tex.ndim != 4:
        raise ValueError(f"tex must be [B, h, w, C] (or [B, 6, s, s, C] with "
                         f"boundary_mode='cube'), got shape {tuple(tex.shape)}")
    if tex.numel() == 0:
        raise ValueError(f"tex is empty: shape {tuple(tex.shape)}")
    if not torch.is_tensor(uv) or uv.ndim != 4:
        raise ValueError("uv must be a tensor of shape [B, H, W, 2] ([B, H, W, 3] for cube maps)")
    pixels = tuple(uv.shape[:3])
    _check_tensor("uv", uv, tex, (*pixels, 3 if cube else 2))
    if tex.shape[0] not in (1, uv.shape[0]):
        raise ValueError(f"tex has batch {tex.shape[0]} but uv has batch {uv.shape[0]} "
                         "(tex batch must be 1 or match)")
    if uv_da is not None:
        _check_tensor("uv_da", uv_da, tex, (*pixels, 6 if cube else 4))
    if mip_level_bias is not None:
        _check_tensor("mip_level_bias", mip_level_bias, tex, pixels)
    return cube


def texture_construct_mip(tex, max_mip_level=None, cube_mode=False) -> list[torch.Tensor]:
    """Mip levels 1..n of ``tex`` (``[B, h, w, C]``, or ``[B, 6, s, s, C]`` with ``cube_mode``)
    as a list of tensors, each a 2x2 box average of the previous; see ``texture_mip`` for sizes.
    Differentiable: gradients reaching the levels in ``texture(..., mip=...)`` flow to ``tex``.
    """
    if not torch.is_tensor(tex) or tex.dtype not in (torch.float32, torch.float64):
        raise TypeError("tex must be a float32 tensor (float64 is accepted by the torch engine)")
    if tex.ndim != (5 if cube_mode else 4) or (cube_mode and tex.shape[1] != 6):
        raise ValueError(f"tex must be {'[B, 6, s, s, C]' if cube_mode else '[B, h, w, C]'}, "
                         f"got shape {tuple(tex.shape)}")
    height, width = tex.shape[-3:-1]
    return texture_mip.build_chain(tex, texture_mip.level_count(height, width, max_mip_level))


def _mip_level(st_da, bias, height: int, width: int, max_level: int):
    """Continuous level: log2 of the footprint's major axis in level-0 texels, plus bias,
    clamped to [0, max_level]."""
    level = None
    if st_da is not None:
        dudx, dudy = st_da[..., 0] * width, st_da[..., 1] * width
        dvdx, dvdy = st_da[..., 2] * height, st_da[..., 3] * height
        # largest eigenvalue of J^T J = [[a, c], [c, b]]: (a + b + sqrt((a - b)^2 + 4c^2)) / 2
        a = torch.addcmul(dudx * dudx, dvdx, dvdx)
        b = torch.addcmul(dudy * dudy, dvdy, dvdy)
        c = torch.addcmul(dudx * dudy, dvdx, dvdy)
        tiny = torch.finfo(st_da.dtype).tiny  # keeps sqrt and log2 (and their gradients) finite
        root = torch.sqrt(torch.addcmul((a - b) ** 2, c, c, value=4.0) + tiny)
        level = 0.5 * torch.log2(a + b + root + tiny) - 0.5
    if bias is not None:
        level = bias if level is None else level + bias
    return torch.clamp(level, 0.0, float(max_level))


def _lowest_level(floor: torch.Tensor) -> int:
    """The lowest whole level of ``floor`` (the lookups' whole levels): where the atlas
    starts. A view whose pixels all cover several of level 0's texels builds no level 0."""
    return int(torch.nan_to_num(floor.amin(), nan=0.0)) if floor.numel() else 0


class _ZeroGradients(torch.autograd.Function):
    """``(out, *levels) -> out``, the ``levels`` (given, left out of the atlas: nothing read
    them) given zero gradients, as nvdiffrast gives every level it is passed."""

    @staticmethod
    def forward(ctx, out, *levels):
        ctx.shapes = [level.shape for level in levels]
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        return grad, *(grad.new_zeros(shape) if needed else None
                       for shape, needed in zip(ctx.shapes, ctx.needs_input_grad[1:],
                                                strict=True))


def _resolve_filter(filter_mode: str, uv_da, mip_level_bias) -> str:
    if filter_mode == "auto":
        mipmapped = uv_da is not None or mip_level_bias is not None
        return "linear-mipmap-linear" if mipmapped else "linear"
    return filter_mode


def texture(tex, uv, uv_da=None, mip_level_bias=None, mip=None, filter_mode="auto",
            boundary_mode="wrap", max_mip_level=None):
    """See ``diffrec.raster.texture`` and this module's docstring. Returns ``[B, H, W, C]``."""
    cube = _check_inputs(tex, uv, uv_da, mip_level_bias, filter_mode, boundary_mode)
    texture_mip.check_max_level(max_mip_level)
    mode = _resolve_filter(filter_mode, uv_da, mip_level_bias)
    levels = [tex]
    if mode in MIPMAP_MODES:
        if mip is None:
            count = texture_mip.level_count(tex.shape[-3], tex.shape[-2], max_mip_level)
            levels += texture_mip.build_chain(tex, count)
        else:
            given = texture_mip.check_chain(tex, mip)
            levels += given if max_mip_level is None else given[:max_mip_level]
        if len(levels) == 1:
            mode = "linear"  # nothing to choose from: plain bilinear on the base level
        elif uv_da is None and mip_level_bias is None:
            raise ValueError(f"filter_mode={mode!r} needs uv_da and/or mip_level_bias")

    batch, height, width = uv.shape[:3]
    if batch * height * width == 0:
        return tex.new_zeros(batch, height, width, tex.shape[-1])
    mipmapped = mode in MIPMAP_MODES
    face, valid, st_da = None, None, uv_da if mipmapped else None
    if cube:
        face, st, valid, st_da = face_coordinates(uv, st_da)
    else:
        st = uv

    if mode == "nearest":
        out = fetch_nearest(build_atlas(levels, boundary_mode), st, boundary_mode, face)[:, 0]
    elif mode == "linear":
        out = fetch(build_atlas(levels, boundary_mode), st, boundary_mode, face=face)[:, 0]
    else:
        max_level = len(levels) - 1
        flevel = _mip_level(st_da, mip_level_bias, tex.shape[-3], tex.shape[-2], max_level)
        floor = torch.floor(flevel.detach())
        lowest = _lowest_level(floor)
        atlas = build_atlas(levels[lowest:], boundary_mode)
        level0 = (floor - lowest).to(torch.int64)  # in the atlas, which starts at ``lowest``
        if mode == "linear-mipmap-nearest":
            out = fetch(atlas, st, boundary_mode, level0[:, None], face)[:, 0]
        else:
            blend = (flevel - floor).unsqueeze(-1)
            pair = torch.stack((level0, torch.clamp(level0 + 1, max=max_level - lowest)), 1)
            both = fetch(atlas, st, boundary_mode, pair, face)
            out = torch.lerp(both[:, 0], both[:, 1], blend)
        unread = [level for level in levels[:lowest] if level.requires_grad]
        if mip is not None and unread and torch.is_grad_enabled():
            out = _ZeroGradients.apply(out, *unread)
    if valid is not None:
        out = torch.where(valid.unsqueeze(-1), out, torch.zeros_like(out))
    return out.contiguous()
