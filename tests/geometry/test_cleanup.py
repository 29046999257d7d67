"""Mesh cleanup: welding, degenerate and duplicate triangles, unreferenced vertices."""

import pytest
import torch

from diffrec.device_waits import DeviceWaits
from diffrec.geometry.cleanup import (
    check_mesh,
    clean_mesh,
    remove_degenerate_triangles,
    remove_duplicate_triangles,
    remove_small_pieces,
    remove_unreferenced_vertices,
    weld_vertices,
)
from diffrec.mesh.primitives import cube

SQUARE = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]


def _messy_square():
    vertices = torch.tensor([
        *SQUARE,
        [0.0, 0.0, 0.0],   # 4: duplicate of 0
        [5.0, 5.0, 5.0],   # 5: unreferenced
        [0.5, 0.0, 0.0],   # 6: on edge 0-1 (collinear triangle)
    ], dtype=torch.float64, requires_grad=True)
    triangles = torch.tensor([
        [0, 1, 2],
        [4, 2, 3],   # uses the duplicate vertex
        [0, 1, 1],   # repeated index
        [0, 6, 1],   # zero area
        [2, 1, 0],   # duplicate of the first, other orientation
        [3, 4, 2],   # the second again after welding (same orientation)
    ])
    return vertices, triangles


def test_clean_mesh_leaves_the_two_triangle_square():
    vertices, triangles = _messy_square()
    clean_v, clean_t = clean_mesh(vertices, triangles)
    assert torch.equal(clean_v.detach(), torch.tensor(SQUARE, dtype=torch.float64))
    assert clean_t.tolist() == [[0, 1, 2], [0, 2, 3]]
    clean_v.sum().backward()  # gradients reach the kept input vertices, one each
    assert vertices.grad[:4].eq(1).all() and vertices.grad[4:].eq(0).all()


def test_weld_with_tolerance_merges_near_vertices_only():
    vertices = torch.tensor([[0.0, 0, 0], [1e-7, 0, 0], [1e-3, 0, 0], [0, 1, 0]])
    triangles = torch.tensor([[0, 2, 3], [1, 2, 3]])
    v, t = weld_vertices(vertices, triangles, tolerance=1e-5)
    assert len(v) == 3 and t.tolist() == [[0, 1, 2], [0, 1, 2]]
    v, t = weld_vertices(vertices, triangles)
    assert len(v) == 4 and torch.equal(t, triangles)
    _, t = remove_duplicate_triangles(*weld_vertices(vertices, triangles, tolerance=1e-5))
    assert t.tolist() == [[0, 1, 2]]


def test_unreferenced_vertices_are_removed_and_triangles_renumbered():
    vertices = torch.arange(18.0).reshape(6, 3)
    v, t = remove_unreferenced_vertices(vertices, torch.tensor([[5, 1, 3]]))
    assert torch.equal(v, vertices[[1, 3, 5]]) and t.tolist() == [[2, 0, 1]]


def test_bad_meshes_are_rejected():
    vertices, triangles = _messy_square()
    with pytest.raises(ValueError, match="indices"):
        clean_mesh(vertices, triangles + 10)
    with pytest.raises(ValueError, match="NaN"):
        clean_mesh(torch.full((3, 3), float("nan")), torch.tensor([[0, 1, 2]]))
    with pytest.raises(ValueError, match="triangles"):
        clean_mesh(vertices, triangles.float())
    with pytest.raises(ValueError, match="indices"):
        check_mesh(vertices, triangles - 1)


def test_checking_a_mesh_waits_for_its_device_once():
    """The finite-values and index-range checks are read back together (on a GPU, each read
    is a host sync; the surface is checked every iteration)."""
    with DeviceWaits() as waits:
        check_mesh(*_messy_square())
    assert len(waits.calls) == 1


# --- welding and triangle removal on a triangle soup (from the former mesh/cleanup tests) ---


def _split_cube():
    """The cube with 36 unshared vertices (a triangle soup), as some exporters write it."""
    mesh = cube()
    return mesh, mesh.corner_positions().reshape(-1, 3), torch.arange(36).reshape(12, 3)


def test_exact_weld_restores_the_shared_cube():
    mesh, soup, soup_triangles = _split_cube()
    welded, triangles = weld_vertices(soup, soup_triangles)
    assert len(welded) == 8
    # Same triangles, corner for corner, as the original cube.
    torch.testing.assert_close(welded[triangles], mesh.corner_positions())
    remap = triangles.reshape(-1)  # soup vertex k is corner k
    torch.testing.assert_close(welded[remap], soup)
    # Representatives are the lowest-index members, in their original order.
    first_of_each = [remap.tolist().index(k) for k in range(8)]
    assert first_of_each == sorted(first_of_each)
    torch.testing.assert_close(welded, soup[first_of_each])


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
    welded, triangles = weld_vertices(positions, torch.tensor([[0, 2, 3], [1, 4, 5]]), tolerance)
    assert triangles.tolist() == [[0, 1, 2], [0, 2, 2]]  # remap [0, 0, 1, 2, 2, 2]
    torch.testing.assert_close(welded, positions[[0, 2, 3]])


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
    welded, triangles = weld_vertices(points, torch.arange(300).reshape(100, 3), tolerance)
    label = torch.tensor(_brute_force_clusters(points, tolerance))
    representatives, expected_remap = torch.unique(label, return_inverse=True)
    assert torch.equal(triangles.reshape(-1), expected_remap)
    torch.testing.assert_close(welded, points[representatives])
    assert len(welded) < 300  # the test exercises merging at all


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
    _, solid = remove_degenerate_triangles(positions, triangles)
    assert solid.tolist() == [[0, 1, 2], [1, 2, 0], [0, 2, 1], [0, 1, 4]]
    _, cleaned = remove_duplicate_triangles(positions, solid)
    assert cleaned.tolist() == [[0, 1, 2], [0, 1, 4]]
    # An area threshold removes small triangles too (areas here: 0.5 and 0.5).
    _, none_left = remove_degenerate_triangles(positions, triangles, min_area=0.5)
    assert none_left.shape == (0, 3)


def test_unreferenced_vertices_are_dropped():
    positions = torch.tensor([[9.0, 9, 9], [0.0, 0, 0], [1.0, 0, 0], [7.0, 7, 7], [0.0, 1, 0]])
    compact, triangles = remove_unreferenced_vertices(positions, torch.tensor([[1, 2, 4]]))
    assert triangles.tolist() == [[0, 1, 2]]
    torch.testing.assert_close(compact[triangles], positions[torch.tensor([[1, 2, 4]])])


def test_small_pieces_are_dropped_and_the_rest_kept_whole():
    """A unit cube, a floater a tenth its size (1 % of its area) and a second body half its
    size (25 %): at 5 % the floater goes, the bodies stay, their vertices renumbered."""
    big, small, half = cube(), cube(), cube()
    parts = [(big.positions, big.triangles),
             (small.positions * 0.1 + 3.0, small.triangles),
             (half.positions * 0.5 - 3.0, half.triangles)]
    vertices, triangles, offset = [], [], 0
    for positions, tris in parts:
        vertices.append(positions)
        triangles.append(tris.long() + offset)
        offset += len(positions)
    vertices, triangles = torch.cat(vertices), torch.cat(triangles)
    kept_vertices, kept_triangles = remove_small_pieces(vertices, triangles, 0.05)
    expected = len(big.triangles) + len(half.triangles)
    assert len(kept_triangles) == expected
    assert len(kept_vertices) == len(big.positions) + len(half.positions)
    assert (kept_vertices > 2).sum() == 0, "the floater around +3 is gone"
    assert (kept_vertices < -2).all(-1).sum() == len(half.positions), "the body at -3 stays"
    assert kept_triangles.max() == len(kept_vertices) - 1
    assert len(remove_small_pieces(vertices, triangles, 0.0)[1]) == len(triangles)
