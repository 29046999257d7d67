"""Welding, degenerate/duplicate triangle removal, unreferenced vertices."""

import pytest
import torch

from diffrec.errors import UserError
from diffrec.mesh import (
    Mesh,
    remove_degenerate_triangles,
    remove_unreferenced_vertices,
    weld_vertices,
)
from diffrec.mesh.primitives import cube


def _split_cube():
    """The cube with 36 unshared vertices (a triangle soup), as some exporters write it."""
    mesh = cube()
    soup = mesh.corner_positions().reshape(-1, 3)
    return mesh, Mesh(soup, torch.arange(36).reshape(12, 3))


def test_exact_weld_restores_the_shared_cube():
    mesh, soup = _split_cube()
    welded, remap = weld_vertices(soup)
    assert welded.num_vertices == 8
    # Same triangles, corner for corner, as the original cube.
    torch.testing.assert_close(welded.corner_positions(), mesh.corner_positions())
    torch.testing.assert_close(welded.positions[remap], soup.positions)
    # Representatives are the lowest-index members, in their original order.
    first_of_each = [remap.tolist().index(k) for k in range(8)]
    assert first_of_each == sorted(first_of_each)
    torch.testing.assert_close(welded.positions, soup.positions[first_of_each])


def test_tolerance_weld_merges_close_points_only():
    tolerance = 1e-3
    positions = torch.tensor(
        [
            [0.0, 0.0, 0.0],
            [0.0009, 0.0, 0.0],  # within tolerance of 0
            [0.0, 0.0015, 0.0],  # 1.5 tolerances from 0: stays apart
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0007],  # a chain: 3-4 and 4-5 close, 3-5 not
            [1.0, 1.0, 1.0014],
        ]
    )
    mesh = Mesh(positions, torch.tensor([[0, 2, 3], [1, 4, 5]]))
    welded, remap = weld_vertices(mesh, tolerance)
    assert remap.tolist() == [0, 0, 1, 2, 2, 2]
    torch.testing.assert_close(welded.positions, positions[[0, 2, 3]])


def _brute_force_clusters(points, tolerance):
    """Connected components of |p_i - p_j| <= tolerance, smallest member as label (float64)."""
    label = list(range(len(points)))

    def root(i):
        while label[i] != i:
            i = label[i]
        return i

    distance = torch.cdist(points.double(), points.double())
    for i in range(len(points)):
        for j in range(i):
            if distance[i, j] <= tolerance:
                a, b = root(i), root(j)
                label[max(a, b)] = min(a, b)
    return [root(i) for i in range(len(points))]


def test_tolerance_weld_matches_brute_force_on_random_points():
    generator = torch.Generator().manual_seed(3)
    points = torch.rand(300, 3, generator=generator) * 0.2
    tolerance = 0.02
    mesh = Mesh(points, torch.arange(300).reshape(100, 3))
    welded, remap = weld_vertices(mesh, tolerance)
    label = torch.tensor(_brute_force_clusters(points, tolerance))
    representatives, expected_remap = torch.unique(label, return_inverse=True)
    assert torch.equal(remap, expected_remap)
    torch.testing.assert_close(welded.positions, points[representatives])
    assert welded.num_vertices < 300  # the test exercises merging at all


def test_weld_keeps_uv_and_normal_buffers():
    _, soup = _split_cube()
    soup = soup.replace(uvs=torch.rand(36, 2), uv_triangles=soup.triangles.clone())
    welded, _ = weld_vertices(soup)
    assert torch.equal(welded.uv_triangles, soup.uv_triangles)
    assert torch.equal(welded.uvs, soup.uvs)


def test_degenerate_and_duplicate_triangles_are_removed():
    positions = torch.tensor(
        [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    )
    triangles = torch.tensor(
        [
            [0, 1, 2],  # kept
            [0, 0, 2],  # repeated index
            [0, 1, 3],  # collinear: zero area
            [1, 2, 0],  # duplicate of the first (rotated)
            [0, 2, 1],  # duplicate of the first (other winding)
            [0, 1, 4],  # kept
        ]
    )
    uv_triangles = torch.arange(18).reshape(6, 3)
    mesh = Mesh(positions, triangles, uvs=torch.rand(18, 2), uv_triangles=uv_triangles)
    cleaned, keep = remove_degenerate_triangles(mesh)
    assert keep.tolist() == [True, False, False, False, False, True]
    assert cleaned.triangles.tolist() == [[0, 1, 2], [0, 1, 4]]
    assert cleaned.uv_triangles.tolist() == [[0, 1, 2], [15, 16, 17]]
    # An area threshold removes small triangles too (areas here: 0.5 and 0.5).
    with pytest.raises(UserError, match="degenerate"):
        remove_degenerate_triangles(mesh, min_area=0.5)


def test_unreferenced_vertices_are_dropped():
    positions = torch.tensor([[9.0, 9, 9], [0.0, 0, 0], [1.0, 0, 0], [7.0, 7, 7], [0.0, 1, 0]])
    mesh = Mesh(positions, torch.tensor([[1, 2, 4]]))
    compact, remap = remove_unreferenced_vertices(mesh)
    assert remap.tolist() == [-1, 0, 1, -1, 2]
    torch.testing.assert_close(compact.corner_positions(), mesh.corner_positions())
