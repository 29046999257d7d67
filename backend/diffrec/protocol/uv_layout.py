"""Which of a mesh's own UVs the server keeps: one rule for both sides (numpy only).

The server bakes its textures into a mesh's own UV map where ``problems`` finds nothing, and
unwraps the mesh anew where it finds something (textures given in the old layout then start
from their averages). The add-on applies the same rule to the artist's own low-poly before it
bakes a start into it, so that the bake lands in UVs the server keeps.

UV conventions are the mesh's: origin bottom-left, ``[0, 1]^2`` covers the texture once, and
textures wrap (repeat).
"""

from __future__ import annotations

import numpy as np

UV_WRAP_MARGIN = 0.25
"""UVs this far outside [0, 1] are kept: textures wrap, so a chart that crosses an edge
continues on the opposite one (Spot's span [-0.052, 1])."""
DEGENERATE_RELATIVE_AREA = 1e-8
"""A triangle this much smaller than the mean is degenerate."""
MAX_FLAT_UV_FRACTION = 0.01
"""Slivers packed below a texel come out of xatlas with zero UV area; they sample one texel,
which is harmless, so a layout is only refused when the triangles flat in UV space cover more
than this share of the surface's area (a trained DMTet surface has many: 249 of 19,365
triangles of Spot's on a GPU run, docs/BENCHMARKS.md)."""
MAX_OVERLAP = 0.01
"""At most this share of the covered texels may lie in more than one triangle (mirrored or
stacked charts bake two places of the surface into one texel)."""
CHECK_RESOLUTION = 256
"""Texels a side at which overlap is counted."""
_CANDIDATES_PER_CHUNK = 1 << 20  # texel centres tested at once (memory: about 200 MB at most)
_SUBTEXELS = 1 << 12  # fixed-point steps a texel: the edge tests are exact in int64 ...
_MAX_RESOLUTION = 1 << 16  # ... up to this many texels a side


def triangle_areas(corners: np.ndarray) -> np.ndarray:
    """Areas of triangles given as corners [T, 3, 2] or [T, 3, 3] (float64)."""
    corners = corners.astype(np.float64)
    a, b = corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]
    if corners.shape[-1] == 2:
        return 0.5 * np.abs(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0])
    return 0.5 * np.linalg.norm(np.cross(a, b), axis=-1)


def _degenerate(areas: np.ndarray) -> np.ndarray:
    """Triangles whose area is negligible next to the mean (all of them if the mean is 0)."""
    return areas <= DEGENERATE_RELATIVE_AREA * areas.mean()


def flat_in_uv(corners: np.ndarray, uv_corners: np.ndarray) -> tuple[int, int, float]:
    """``(flat, solid, share)``: of the ``solid`` triangles (area in 3D, corners ``[T, 3, 3]``),
    the ``flat`` ones have none in UV space (``uv_corners [T, 3, 2]``) and cover ``share`` of
    the surface's area."""
    areas = triangle_areas(corners)
    solid = ~_degenerate(areas)
    flat = _degenerate(triangle_areas(uv_corners)) & solid
    share = float(areas[flat].sum() / max(areas[solid].sum(), np.finfo(np.float64).tiny))
    return int(flat.sum()), int(solid.sum()), share


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _chunks(sizes: np.ndarray, limit: int):
    """Slices of consecutive items whose ``sizes`` add up to about ``limit`` at most (an item
    larger than ``limit`` alone)."""
    ends = np.cumsum(sizes)
    start = 0
    while start < len(sizes):
        before = ends[start - 1] if start else 0
        stop = max(int(np.searchsorted(ends, before + limit, side="right")), start + 1)
        yield slice(start, stop)
        start = stop


def _owns(edge: np.ndarray) -> np.ndarray:
    """Whether a point on an edge (its direction, counter-clockwise about its triangle) belongs
    to that triangle: of the two triangles sharing an edge, which run it in opposite
    directions, exactly one (the top-left rule of rasterizers)."""
    return (edge[..., 1] < 0) | ((edge[..., 1] == 0) & (edge[..., 0] > 0))


def texel_overlap(uv_corners: np.ndarray, resolution: int,
                  enough: int | None = None) -> tuple[int, int]:
    """``(covered, overlapped)``: how many texels of a ``resolution``² texture have their
    centre inside one of the UV triangles ``uv_corners`` [T, 3, 2] or more, and inside more
    than one. A centre on an edge two triangles share is in exactly one of them (corners are
    snapped to ``1 / _SUBTEXELS`` of a texel, where the tests are exact). UVs wrap: each
    triangle is moved by whole tiles to put its centroid in [0, 1)² (what sticks out of the
    square then is not counted; corners further than two tiles away are clamped there).
    Counting stops once ``overlapped`` exceeds ``enough`` (None: never); both counts are then
    those so far."""
    if not 0 < resolution <= _MAX_RESOLUTION:
        raise ValueError(f"texel counts are exact up to {_MAX_RESOLUTION} texels a side, "
                         f"not {resolution}")
    corners = np.asarray(uv_corners, np.float64)
    corners = np.clip(corners - np.floor(corners.mean(1, keepdims=True)), -2.0, 3.0)
    # fixed point, in texels: texel (x, y)'s centre at (x, y) * _SUBTEXELS
    corners = np.round((corners * resolution - 0.5) * _SUBTEXELS).astype(np.int64)
    orientation = np.sign(_cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]))
    low = np.clip(-(-corners.min(1) // _SUBTEXELS), 0, resolution)
    high = np.clip(corners.max(1) // _SUBTEXELS, -1, resolution - 1)
    size = np.maximum(high - low + 1, 0)
    tested = size[:, 0] * size[:, 1] * (orientation != 0)
    counts = np.zeros(resolution * resolution, np.int64)
    for part in _chunks(tested, _CANDIDATES_PER_CHUNK):
        sizes = tested[part]
        triangle = np.repeat(np.arange(part.start, part.stop), sizes)
        if not len(triangle):
            continue
        offset = np.arange(len(triangle)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        x = low[triangle, 0] + offset % size[triangle, 0]
        y = low[triangle, 1] + offset // size[triangle, 0]
        point = np.stack([x, y], -1) * _SUBTEXELS
        sign = orientation[triangle, None]
        inside = np.ones(len(triangle), bool)
        for k in range(3):
            start = corners[triangle, k]
            edge = (corners[triangle, (k + 1) % 3] - start) * sign  # counter-clockwise
            side = _cross(edge, point - start)
            inside &= (side > 0) | ((side == 0) & _owns(edge))
        counts += np.bincount(y[inside] * resolution + x[inside], minlength=len(counts))
        if enough is not None and np.count_nonzero(counts > 1) > enough:
            break
    return int(np.count_nonzero(counts)), int(np.count_nonzero(counts > 1))


def problems(corners: np.ndarray, uv_corners: np.ndarray, *,
             resolution: int = CHECK_RESOLUTION, max_flat: float = MAX_FLAT_UV_FRACTION,
             max_overlap: float = MAX_OVERLAP) -> list[str]:
    """Why a UV map is not fit to bake into (empty: it is), one phrase each; ``corners``
    [T, 3, 3] the triangles' positions, ``uv_corners`` [T, 3, 2] their UVs.

    Checks: every UV within ``UV_WRAP_MARGIN`` of [0, 1] (textures wrap); the triangles with
    no UV area cover at most ``max_flat`` of the surface's area; at most ``max_overlap`` of
    the covered texels, at ``resolution``² (``texel_overlap``), lie in more than one triangle.
    """
    uv_corners = np.asarray(uv_corners, np.float64)
    found = []
    if not np.isfinite(uv_corners).all():
        return ["UVs are not finite"]
    low, high = float(uv_corners.min()), float(uv_corners.max())
    if low < -UV_WRAP_MARGIN or high > 1 + UV_WRAP_MARGIN:
        found.append(f"UVs span [{low:.3g}, {high:.3g}], more than {UV_WRAP_MARGIN:g} "
                     "outside [0, 1]")
    flat, solid, share = flat_in_uv(np.asarray(corners), uv_corners)
    if share > max_flat:
        found.append(f"{flat} of {solid} triangles, {share:.1%} of the surface, have no UV area")
    # past this many, the share is over max_overlap whatever else is covered
    enough = int(max_overlap * resolution * resolution)
    covered, overlapped = texel_overlap(uv_corners, resolution, enough)
    if overlapped > enough:  # counting may have stopped: a lower bound
        found.append(f"{overlapped} texels or more (at {resolution}²) belong to more than one "
                     f"triangle, more than {max_overlap:.0%} of the texture")
    elif overlapped > max_overlap * max(covered, 1):
        found.append(f"{overlapped} texels (at {resolution}²) belong to more than one "
                     f"triangle, more than {max_overlap:.0%} of the {covered} covered")
    return found
