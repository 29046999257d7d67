"""Mesh cleanup on plain tensors: weld vertices, drop degenerate and duplicate triangles,
remove unreferenced vertices, drop small disconnected pieces.

Every function takes and returns ``vertices`` float ``[V, 3]`` and ``triangles`` int64
``[T, 3]`` on the same device. Kept vertices are gathered (``vertices[index]``), never
recomputed, so gradients flow from the output vertices to the input ones. Vertex and
triangle order follow the input (first occurrences win).
"""

from __future__ import annotations

import torch

from diffrec.rows import unique_rows

_NEIGHBOUR_OFFSETS = torch.cartesian_prod(*[torch.tensor([-1, 0, 1])] * 3)  # [27, 3]


def check_mesh(vertices: torch.Tensor, triangles: torch.Tensor) -> None:
    """Raise ``ValueError``/``TypeError`` unless ``vertices``/``triangles`` form a valid mesh."""
    if not isinstance(vertices, torch.Tensor) or not isinstance(triangles, torch.Tensor):
        raise TypeError("vertices and triangles must be torch tensors")
    if vertices.ndim != 2 or vertices.shape[1] != 3 or not vertices.is_floating_point():
        raise ValueError(f"vertices must be float [V, 3], got {vertices.dtype} "
                         f"{tuple(vertices.shape)}")
    if triangles.ndim != 2 or triangles.shape[1] != 3 or triangles.is_floating_point():
        raise ValueError(f"triangles must be integer [T, 3], got {triangles.dtype} "
                         f"{tuple(triangles.shape)}")
    flags = [~torch.isfinite(vertices).all()]
    if triangles.numel():
        lowest, highest = torch.aminmax(triangles)
        flags.append((lowest < 0) | (highest >= len(vertices)))
    not_finite, *out_of_range = torch.stack(flags).tolist()  # one wait for the device
    if not_finite:
        raise ValueError("vertices contain NaN or infinite values")
    if any(out_of_range):
        raise ValueError(f"triangle indices must lie in 0..{len(vertices) - 1}")


def _first_occurrence_groups(inverse: torch.Tensor, num_groups: int):
    """For group labels ``inverse [N]``: the first member of each group, ordered by first
    appearance, and each item's new label in that order."""
    index = torch.arange(len(inverse), device=inverse.device)
    first = torch.full((num_groups,), len(inverse), dtype=torch.int64, device=inverse.device)
    first = first.scatter_reduce(0, inverse, index, reduce="amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(num_groups, device=inverse.device)
    return first[order], rank[inverse]


def weld_vertices(vertices: torch.Tensor, triangles: torch.Tensor, tolerance: float = 0.0):
    """Merge vertices closer than ``tolerance`` (Euclidean, in the vertices' units; 0 merges
    exactly equal positions).

    Clusters are the connected components of the graph "distance <= tolerance", so chains
    merge transitively; each keeps its lowest-index vertex, and the kept vertices keep the
    input's order. Triangles may become degenerate: follow with
    ``remove_degenerate_triangles`` (or use ``clean_mesh``).
    """
    check_mesh(vertices, triangles)
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if len(vertices) == 0:
        return vertices, triangles.to(torch.int64)
    key = vertices.detach()
    if tolerance == 0:
        _, inverse = unique_rows(key)
        keep, new_index = _first_occurrence_groups(inverse, int(inverse.max()) + 1)
    else:
        label = _connected_labels(len(key), *_close_pairs(key, tolerance))
        keep, new_index = torch.unique(label, return_inverse=True)
    return vertices[keep], new_index[triangles.to(torch.int64)]


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


def _piece_labels(count: int, triangles: torch.Tensor) -> torch.Tensor:
    """Each triangle's connected piece (triangles sharing vertices), labelled by the smallest
    vertex index in it; ``count`` vertices."""
    first = triangles[:, [0, 1, 2]].reshape(-1)
    second = triangles[:, [1, 2, 0]].reshape(-1)
    both = (torch.cat([first, second]), torch.cat([second, first]))
    return _connected_labels(count, *both)[triangles[:, 0]]


def piece_count(vertices: torch.Tensor, triangles: torch.Tensor) -> int:
    """How many connected pieces the mesh has: triangles sharing a position (seams welded)
    are one piece."""
    vertices, triangles = weld_vertices(vertices, triangles.to(torch.int64))
    if len(triangles) == 0:
        return 0
    return len(torch.unique(_piece_labels(len(vertices), triangles)))


def triangle_areas(vertices: torch.Tensor, triangles: torch.Tensor) -> torch.Tensor:
    """Areas ``[T]`` of the triangles, in the vertices' units squared."""
    v0, v1, v2 = (vertices[triangles[:, i]] for i in range(3))
    return 0.5 * torch.linalg.cross(v1 - v0, v2 - v0, dim=-1).norm(dim=-1)


def remove_degenerate_triangles(vertices: torch.Tensor, triangles: torch.Tensor,
                                min_area: float = 0.0):
    """Drop triangles that repeat a vertex index or whose area is ``<= min_area``."""
    check_mesh(vertices, triangles)
    triangles = triangles.to(torch.int64)
    t = triangles
    distinct = (t[:, 0] != t[:, 1]) & (t[:, 1] != t[:, 2]) & (t[:, 2] != t[:, 0])
    with torch.no_grad():
        keep = distinct & (triangle_areas(vertices, t) > min_area)
    return vertices, triangles[keep]


def remove_duplicate_triangles(vertices: torch.Tensor, triangles: torch.Tensor):
    """Keep the first of the triangles that use the same three vertices (either orientation)."""
    check_mesh(vertices, triangles)
    triangles = triangles.to(torch.int64)
    if len(triangles) == 0:
        return vertices, triangles
    _, inverse = unique_rows(torch.sort(triangles, dim=1).values)
    keep, _ = _first_occurrence_groups(inverse, int(inverse.max()) + 1)
    return vertices, triangles[torch.sort(keep).values]


def remove_unreferenced_vertices(vertices: torch.Tensor, triangles: torch.Tensor):
    """Drop vertices no triangle uses and renumber the triangles."""
    check_mesh(vertices, triangles)
    triangles = triangles.to(torch.int64)
    used = torch.zeros(len(vertices), dtype=torch.bool, device=vertices.device)
    used[triangles.reshape(-1)] = True
    new_index = torch.cumsum(used, 0) - 1
    return vertices[used], new_index[triangles]


def clean_mesh(vertices: torch.Tensor, triangles: torch.Tensor, weld_tolerance: float = 0.0,
               min_area: float = 0.0):
    """Weld, then drop degenerate and duplicate triangles, then unreferenced vertices."""
    vertices, triangles = weld_vertices(vertices, triangles, weld_tolerance)
    vertices, triangles = remove_degenerate_triangles(vertices, triangles, min_area)
    vertices, triangles = remove_duplicate_triangles(vertices, triangles)
    return remove_unreferenced_vertices(vertices, triangles)


def remove_small_pieces(vertices: torch.Tensor, triangles: torch.Tensor,
                        min_fraction: float = 0.05):
    """Drop the connected pieces (triangles sharing vertices) whose area is below
    ``min_fraction`` of the largest piece's: floaters left by pass 1. Unreferenced vertices
    are dropped too."""
    check_mesh(vertices, triangles)
    triangles = triangles.to(torch.int64)
    if len(triangles) == 0:
        return remove_unreferenced_vertices(vertices, triangles)
    piece = _piece_labels(len(vertices), triangles)
    with torch.no_grad():
        area = torch.zeros(len(vertices), dtype=vertices.dtype, device=vertices.device)
        area.index_add_(0, piece, triangle_areas(vertices, triangles))
    keep = area[piece] >= min_fraction * area.max()
    return remove_unreferenced_vertices(vertices, triangles[keep])
