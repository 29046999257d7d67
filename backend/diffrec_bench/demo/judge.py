"""Scores of a result against its targets, both rendered by Cycles from held-out cameras.

Images are float32 ``[N, H, W, 4]``, scene-linear RGB with straight alpha (what
``addon.export_scene.render_views`` returns). Colour is compared over black (premultiplied),
as the reference system and diffrec's own validation do; PSNR is on the sRGB-encoded image
with peak 1. ``psnr_object`` restricts the error to the pixels either image covers, so the
empty background cannot flatter it.
"""

from __future__ import annotations

import numpy as np
import torch

from diffrec.render.metrics import display, psnr, ssim

COVERED = 0.5  # alpha above this counts as the object's silhouette


def over_black(images: np.ndarray) -> torch.Tensor:
    """[N, H, W, 4] straight alpha -> [N, H, W, 3] premultiplied, as a torch tensor."""
    images = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32))
    return images[..., :3] * images[..., 3:4]


def silhouette_iou(results: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Intersection over union of the alpha > 0.5 masks, per view [N]."""
    a, b = results[..., 3] > COVERED, targets[..., 3] > COVERED
    union = (a | b).sum(axis=(1, 2))
    return np.where(union > 0, (a & b).sum(axis=(1, 2)) / np.maximum(union, 1), 1.0)


def object_psnr(results: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """PSNR (dB, sRGB peak 1) over the pixels covered in either image, per view [N]."""
    x, y = display(over_black(results)), display(over_black(targets))
    mask = torch.from_numpy((results[..., 3] > 0) | (targets[..., 3] > 0))[..., None]
    error = ((x - y).square() * mask).flatten(1).sum(1) / (mask.flatten(1).sum(1) * 3).clamp(min=1)
    return (-10.0 * torch.log10(error.clamp(min=1e-10))).numpy()


def score(results: np.ndarray, targets: np.ndarray, names: list[str]) -> dict:
    """Per-view and mean PSNR, object PSNR, SSIM and silhouette IoU."""
    if results.shape != targets.shape or results.ndim != 4 or results.shape[-1] != 4:
        raise ValueError(f"results {results.shape} and targets {targets.shape} must both be "
                         "[N, H, W, 4]")
    x, y = over_black(results), over_black(targets)
    columns = {"psnr": psnr(x, y).numpy(), "psnr_object": object_psnr(results, targets),
               "ssim": ssim(x, y).numpy(), "iou": silhouette_iou(results, targets)}
    views = [{"name": name, **{key: float(values[i]) for key, values in columns.items()}}
             for i, name in enumerate(names)]
    return {"views": views, **{f"{key}_mean": float(np.mean(values))
                               for key, values in columns.items()}}
