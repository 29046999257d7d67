"""sRGB transfer curve (IEC 61966-2-1), exact piecewise form, for numpy arrays and torch tensors.

``linear_to_srgb``: ``12.92 x`` for ``x <= 0.0031308``, else ``1.055 x^(1/2.4) - 0.055``.
``srgb_to_linear``: ``c / 12.92`` for ``c <= 0.04045``, else ``((c + 0.055) / 1.055)^2.4``.

Values are not clamped: negatives follow the linear segment and values above 1 follow the
power segment (HDR values pass through). Torch versions are differentiable everywhere with
finite gradients (the power branch only ever sees inputs above its threshold).
Both functions return the same kind of array they are given (numpy in, numpy out).
"""

from __future__ import annotations

import numpy as np
import torch

LINEAR_THRESHOLD = 0.0031308
SRGB_THRESHOLD = 0.04045


def linear_to_srgb(x):
    """Encode scene-linear values with the sRGB curve; any shape."""
    if isinstance(x, torch.Tensor):
        power = 1.055 * torch.clamp(x, min=LINEAR_THRESHOLD) ** (1.0 / 2.4) - 0.055
        return torch.where(x <= LINEAR_THRESHOLD, 12.92 * x, power)
    x = _float_array(x)
    power = 1.055 * np.maximum(x, LINEAR_THRESHOLD) ** (1.0 / 2.4) - 0.055
    return np.where(x <= LINEAR_THRESHOLD, 12.92 * x, power).astype(x.dtype, copy=False)


def srgb_to_linear(c):
    """Decode sRGB-encoded values to scene-linear; any shape."""
    if isinstance(c, torch.Tensor):
        power = ((torch.clamp(c, min=SRGB_THRESHOLD) + 0.055) / 1.055) ** 2.4
        return torch.where(c <= SRGB_THRESHOLD, c / 12.92, power)
    c = _float_array(c)
    power = ((np.maximum(c, SRGB_THRESHOLD) + 0.055) / 1.055) ** 2.4
    return np.where(c <= SRGB_THRESHOLD, c / 12.92, power).astype(c.dtype, copy=False)


def _float_array(a) -> np.ndarray:
    a = np.asarray(a)
    return a if np.issubdtype(a.dtype, np.floating) else a.astype(np.float64)
