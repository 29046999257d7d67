"""Base-colour error: renders of a result's base colour against the true one (no bpy).

Both are float32 ``[N, H, W, 4]`` scene-linear RGB with straight alpha, as
``addon.export_scene.render_views`` returns them (the base colour rendered as emission by
``relight.base_colour_views``). Only object pixels count: alpha above ``judge.COVERED`` in
both. One scale per channel is fitted first (least squares of ``scale * result`` to the
truth), so a uniformly darker or tinted result is told apart from a blotchy one.
"""

from __future__ import annotations

import numpy as np
from demo_lib.judge import COVERED


def channel_scale(result: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """[3] s minimising sum((s * result - truth)^2) per channel over rows of ``[P, 3]``
    (1 where the result is black in that channel)."""
    energy = np.square(result).sum(0)
    return np.where(energy > 0, (result * truth).sum(0) / np.maximum(energy, 1e-30), 1.0)


def albedo_error(result: np.ndarray, truth: np.ndarray) -> dict:
    """Linear base-colour error on object pixels: ``rmse_raw`` as rendered, ``scale`` [3]
    fitted, ``rmse`` after scaling, ``relative`` = ``rmse`` / RMS of the truth. Raises
    ValueError when the two renders share no object pixel."""
    if result.shape != truth.shape or result.ndim != 4 or result.shape[-1] != 4:
        raise ValueError(f"base-colour renders {result.shape} and {truth.shape} must both be "
                         "[N, H, W, 4]")
    mask = (result[..., 3] > COVERED) & (truth[..., 3] > COVERED)
    if not mask.any():
        raise ValueError("the result and the truth cover no pixel in common")
    x, y = result[mask][:, :3].astype(np.float64), truth[mask][:, :3].astype(np.float64)
    scale = channel_scale(x, y)
    rmse = float(np.sqrt(np.square(scale * x - y).mean()))
    return {"scale": scale.tolist(), "rmse": rmse,
            "rmse_raw": float(np.sqrt(np.square(x - y).mean())),
            "relative": rmse / max(float(np.sqrt(np.square(y).mean())), 1e-12),
            "pixels": int(mask.sum())}
