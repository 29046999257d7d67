"""Base-colour error: renders of a result's base colour against the true one (no bpy).

Both are float32 ``[N, H, W, 4]`` scene-linear RGB with straight alpha, as
``addon.export_scene.render_views`` returns them (the base colour rendered as emission by
``relight.base_colour_views``). Only object pixels count: alpha above ``judge.COVERED`` in
both. One scale per channel is fitted first (least squares of ``scale * result`` to the
truth), so a uniformly darker or tinted result is told apart from a blotchy one. The error is
also given at the scale of shading (``relative_shading``): both renders blurred alike, so that
what a baked shadow or light painted into the texture costs is told apart from fine detail
the texture does not resolve (a mug's stripes a few pixels apart).
"""

from __future__ import annotations

import numpy as np

from diffrec_bench.demo.judge import COVERED

SHADING_SCALE = 1 / 64
"""The blur of ``relative_shading``: a Gaussian whose sigma is this fraction of a render's
longer side (2 pixels at 128): detail under about five pixels goes, shading stays."""


def masked_blur(images: np.ndarray, mask: np.ndarray, sigma: float) -> np.ndarray:
    """``images`` [N, H, W, C] blurred by a Gaussian of ``sigma`` pixels over the pixels of
    ``mask`` [N, H, W] only (normalised convolution: pixels outside the mask neither count nor
    dilute their neighbours); values outside the mask are meaningless."""
    radius = max(1, int(np.ceil(3 * sigma)))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    weighted = np.concatenate([images * mask[..., None], mask[..., None]], -1).astype(np.float64)
    for axis in (1, 2):  # rows, then columns, zero beyond the image
        rows = np.moveaxis(weighted, axis, 0)
        padded = np.pad(rows, [(radius, radius)] + [(0, 0)] * (rows.ndim - 1))
        rows = sum(tap * padded[i:i + len(rows)] for i, tap in enumerate(taps))
        weighted = np.moveaxis(rows, 0, axis)
    return weighted[..., :-1] / np.maximum(weighted[..., -1:], 1e-12)


def channel_scale(result: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """[3] s minimising sum((s * result - truth)^2) per channel over rows of ``[P, 3]``
    (1 where the result is black in that channel)."""
    energy = np.square(result).sum(0)
    return np.where(energy > 0, (result * truth).sum(0) / np.maximum(energy, 1e-30), 1.0)


def albedo_error(result: np.ndarray, truth: np.ndarray) -> dict:
    """Linear base-colour error on object pixels: ``rmse_raw`` as rendered, ``scale`` [3]
    fitted, ``rmse`` after scaling, ``relative`` = ``rmse`` / RMS of the truth, and
    ``relative_shading`` the same after both are blurred (``masked_blur``, sigma
    ``SHADING_SCALE`` of the longer side). Raises ValueError when the two renders share no
    object pixel."""
    if result.shape != truth.shape or result.ndim != 4 or result.shape[-1] != 4:
        raise ValueError(f"base-colour renders {result.shape} and {truth.shape} must both be "
                         "[N, H, W, 4]")
    mask = (result[..., 3] > COVERED) & (truth[..., 3] > COVERED)
    if not mask.any():
        raise ValueError("the result and the truth cover no pixel in common")
    x, y = result[mask][:, :3].astype(np.float64), truth[mask][:, :3].astype(np.float64)
    scale = channel_scale(x, y)
    sigma = SHADING_SCALE * max(result.shape[1:3])
    smooth_x, smooth_y = (masked_blur(image[..., :3], mask, sigma)[mask]
                          for image in (result, truth))
    return {"scale": scale.tolist(), "rmse": _rms(scale * x - y), "rmse_raw": _rms(x - y),
            "relative": _rms(scale * x - y) / max(_rms(y), 1e-12),
            "relative_shading": _rms(scale * smooth_x - smooth_y) / max(_rms(smooth_y), 1e-12),
            "pixels": int(mask.sum())}


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.square(values).mean()))
