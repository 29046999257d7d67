"""Independent float64 references for the rasterization tests.

Perspective-correct barycentrics are found by solving, per pixel, the linear system
``sum b_i (x_i - X w_i) = 0``, ``sum b_i (y_i - Y w_i) = 0``, ``sum b_i = 1`` (the point with
barycentrics ``b`` on the triangle projects to the pixel centre ``(X, Y)``), which is a
different computation from the edge functions the implementation uses.
"""

from __future__ import annotations

import numpy as np


def pixel_centres(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """NDC (X, Y) of every pixel centre, arrays [H, W]; row 0 is the bottom (Y = -1 side)."""
    xs = (2.0 * np.arange(width) + 1.0) / width - 1.0
    ys = (2.0 * np.arange(height) + 1.0) / height - 1.0
    return np.meshgrid(xs, ys)


def barycentrics(clip: np.ndarray, X: np.ndarray, Y: np.ndarray):
    """Perspective-correct barycentrics [..., 3] of the ray through (X, Y) on triangle ``clip``.

    ``clip``: [3, 4] clip-space vertices. Also returns the point's clip w (its depth along the
    ray; positive in front of the camera) and z/w.
    """
    clip = np.asarray(clip, dtype=np.float64)
    x, y, z, w = clip.T
    rows = np.stack(
        [
            x[None, None, :] - X[..., None] * w[None, None, :],
            y[None, None, :] - Y[..., None] * w[None, None, :],
            np.ones((*X.shape, 3)),
        ],
        axis=-2,
    )  # [..., 3 equations, 3 unknowns]
    parallel = np.abs(np.linalg.det(rows)) < 1e-12  # the ray never meets the triangle's plane
    rows = np.where(parallel[..., None, None], np.eye(3), rows)
    rhs = np.broadcast_to(np.array([0.0, 0.0, 1.0]), (*X.shape, 3))
    b = np.linalg.solve(rows, rhs[..., None])[..., 0]
    b[parallel] = -1.0
    point_w = b @ w
    return b, point_w, (b @ z) / point_w


def coverage(clip: np.ndarray, height: int, width: int, margin: float = 1e-7):
    """Reference coverage of one triangle: (inside [H, W], ambiguous [H, W], b, z/w).

    ``ambiguous`` marks pixel centres within ``margin`` of an edge or the near/far planes,
    where either answer is acceptable.
    """
    X, Y = pixel_centres(height, width)
    b, point_w, depth = barycentrics(clip, X, Y)
    inside = (b >= 0).all(-1) & (point_w > 0) & (np.abs(depth) <= 1)
    ambiguous = (np.abs(b) < margin).any(-1) | (np.abs(np.abs(depth) - 1) < margin)
    return inside, ambiguous, b, depth
