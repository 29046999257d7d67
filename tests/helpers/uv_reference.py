"""Brute-force UV-space references for the unwrap and bake tests (numpy, float64): which
triangle contains each texel centre, and where that is on the mesh."""

import numpy as np


def texel_centres(resolution: int) -> np.ndarray:
    """UV of every texel centre, [R, R, 2], rows top-down (row 0 is v = 1)."""
    index = (np.arange(resolution) + 0.5) / resolution
    v, u = np.meshgrid(1.0 - index, index, indexing="ij")
    return np.stack([u, v], -1)


def barycentrics(points: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """Barycentric coordinates of points [P, 2] in triangles [T, 3, 2]: [P, T, 3]."""
    a, b, c = (corners[None, :, k].astype(np.float64) for k in range(3))
    p = points[:, None].astype(np.float64)
    v0, v1, v2 = b - a, c - a, p - a
    det = v0[..., 0] * v1[..., 1] - v0[..., 1] * v1[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        w1 = (v2[..., 0] * v1[..., 1] - v2[..., 1] * v1[..., 0]) / det
        w2 = (v0[..., 0] * v2[..., 1] - v0[..., 1] * v2[..., 0]) / det
    return np.stack([1 - w1 - w2, w1, w2], -1)


def cover_counts(uvs, uv_triangles, resolution: int, margin: float = 1e-6) -> np.ndarray:
    """How many UV triangles strictly contain each texel centre (barycentrics > ``margin``),
    [R, R] rows top-down."""
    points = texel_centres(resolution).reshape(-1, 2)
    bary = barycentrics(points, np.asarray(uvs)[np.asarray(uv_triangles)])
    inside = (bary > margin).all(-1)
    return inside.sum(-1).reshape(resolution, resolution)


def texel_world_positions(mesh, resolution: int, margin: float = 1e-4):
    """For texels whose centre lies clearly inside one UV triangle: (rows, cols, world
    positions [N, 3]) from that triangle's barycentrics applied to its 3D corners."""
    points = texel_centres(resolution).reshape(-1, 2)
    uv_corners = mesh.uvs.double().numpy()[mesh.uv_triangles.numpy()]
    bary = barycentrics(points, uv_corners)
    inside = (bary > margin).all(-1)
    texel, tri = np.nonzero(inside)
    assert len(np.unique(texel)) == len(texel), "a texel centre lies inside two triangles"
    corners = mesh.positions.double().numpy()[mesh.triangles.numpy()]
    world = np.einsum("nk,nkd->nd", bary[texel, tri], corners[tri])
    rows, cols = np.divmod(texel, resolution)
    return rows, cols, world
