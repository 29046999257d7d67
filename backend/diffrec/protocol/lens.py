"""Lens distortion as capture tools state it, and photos resampled onto pinhole cameras (numpy
only: the add-on reads captures inside Blender, which has numpy but not OpenCV; the tests
check every formula here against OpenCV's own functions).

Models (OpenCV's, on the normalised coordinates ``x = (u - cx) / fx``, ``y = (v - cy) / fy``
of a point in front of the camera; coefficients in OpenCV's order, ``MODELS``):

- ``opencv`` (COLMAP's and nerfstudio's ``OPENCV``, plus OpenCV's ``k3``): with
  ``r² = x² + y²`` and ``d = 1 + k1 r² + k2 r⁴ + k3 r⁶``,
  ``x_d = x d + 2 p1 x y + p2 (r² + 2 x²)``, ``y_d = y d + p1 (r² + 2 y²) + 2 p2 x y``.
- ``fisheye`` (``OPENCV_FISHEYE``): ``θ = atan(r)``,
  ``θ_d = θ (1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸)``, ``(x_d, y_d) = (θ_d / r) (x, y)``.

A photo's pixel is ``u_d = fx x_d + cx``, ``v_d = fy y_d + cy`` (the wire's convention:
origin at the top-left corner of the image, pixel (i, j) centred at (j + 0.5, i + 0.5)).

Undistorted photos (``Lens.undistort``) are seen by a pinhole camera of the same image size
and principal point with focal lengths ``zoom`` times the lens's: 1 where every pixel of that
pinhole image then sees into the photo (barrel distortion, the usual case for phones: the
photo's far corners are cropped), else the smallest zoom above 1 for which every pixel does
(so that no pixel is left without data). Within that view the distortion must be one to one
(the distorted radius growing outward); a lens that folds back is refused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

MODELS = {"opencv": ("k1", "k2", "p1", "p2", "k3"), "fisheye": ("k1", "k2", "k3", "k4")}
"""Each model's coefficients, in OpenCV's order (``distCoeffs`` / ``cv2.fisheye``'s ``D``)."""
MAX_ZOOM = 4.0  # a lens that needs more than this is refused
_RAY_STEPS = 256  # samples along each ray from the centre when checking one-to-one
_SEARCH_STEPS = 40  # bisection steps for the zoom (relative error 2^-40 of MAX_ZOOM - 1)


@dataclass(frozen=True)
class Lens:
    """A photo's camera: ``model`` (a key of ``MODELS``), its ``coefficients`` in
    ``MODELS[model]``'s order, ``intrinsics`` ``(fx, fy, cx, cy)`` in pixels at the image size
    ``size`` ``(width, height)``."""

    model: str
    coefficients: tuple[float, ...]
    intrinsics: tuple[float, float, float, float]
    size: tuple[float, float]

    def __post_init__(self):
        if self.model not in MODELS or len(self.coefficients) != len(MODELS[self.model]):
            raise ValueError(f"a {self.model!r} lens takes the coefficients "
                             f"{MODELS.get(self.model, ())}, got {self.coefficients}")

    def distort(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised pinhole coordinates ``(x, y)`` to where the lens puts them."""
        if self.model == "opencv":
            k1, k2, p1, p2, k3 = self.coefficients
            r2 = x * x + y * y
            radial = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
            return (x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x),
                    y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y)
        k1, k2, k3, k4 = self.coefficients
        r = np.hypot(x, y)
        theta = np.arctan(r)
        t2 = theta * theta
        theta_d = theta * (1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
        scale = np.where(r > 1e-12, theta_d / np.maximum(r, 1e-12), 1.0)
        return x * scale, y * scale

    def zoom(self) -> float:
        """The pinhole camera's focal lengths over the lens's (module docstring); ValueError
        where no zoom up to ``MAX_ZOOM`` leaves every pixel seeing into the photo."""
        return _zoom(self)

    def pinhole(self) -> tuple[float, float, float, float]:
        """``(fx, fy, cx, cy)`` of the undistorted images, in pixels at ``size``."""
        fx, fy, cx, cy = self.intrinsics
        zoom = self.zoom()
        return fx * zoom, fy * zoom, cx, cy

    def photo_positions(self, u: np.ndarray, v: np.ndarray, width: float, height: float
                        ) -> tuple[np.ndarray, np.ndarray]:
        """Where the pinhole image's points ``(u, v)`` (pixels, images ``width`` x ``height``,
        any size: the intrinsics scale with it) lie in the photo of the same size."""
        sx, sy = width / self.size[0], height / self.size[1]
        fx, fy, cx, cy = self.intrinsics
        pfx, pfy, pcx, pcy = self.pinhole()
        xd, yd = self.distort((u / sx - pcx) / pfx, (v / sy - pcy) / pfy)
        return (fx * xd + cx) * sx, (fy * yd + cy) * sy

    def undistort(self, pixels: np.ndarray) -> np.ndarray:
        """The photo ``pixels`` ``[H, W, C]`` (float; any size, the intrinsics scale with it)
        resampled onto the pinhole camera ``pinhole()``: bilinear, at each pixel's centre;
        float32. Resample straight colour with premultiplied alpha, as any filter should."""
        height, width = pixels.shape[:2]
        u = np.arange(width, dtype=np.float64)[None, :] + 0.5
        v = np.arange(height, dtype=np.float64)[:, None] + 0.5
        ud, vd = self.photo_positions(*np.broadcast_arrays(u, v), width, height)
        return _bilinear(np.asarray(pixels, dtype=np.float32), vd - 0.5, ud - 0.5)

    def _covers(self, zoom: float) -> bool:
        """Whether every pixel of the pinhole image at ``zoom`` sees into the photo, along
        rays on which the distortion is one to one."""
        width, height = self.size
        fx, fy, cx, cy = self.intrinsics
        u, v = _border(width, height)
        x, y = (u - cx) / (zoom * fx), (v - cy) / (zoom * fy)
        xd, yd = self.distort(x, y)
        ud, vd = fx * xd + cx, fy * yd + cy
        if not ((ud >= 0) & (ud <= width) & (vd >= 0) & (vd <= height)).all():
            return False
        along = np.linspace(0.0, 1.0, _RAY_STEPS)[:, None]
        rx, ry = self.distort(along * x[None, :], along * y[None, :])
        radius = np.hypot(rx, ry)
        return bool((np.diff(radius, axis=0) > 0).all())


@functools.cache
def _zoom(lens: Lens) -> float:
    if lens._covers(1.0):
        return 1.0
    if not lens._covers(MAX_ZOOM):
        raise ValueError(f"its {lens.model} lens distortion {lens.coefficients} leaves part of "
                         f"the image without data or folds it back even when zoomed in "
                         f"{MAX_ZOOM:g} times: check the coefficients")
    low, high = 1.0, MAX_ZOOM
    for _ in range(_SEARCH_STEPS):
        middle = 0.5 * (low + high)
        low, high = (low, middle) if lens._covers(middle) else (middle, high)
    return high


def _border(width: float, height: float) -> tuple[np.ndarray, np.ndarray]:
    """The centres ``(u, v)`` of an image's outermost pixels."""
    columns, rows = np.arange(int(width)) + 0.5, np.arange(int(height)) + 0.5
    u = np.concatenate([columns, columns, np.full(len(rows), 0.5), np.full(len(rows),
                                                                          width - 0.5)])
    v = np.concatenate([np.full(len(columns), 0.5), np.full(len(columns), height - 0.5), rows,
                        rows])
    return u, v


def _bilinear(pixels: np.ndarray, row: np.ndarray, column: np.ndarray) -> np.ndarray:
    """``pixels`` ``[H, W, C]`` sampled at fractional ``(row, column)`` (pixel centres at
    integers), positions beyond the outermost centres taking the edge's values."""
    height, width = pixels.shape[:2]
    row, column = np.clip(row, 0, height - 1), np.clip(column, 0, width - 1)
    r0, c0 = np.floor(row).astype(np.intp), np.floor(column).astype(np.intp)
    r1, c1 = np.minimum(r0 + 1, height - 1), np.minimum(c0 + 1, width - 1)
    fr, fc = (row - r0)[..., None].astype(np.float32), (column - c0)[..., None].astype(np.float32)
    top = pixels[r0, c0] * (1 - fc) + pixels[r0, c1] * fc
    bottom = pixels[r1, c0] * (1 - fc) + pixels[r1, c1] * fc
    return top * (1 - fr) + bottom * fr
