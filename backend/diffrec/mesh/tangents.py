"""Per-vertex tangent frames from UVs (for tangent-space normal maps), differentiable in the
positions.

Each triangle's tangent is the direction of increasing ``u`` on its plane,
``T = (e1 dv2 - e2 dv1) / det`` with ``e1, e2`` its edges and ``det = du1 dv2 - du2 dv1``;
its bitangent (increasing ``v``) is ``B = (e2 du1 - e1 du2) / det``. A corner's handedness is
``sign((N x T) . B)`` with ``N`` the corner's shading normal: +1 for an unmirrored UV layout,
-1 where the UVs are mirrored.

Corners are grouped into tangent vertices by (position, uv, normal, handedness), as
MikkTSpace does: mirrored halves that share a UV vertex get separate tangents instead of
cancelling out. In each group the unit triangle tangents are summed with corner-angle
weights, made orthogonal to the normal (Gram-Schmidt) and normalised. A group whose tangents
vanish (degenerate UVs) gets an arbitrary unit vector orthogonal to its normal.
"""

from __future__ import annotations

import torch

from diffrec.errors import UserError
from diffrec.mesh.mesh import Mesh
from diffrec.mesh.normals import corner_angles, safe_normalize
from diffrec.rows import unique_rows


def with_tangents(mesh: Mesh) -> Mesh:
    """The mesh with ``tangents`` [VG, 4] (xyz unit, w = +-1) and ``tangent_triangles``."""
    if mesh.uvs is None or mesh.normals is None:
        raise UserError("tangents need UVs and normals (see with_vertex_normals)")
    corner_normals = safe_normalize(mesh.normals[mesh.normal_triangles])  # [T, 3, 3]
    face_tangent, face_bitangent = _face_tangents(mesh)
    handedness = torch.where(
        (
            torch.linalg.cross(corner_normals, face_tangent[:, None], dim=-1)
            * face_bitangent[:, None]
        ).sum(-1)
        < 0,
        -1,
        1,
    )  # [T, 3]
    keys = torch.stack(
        [mesh.triangles, mesh.uv_triangles, mesh.normal_triangles, handedness], dim=-1
    ).reshape(-1, 4)
    groups, tangent_triangles = _grouped(keys)
    weights = corner_angles(mesh.positions, mesh.triangles)[..., None]
    summed = torch.zeros(
        groups.shape[0], 3, dtype=mesh.positions.dtype, device=mesh.device
    ).index_add(0, tangent_triangles, (face_tangent[:, None] * weights).reshape(-1, 3))
    normal = safe_normalize(mesh.normals[groups[:, 2]])
    tangent = summed - normal * (normal * summed).sum(-1, keepdim=True)
    length_sq = (tangent * tangent).sum(-1, keepdim=True)
    tangent = torch.where(length_sq > 1e-24, safe_normalize(tangent), _any_perpendicular(normal))
    tangents = torch.cat([tangent, groups[:, 3:4].to(tangent.dtype)], dim=-1)
    return mesh.replace(tangents=tangents, tangent_triangles=tangent_triangles.reshape(-1, 3))


class _LastGrouping:
    """``unique_rows`` of the last corner keys seen, given again for the same keys: a mesh
    whose vertices move in a fit keeps its grouping from one step to the next (on the bake
    benchmark's 16k-triangle meshes the grouping was a third of ``with_tangents``)."""

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.grouping: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        last = self.keys
        if last is None or last.shape != keys.shape or last.device != keys.device \
                or not torch.equal(last, keys):
            self.keys, self.grouping = keys, unique_rows(keys)
        return self.grouping


_grouped = _LastGrouping()


def _face_tangents(mesh: Mesh) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit directions of increasing u and v on each triangle, [T, 3] each (0 if degenerate)."""
    p0, p1, p2 = mesh.positions[mesh.triangles].unbind(1)
    t0, t1, t2 = mesh.uvs[mesh.uv_triangles].to(mesh.positions.dtype).unbind(1)
    e1, e2 = p1 - p0, p2 - p0
    d1, d2 = t1 - t0, t2 - t0
    det = d1[:, 0] * d2[:, 1] - d2[:, 0] * d1[:, 1]
    orientation = torch.sign(det)[:, None]  # dividing by |det| would only change the length
    tangent = (e1 * d2[:, 1:2] - e2 * d1[:, 1:2]) * orientation
    bitangent = (e2 * d1[:, 0:1] - e1 * d2[:, 0:1]) * orientation
    return safe_normalize(tangent), safe_normalize(bitangent)


def _any_perpendicular(normal: torch.Tensor) -> torch.Tensor:
    """A unit vector orthogonal to each (unit) normal [N, 3]."""
    axis = torch.zeros_like(normal)
    axis.scatter_(-1, normal.abs().argmin(-1, keepdim=True), 1.0)
    return safe_normalize(torch.linalg.cross(normal, axis, dim=-1))
