"""Edges and edge-to-triangle adjacency of a triangle index buffer."""

from __future__ import annotations

import torch

from diffrec.rows import unique_rows


def unique_edges(triangles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unique undirected edges of ``triangles`` [T, 3].

    Returns ``edges`` [E, 2] int64 with ``edges[:, 0] < edges[:, 1]``, sorted
    lexicographically, and ``triangle_edges`` [T, 3]: the edge between corners ``k`` and
    ``(k + 1) % 3`` of triangle ``t`` is ``edges[triangle_edges[t, k]]``.
    """
    directed = torch.stack([triangles, triangles.roll(-1, dims=1)], dim=-1).reshape(-1, 2)
    undirected, _ = directed.sort(dim=1)
    edges, inverse = unique_rows(undirected)
    return edges, inverse.reshape(-1, 3)


def edge_triangles(triangles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Triangles on each edge: ``edges`` [E, 2] as in ``unique_edges`` and ``adjacent`` [E, K]
    int64, the triangles using each edge in increasing order, padded with -1. ``K`` is the
    largest number of triangles on one edge: 2 for a closed manifold, more where the mesh is
    non-manifold; boundary edges have one triangle and -1."""
    edges, triangle_edges = unique_edges(triangles)
    edge_of_corner = triangle_edges.reshape(-1)
    triangle_of_corner = torch.arange(
        triangles.shape[0], device=triangles.device
    ).repeat_interleave(3)
    order = torch.argsort(edge_of_corner * triangles.shape[0] + triangle_of_corner)
    sorted_edges = edge_of_corner[order]
    counts = torch.bincount(sorted_edges, minlength=edges.shape[0])
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(sorted_edges.shape[0], device=triangles.device) - starts[sorted_edges]
    adjacent = torch.full(
        (edges.shape[0], int(counts.max())), -1, dtype=torch.int64, device=triangles.device
    )
    adjacent[sorted_edges, slot] = triangle_of_corner[order]
    return edges, adjacent


def uv_seams(triangles: torch.Tensor, uv_triangles: torch.Tensor) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """The UV seams of a mesh: each edge that exactly two triangles of ``triangles`` [T, 3]
    share and map to different UVs (``uv_triangles`` [T, 3]). Returns ``side_a`` and ``side_b``
    [S, 2] int64: the UV indices of the edge's two ends as each triangle maps them, the same
    end first in both (boundary and non-manifold edges are left out)."""
    edges, adjacent = edge_triangles(triangles)
    if adjacent.shape[1] < 2:
        empty = torch.zeros(0, 2, dtype=torch.int64, device=triangles.device)
        return empty, empty
    two = (adjacent >= 0).sum(1) == 2
    edges, adjacent = edges[two], adjacent[two, :2]

    def uv_ends(triangle: torch.Tensor) -> torch.Tensor:
        corner = (triangles[triangle][:, None, :] == edges[:, :, None]).int().argmax(-1)
        return uv_triangles[triangle].gather(1, corner)

    side_a, side_b = uv_ends(adjacent[:, 0]), uv_ends(adjacent[:, 1])
    seam = (side_a != side_b).any(1)
    return side_a[seam], side_b[seam]
