"""Mesh cleanup: welding, degenerate and duplicate triangles, unreferenced vertices."""

import pytest
import torch

from diffrec.geometry.cleanup import (
    clean_mesh,
    remove_duplicate_triangles,
    remove_unreferenced_vertices,
    weld_vertices,
)

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
