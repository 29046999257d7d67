"""Face and vertex normals, differentiable with respect to the positions.

Vertex normals are angle-weighted by default (Thürmer & Wüthrich 1998): each triangle adds its
unit normal times its interior angle at the vertex, so the result does not depend on how a
surface is split into triangles. Area weighting (the unnormalised cross product) is available.
Degenerate triangles contribute nothing and never produce NaN values or gradients.
"""

from __future__ import annotations

import torch

from diffrec.mesh.mesh import Mesh

WEIGHTINGS = ("angle", "area")


def safe_normalize(v: torch.Tensor, eps: float = 1e-20) -> torch.Tensor:
    """``v / |v|`` along the last axis; zero vectors stay zero with finite gradients."""
    return v * torch.rsqrt(torch.clamp((v * v).sum(-1, keepdim=True), min=eps))


def face_normals(positions: torch.Tensor, triangles: torch.Tensor, unit: bool = True):
    """Normals of the triangles [T, 3], counter-clockwise = front. ``unit=False`` gives the
    cross product, whose length is twice the triangle's area."""
    p0, p1, p2 = positions[triangles].unbind(1)
    n = torch.linalg.cross(p1 - p0, p2 - p0, dim=-1)
    return safe_normalize(n) if unit else n


def corner_angles(positions: torch.Tensor, triangles: torch.Tensor) -> torch.Tensor:
    """Interior angle of each triangle at each corner, [T, 3], radians; 0 for degenerate corners."""
    corners = positions[triangles]
    to_next = corners.roll(-1, dims=1) - corners
    to_prev = corners.roll(1, dims=1) - corners
    sine = torch.linalg.cross(to_next, to_prev, dim=-1)
    sine_length = torch.sqrt(torch.clamp((sine * sine).sum(-1), min=1e-30))
    return torch.atan2(sine_length, (to_next * to_prev).sum(-1))


def vertex_normals(
    positions: torch.Tensor, triangles: torch.Tensor, weighting: str = "angle",
    groups: torch.Tensor | None = None, count: int | None = None,
) -> torch.Tensor:
    """Unit vertex normals [V, 3]; vertices used by no (non-degenerate) triangle get zeros.
    With ``groups`` [T, 3] (a normal index per corner, ``count`` of them): the normals [count,
    3] of those groups instead, each smoothed over its own corners only (hard edges kept)."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if weighting == "angle":
        weighted = (
            face_normals(positions, triangles)[:, None, :]
            * corner_angles(positions, triangles)[..., None]
        )
    else:
        weighted = face_normals(positions, triangles, unit=False)[:, None, :].expand(-1, 3, -1)
    index = triangles if groups is None else groups
    summed = positions.new_zeros(len(positions) if groups is None else count, 3)
    summed = summed.index_add(0, index.reshape(-1), weighted.reshape(-1, 3))
    return safe_normalize(summed)


def with_vertex_normals(mesh: Mesh, weighting: str = "angle") -> Mesh:
    """The mesh with smooth vertex normals (indexed like the positions); tangents are dropped
    because they depend on the normals (recompute them with ``with_tangents``)."""
    normals = vertex_normals(mesh.positions, mesh.triangles, weighting)
    return mesh.replace(
        normals=normals, normal_triangles=mesh.triangles, tangents=None, tangent_triangles=None
    )


def with_grouped_normals(mesh: Mesh, weighting: str = "angle") -> Mesh:
    """The mesh with its normals recomputed from its positions, each smoothed only over the
    corners that share it (``normal_triangles``): its flat faces and hard edges kept as the
    surface moves. A mesh without normals gets smooth ones (``with_vertex_normals``).
    Tangents are dropped, as there."""
    if mesh.normals is None:
        return with_vertex_normals(mesh, weighting)
    normals = vertex_normals(mesh.positions, mesh.triangles, weighting,
                             groups=mesh.normal_triangles, count=len(mesh.normals))
    return mesh.replace(normals=normals, tangents=None, tangent_triangles=None)


def welded_normals(mesh: Mesh, tolerance: float = 1e-4) -> Mesh:
    """The mesh with one normal per vertex and direction: corners on the same vertex whose
    normals agree within ``tolerance`` share one index (files often give each corner a normal
    of its own, even where the surface is smooth); unchanged without normals."""
    if mesh.normals is None:
        return mesh
    corner_normals = mesh.normals[mesh.normal_triangles].reshape(-1, 3)
    keys = torch.cat([mesh.triangles.reshape(-1, 1),
                      torch.round(corner_normals / tolerance).long()], 1)
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)
    first = torch.full((len(unique),), len(keys), dtype=torch.long, device=keys.device)
    first = first.scatter_reduce(0, inverse, torch.arange(len(keys), device=keys.device),
                                 reduce="amin")
    return mesh.replace(normals=corner_normals[first],
                        normal_triangles=inverse.reshape(mesh.triangles.shape))
