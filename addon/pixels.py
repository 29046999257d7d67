"""Pixel conventions between Blender images and the wire, without bpy.

Blender stores image pixels bottom row first, RGBA float, and its EXR renders carry
premultiplied alpha. The wire wants rows top-down and straight alpha (docs/protocol.md,
"Inputs").
"""

from __future__ import annotations

import numpy as np


def from_blender_rows(flat: np.ndarray, width: int, height: int, channels: int) -> np.ndarray:
    """A Blender ``pixels`` buffer (bottom row first) as a float32 [H,W,C] array, rows top-down."""
    if flat.size != width * height * channels:
        raise ValueError(f"{flat.size} values do not make a {width}x{height}x{channels} image")
    return np.ascontiguousarray(flat.reshape(height, width, channels)[::-1], dtype=np.float32)


def to_blender_rows(image: np.ndarray) -> np.ndarray:
    """A [H,W,C] array with rows top-down as a flat float32 buffer for ``pixels.foreach_set``."""
    return np.ascontiguousarray(image[::-1], dtype=np.float32).reshape(-1)


def unpremultiply(rgba: np.ndarray) -> np.ndarray:
    """Straight alpha from premultiplied [...,4]; colour is 0 where alpha is 0."""
    if rgba.shape[-1] != 4:
        raise ValueError(f"expected RGBA, got {rgba.shape[-1]} channels")
    alpha = rgba[..., 3:4]
    safe = np.where(alpha > 0, alpha, 1)
    rgb = np.where(alpha > 0, rgba[..., :3] / safe, 0)
    return np.concatenate([rgb, alpha], axis=-1).astype(np.float32)


def rgba(image: np.ndarray) -> np.ndarray:
    """[H,W,3] or [H,W,4] as [H,W,4] (opaque alpha added)."""
    if image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ValueError(f"expected an [H,W,3|4] image, got shape {image.shape}")
    if image.shape[2] == 4:
        return image
    return np.concatenate([image, np.ones((*image.shape[:2], 1), image.dtype)], axis=2)


def srgb_to_linear(values: np.ndarray) -> np.ndarray:
    """The sRGB transfer function, inverted (IEC 61966-2-1)."""
    values = np.asarray(values, dtype=np.float32)
    return np.where(values <= 0.04045, values / 12.92, ((values + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(values: np.ndarray) -> np.ndarray:
    """The sRGB transfer function (IEC 61966-2-1) of linear values, clipped to [0, 1]."""
    values = np.clip(values, 0.0, 1.0)
    return np.where(values <= 0.0031308, values * 12.92, 1.055 * values ** (1 / 2.4) - 0.055)
