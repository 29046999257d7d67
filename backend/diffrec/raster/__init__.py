"""Differentiable rasterization: nvdiffrast's four operations behind one API, on two engines.

The functions keep nvdiffrast's names, arguments and contracts, so either engine can sit
behind them:

- ``rasterize(ctx, pos, tri, resolution, ranges=None, grad_db=True)`` -> ``(rast, rast_db)``
- ``DepthPeeler(ctx, pos, tri, resolution, ranges=None, grad_db=True)``
- ``interpolate(attr, rast, tri, rast_db=None, diff_attrs=None, *, ctx)`` -> ``(out, out_da)``
- ``texture(tex, uv, uv_da=None, mip_level_bias=None, mip=None, filter_mode="auto",
  boundary_mode="wrap", max_mip_level=None, *, ctx)`` -> sampled values
- ``texture_construct_mip(tex, max_mip_level=None, cube_mode=False, *, ctx)`` -> mip chain
- ``texture_points(tex, points, mip_level_bias=None, *, ctx, **options)``: ``texture`` at a
  flat list of lookups (diffrec's own, laid out as nvdiffrast's launch limits need)
- ``antialias(color, rast, pos, tri, topology_hash=None, pos_gradient_boost=1.0, *, ctx)``
- ``antialias_construct_topology_hash(tri, *, ctx)``

Conventions (shared by both engines): ``pos`` is clip space ``(x, y, z, w)``; image row 0 is
the *bottom* row (OpenGL); pixel ``(px, py)`` samples the centre ``x = 2(px + 0.5)/W - 1``;
``rast`` holds ``(u, v, z/w, triangle_id + 1)`` with zeros where nothing is covered, and
the barycentrics are perspective-correct with vertex 0 at ``(u, v) = (1, 0)``, vertex 1 at
``(0, 1)`` and vertex 2 at ``(0, 0)``.

One difference, on purpose: the torch ``antialias`` follows a pixel pair's segment across
front-facing neighbours to the silhouette edge it leaves through, where nvdiffrast examines the
inside pixel's triangle alone and leaves the pair aliased when that triangle's edges are no
silhouettes (common along the silhouette of a finely tessellated smooth mesh, where it biased
silhouettes outward; ``diffrec.raster._torch.antialias`` says by how much). Elsewhere the two
give the same values and gradients, with three measured exceptions (docs/BENCHMARKS.md, "GPU
machine, second visit"): antialias position gradients (each engine's is exact for its own
forward pass, but nvdiffrast's image moves about a third as fast with a silhouette vertex;
the torch engine's slope is a box filter's), texel gradients with the ``zero`` boundary in
mipmapped modes (nvdiffrast's miss finite differences on some border texels) and a few cube
lookups (nvdiffrast's float32 values differ from the definition's float64 evaluation).

nvdiffrast scripts run unchanged but for the import line (``import diffrec.raster as dr``) and
the ``ctx`` keyword (below):
``RasterizeCudaContext(device=None)`` and ``RasterizeGLContext(output_db=True,
mode="automatic", device=None)`` both give a ``RasterContext`` on the best engine for the
device (nvdiffrast on CUDA when it is installed, else the torch engine, the CPU included),
the context is the ``glctx`` argument, and ``get_log_level`` / ``set_log_level`` take
nvdiffrast's levels (0 info, 1 warning, 2 error, 3 fatal) for this module's log.

The engine comes from a ``RasterContext``, and every operation must be given one: ``rasterize``
and ``DepthPeeler`` take it first (``glctx``), as nvdiffrast does; the other functions take it
as the required keyword ``ctx`` (nvdiffrast's take none: a ported script adds ``ctx=glctx``).
Pass the context you rasterized with, so that every operation of a render runs on the same
engine; a call without one raises TypeError rather than pick an engine of its own.
"""

from __future__ import annotations

import logging

import torch

from diffrec.devices import default_device
from diffrec.engines import RASTER, EngineUnavailableError
from diffrec.raster import _torch

__all__ = [
    "ENGINES",
    "DepthPeeler",
    "EngineUnavailableError",
    "RasterContext",
    "RasterizeCudaContext",
    "RasterizeGLContext",
    "antialias",
    "antialias_construct_topology_hash",
    "get_log_level",
    "interpolate",
    "rasterize",
    "set_log_level",
    "texture",
    "texture_construct_mip",
    "texture_points",
]

log = logging.getLogger(__name__)

ENGINES = RASTER.engines
# Lookups per image row when texture_points lays a flat list out as an image: nvdiffrast
# launches a thread block per few pixels with the image height on the grid's y axis (at most
# 65,535 blocks), which a one-pixel-wide column of millions of lookups exceeds.
POINTS_PER_ROW = 1024


class RasterContext:
    """Holds the engine choice (and nvdiffrast's CUDA context when that engine is used).

    ``device``: where the tensors live (default: ``diffrec.devices.default_device``, CUDA, else
    MPS, else the CPU).
    ``impl``: "auto", "torch" or "nvdiffrast"; "auto" defers to ``$DIFFREC_RASTER`` and then
    picks nvdiffrast on CUDA when it imports, torch otherwise (``diffrec.engines.RASTER``).
    Raises EngineUnavailableError when nvdiffrast is asked for and cannot run on ``device``.
    """

    output_db = True  # rasterize returns rast_db (nvdiffrast's RasterizeGLContext option)

    def __init__(self, device: torch.device | str | None = None, impl: str = "auto"):
        self.device = default_device() if device is None else torch.device(device)
        self.engine = RASTER.resolve(self.device, impl)
        self._native = None
        log.info("%s engine on %s", self.engine, self.device)

    @property
    def native(self):
        """nvdiffrast's ``RasterizeCudaContext`` (made on first use; nvdiffrast engine only)."""
        if self.engine != "nvdiffrast":
            raise RuntimeError(f"{self!r} has no nvdiffrast context")
        if self._native is None:
            self._native = RASTER.module().RasterizeCudaContext(device=self.device)
        return self._native

    def __repr__(self) -> str:
        return f"RasterContext(device={str(self.device)!r}, engine={self.engine!r})"


class RasterizeCudaContext(RasterContext):
    """nvdiffrast's name for its CUDA context: here a ``RasterContext`` on the best engine for
    ``device`` (default: the current CUDA device, else as ``RasterContext``)."""

    def __init__(self, device: torch.device | str | None = None):
        super().__init__(device)


class RasterizeGLContext(RasterContext):
    """nvdiffrast's name for its OpenGL context: here a ``RasterContext`` on the best engine
    for ``device`` (no OpenGL needed). ``output_db`` False: ``rasterize`` returns an empty
    ``rast_db``, as nvdiffrast's does; ``mode`` ("automatic" or "manual") has no effect."""

    def __init__(self, output_db: bool = True, mode: str = "automatic",
                 device: torch.device | str | None = None):
        if mode not in ("automatic", "manual"):
            raise ValueError(f"mode must be 'automatic' or 'manual', got {mode!r}")
        super().__init__(device)
        self.output_db = bool(output_db)


# nvdiffrast's log levels (Torch's C++ convention) and this module's logging levels
_LOG_LEVELS = (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


def get_log_level() -> int:
    """This module's log level on nvdiffrast's scale: 0 info, 1 warning, 2 error, 3 fatal."""
    level = log.getEffectiveLevel()
    return next((i for i, known in enumerate(_LOG_LEVELS) if level <= known), 3)


def set_log_level(level: int) -> None:
    """Set this module's log level on nvdiffrast's scale (0 info, 1 warning, 2 error, 3
    fatal; nvdiffrast's default is 1)."""
    if level not in range(len(_LOG_LEVELS)):
        raise ValueError(f"log level must be 0, 1, 2 or 3, got {level!r}")
    log.setLevel(_LOG_LEVELS[level])


def _engine(ctx: RasterContext, operation: str) -> str:
    """``ctx``'s engine; TypeError when ``ctx`` is no ``RasterContext`` (an operation never
    picks an engine of its own)."""
    if not isinstance(ctx, RasterContext):
        raise TypeError(f"{operation} needs the RasterContext to run on (the one the image "
                        f"was rasterized with), got {type(ctx).__name__}; ported nvdiffrast "
                        "code passes ctx=glctx to interpolate, texture and antialias")
    return ctx.engine


def _dense(*tensors):
    """``tensors`` made contiguous (None kept): nvdiffrast's operations refuse any other
    layout, where the torch engine takes views as they are (a batch's images sliced out of a
    padded buffer, say), so the wrapper hands nvdiffrast contiguous ones (no copy for a tensor
    that already is)."""
    return tuple(None if tensor is None else tensor.contiguous() for tensor in tensors)


def rasterize(glctx: RasterContext, pos, tri, resolution, ranges=None, grad_db: bool = True):
    """Rasterize triangles with context ``glctx``; return ``(rast, rast_db)``, both
    ``[B, H, W, 4]`` float32 (``rast_db`` ``[B, H, W, 0]`` when the context's ``output_db`` is
    False).

    ``pos``: clip-space vertices, ``[B, V, 4]`` (instanced mode) or ``[V, 4]`` with ``ranges``
    (int32 ``[B, 2]`` of (first triangle, triangle count), on the CPU; range mode).
    ``tri``: int32 ``[T, 3]``. ``resolution``: ``(H, W)``.
    ``rast`` = (u, v, z/w, triangle_id + 1); ``rast_db`` = (du/dX, du/dY, dv/dX, dv/dY) in
    pixels. Gradients reach ``pos`` through u and v (and through ``rast_db`` if ``grad_db``).
    """
    if _engine(glctx, "rasterize") == "nvdiffrast":
        rast, rast_db = RASTER.module().rasterize(glctx.native, *_dense(pos, tri), resolution,
                                                  *_dense(ranges), grad_db)
    else:
        rast, rast_db = _torch.rasterize(pos, tri, resolution, ranges=ranges, grad_db=grad_db)
    return rast, (rast_db if glctx.output_db else rast_db[..., :0])


class DepthPeeler:
    """Context manager that peels depth layers: each ``rasterize_next_layer()`` returns the
    next-nearest surface per pixel as ``(rast, rast_db)``, the same layout as ``rasterize``."""

    def __init__(self, glctx: RasterContext, pos, tri, resolution, ranges=None, grad_db=True):
        if _engine(glctx, "DepthPeeler") == "nvdiffrast":
            self._peeler = RASTER.module().DepthPeeler(
                glctx.native, *_dense(pos, tri), resolution, *_dense(ranges), grad_db
            )
        else:
            self._peeler = _torch.DepthPeeler(pos, tri, resolution, ranges=ranges, grad_db=grad_db)

    def __enter__(self) -> DepthPeeler:
        self._peeler.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._peeler.__exit__(*exc)

    def rasterize_next_layer(self):
        return self._peeler.rasterize_next_layer()


def interpolate(
    attr, rast, tri, rast_db=None, diff_attrs=None, *, ctx: RasterContext
):
    """Interpolate vertex attributes: ``u*a0 + v*a1 + (1-u-v)*a2``, zero where empty.

    ``attr``: ``[B, V, C]`` or ``[V, C]`` (broadcast over the batch / range mode).
    Returns ``(out [B, H, W, C], out_da)``; ``out_da`` is ``[B, H, W, 2*len(diff_attrs)]``
    holding (dA/dX, dA/dY) per listed attribute when ``diff_attrs`` ("all" or a list of channel
    indices) and ``rast_db`` are given, else an empty tensor.
    """
    if _engine(ctx, "interpolate") == "nvdiffrast":
        return RASTER.module().interpolate(*_dense(attr, rast, tri, rast_db), diff_attrs)
    return _torch.interpolate(attr, rast, tri, rast_db=rast_db, diff_attrs=diff_attrs)


def texture(
    tex,
    uv,
    uv_da=None,
    mip_level_bias=None,
    mip=None,
    filter_mode: str = "auto",
    boundary_mode: str = "wrap",
    max_mip_level: int | None = None,
    *,
    ctx: RasterContext,
):
    """Sample a 2D texture ``[B, h, w, C]`` at ``uv [B, H, W, 2]`` or a cube map
    ``[B, 6, h, w, C]`` (``boundary_mode="cube"``) at directions ``uv [B, H, W, 3]``.

    Texel coordinate is ``u * w - 0.5``. Filter modes: "nearest", "linear",
    "linear-mipmap-nearest", "linear-mipmap-linear", or "auto" (mipmapped when ``uv_da`` or
    ``mip_level_bias`` is given, else linear). Boundary modes: "wrap", "clamp", "zero", "cube".
    The mip level is log2 of the footprint's major axis in texels (from ``uv_da``, the
    screen-space derivatives ``[B, H, W, 4]``, or 6 for cube maps) plus ``mip_level_bias``.
    ``mip`` is a prebuilt chain from ``texture_construct_mip`` (or a list of tensors).
    """
    if _engine(ctx, "texture") == "nvdiffrast":
        return RASTER.module().texture(
            *_dense(tex, uv, uv_da, mip_level_bias),
            list(_dense(*mip)) if isinstance(mip, list) else mip, filter_mode, boundary_mode,
            max_mip_level
        )
    return _torch.texture(
        tex,
        uv,
        uv_da=uv_da,
        mip_level_bias=mip_level_bias,
        mip=mip,
        filter_mode=filter_mode,
        boundary_mode=boundary_mode,
        max_mip_level=max_mip_level,
    )


def texture_points(tex, points, mip_level_bias=None, *, ctx: RasterContext, **options):
    """``texture`` at a flat list of lookups ``points [N, D]`` (uv or directions), with
    ``mip_level_bias [N]`` when given; returns ``[N, C]``. The lookups are laid out as rows of
    ``POINTS_PER_ROW`` (the last row padded with copies of the last lookup, whose outputs are
    dropped), so any ``N`` fits both engines. ``options``: ``texture``'s other keywords."""
    count = points.shape[0]
    width = min(count, POINTS_PER_ROW) or 1
    rows = -(-count // width)
    padding = rows * width - count

    def as_image(values):
        if padding:
            values = torch.cat([values, values[-1:].expand(padding, *values.shape[1:])])
        return values.reshape(1, rows, width, *values.shape[1:]).contiguous()

    bias = None if mip_level_bias is None else as_image(mip_level_bias)
    out = texture(tex, as_image(points), mip_level_bias=bias, ctx=ctx, **options)
    return out.reshape(rows * width, out.shape[-1])[:count]


def texture_construct_mip(
    tex, max_mip_level=None, cube_mode=False, *, ctx: RasterContext
):
    """Build a mip chain (2x2 box averages) for ``tex``, to pass as ``texture(..., mip=...)``."""
    if _engine(ctx, "texture_construct_mip") == "nvdiffrast":
        return RASTER.module().texture_construct_mip(*_dense(tex), max_mip_level, cube_mode)
    return _torch.texture_construct_mip(tex, max_mip_level=max_mip_level, cube_mode=cube_mode)


def antialias(
    color,
    rast,
    pos,
    tri,
    topology_hash=None,
    pos_gradient_boost=1.0,
    *,
    ctx: RasterContext,
):
    """Analytic antialiasing of silhouette edges; returns the antialiased ``color``.

    Blends the colours of neighbouring pixels where a silhouette edge of the nearer triangle
    passes between their centres, by where it crosses; this gives gradients to ``pos`` along
    silhouettes. Horizontal neighbours blend across edges at least as steep as 45 degrees,
    vertical ones across the others, so that an edge moved by d pixels changes each row (or
    column) by d, as a box filter would. ``tri`` must be welded (shared vertex indices) for
    silhouettes to be found.
    """
    if _engine(ctx, "antialias") == "nvdiffrast":
        return RASTER.module().antialias(
            *_dense(color, rast, pos, tri), topology_hash, pos_gradient_boost
        )
    return _torch.antialias(
        color, rast, pos, tri, topology_hash=topology_hash, pos_gradient_boost=pos_gradient_boost
    )


def antialias_construct_topology_hash(tri, *, ctx: RasterContext):
    """Precompute the edge topology of ``tri`` for repeated ``antialias`` calls."""
    if _engine(ctx, "antialias_construct_topology_hash") == "nvdiffrast":
        return RASTER.module().antialias_construct_topology_hash(*_dense(tri))
    return _torch.antialias_construct_topology_hash(tri)
