"""Tangent frames from UVs: known UV layouts, mirrored UVs, curved surfaces."""

import importlib
import math

import pytest
import torch

from diffrec.errors import UserError
from diffrec.mesh import with_tangents, with_vertex_normals
from diffrec.mesh.primitives import cube, plane, uv_sphere


def _plane_with_uv_map(matrix):
    """The +z plane with uv = matrix @ (x, y) (a general affine layout)."""
    mesh = plane(resolution=3)
    uvs = mesh.positions[:, :2] @ torch.tensor(matrix).T + 0.5
    return with_vertex_normals(mesh.replace(uvs=uvs))


@pytest.mark.parametrize(
    "matrix",
    [
        [[1.0, 0.0], [0.0, 1.0]],
        [[math.cos(0.7), math.sin(0.7)], [-math.sin(0.7), math.cos(0.7)]],  # rotated layout
        [[0.5, 0.3], [-0.2, 2.0]],  # sheared and stretched layout
    ],
)
def test_plane_tangent_is_the_direction_of_increasing_u(matrix):
    mesh = with_tangents(_plane_with_uv_map(matrix))
    # p(u, v) = A^-1 (uv - 1/2): dp/du is A^-1's first column, dp/dv its second.
    inverse = torch.linalg.inv(torch.tensor(matrix, dtype=torch.float64))
    dp_du = torch.tensor([*inverse[:, 0], 0.0]).float()
    dp_dv = torch.tensor([*inverse[:, 1], 0.0]).float()
    tangent = mesh.tangents[:, :3]
    torch.testing.assert_close(tangent, (dp_du / dp_du.norm()).expand_as(tangent))
    torch.testing.assert_close(mesh.tangents[:, 3], torch.ones(len(tangent)))
    # The reconstructed bitangent w * (N x T) lies on the side of increasing v.
    normal = torch.tensor([0.0, 0.0, 1.0])
    bitangent = torch.linalg.cross(normal.expand_as(tangent), tangent, dim=-1)
    assert ((bitangent * mesh.tangents[:, 3:]) @ dp_dv > 0).all()


def test_mirrored_uvs_flip_the_handedness():
    mesh = with_tangents(_plane_with_uv_map([[-1.0, 0.0], [0.0, 1.0]]))  # u grows along -x
    expected = torch.tensor([-1.0, 0.0, 0.0, -1.0]).expand(mesh.tangents.shape[0], -1)
    torch.testing.assert_close(mesh.tangents, expected)
    # bitangent = w * (N x T) = -(z x -x) = +y: still the direction of increasing v.


def test_mirror_seam_splits_tangents_instead_of_cancelling():
    # u = 1/2 + |x|/2: the two halves mirror each other and share the UV vertices on x = 0.
    mesh = plane(resolution=4)
    uvs = torch.stack([0.5 + mesh.positions[:, 0].abs() / 2, mesh.uvs[:, 1]], dim=-1)
    mesh = with_tangents(with_vertex_normals(mesh.replace(uvs=uvs)))
    corner_tangents = mesh.tangents[mesh.tangent_triangles]  # [T, 3, 4]
    side = mesh.corner_positions()[..., 0].mean(1).sign()  # which half each triangle is in
    expected = torch.stack([side, 0 * side, 0 * side, side], dim=-1)[:, None].expand(-1, 3, -1)
    torch.testing.assert_close(corner_tangents, expected)


def test_sphere_tangents_follow_longitude_and_are_orthonormal():
    mesh = with_tangents(with_vertex_normals(uv_sphere(24, 12)))
    tangent, w = mesh.tangents[:, :3], mesh.tangents[:, 3]
    normal = mesh.normals[mesh.normal_triangles].reshape(-1, 3)
    corner_tangent = mesh.tangents[mesh.tangent_triangles].reshape(-1, 4)[:, :3]
    torch.testing.assert_close(tangent.norm(dim=-1), torch.ones(len(tangent)))
    assert (normal * corner_tangent).sum(-1).abs().max() < 1e-5
    torch.testing.assert_close(w, torch.ones_like(w))
    # Away from the poles, increasing u (longitude) is the direction (-sin phi, cos phi, 0).
    # Each triangle's tangent is a chord along a latitude, off by half a segment (7.5 deg)
    # at its ends; a vertex averages the chords on both sides, except on the UV seam
    # (x > 0, y = 0), where it only has one side.
    p = mesh.corner_positions().reshape(-1, 3)
    east = torch.stack([-p[:, 1], p[:, 0], torch.zeros_like(p[:, 0])], -1)
    east = east / east.norm(dim=-1, keepdim=True)
    cosine = (east * corner_tangent).sum(-1)
    seam = (p[:, 1].abs() < 1e-6) & (p[:, 0] > 0)
    away = p[:, 2].abs() < 0.9
    assert cosine[away & ~seam].min() > math.cos(math.radians(0.5))
    assert cosine[away & seam].min() > math.cos(math.radians(7.5 + 0.5))


def test_degenerate_uvs_still_give_unit_orthogonal_tangents():
    mesh = with_vertex_normals(cube())
    mesh = mesh.replace(uvs=torch.zeros(1, 2), uv_triangles=torch.zeros_like(mesh.triangles))
    mesh = with_tangents(mesh)
    corner_normal = mesh.normals[mesh.normal_triangles].reshape(-1, 3)
    corner_tangent = mesh.tangents[mesh.tangent_triangles].reshape(-1, 4)[:, :3]
    torch.testing.assert_close(corner_tangent.norm(dim=-1), torch.ones(36))
    assert (corner_normal * corner_tangent).sum(-1).abs().max() < 1e-6


def test_tangents_are_differentiable_in_the_positions():
    mesh = with_vertex_normals(uv_sphere(6, 4))
    positions = mesh.positions.double().requires_grad_()

    def tangents(p):
        m = with_vertex_normals(mesh.replace(positions=p))
        return with_tangents(m).tangents[:, :3]

    assert torch.autograd.gradcheck(tangents, (positions,))


def test_tangents_need_uvs_and_normals():
    with pytest.raises(UserError, match="UVs and normals"):
        with_tangents(cube())


def test_a_mesh_whose_vertices_move_is_grouped_once(monkeypatch):
    """The corners' grouping is reused while their keys stay (vertices moved a little), and
    made again when they change; the tangents are those of a grouping made afresh."""
    tangents = importlib.import_module("diffrec.mesh.tangents")
    grouped = []
    unique_rows = tangents.unique_rows
    monkeypatch.setattr(tangents, "unique_rows", lambda rows: grouped.append(len(rows))
                        or unique_rows(rows))
    monkeypatch.setattr(tangents, "_grouped", tangents._LastGrouping())
    sphere = uv_sphere(12, 6)
    moved = [sphere.replace(positions=sphere.positions * (1.0 + 0.01 * step)
                            + 0.001 * torch.randn(sphere.positions.shape,
                                                  generator=torch.Generator().manual_seed(step)))
             for step in range(3)]
    frames = [with_tangents(with_vertex_normals(mesh)) for mesh in moved]
    assert len(grouped) == 1
    monkeypatch.setattr(tangents, "_grouped", tangents._LastGrouping())  # forgets
    fresh = with_tangents(with_vertex_normals(moved[2]))
    assert len(grouped) == 2
    torch.testing.assert_close(frames[2].tangents, fresh.tangents)
    assert torch.equal(frames[2].tangent_triangles, fresh.tangent_triangles)
    with_tangents(with_vertex_normals(uv_sphere(10, 5)))  # other corners: grouped again
    assert len(grouped) == 3
