"""The image conventions of ``diffrec.protocol.images`` for torch tensors as well as numpy
arrays: the sRGB curve (IEC 61966-2-1, exact piecewise form, unclamped) and premultiplied to
straight alpha.

numpy in, numpy out: arrays go to the protocol's functions (the one source the add-on shares);
tensors take the same formulas with the same thresholds, differentiable everywhere with finite
gradients (the power branch only ever sees inputs above its threshold).
"""

from __future__ import annotations

import torch

from diffrec.protocol import images
from diffrec.protocol.images import LINEAR_THRESHOLD, SRGB_THRESHOLD

__all__ = ["LINEAR_THRESHOLD", "LUMINANCE", "SRGB_THRESHOLD", "linear_to_srgb", "luminance",
           "premultiplied_to_straight", "srgb_to_linear", "straight_to_premultiplied"]

LUMINANCE = (0.2126, 0.7152, 0.0722)
"""Rec. 709 weights of linear R, G and B in luminance."""


def linear_to_srgb(x):
    """Encode scene-linear values with the sRGB curve; any shape."""
    if not isinstance(x, torch.Tensor):
        return images.linear_to_srgb(x)
    power = 1.055 * torch.clamp(x, min=LINEAR_THRESHOLD) ** (1.0 / 2.4) - 0.055
    return torch.where(x <= LINEAR_THRESHOLD, 12.92 * x, power)


def srgb_to_linear(c):
    """Decode sRGB-encoded values to scene-linear; any shape."""
    if not isinstance(c, torch.Tensor):
        return images.srgb_to_linear(c)
    power = ((torch.clamp(c, min=SRGB_THRESHOLD) + 0.055) / 1.055) ** 2.4
    return torch.where(c <= SRGB_THRESHOLD, c / 12.92, power)


def premultiplied_to_straight(rgba):
    """Premultiplied ``[..., 4]`` RGBA -> straight alpha: colour / alpha where alpha > 0,
    colour unchanged where alpha is 0. (Blender's EXR renders load premultiplied.)"""
    if not isinstance(rgba, torch.Tensor):
        return images.premultiplied_to_straight(rgba)
    alpha = rgba[..., 3:]
    covered = alpha > 0
    colour = torch.where(covered, rgba[..., :3] / torch.where(covered, alpha, 1.0), rgba[..., :3])
    return torch.cat([colour, alpha], -1)


def straight_to_premultiplied(rgba: torch.Tensor) -> torch.Tensor:
    """Straight-alpha ``[..., 4]`` RGBA -> premultiplied: colour times alpha (for filtering
    images whose edges are partly covered)."""
    return torch.cat([rgba[..., :3] * rgba[..., 3:], rgba[..., 3:]], -1)


def luminance(rgb: torch.Tensor) -> torch.Tensor:
    """Rec. 709 luminance of linear ``[..., 3]`` -> ``[...]``."""
    return rgb @ torch.tensor(LUMINANCE, dtype=rgb.dtype, device=rgb.device)
