"""Pass 1's surface simplified to a triangle budget before unwrapping: at most the budget,
still closed, still the same shape; left alone when it fits."""

import torch

from diffrec.geometry import DMTetGeometry
from diffrec.geometry.simplify import simplify
from diffrec.mesh.topology import unique_edges


def dmtet_sphere() -> tuple[torch.Tensor, torch.Tensor]:
    """A sphere of radius 0.6 as marching tetrahedra extract it (slivers and all)."""
    geometry = DMTetGeometry(32, 2.0)
    with torch.no_grad():
        geometry.sdf.copy_(geometry.grid_vertices.norm(dim=-1) - 0.6)
        return geometry.extract()


def test_a_surface_over_the_budget_is_simplified_and_keeps_its_shape():
    vertices, triangles = dmtet_sphere()
    assert len(triangles) > 3000
    simple_vertices, simple_triangles = simplify(vertices, triangles, 1000)
    assert 900 <= len(simple_triangles) <= 1000
    assert simple_vertices.dtype == vertices.dtype and simple_triangles.dtype == torch.int64
    radius = simple_vertices.norm(dim=-1)
    assert (radius - 0.6).abs().max() < 0.02, "the shape is kept"
    _, triangle_edges = unique_edges(simple_triangles)
    uses = torch.bincount(triangle_edges.reshape(-1))
    assert (uses == 2).all(), "closed: every edge between two triangles"


def test_a_surface_within_the_budget_or_without_one_is_left_alone():
    vertices, triangles = dmtet_sphere()
    for budget in (0, len(triangles)):
        kept_vertices, kept_triangles = simplify(vertices, triangles, budget)
        assert kept_vertices is vertices and kept_triangles is triangles
