"""Small analytic meshes for tests, demos and initial shapes (float32, counter-clockwise
triangles seen from outside, welded positions)."""

from __future__ import annotations

import math

import torch

from diffrec.mesh.mesh import Mesh

_CUBE_CORNERS = [[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)]
_CUBE_QUADS = [  # corner index = 4*(x>0) + 2*(y>0) + (z>0); each quad counter-clockwise
    [0, 1, 3, 2], [4, 6, 7, 5],  # -x, +x
    [0, 4, 5, 1], [2, 3, 7, 6],  # -y, +y
    [0, 2, 6, 4], [1, 5, 7, 3],  # -z, +z
]  # fmt: skip


def cube(half_size: float = 1.0, alternate_diagonals: bool = False) -> Mesh:
    """Axis-aligned cube [-h, h]^3: 8 vertices, 12 triangles. ``alternate_diagonals`` splits
    each face along its other diagonal (same surface, different triangulation)."""
    quads = torch.tensor(_CUBE_QUADS)
    if alternate_diagonals:
        quads = quads.roll(1, dims=1)
    triangles = torch.cat([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return Mesh(torch.tensor(_CUBE_CORNERS) * half_size, triangles)


def plane(resolution: int = 4, size: float = 2.0) -> Mesh:
    """Square grid in the z = 0 plane facing +z, ``[-s/2, s/2]^2``, ``resolution`` quads per
    side, with UVs ``u = x / s + 1/2``, ``v = y / s + 1/2`` sharing the position indices."""
    ticks = torch.linspace(-size / 2, size / 2, resolution + 1)
    y, x = torch.meshgrid(ticks, ticks, indexing="ij")
    positions = torch.stack([x, y, torch.zeros_like(x)], dim=-1).reshape(-1, 3)
    triangles = _grid_triangles(resolution, resolution, resolution + 1)
    uvs = positions[:, :2] / size + 0.5
    return Mesh(positions, triangles, uvs=uvs, uv_triangles=triangles)


def uv_sphere(segments: int = 32, rings: int = 16, radius: float = 1.0) -> Mesh:
    """Latitude-longitude sphere centred at the origin, poles on +-z, with UVs
    ``u = longitude / 2 pi`` (seam at +x, split in the UV buffer only) and
    ``v = (latitude + pi/2) / pi``."""
    if segments < 3 or rings < 2:
        raise ValueError("a UV sphere needs segments >= 3 and rings >= 2")
    theta = torch.linspace(0, math.pi, rings + 1, dtype=torch.float64)[1:-1]  # from the north pole
    phi = torch.arange(segments, dtype=torch.float64) * (2 * math.pi / segments)
    t, p = torch.meshgrid(theta, phi, indexing="ij")
    ring_points = torch.stack([t.sin() * p.cos(), t.sin() * p.sin(), t.cos()], -1).reshape(-1, 3)
    poles = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]], dtype=torch.float64)
    positions = torch.cat([poles[:1], ring_points, poles[1:]]) * radius
    # Grid of (rings + 1) x (segments + 1) UV vertices; position of UV vertex (r, s).
    r, s = torch.meshgrid(torch.arange(rings + 1), torch.arange(segments + 1), indexing="ij")
    position_of = torch.where(r == 0, 0, 1 + (r - 1) * segments + s % segments)
    position_of = torch.where(r == rings, positions.shape[0] - 1, position_of).reshape(-1)
    uvs = torch.stack([s / segments, 1 - r / rings], -1).reshape(-1, 2).float()
    uv_triangles = _grid_triangles(rings, segments, segments + 1, flip=True)
    keep = _not_pole_slivers(uv_triangles, position_of)
    uv_triangles = uv_triangles[keep]
    return Mesh(positions.float(), position_of[uv_triangles], uvs=uvs, uv_triangles=uv_triangles)


def _grid_triangles(rows: int, columns: int, stride: int, flip: bool = False) -> torch.Tensor:
    """Two triangles per grid cell of a row-major vertex grid, counter-clockwise when rows
    grow along +y and columns along +x (``flip`` reverses the winding)."""
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
    a = (r * stride + c).reshape(-1)
    b, d, e = a + 1, a + stride, a + stride + 1
    triangles = torch.cat([torch.stack([a, b, e], -1), torch.stack([a, e, d], -1)])
    return triangles.flip(1) if flip else triangles


def _not_pole_slivers(uv_triangles: torch.Tensor, position_of: torch.Tensor) -> torch.Tensor:
    """Drop the zero-area triangles of the UV grid whose two corners map to the same pole."""
    tri = position_of[uv_triangles]
    return (tri[:, 0] != tri[:, 1]) & (tri[:, 1] != tri[:, 2]) & (tri[:, 0] != tri[:, 2])
