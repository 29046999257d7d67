"""diffrec's own tetrahedral grid: a body-centred-cubic (BCC) tetrahedralisation of a cube.

Why BCC rather than the 6-tet Kuhn/Freudenthal split of each cube: every interior BCC tet is
the same well-shaped tetrahedron (two edges of length ``h``, four of ``h*sqrt(3)/2``;
dihedral angles 60 and 90 degrees), and the lattice has no preferred diagonal. Kuhn tets are
slivers by comparison (edges 1, 1, 1, sqrt2, sqrt2, sqrt3; 45-degree dihedrals) all leaning
along one main diagonal, which shows up as direction-dependent, stretched triangles in the
marching-tets surface. Isosurface stuffing (Labelle & Shewchuk 2007) uses BCC for this reason.

Construction over ``[-0.5, 0.5]^3`` with ``N = resolution / 2`` cubic cells per axis (cell
size ``h = 1/N``): vertices are the cell corners, the cell centres and the centres of the
cube's boundary faces. For every interior face shared by two cells with centres ``c1, c2``,
the square face's four edges ``(a, b)`` give four tets ``(c1, c2, a, b)`` (they fill the
octahedron around the face). For every boundary face, with cell centre ``c`` and face centre
``f``, the four tets ``(c, f, a, b)`` fill the half octahedron, so the grid's boundary is
exactly the cube's surface and the tets fill the cube. All vertices lie on the lattice
``{-0.5 + m/resolution}``.

Sizes: ``V = (N+1)^3 + N^3 + 6N^2`` (about ``resolution^3 / 4``), ``T = 12 N^3 + 12 N^2``.
Resolution 64 has 75k vertices and 0.41M tets; 128 has 0.56M and 3.2M; 256 has 4.3M and 25M.

Grids are cached as ``.npz`` under ``$XDG_CACHE_HOME/diffrec/tets`` (default
``~/.cache/diffrec/tets``), written atomically (temporary file, fsync, rename).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from diffrec.files import atomic_writer, cache_dir

GRID_FORMAT_VERSION = 1

# The four edges of a square face, as pairs of its corners listed in cyclic order.
_SQUARE_CORNERS = ((0, 0), (1, 0), (1, 1), (0, 1))
_SQUARE_EDGES = ((0, 1), (1, 2), (2, 3), (3, 0))


@dataclass(frozen=True)
class TetGrid:
    """A conforming, positively oriented tetrahedral grid over ``[-0.5, 0.5]^3``.

    ``vertices`` float32 ``[V, 3]``; ``tets`` int64 ``[T, 4]`` with positive signed volume
    ``det(v1 - v0, v2 - v0, v3 - v0) > 0``; ``edges`` int64 ``[E, 2]``, every tet edge once,
    ``edges[:, 0] < edges[:, 1]``, rows sorted. ``resolution`` is the lattice resolution:
    vertex coordinates are multiples of ``1/resolution`` and cells have size
    ``cell_size = 2/resolution``.
    """

    vertices: torch.Tensor
    tets: torch.Tensor
    edges: torch.Tensor
    resolution: int

    @property
    def cell_size(self) -> float:
        """Edge length of the cubic cells in the unit cube (the BCC tets' long edges)."""
        return 2.0 / self.resolution

    def to(self, device: torch.device | str) -> TetGrid:
        return TetGrid(self.vertices.to(device), self.tets.to(device), self.edges.to(device),
                       self.resolution)


def _check_resolution(resolution: int) -> int:
    if isinstance(resolution, bool) or not isinstance(resolution, int | np.integer):
        raise TypeError(f"resolution must be an int, got {type(resolution).__name__}")
    if resolution < 2 or resolution % 2:
        raise ValueError(f"resolution must be an even integer >= 2, got {resolution}")
    return int(resolution)


def _place(axis: int, along: np.ndarray, u: np.ndarray, w: np.ndarray) -> tuple:
    """Put ``along`` on ``axis`` and ``u, w`` on the other two axes in increasing order."""
    others = [a for a in range(3) if a != axis]
    coords = [None, None, None]
    coords[axis], coords[others[0]], coords[others[1]] = along, u, w
    return tuple(coords)


def _unique_edge_keys(pairs: np.ndarray, num_vertices: int) -> np.ndarray:
    """Sorted unique keys ``min * V + max`` of vertex pairs ``[..., 2]``.

    Sort and compare neighbours: numpy 2.4's ``np.unique`` is many times slower on 10^7 keys.
    """
    lo, hi = np.minimum(pairs[..., 0], pairs[..., 1]), np.maximum(pairs[..., 0], pairs[..., 1])
    keys = np.sort((lo * num_vertices + hi).ravel())
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))]


def generate_bcc_grid(resolution: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Build the BCC grid (see the module docstring) without touching the cache.

    Returns ``(vertices float32 [V, 3], tets int64 [T, 4], edges int64 [E, 2])``.
    """
    resolution = _check_resolution(resolution)
    n = resolution // 2
    corner_count, centre_count = (n + 1) ** 3, n**3

    def corner(i, j, k):
        return (i * (n + 1) + j) * (n + 1) + k

    def centre(i, j, k):
        return corner_count + (i * n + j) * n + k

    def face_centre(axis, side, u, w):
        return corner_count + centre_count + ((axis * 2 + side) * n + u) * n + w

    # Integer lattice coordinates in 0..resolution: corners even, centres odd.
    ii = np.stack(np.meshgrid(*(np.arange(n + 1),) * 3, indexing="ij"), -1).reshape(-1, 3)
    cc = np.stack(np.meshgrid(*(np.arange(n),) * 3, indexing="ij"), -1).reshape(-1, 3)
    lattice = [2 * ii, 2 * cc + 1]
    uu, ww = (g.ravel() for g in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    for axis in range(3):
        for side in range(2):
            along = np.full_like(uu, side * resolution)
            lattice.append(np.stack(_place(axis, along, 2 * uu + 1, 2 * ww + 1), -1))
    lattice = np.concatenate(lattice).astype(np.int64)

    tets = []
    for axis in range(3):
        # Interior faces: between cells (.., s, ..) and (.., s+1, ..) along `axis`.
        s, u, w = (g.ravel() for g in np.meshgrid(np.arange(n - 1), np.arange(n), np.arange(n),
                                                  indexing="ij"))
        first = centre(*_place(axis, s, u, w))
        second = centre(*_place(axis, s + 1, u, w))
        square = [corner(*_place(axis, s + 1, u + du, w + dw)) for du, dw in _SQUARE_CORNERS]
        tets += [np.stack((first, second, square[a], square[b]), -1) for a, b in _SQUARE_EDGES]
        # Boundary faces: the cell's centre and the face's centre.
        for side, cell_layer in ((0, 0), (1, n - 1)):
            cell = centre(*_place(axis, np.full_like(uu, cell_layer), uu, ww))
            face = face_centre(axis, side, uu, ww)
            square = [corner(*_place(axis, np.full_like(uu, side * n), uu + du, ww + dw))
                      for du, dw in _SQUARE_CORNERS]
            tets += [np.stack((cell, face, square[a], square[b]), -1) for a, b in _SQUARE_EDGES]
    tets = np.concatenate(tets).astype(np.int64)

    # Orient every tet positively; integer determinants are exact.
    p = lattice[tets]
    det = np.einsum("ti,ti->t", p[:, 1] - p[:, 0], np.cross(p[:, 2] - p[:, 0], p[:, 3] - p[:, 0]))
    flip = det < 0
    tets[flip] = tets[flip][:, [0, 1, 3, 2]]

    num_vertices = len(lattice)
    local_pairs = np.array([(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)])
    keys = _unique_edge_keys(tets[:, local_pairs], num_vertices)
    edges = np.stack((keys // num_vertices, keys % num_vertices), -1)

    vertices = (lattice / resolution - 0.5).astype(np.float32)
    return vertices, tets, edges


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/diffrec/tets``, or ``~/.cache/diffrec/tets`` when it is unset."""
    return cache_dir("tets")


def _cache_path(cache_dir: Path, resolution: int) -> Path:
    return cache_dir / f"bcc_{resolution}_v{GRID_FORMAT_VERSION}.npz"


def _read_cached(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The cached arrays, or None when the file is missing or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            vertices, tets, edges = data["vertices"], data["tets"], data["edges"]
    except (OSError, KeyError, ValueError):
        return None
    if (vertices.dtype != np.float32 or vertices.ndim != 2 or vertices.shape[1] != 3
            or tets.ndim != 2 or tets.shape[1] != 4 or edges.ndim != 2 or edges.shape[1] != 2):
        return None
    return vertices, tets.astype(np.int64), edges.astype(np.int64)


def _write_atomically(path: Path, vertices, tets, edges) -> None:
    with atomic_writer(path) as f:
        # int32 on disk halves the file; every index is far below 2^31.
        np.savez(f, vertices=vertices, tets=tets.astype(np.int32), edges=edges.astype(np.int32))


def tet_grid(resolution: int, device: torch.device | str = "cpu",
             cache_dir: Path | str | None = None, use_cache: bool = True) -> TetGrid:
    """The BCC grid of ``resolution`` (even, >= 2) on ``device``, from the disk cache if there.

    ``cache_dir`` defaults to ``default_cache_dir()``; ``use_cache=False`` neither reads nor
    writes it. A missing or corrupt cache file is (re)generated.
    """
    resolution = _check_resolution(resolution)
    arrays = None
    if use_cache:
        path = _cache_path(Path(cache_dir) if cache_dir is not None else default_cache_dir(),
                           resolution)
        arrays = _read_cached(path)
    if arrays is None:
        arrays = generate_bcc_grid(resolution)
        if use_cache:
            _write_atomically(path, *arrays)
    vertices, tets, edges = (torch.from_numpy(a).to(device) for a in arrays)
    return TetGrid(vertices, tets, edges, resolution)
