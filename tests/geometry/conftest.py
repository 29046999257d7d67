"""Mesh checks shared by the geometry tests, as fixtures."""

from collections import Counter

import pytest
import torch


def _directed_edges(triangles):
    return Counter((a, b) for t in triangles.tolist()
                   for a, b in ((t[0], t[1]), (t[1], t[2]), (t[2], t[0])))


def signed_volume(vertices, triangles):
    v = vertices.detach().double()[triangles]
    return float((v[:, 0] * torch.linalg.cross(v[:, 1], v[:, 2], dim=-1)).sum() / 6)


def assert_closed_oriented_manifold(vertices, triangles) -> int:
    """Every edge has exactly two triangles, traversed once each way; every vertex's
    triangles form one fan (its link is a single cycle); no duplicate or zero-area triangles;
    every vertex used. Returns the Euler characteristic V - E + F."""
    directed = _directed_edges(triangles)
    assert max(directed.values()) == 1, "an edge is traversed twice in the same direction"
    assert all((b, a) in directed for a, b in directed), "an edge has only one triangle"
    assert len(torch.unique(triangles.sort(1).values, dim=0)) == len(triangles)
    following = {}  # vertex -> {a: b} for each triangle (vertex, a, b)
    for a, b, c in triangles.tolist():
        for v, x, y in ((a, b, c), (b, c, a), (c, a, b)):
            following.setdefault(v, {})[x] = y
    assert len(following) == len(vertices), "unreferenced vertex"
    for v, step in following.items():
        start = x = next(iter(step))
        length = 0
        while True:
            x, length = step[x], length + 1
            if x == start:
                break
        assert length == len(step), f"vertex {v} joins {len(step)} triangles in several fans"
    v = vertices.detach().double()[triangles]
    areas = torch.linalg.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0], dim=-1).norm(dim=-1)
    assert areas.min() > 0
    return len(vertices) - len(directed) // 2 + len(triangles)


@pytest.fixture
def mesh_checks():
    """``assert_closed_oriented_manifold`` and ``signed_volume``."""
    return assert_closed_oriented_manifold, signed_volume
