"""Differentiable marching tetrahedra on plain tensors.

Sign convention: a vertex is *inside* when its SDF is ``< 0`` and outside when ``>= 0``.
Triangles are wound counter-clockwise seen from outside, so the right-hand normal
``(v1 - v0) x (v2 - v0)`` points from negative to positive SDF (outward for an SDF that is
negative inside), given positively oriented tets.

On every edge whose endpoints differ in sign the surface vertex sits at the linear zero
crossing ``p = p_a + t (p_b - p_a)``, ``t = s_a / (s_a - s_b)``; the output vertices are
differentiable functions of the vertex positions and SDF values. There is one vertex per
crossed edge (a welded mesh), except that vertices landing on exactly the same point (an
SDF value of exactly zero puts the crossing on a grid vertex) are merged and the triangles
this collapses are dropped, so no triangle is degenerate.

The case table is built programmatically from a reference tet (no hand-written table): one
inside or one outside vertex gives one triangle, two and two give a quad, split along its
shorter diagonal.
"""

from __future__ import annotations

import numpy as np
import torch

from diffrec.geometry.cleanup import clean_mesh

# Local tet edges as pairs of local vertex indices.
TET_EDGES = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
_REFERENCE_TET = np.array([(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)], dtype=np.float64)


def _edge(a: int, b: int) -> int:
    return TET_EDGES.index((min(a, b), max(a, b)))


def _oriented(triangle: tuple[int, int, int], inside: list[int]) -> tuple[int, int, int]:
    """Wind a triangle of local edges so its normal points away from the inside vertices
    (checked on the positively oriented reference tet with crossings at edge midpoints)."""
    mid = [_REFERENCE_TET[list(TET_EDGES[e])].mean(0) for e in triangle]
    normal = np.cross(mid[1] - mid[0], mid[2] - mid[0])
    outside = [v for v in range(4) if v not in inside]
    away = _REFERENCE_TET[outside].mean(0) - _REFERENCE_TET[inside].mean(0)
    return triangle if normal @ away > 0 else (triangle[0], triangle[2], triangle[1])


def _build_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Case tables indexed by ``sum(inside_i << i)``.

    ``num_triangles [16]``; ``triangles [16, 2, 2, 3]`` local edges, per quad split variant
    (variant 0 splits along ``diagonals[case, 0]``, variant 1 along ``diagonals[case, 1]``);
    ``diagonals [16, 2, 2]`` the local edges joined by each split's diagonal. Unused: -1.
    """
    num_triangles = np.zeros(16, dtype=np.int64)
    triangles = np.full((16, 2, 2, 3), -1, dtype=np.int64)
    diagonals = np.full((16, 2, 2), -1, dtype=np.int64)
    for case in range(16):
        inside = [v for v in range(4) if case >> v & 1]
        outside = [v for v in range(4) if v not in inside]
        if len(inside) in (1, 3):
            lone, others = (inside, outside) if len(inside) == 1 else (outside, inside)
            tri = _oriented(tuple(_edge(lone[0], o) for o in others), inside)
            triangles[case, :, 0] = tri
            num_triangles[case] = 1
        elif len(inside) == 2:
            (a, b), (c, d) = inside, outside
            # The quad's corners in cyclic order: ac, ad, bd, bc.
            quad = [_edge(a, c), _edge(a, d), _edge(b, d), _edge(b, c)]
            for variant, start in enumerate((0, 1)):
                q = quad[start:] + quad[:start]
                diagonals[case, variant] = (q[0], q[2])
                triangles[case, variant, 0] = _oriented((q[0], q[1], q[2]), inside)
                triangles[case, variant, 1] = _oriented((q[0], q[2], q[3]), inside)
            num_triangles[case] = 2
    return num_triangles, triangles, diagonals


NUM_TRIANGLES, CASE_TRIANGLES, CASE_DIAGONALS = _build_tables()


def _check_inputs(vertices: torch.Tensor, sdf: torch.Tensor, tets: torch.Tensor) -> torch.Tensor:
    if vertices.ndim != 2 or vertices.shape[1] != 3 or not vertices.is_floating_point():
        raise ValueError(f"vertices must be float [V, 3], got {vertices.dtype} "
                         f"{tuple(vertices.shape)}")
    if sdf.ndim == 2 and sdf.shape[1] == 1:
        sdf = sdf[:, 0]
    if sdf.shape != vertices.shape[:1] or not sdf.is_floating_point():
        raise ValueError(f"sdf must be float [V] or [V, 1] with V={len(vertices)}, got "
                         f"{sdf.dtype} {tuple(sdf.shape)}")
    if tets.ndim != 2 or tets.shape[1] != 4 or tets.is_floating_point():
        raise ValueError(f"tets must be integer [T, 4], got {tets.dtype} {tuple(tets.shape)}")
    if not (bool(torch.isfinite(sdf).all()) and bool(torch.isfinite(vertices).all())):
        raise ValueError("vertices and sdf must be finite (found NaN or infinity)")
    if tets.numel() and (int(tets.min()) < 0 or int(tets.max()) >= len(vertices)):
        raise ValueError(f"tet indices must lie in 0..{len(vertices) - 1}")
    return sdf


def marching_tets(vertices: torch.Tensor, sdf: torch.Tensor, tets: torch.Tensor):
    """Extract the zero level set of ``sdf`` over a tet mesh as a welded triangle mesh.

    ``vertices`` float ``[V, 3]`` (possibly deformed) grid positions; ``sdf`` float ``[V]``
    (or ``[V, 1]``); ``tets`` integer ``[T, 4]``, positively oriented. Returns
    ``(surface_vertices [S, 3] in vertices' dtype, triangles int64 [F, 3])``, no UVs;
    empty tensors when the SDF has no sign change. Differentiable w.r.t. ``vertices`` and
    ``sdf``.
    """
    sdf = _check_inputs(vertices, sdf, tets)
    device = vertices.device
    edges = torch.tensor(TET_EDGES, device=device)
    with torch.no_grad():
        inside = sdf < 0
        tet_inside = inside[tets]
        count = tet_inside.sum(1)
        active = (count > 0) & (count < 4)
        tets_a, inside_a = tets[active].to(torch.int64), tet_inside[active]
        pairs = tets_a[:, edges]  # [A, 6, 2]
        crossed = inside_a[:, edges[:, 0]] != inside_a[:, edges[:, 1]]
        num_vertices = len(vertices)
        low, high = pairs.unbind(-1)
        keys = torch.minimum(low, high) * num_vertices + torch.maximum(low, high)
        unique_keys, inverse = torch.unique(keys[crossed], return_inverse=True)
        surface_index = torch.full_like(keys, -1)
        surface_index[crossed] = inverse
        ends = torch.stack((unique_keys // num_vertices, unique_keys % num_vertices), -1)

    s_a, s_b = sdf[ends[:, 0]], sdf[ends[:, 1]]
    t = (s_a / (s_a - s_b)).unsqueeze(-1)
    p_a, p_b = vertices[ends[:, 0]], vertices[ends[:, 1]]
    surface = p_a + t * (p_b - p_a)

    with torch.no_grad():
        case = (inside_a.to(torch.int64) << torch.arange(4, device=device)).sum(1)
        diag = torch.as_tensor(CASE_DIAGONALS, device=device)[case]  # [A, 2, 2]
        ends_of = surface_index.gather(1, diag.clamp(min=0).reshape(-1, 4)).reshape(-1, 2, 2)
        lengths = (surface[ends_of[..., 0]] - surface[ends_of[..., 1]]).norm(dim=-1)
        variant = (lengths[:, 1] < lengths[:, 0]).to(torch.int64)
        local = torch.as_tensor(CASE_TRIANGLES, device=device)[case, variant]  # [A, 2, 3]
        two = torch.as_tensor(NUM_TRIANGLES, device=device)[case] == 2
        first = surface_index.gather(1, local[:, 0])
        second = surface_index[two].gather(1, local[two, 1])
        triangles = torch.cat((first, second))
    if len(triangles) == 0:
        return surface, triangles
    return clean_mesh(surface, triangles)
