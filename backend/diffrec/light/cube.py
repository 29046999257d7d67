"""Cube-map geometry (OpenGL convention) and sparse bilinear resampling of cube maps.

A cube map is a tensor ``[6, R, R, C]``, faces in the order +x, -x, +y, -y, +z, -z. A direction
``d`` selects the face of its major axis (ties go to x, then y, then z) and the face coordinates
``s = (sc/|ma| + 1)/2``, ``t = (tc/|ma| + 1)/2`` from the OpenGL cube-map table:

    face  ma   sc   tc          face  ma   sc   tc
    +x    +x   -z   -y          -x    -x   +z   -y
    +y    +y   +x   +z          -y    -y   +x   -z
    +z    +z   +x   -y          -z    -z   -x   -y

Texel ``(i, j)`` of a face (row ``i``, column ``j``) is centred at ``s = (j + 0.5)/R``,
``t = (i + 0.5)/R``: rows follow ``t``, columns follow ``s``, the same layout nvdiffrast's cube
textures use. Directions are in the world frame (Blender's: right-handed, Z up).

Resampling is expressed as *taps*: integer indices into the flattened map ``[6*R*R, C]`` and
weights, applied with ``apply_taps``; this keeps every resampling linear in (and differentiable
with respect to) the map, and lets a sampler be built once and reused.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

__all__ = [
    "apply_taps",
    "bilinear_taps",
    "direction_to_face",
    "face_to_direction",
    "texel_directions",
    "texel_solid_angles",
]


# Per face: the major axis, and the axes that sc and tc measure (orthonormal frames), so that
# d / |ma| = AXIS + sc/|ma| * SC_AXIS + tc/|ma| * TC_AXIS reproduces the table above.
_AXIS = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))
_SC_AXIS = ((0, 0, -1), (0, 0, 1), (1, 0, 0), (1, 0, 0), (1, 0, 0), (-1, 0, 0))
_TC_AXIS = ((0, -1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1), (0, -1, 0), (0, -1, 0))


def _frames(like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _frames_on(like.dtype, like.device)


@functools.lru_cache(maxsize=8)
def _frames_on(dtype: torch.dtype, device: torch.device):
    """The face frames on ``device``, copied there once (a copy makes the host wait)."""
    return tuple(torch.tensor(table, dtype=dtype, device=device)
                 for table in (_AXIS, _SC_AXIS, _TC_AXIS))


def direction_to_face(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Map directions ``[..., 3]`` (any length > 0) to ``(face, s, t)``.

    ``face`` is int64 in 0..5, ``s`` and ``t`` are in [0, 1] (see the module docstring).
    """
    axis, sc_axis, tc_axis = _frames(d)
    absolute = d.abs()
    major = torch.where(
        (absolute[..., 0] >= absolute[..., 1]) & (absolute[..., 0] >= absolute[..., 2]),
        0,
        torch.where(absolute[..., 1] >= absolute[..., 2], 1, 2),
    )
    negative = d.gather(-1, major[..., None])[..., 0] < 0
    face = 2 * major + negative.long()
    ma = (axis[face] * d).sum(-1)
    s = ((sc_axis[face] * d).sum(-1) / ma + 1) / 2
    t = ((tc_axis[face] * d).sum(-1) / ma + 1) / 2
    return face, s, t


def face_to_direction(face: torch.Tensor, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Inverse of ``direction_to_face``: unit directions ``[..., 3]``.

    ``s`` and ``t`` may lie outside [0, 1]; the result is then the direction through the
    face's plane extended beyond the face, which ``direction_to_face`` maps onto a neighbour.
    """
    axis, sc_axis, tc_axis = _frames(s)
    face = face.long()
    d = axis[face] + (2 * s - 1)[..., None] * sc_axis[face] + (2 * t - 1)[..., None] * tc_axis[face]
    return F.normalize(d, dim=-1)


def _texel_grid(resolution: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    centres = (torch.arange(resolution, dtype=dtype, device=device) + 0.5) / resolution
    t, s = torch.meshgrid(centres, centres, indexing="ij")
    return s, t


def texel_directions(resolution: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """Unit directions through the texel centres, ``[6, R, R, 3]``."""
    s, t = _texel_grid(resolution, dtype, device)
    face = torch.arange(6, device=device)[:, None, None].expand(6, resolution, resolution)
    return face_to_direction(face, s.expand(6, -1, -1), t.expand(6, -1, -1))


def texel_solid_angles(resolution: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Exact solid angle of each texel in steradians, ``[6, R, R]``; they sum to 4*pi.

    The solid angle of the face-plane rectangle [0, x] x [0, y] at unit distance is
    ``atan2(x*y, sqrt(x^2 + y^2 + 1))``; a texel is the inclusion-exclusion of four of these.
    """
    edges = torch.linspace(-1, 1, resolution + 1, dtype=dtype)

    def corner(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.atan2(x * y, torch.sqrt(x * x + y * y + 1))

    y0, x0 = edges[:-1, None], edges[None, :-1]
    y1, x1 = edges[1:, None], edges[None, 1:]
    omega = corner(x1, y1) - corner(x0, y1) - corner(x1, y0) + corner(x0, y0)
    return omega.expand(6, resolution, resolution).clone()


def bilinear_taps(directions: torch.Tensor, resolution: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bilinear interpolation taps for sampling an ``R``-cube at ``directions [N, 3]``.

    Returns ``(index [N, 4] int64, weight [N, 4])`` into the flattened ``[6*R*R, C]`` map; the
    weights of a row sum to 1. Taps that fall off the face (within half a texel of an edge)
    are carried across the seam: the tap's texel centre, extended onto the face's plane, is
    re-projected onto the cube and the texel there is used. At the 8 cube corners one of the
    three meeting faces is chosen, a sub-texel approximation.
    """
    face, s, t = direction_to_face(directions)
    x = s * resolution - 0.5
    y = t * resolution - 0.5
    x0, y0 = torch.floor(x), torch.floor(y)
    fx, fy = x - x0, y - y0
    cols = torch.stack([x0, x0 + 1, x0, x0 + 1], -1).long()
    rows = torch.stack([y0, y0, y0 + 1, y0 + 1], -1).long()
    weight = torch.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], -1)
    face = face[:, None].expand(-1, 4)
    index = (face * resolution + rows.clamp(0, resolution - 1)) * resolution + cols.clamp(
        0, resolution - 1
    )
    off = (cols < 0) | (cols >= resolution) | (rows < 0) | (rows >= resolution)
    if bool(off.any()):
        s_off = (cols[off] + 0.5).to(directions.dtype) / resolution
        t_off = (rows[off] + 0.5).to(directions.dtype) / resolution
        tap_face, tap_s, tap_t = direction_to_face(face_to_direction(face[off], s_off, t_off))
        j = (tap_s * resolution).floor().long().clamp(0, resolution - 1)
        i = (tap_t * resolution).floor().long().clamp(0, resolution - 1)
        index[off] = (tap_face * resolution + i) * resolution + j
    return index, weight


def apply_taps(flat: torch.Tensor, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Weighted gather: ``out[n] = sum_k weight[n, k] * flat[index[n, k]]``, ``[N, C]``.

    Linear and differentiable in ``flat`` ``[P, C]``; memory stays at the size of the output.
    """
    return F.embedding_bag(index, flat, per_sample_weights=weight.to(flat.dtype), mode="sum")
