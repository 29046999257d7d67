"""Pixel conventions between Blender images and the wire, without bpy.

Blender stores image pixels bottom row first, RGBA float; the wire wants rows top-down
(docs/protocol.md, "Inputs"). The conventions the backend shares (the sRGB curve, straight
alpha from Blender's premultiplied EXR renders, longest-side sizes) are the protocol's
``images`` module.
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


def rgba(image: np.ndarray) -> np.ndarray:
    """[H,W,3] or [H,W,4] as [H,W,4] (opaque alpha added)."""
    if image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ValueError(f"expected an [H,W,3|4] image, got shape {image.shape}")
    if image.shape[2] == 4:
        return image
    return np.concatenate([image, np.ones((*image.shape[:2], 1), image.dtype)], axis=2)
