"""Pass 1's surface simplified to a triangle budget before unwrapping: at most the budget,
still closed, still the same shape; left alone when it fits."""

import fast_simplification
import numpy as np
import pytest
import torch

from diffrec.errors import UserError
from diffrec.geometry import DMTetGeometry
from diffrec.geometry.simplify import simplify
from diffrec.mesh.primitives import uv_sphere
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


def bumpy_grid(columns: int, rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An open ``columns`` x ``rows`` grid of the unit square, two triangles a cell, its
    heights random (standard deviation 0.1)."""
    heights = np.random.default_rng(seed).normal(size=(rows + 1) * (columns + 1))
    y, x = torch.meshgrid(torch.linspace(0, 1, rows + 1), torch.linspace(0, 1, columns + 1),
                          indexing="ij")
    vertices = torch.stack([x.reshape(-1), y.reshape(-1),
                            0.1 * torch.from_numpy(heights).float()], -1)
    corner = (torch.arange(rows)[:, None] * (columns + 1) + torch.arange(columns)).reshape(-1)
    quads = torch.stack([corner, corner + 1, corner + columns + 2, corner + columns + 1], -1)
    return vertices, torch.cat([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])


def test_the_budget_is_a_bound_where_the_package_stops_above_its_target():
    """fast-simplification's target_count is a target: on this grid it keeps 31 triangles
    when asked for 30 or 20; ``simplify`` collapses again until the budget holds."""
    vertices, triangles = bumpy_grid(32, 23, seed=1)
    for budget in (30, 20):
        _, package = fast_simplification.simplify(vertices.double().numpy(), triangles.numpy(),
                                                   target_count=budget)
        assert len(package) > budget, "the case this test is about: the package overshoots"
        _, simple = simplify(vertices, triangles, budget)
        assert 0 < len(simple) <= budget


@pytest.mark.parametrize("budget", [7, 50, 333, 1000, 2999])
def test_no_mesh_comes_back_over_its_budget(budget):
    meshes = [dmtet_sphere(), bumpy_grid(32, 23, seed=0), bumpy_grid(40, 30, seed=2),
              (uv_sphere(48, 24).positions, uv_sphere(48, 24).triangles)]
    for vertices, triangles in meshes:
        _, simple = simplify(vertices, triangles, budget)
        assert len(simple) <= budget
        assert len(simple) >= min(len(triangles), budget) // 2, "not far below it either"


def test_a_budget_collapse_cannot_reach_is_refused_with_a_sentence():
    vertices, triangles = bumpy_grid(32, 23, seed=1)  # collapses stop at 5 triangles
    with pytest.raises(UserError, match=r"the mesh's 1,472 triangles cannot be simplified to 3: "
                                        r"edge collapse stops at 5 .* allow at least 5 "
                                        r"triangles"):
        simplify(vertices, triangles, 3)


def test_a_mesh_that_collapses_to_nothing_is_refused_not_returned_empty():
    """Triangles of no area are all cleaned away: a sentence, not an empty mesh."""
    degenerate = torch.arange(30).reshape(10, 3)
    with pytest.raises(UserError, match="collapse to none at a budget of 5"):
        simplify(torch.zeros(30, 3), degenerate, 5)
