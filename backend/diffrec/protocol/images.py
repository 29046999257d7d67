"""Image conventions both sides share (numpy only): the sRGB curve, straight alpha and the
longest-side size a training resolution means.

- ``linear_to_srgb`` / ``srgb_to_linear``: the sRGB transfer curve (IEC 61966-2-1), exact
  piecewise form: ``12.92 x`` for ``x <= LINEAR_THRESHOLD``, else ``1.055 x^(1/2.4) - 0.055``;
  its inverse ``c / 12.92`` for ``c <= SRGB_THRESHOLD``, else ``((c + 0.055) / 1.055)^2.4``.
  Values are not clamped: negatives follow the linear segment and values above 1 the power
  segment (HDR values pass through); clip first where 8-bit values or a display are made.
- ``premultiplied_to_straight``: colour / alpha where alpha > 0, colour unchanged where alpha
  is 0 (Blender's EXR renders carry premultiplied alpha; the wire wants straight alpha).
- ``longest_side_size``: an image's size scaled to a longest side (``train_res``);
  ``smallest_longest_side``: the least longest side that keeps MIN_SIDE pixels on each side.

The backend's torch versions (``diffrec.color``) use the same thresholds and are tested
against these.
"""

from __future__ import annotations

import numpy as np

LINEAR_THRESHOLD = 0.0031308
SRGB_THRESHOLD = 0.04045
MIN_SIDE = 11
"""The fewest pixels a job's images (at ``train_res``) may have on a side: a run scores its
held-out views with SSIM, whose window (``diffrec.render.metrics.ssim``) is 11 pixels wide."""

__all__ = [
    "LINEAR_THRESHOLD",
    "MIN_SIDE",
    "SRGB_THRESHOLD",
    "linear_to_srgb",
    "longest_side_size",
    "premultiplied_to_straight",
    "smallest_longest_side",
    "srgb_to_linear",
]


def linear_to_srgb(x) -> np.ndarray:
    """Encode scene-linear values with the sRGB curve; any shape, a float dtype kept (other
    dtypes become float64)."""
    x = _float_array(x)
    power = 1.055 * np.maximum(x, LINEAR_THRESHOLD) ** (1.0 / 2.4) - 0.055
    return np.where(x <= LINEAR_THRESHOLD, 12.92 * x, power).astype(x.dtype, copy=False)


def srgb_to_linear(c) -> np.ndarray:
    """Decode sRGB-encoded values to scene-linear; any shape, a float dtype kept (other dtypes
    become float64)."""
    c = _float_array(c)
    power = ((np.maximum(c, SRGB_THRESHOLD) + 0.055) / 1.055) ** 2.4
    return np.where(c <= SRGB_THRESHOLD, c / 12.92, power).astype(c.dtype, copy=False)


def premultiplied_to_straight(rgba) -> np.ndarray:
    """Premultiplied ``[..., 4]`` RGBA -> straight alpha: colour / alpha where alpha > 0,
    colour unchanged where alpha is 0; a float dtype kept."""
    rgba = _float_array(rgba)
    if rgba.shape[-1] != 4:
        raise ValueError(f"expected RGBA [..., 4], got {rgba.shape[-1]} channels")
    alpha = rgba[..., 3:]
    covered = alpha > 0
    colour = np.where(covered, rgba[..., :3] / np.where(covered, alpha, 1), rgba[..., :3])
    return np.concatenate([colour, alpha], -1).astype(rgba.dtype, copy=False)


def longest_side_size(width: int, height: int, longest_side: int) -> tuple[int, int]:
    """``(width, height)`` scaled so that the longer side is ``longest_side`` pixels (aspect
    kept, the other side rounded, at least 1)."""
    scale = longest_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def smallest_longest_side(width: int, height: int, side: int = MIN_SIDE) -> int:
    """The least longest side (``train_res``) at which a ``width x height`` image, resized by
    ``longest_side_size``, has at least ``side`` pixels on each side."""
    longest = side
    while min(longest_side_size(width, height, longest)) < side:
        longest += 1
    return longest


def _float_array(a) -> np.ndarray:
    a = np.asarray(a)
    return a if np.issubdtype(a.dtype, np.floating) else a.astype(np.float64)
