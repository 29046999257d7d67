"""FlexiCubes (Shen et al., SIGGRAPH 2023), re-implemented from the paper on plain tensors.

Dual marching cubes on a regular grid of ``N^3`` cubes over ``[-0.5, 0.5]^3`` (scaled by
the caller), with the paper's per-cube weights:

- ``alpha [C, 8]`` (per cube corner) move the edge crossings:
  ``u_e = (s_i a_i x_j - s_j a_j x_i) / (s_i a_i - s_j a_j)``;
- ``beta [C, 12]`` (per cube edge) place each dual vertex at the ``beta``-weighted mean of its
  patch's crossings;
- ``gamma [C]`` splits each quad: in training into four triangles around
  ``(g0 g2 (v0 + v2) / 2 + g1 g3 (v1 + v3) / 2) / (g0 g2 + g1 g3)``, at extraction into two
  triangles along the diagonal with the larger ``gamma`` product.

All weights must be positive (``FlexiCubesGeometry`` keeps them in ``1 +- 0.99``).

Sign convention as in ``marching_tets``: inside is ``sdf < 0``; triangles are wound
counter-clockwise seen from outside. A crossed grid edge gives one quad joining the dual
vertices of its four cubes, so the surface is closed wherever it stays off the grid's
boundary (edges on the boundary have fewer than four cubes and give no quad: keep the SDF
positive on the boundary for a closed mesh).

Patches (the dual vertices of a cube) are generated here, not copied from a table: on each
cube face the crossed edges are joined into segments (an ambiguous face, whose inside
corners are diagonal, cuts off each inside corner by default), and the segments chain the
cube's crossed edges into loops; each loop is one patch. When the two cubes on either side of
an ambiguous face each put both of its segments into one patch, the dual mesh would have an
edge shared by four quads; those faces are resolved the other way (cutting off the outside
corners) in both cubes, which keeps the face consistent and the mesh manifold.

The paper's deviation regulariser is not included; the SDF sign-change regulariser of
``diffrec.geometry.dmtet`` applies to the grid's edges.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from diffrec.geometry.cleanup import clean_mesh
from diffrec.geometry.dmtet import initial_sphere_sdf, sdf_sign_change_loss

# Corner c of a cube sits at offset (c & 1, c >> 1 & 1, c >> 2 & 1).
CORNER_OFFSETS = tuple((c & 1, c >> 1 & 1, c >> 2 & 1) for c in range(8))
# Cube edges: 0-3 along x, 4-7 along y, 8-11 along z; each (corner, corner + axis bit).
CUBE_EDGES = tuple((c, c | 1 << axis) for axis in range(3) for c in range(8)
                   if not c & 1 << axis)
MAX_PATCHES = 4


def _face_cycles() -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """Faces ``2 * axis + side``: their corners in cyclic order and the edges between them."""
    faces = []
    for axis in range(3):
        u, w = (a for a in range(3) if a != axis)
        for side in range(2):
            corners = tuple(side << axis | du << u | dw << w
                            for du, dw in ((0, 0), (1, 0), (1, 1), (0, 1)))
            edges = tuple(CUBE_EDGES.index(tuple(sorted((corners[i], corners[(i + 1) % 4]))))
                          for i in range(4))
            faces.append((corners, edges))
    return tuple(faces)


FACES = _face_cycles()


def _patches(config: int, flips: int) -> tuple[list[int], list[bool]]:
    """Patch id per cube edge (-1 if not crossed) for a sign ``config`` (bit c: corner c
    inside) and ``flips`` (bit f: ambiguous face f cuts off its outside corners), and per face
    whether the face is ambiguous with all four crossings in one patch."""
    inside = [config >> c & 1 for c in range(8)]
    crossed = [inside[a] != inside[b] for a, b in CUBE_EDGES]
    parent = list(range(12))

    def root(e):
        while parent[e] != e:
            e = parent[e]
        return e

    for face, (corners, edges) in enumerate(FACES):
        crossed_edges = [e for e in edges if crossed[e]]
        if len(crossed_edges) == 2:
            parent[root(crossed_edges[0])] = root(crossed_edges[1])
        elif len(crossed_edges) == 4:
            cut = 0 if flips >> face & 1 else 1  # cut off inside corners unless flipped
            for i, corner in enumerate(corners):
                if inside[corner] == cut:
                    parent[root(edges[i - 1])] = root(edges[i])
    ids: dict[int, int] = {}
    patch = [ids.setdefault(root(e), len(ids)) if crossed[e] else -1 for e in range(12)]
    one_loop = [all(crossed[e] for e in edges) and len({patch[e] for e in edges}) == 1
                for _, edges in FACES]
    return patch, one_loop


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray]:
    """``patch_of_edge int64 [256, 64, 12]`` and ``face_in_one_patch bool [256, 64, 6]``."""
    patch = np.full((256, 64, 12), -1, dtype=np.int64)
    one_loop = np.zeros((256, 64, 6), dtype=bool)
    for config in range(256):
        for flips in range(64):
            patch[config, flips], one_loop[config, flips] = _patches(config, flips)
    return patch, one_loop


def cube_grid_vertices(resolution: int) -> torch.Tensor:
    """The ``(N+1)^3`` lattice vertices over ``[-0.5, 0.5]^3``, float32 ``[(N+1)^3, 3]``, in
    order ``(i * (N+1) + j) * (N+1) + k``."""
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 1:
        raise ValueError(f"resolution must be a positive int, got {resolution!r}")
    axis = torch.arange(resolution + 1, dtype=torch.float64) / resolution - 0.5
    grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), -1)
    return grid.reshape(-1, 3).float()


def cube_grid_edges(resolution: int) -> torch.Tensor:
    """All lattice edges as vertex pairs, int64 ``[3 N (N+1)^2, 2]``."""
    n1 = resolution + 1
    index = torch.arange(n1**3).reshape(n1, n1, n1)
    pairs = [torch.stack((index[:-1].reshape(-1), index[1:].reshape(-1)), -1),
             torch.stack((index[:, :-1].reshape(-1), index[:, 1:].reshape(-1)), -1),
             torch.stack((index[:, :, :-1].reshape(-1), index[:, :, 1:].reshape(-1)), -1)]
    return torch.cat(pairs)


def _cube_corner_offsets(resolution: int, device) -> torch.Tensor:
    """Vertex index offset of each cube corner from the cube's corner 0, int64 ``[8]``."""
    n1 = resolution + 1
    return torch.tensor([(x * n1 + y) * n1 + z for x, y, z in CORNER_OFFSETS], device=device)


def _check_inputs(resolution, vertices, sdf, alpha, beta, gamma):
    num_vertices, num_cubes = (resolution + 1) ** 3, resolution**3
    expected = {"vertices": (vertices, (num_vertices, 3)), "sdf": (sdf, (num_vertices,)),
                "alpha": (alpha, (num_cubes, 8)), "beta": (beta, (num_cubes, 12)),
                "gamma": (gamma, (num_cubes,))}
    for name, (tensor, shape) in expected.items():
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor)
            raise ValueError(f"{name} must have shape {shape} for resolution {resolution}, "
                             f"got {got}")
        if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name} must be a finite float tensor")
    for name, weights in (("alpha", alpha), ("beta", beta), ("gamma", gamma)):
        if not bool((weights > 0).all()):
            raise ValueError(f"{name} weights must be positive")


def _resolve_patches(config, cube_index, slot, n, device):
    """Patch ids ``[A, 12]`` of the active cubes, with ambiguous faces flipped where both of
    their cubes would join the face's two segments (see the module docstring). ``slot [N^3]``
    maps a cube to its row among the active cubes (-1 if inactive)."""
    patch_table, one_loop_table = (torch.as_tensor(t, device=device) for t in _tables())
    ijk = torch.stack((cube_index // (n * n), cube_index // n % n, cube_index % n), -1)
    flips = torch.zeros_like(cube_index)
    for _ in range(8):
        one_loop = one_loop_table[config, flips]  # [A, 6]
        fixes = 0
        for axis in range(3):
            # Face (axis, side 1) of cube A is face (axis, side 0) of its neighbour B.
            has_next = ijk[:, axis] < n - 1
            neighbour = cube_index + has_next * (n * n, n, 1)[axis]
            b = slot[neighbour]
            both = has_next & (b >= 0) & one_loop[:, 2 * axis + 1]
            both &= one_loop[b.clamp(min=0), 2 * axis]
            a_fix, b_fix = torch.nonzero(both).squeeze(1), b[both]
            flips[a_fix] ^= 1 << (2 * axis + 1)
            flips[b_fix] ^= 1 << (2 * axis)
            fixes += len(a_fix)
        if fixes == 0:
            return patch_table[config, flips]
    raise RuntimeError("FlexiCubes could not resolve ambiguous faces into a manifold mesh")


def flexicubes(vertices: torch.Tensor, sdf: torch.Tensor, resolution: int,
               alpha: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor,
               training: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Extract the FlexiCubes surface of ``sdf`` on a (deformed) cube grid.

    ``vertices`` float ``[(N+1)^3, 3]`` in ``cube_grid_vertices`` order (possibly deformed);
    ``sdf`` float ``[(N+1)^3]``; cube ``(i, j, k)`` (index ``(i N + j) N + k``) has weights
    ``alpha [N^3, 8]``, ``beta [N^3, 12]``, ``gamma [N^3]``, all positive. ``training``
    selects the four-triangle quad split (every weight gets gradients) over the two-triangle
    one. Returns ``(vertices [S, 3], triangles int64 [F, 3])``, differentiable w.r.t.
    ``vertices``, ``sdf`` and the weights; empty when there is no sign change.
    """
    _check_inputs(resolution, vertices, sdf, alpha, beta, gamma)
    device, n, n1 = vertices.device, resolution, resolution + 1
    corner_offsets = _cube_corner_offsets(n, device)
    cube_edges = torch.tensor(CUBE_EDGES, device=device)
    with torch.no_grad():
        inside = (sdf < 0).reshape(n1, n1, n1)
        config = torch.zeros((n, n, n), dtype=torch.int64, device=device)
        for c, (x, y, z) in enumerate(CORNER_OFFSETS):
            config |= inside[x:x + n, y:y + n, z:z + n].to(torch.int64) << c
        config = config.reshape(-1)
        cube_index = torch.nonzero((config > 0) & (config < 255)).squeeze(1)
        config = config[cube_index]
        slot = torch.full((n**3,), -1, dtype=torch.int64, device=device)
        slot[cube_index] = torch.arange(len(cube_index), device=device)
        patch = _resolve_patches(config, cube_index, slot, n, device)  # [A, 12]
        ijk = torch.stack((cube_index // (n * n), cube_index // n % n, cube_index % n), -1)
        corner0 = (ijk[:, 0] * n1 + ijk[:, 1]) * n1 + ijk[:, 2]
        corners = corner0[:, None] + corner_offsets  # [A, 8] vertex ids
        crossed = patch >= 0
        cube_of, edge_of = torch.nonzero(crossed, as_tuple=True)

    # Edge crossings, alpha-weighted per cube.
    ends = corners[cube_of[:, None], cube_edges[edge_of]]  # [X, 2]
    weights = alpha[cube_index[cube_of][:, None], cube_edges[edge_of]]
    sa = sdf[ends] * weights  # [X, 2]
    x_i, x_j = vertices[ends[:, 0]], vertices[ends[:, 1]]
    crossing = (sa[:, :1] * x_j - sa[:, 1:] * x_i) / (sa[:, :1] - sa[:, 1:])
    # Dual vertices: beta-weighted mean of each patch's crossings.
    b = beta[cube_index[cube_of], edge_of].unsqueeze(-1)
    dual_slot = cube_of * MAX_PATCHES + patch[cube_of, edge_of]
    size = len(cube_index) * MAX_PATCHES
    sums = torch.zeros(size, 3, dtype=vertices.dtype, device=device).index_add(
        0, dual_slot, b * crossing)
    totals = torch.zeros(size, 1, dtype=vertices.dtype, device=device).index_add(0, dual_slot, b)
    with torch.no_grad():
        used = totals[:, 0] > 0
        dual_id = torch.cumsum(used, 0) - 1
    dual = sums[used] / totals[used]

    quads, quad_cubes = _quads(inside, patch, slot, n, dual_id)
    if len(quads) == 0:
        return dual[:0], quads[:, :3]
    g = gamma[quad_cubes]  # [Q, 4]
    if training:
        v = dual[quads]
        w02, w13 = (g[:, 0] * g[:, 2]).unsqueeze(-1), (g[:, 1] * g[:, 3]).unsqueeze(-1)
        centre = (w02 * (v[:, 0] + v[:, 2]) + w13 * (v[:, 1] + v[:, 3])) / (2 * (w02 + w13))
        centre_id = len(dual) + torch.arange(len(quads), device=device)
        triangles = torch.cat([torch.stack((quads[:, i], quads[:, (i + 1) % 4], centre_id), -1)
                               for i in range(4)])
        return clean_mesh(torch.cat((dual, centre)), triangles)
    with torch.no_grad():
        along_02 = (g[:, 0] * g[:, 2] >= g[:, 1] * g[:, 3]).unsqueeze(-1)
        split_02 = torch.cat((quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]), -1)
        split_13 = torch.cat((quads[:, [0, 1, 3]], quads[:, [1, 2, 3]]), -1)
        triangles = torch.where(along_02, split_02, split_13).reshape(-1, 3)
    return clean_mesh(dual, triangles)


def _quads(inside, patch, slot, n, dual_id):
    """One quad per crossed interior grid edge, wound outwards: dual ids ``[Q, 4]`` and the
    cube of each corner ``[Q, 4]``."""
    quads, quad_cubes = [], []
    with torch.no_grad():
        for axis in range(3):
            u, w = (a for a in range(3) if a != axis)
            lo = inside.narrow(axis, 0, n)
            hi = inside.narrow(axis, 1, n)
            start = torch.nonzero(lo != hi)  # lattice (i, j, k) of the edge's lower end
            interior = ((start[:, u] > 0) & (start[:, u] < n) & (start[:, w] > 0)
                        & (start[:, w] < n))
            start = start[interior]
            corners, cubes = [], []
            # Cubes around the edge, counter-clockwise in (u, w) seen from +axis.
            for du, dw in ((1, 1), (0, 1), (0, 0), (1, 0)):
                cube = start.clone()
                cube[:, u] -= du
                cube[:, w] -= dw
                cube_id = (cube[:, 0] * n + cube[:, 1]) * n + cube[:, 2]
                local_corner = du << u | dw << w
                local_edge = CUBE_EDGES.index((local_corner, local_corner | 1 << axis))
                a = slot[cube_id]
                corners.append(dual_id[a * MAX_PATCHES + patch[a, local_edge]])
                cubes.append(cube_id)
            quad = torch.stack(corners, -1)
            # Outward: +axis when the lower end is inside; (axis, u, w) is left-handed for y.
            lower_inside = lo[tuple(start.T)]
            reverse = lower_inside if axis == 1 else ~lower_inside
            quad = torch.where(reverse.unsqueeze(-1), quad.flip(-1), quad)
            cube_ids = torch.stack(cubes, -1)
            quads.append(quad)
            quad_cubes.append(torch.where(reverse.unsqueeze(-1), cube_ids.flip(-1), cube_ids))
    return torch.cat(quads), torch.cat(quad_cubes)


class FlexiCubesGeometry(nn.Module):
    """Trainable SDF, deformation and FlexiCubes weights on an ``N^3`` cube grid spanning
    ``[-scale/2, scale/2]^3``.

    Initialisation as ``DMTetGeometry``: a sphere of radius ``init_radius * scale`` plus
    Gaussian noise of ``init_noise`` cells; deformations bounded by ``deform_fraction`` of a
    cell through ``tanh``; weights ``1 + 0.99 tanh(raw)`` with ``raw = 0`` (plain dual
    marching cubes at the start).
    """

    def __init__(self, grid_res: int, scale: float, device: torch.device | str = "cpu", *,
                 init_radius: float = 0.25, init_noise: float = 0.05,
                 deform_fraction: float = 0.25, generator: torch.Generator | None = None):
        super().__init__()
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        if not 0 < init_radius < 0.5 or deform_fraction < 0:
            raise ValueError("need 0 < init_radius < 0.5 and deform_fraction >= 0")
        self.grid_res, self.scale = grid_res, float(scale)
        cell = self.scale / grid_res
        self.max_deformation = deform_fraction * cell
        grid = cube_grid_vertices(grid_res).to(device) * self.scale
        self.register_buffer("grid_vertices", grid, persistent=False)
        self.register_buffer("edges", cube_grid_edges(grid_res).to(device), persistent=False)
        self.sdf = nn.Parameter(initial_sphere_sdf(grid, init_radius * self.scale,
                                                   init_noise * cell, generator))
        self.deform = nn.Parameter(torch.zeros_like(grid))
        num_cubes = grid_res**3
        self.alpha_raw = nn.Parameter(torch.zeros(num_cubes, 8, device=device))
        self.beta_raw = nn.Parameter(torch.zeros(num_cubes, 12, device=device))
        self.gamma_raw = nn.Parameter(torch.zeros(num_cubes, device=device))

    def deformed_vertices(self) -> torch.Tensor:
        return self.grid_vertices + self.max_deformation * torch.tanh(self.deform)

    def extract(self, training: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The surface ``(vertices [S, 3], triangles int64 [F, 3])``; ``training`` defaults to
        the module's mode (four-triangle split while training)."""
        def weight(raw):
            return 1.0 + 0.99 * torch.tanh(raw)

        return flexicubes(self.deformed_vertices(), self.sdf, self.grid_res,
                          weight(self.alpha_raw), weight(self.beta_raw), weight(self.gamma_raw),
                          training=self.training if training is None else training)

    def sdf_regularizer(self) -> torch.Tensor:
        """``sdf_sign_change_loss`` over the grid's edges (scalar)."""
        return sdf_sign_change_loss(self.sdf, self.edges)
