"""Edges and edge-to-triangle adjacency against brute-force references."""

import torch

from diffrec.mesh import edge_triangles, unique_edges, uv_seams
from diffrec.mesh.primitives import cube, plane, uv_sphere


def _reference_adjacency(triangles):
    """{(a, b) with a < b: sorted list of triangles using that edge}, by plain Python."""
    table = {}
    for t, tri in enumerate(triangles.tolist()):
        for k in range(3):
            a, b = sorted((tri[k], tri[(k + 1) % 3]))
            table.setdefault((a, b), []).append(t)
    return table


def _check_against_reference(triangles):
    edges, adjacent = edge_triangles(triangles)
    reference = _reference_adjacency(triangles)
    assert [tuple(e) for e in edges.tolist()] == sorted(reference)
    for edge, row in zip(edges.tolist(), adjacent.tolist(), strict=True):
        used = reference[tuple(edge)]
        assert row == used + [-1] * (len(row) - len(used))
    return edges, adjacent


def test_cube_is_a_closed_manifold():
    mesh = cube()
    edges, adjacent = _check_against_reference(mesh.triangles)
    assert edges.shape[0] == 18  # 12 cube edges + 6 face diagonals
    assert adjacent.shape[1] == 2 and (adjacent >= 0).all()
    assert mesh.num_vertices - edges.shape[0] + mesh.num_triangles == 2  # Euler characteristic


def test_triangle_edges_name_each_triangles_own_edges():
    mesh = uv_sphere(8, 5)
    edges, triangle_edges = unique_edges(mesh.triangles)
    corners = torch.stack([mesh.triangles, mesh.triangles.roll(-1, dims=1)], -1)
    torch.testing.assert_close(edges[triangle_edges], corners.sort(-1).values)


def test_boundary_and_non_manifold_edges():
    # Two triangles share edge (0, 1) with a third: a fin; all other edges are boundary.
    triangles = torch.tensor([[0, 1, 2], [1, 0, 3], [0, 1, 4]])
    edges, adjacent = _check_against_reference(triangles)
    assert adjacent.shape[1] == 3
    assert adjacent[edges.tolist().index([0, 1])].tolist() == [0, 1, 2]


def test_random_soup_matches_reference():
    generator = torch.Generator().manual_seed(1)
    triangles = torch.stack([torch.randperm(12, generator=generator)[:3] for _ in range(40)])
    _check_against_reference(triangles)


def _reference_seams(triangles, uv_triangles):
    """{((uv a, uv b), (uv a', uv b'))} of edges on exactly two triangles whose UV ends differ,
    ends in increasing position index, by plain Python."""
    corners = {}
    for tri, uvs in zip(triangles.tolist(), uv_triangles.tolist(), strict=True):
        for k in range(3):
            ends = sorted([(tri[k], uvs[k]), (tri[(k + 1) % 3], uvs[(k + 1) % 3])])
            corners.setdefault((ends[0][0], ends[1][0]), []).append((ends[0][1], ends[1][1]))
    return {tuple(sides) for sides in corners.values() if len(sides) == 2 and sides[0] != sides[1]}


def _seams(triangles, uv_triangles):
    side_a, side_b = uv_seams(triangles, uv_triangles)
    return {(tuple(a), tuple(b)) for a, b in zip(side_a.tolist(), side_b.tolist(), strict=True)}


def test_uv_seams_are_the_shared_edges_the_two_triangles_map_apart():
    square = torch.tensor([[0, 1, 2], [0, 2, 3]])
    assert _seams(square, square) == set(), "one chart: no seam"
    # the second triangle maps its corners to UVs of its own: the shared edge 0-2 is a seam,
    # vertex 0 first on both sides; the outer edges have one triangle each and are not
    assert _seams(square, torch.tensor([[0, 1, 2], [4, 5, 6]])) == {((0, 2), (4, 5))}
    fan = torch.tensor([[0, 1, 2], [0, 2, 3], [0, 2, 4]])  # edge 0-2 on three triangles
    assert _seams(fan, torch.arange(9).reshape(3, 3)) == set(), "non-manifold: not a seam"
    sphere = uv_sphere(6, 12)  # split along one meridian and at its poles
    assert _seams(sphere.triangles, sphere.uv_triangles) == _reference_seams(
        sphere.triangles, sphere.uv_triangles) != set()
    flat = plane()
    assert _seams(flat.triangles, flat.uv_triangles) == set()
