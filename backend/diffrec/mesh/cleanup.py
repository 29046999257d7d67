"""Welding coincident vertices and removing degenerate or duplicate triangles."""

from __future__ import annotations

import torch

from diffrec.errors import UserError
from diffrec.mesh.mesh import Mesh
from diffrec.mesh.normals import face_normals
from diffrec.rows import unique_rows

_NEIGHBOUR_OFFSETS = torch.cartesian_prod(*[torch.tensor([-1, 0, 1])] * 3)  # [27, 3]


def weld_vertices(mesh: Mesh, tolerance: float = 0.0) -> tuple[Mesh, torch.Tensor]:
    """Merge positions closer than ``tolerance`` (Euclidean; 0 = exactly equal).

    Clusters are the connected components of the graph "distance <= tolerance" (so chains
    merge transitively); each keeps the position of its lowest-index vertex, and the new
    vertices keep the order of those representatives. Only ``positions``/``triangles`` change:
    UV, normal and tangent index buffers are untouched. Triangles may become degenerate;
    follow with ``remove_degenerate_triangles``.
    Returns the mesh and ``remap`` [V] int64 (old vertex index -> new vertex index).
    """
    if not tolerance >= 0.0:
        raise UserError(f"weld tolerance must be >= 0, got {tolerance}")
    positions = mesh.positions.detach()
    if tolerance == 0.0:
        _, group = unique_rows(positions)
        first = torch.full_like(group[: int(group.max()) + 1], positions.shape[0])
        first = first.scatter_reduce(0, group, _arange(positions), "amin")
        label = first[group]
    else:
        label = _connected_labels(positions.shape[0], *_close_pairs(positions, tolerance))
    representatives, remap = torch.unique(label, return_inverse=True)
    positions = mesh.positions[representatives]
    return mesh.replace(positions=positions, triangles=remap[mesh.triangles]), remap


def remove_degenerate_triangles(mesh: Mesh, min_area: float = 0.0) -> tuple[Mesh, torch.Tensor]:
    """Drop triangles that repeat a vertex index, have area <= ``min_area``, or repeat an
    earlier triangle's vertex set (in any order or winding; the first one stays).

    All index buffers are filtered alike. Returns the mesh and ``keep`` [T] bool.
    Raises ``UserError`` if no triangle is left.
    """
    tri = mesh.triangles
    distinct = (tri[:, 0] != tri[:, 1]) & (tri[:, 1] != tri[:, 2]) & (tri[:, 0] != tri[:, 2])
    area = 0.5 * face_normals(mesh.positions.detach(), tri, unit=False).norm(dim=-1)
    keep = distinct & (area > min_area)
    _, group = unique_rows(tri.sort(dim=1).values)
    first = torch.full_like(group, tri.shape[0]).scatter_reduce(0, group, _arange(tri), "amin")
    keep &= first[group] == _arange(tri)
    if not keep.any():
        raise UserError("every triangle of the mesh is degenerate or duplicate")
    changes = {
        name: getattr(mesh, name)[keep]
        for name in ("triangles", "uv_triangles", "normal_triangles", "tangent_triangles")
        if getattr(mesh, name) is not None
    }
    return mesh.replace(**changes), keep


def remove_unreferenced_vertices(mesh: Mesh) -> tuple[Mesh, torch.Tensor]:
    """Drop positions no triangle uses. Returns the mesh and ``remap`` [V] int64 (-1 where
    dropped)."""
    used = torch.zeros(mesh.num_vertices, dtype=torch.bool, device=mesh.device)
    used[mesh.triangles.reshape(-1)] = True
    remap = torch.cumsum(used, 0) - 1
    remap[~used] = -1
    return mesh.replace(positions=mesh.positions[used], triangles=remap[mesh.triangles]), remap


def _arange(like: torch.Tensor) -> torch.Tensor:
    return torch.arange(like.shape[0], device=like.device)


def _close_pairs(positions: torch.Tensor, tolerance: float) -> tuple[torch.Tensor, torch.Tensor]:
    """All index pairs (i, j), i != j, with |p_i - p_j| <= tolerance, found through a grid of
    cells of side ``tolerance``: close points lie in the same or in neighbouring cells."""
    cells = torch.floor(positions.double() / tolerance).long()
    table, cell_of_point = unique_rows(cells)
    order = torch.argsort(cell_of_point)
    counts = torch.bincount(cell_of_point, minlength=table.shape[0])
    starts = torch.cumsum(counts, 0) - counts
    firsts, seconds = [], []
    for offset in _NEIGHBOUR_OFFSETS.to(positions.device):
        # Find each point's neighbour cell in the table through a joint unique of both.
        queries = torch.cat([table, cells + offset])
        joint, inverse = unique_rows(queries)
        table_index = torch.full((joint.shape[0],), -1, dtype=torch.int64, device=cells.device)
        table_index[inverse[: table.shape[0]]] = _arange(table)
        neighbour = table_index[inverse[table.shape[0] :]]
        point = torch.nonzero(neighbour >= 0).squeeze(1)
        cell = neighbour[point]
        repeats = counts[cell]
        within = _arange(repeats.repeat_interleave(repeats))
        within -= (torch.cumsum(repeats, 0) - repeats).repeat_interleave(repeats)
        firsts.append(point.repeat_interleave(repeats))
        seconds.append(order[starts[cell].repeat_interleave(repeats) + within])
    first, second = torch.cat(firsts), torch.cat(seconds)
    distance = (positions.double()[first] - positions.double()[second]).norm(dim=-1)
    close = (distance <= tolerance) & (first != second)
    return first[close], second[close]


def _connected_labels(count: int, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Label each of ``count`` nodes with the smallest node index of its connected component."""
    label = torch.arange(count, device=first.device)
    while True:
        updated = label.scatter_reduce(0, first, label[second], "amin")
        updated = updated[updated]  # pointer jumping: follow labels to their own labels
        if torch.equal(updated, label):
            return label
        label = updated
