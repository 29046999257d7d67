"""The engine's pictures side by side: for each scale k (1 = the near view, k = k times as
far), the middle 1/k of each picture (where the object is), the reference box-reduced to the
far view's pixels, scores against the reference, and one figure with every tile enlarged
(nearest) back to the near view's size.

Pictures are uint8 sRGB RGBA ``[H, W, 4]`` as the page's canvas gives them (straight alpha,
transparent background)."""

from __future__ import annotations

import numpy as np

from diffrec_bench.demo import report

ROWS = ("reference", "png", "ktx2")
"""The page's picture names' first parts, in the figure's order."""
ROW_TITLES = {"reference": "reference: mesh.glb, k x k samples",
              "png": "mesh.glb: WebGL's box mips",
              "ktx2": "mesh_ktx2.glb: the exported chain"}
BACKGROUND = 0.5
"""The figure's background, sRGB."""


def to_linear(srgb: np.ndarray) -> np.ndarray:
    """sRGB in [0, 1] to linear (the sRGB transfer function's inverse)."""
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def to_srgb(linear: np.ndarray) -> np.ndarray:
    """Linear in [0, 1] to sRGB."""
    linear = np.clip(linear, 0, 1)
    return np.where(linear <= 0.0031308, linear * 12.92, 1.055 * linear ** (1 / 2.4) - 0.055)


def middle(picture: np.ndarray, side: int) -> np.ndarray:
    """The ``side`` x ``side`` square at the picture's centre."""
    top, left = (picture.shape[0] - side) // 2, (picture.shape[1] - side) // 2
    return picture[top:top + side, left:left + side]


def box_reduce(picture: np.ndarray, factor: int) -> np.ndarray:
    """A uint8 sRGB RGBA picture averaged over ``factor`` x ``factor`` blocks as light adds up
    (linear, alpha-weighted); float sRGB RGBA in [0, 1]."""
    rgba = picture.astype(np.float64) / 255
    if factor == 1:
        return rgba
    alpha = rgba[..., 3:]
    weighted = np.concatenate([to_linear(rgba[..., :3]) * alpha, alpha], axis=-1)
    height, width = weighted.shape[0] // factor, weighted.shape[1] // factor
    blocks = weighted[:height * factor, :width * factor].reshape(
        height, factor, width, factor, 4).mean(axis=(1, 3))
    coverage = blocks[..., 3:]
    colour = np.divide(blocks[..., :3], coverage, out=np.zeros_like(blocks[..., :3]),
                       where=coverage > 0)
    return np.concatenate([to_srgb(colour), coverage], axis=-1)


def tiles(pictures: dict[str, np.ndarray], size: int, scales: list[int]) -> dict:
    """``{(row, k): float sRGB RGBA [size / k, size / k, 4]}``: for each scale, the middle
    ``1/k`` of ``png_k`` and ``ktx2_k`` (``size`` px pictures) and of ``reference_k``
    (``k * size`` px) box-reduced by ``k``."""
    found = {}
    for scale in scales:
        side = size // scale
        for row in ROWS:
            picture = pictures[f"{row}_{scale}"]
            if row == "reference":
                found[row, scale] = box_reduce(middle(picture, size), scale)
            else:
                found[row, scale] = middle(picture, side).astype(np.float64) / 255
    return found


def psnr(picture: np.ndarray, truth: np.ndarray) -> float | None:
    """PSNR (sRGB, peak 1) over the pixels wholly covered in both RGBA pictures; None when no
    pixel is."""
    covered = (picture[..., 3] > 0.999) & (truth[..., 3] > 0.999)
    if not covered.any():
        return None
    error = np.mean((picture[covered, :3] - truth[covered, :3]) ** 2)
    return float("inf") if error == 0 else float(-10 * np.log10(error))


def scores(found: dict, scales: list[int]) -> dict[int, dict[str, float | None]]:
    """``{k: {"png": dB, "ktx2": dB}}`` against the reference of the same scale."""
    return {scale: {row: psnr(found[row, scale], found["reference", scale])
                    for row in ROWS[1:]} for scale in scales}


def over_background(rgba: np.ndarray) -> np.ndarray:
    """Float sRGB RGB: ``rgba`` over the figure's grey (composited in sRGB, as a web page
    shows a transparent canvas)."""
    alpha = rgba[..., 3:]
    return rgba[..., :3] * alpha + BACKGROUND * (1 - alpha)


def figure(found: dict, scales: list[int], size: int,
           scored: dict[int, dict[str, float | None]]) -> np.ndarray:
    """uint8 sRGB RGB: a header naming the scales, then one row per ``ROWS`` entry, each tile
    enlarged by ``k`` (nearest) to ``size`` px, its PSNR against the reference at its foot."""
    header = np.ones((report.HEADER_PX, size * len(scales), 3))
    for column, scale in enumerate(scales):
        title = "near" if scale == 1 else f"1/{scale} the size, enlarged x{scale}"
        report.put_text(header, title, (column * size + 4, report.HEADER_PX - 7),
                        colour=(0, 0, 0))
    rows = []
    for row in ROWS:
        strip = []
        for scale in scales:
            tile = over_background(found[row, scale]).repeat(scale, 0).repeat(scale, 1)
            tile = np.ascontiguousarray(tile)
            if scale == scales[0]:
                report.put_text(tile, ROW_TITLES[row], (4, 16))
            value = scored[scale].get(row)
            if value is not None:
                label = "the reference" if value == float("inf") else f"{value:.2f} dB"
                report.put_text(tile, label, (4, size - 6))
            strip.append(tile)
        rows.append(np.concatenate(strip, axis=1))
    picture = np.concatenate([header, *rows], axis=0)
    return np.round(np.clip(picture, 0, 1) * 255).astype(np.uint8)
