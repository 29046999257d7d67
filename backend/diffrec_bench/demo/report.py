"""The demo's pictures: ``comparison.png`` (held-out views, target | result | error) and
``curves.png`` (training loss and PSNR per iteration), drawn with numpy and OpenCV."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from diffrec.io import write_image
from diffrec.protocol.events import PassName
from diffrec.render.metrics import display

from .judge import over_black

ERROR_GAIN = 4  # the error column shows |result - target| x 4 (in sRGB)
HEADER_PX = 22
MIN_TILE_PX = 192  # small renders are enlarged (nearest) so the comparison stays legible


def comparison_image(results: np.ndarray, targets: np.ndarray, labels: list[str]) -> np.ndarray:
    """sRGB float [H, W, 3]: one row per view (target | result | |error| x 4) under a header.
    Inputs as ``judge.score`` takes them."""
    shown_results = display(over_black(results)).numpy()
    shown_targets = display(over_black(targets)).numpy()
    scale = max(1, -(-MIN_TILE_PX // targets.shape[1]))
    rows = []
    for result, target, label in zip(shown_results, shown_targets, labels, strict=True):
        error = np.clip(np.abs(result - target) * ERROR_GAIN, 0, 1)
        row = np.concatenate([target, result, error], axis=1)
        row = np.repeat(np.repeat(row, scale, axis=0), scale, axis=1)
        put_text(row, label, (4, row.shape[0] - 6))
        rows.append(row)
    body = np.concatenate(rows, axis=0)
    header = np.ones((HEADER_PX, body.shape[1], 3), np.float32)
    tile = body.shape[1] // 3
    for column, title in enumerate(("target (Cycles)", "result (Cycles)",
                                    f"|error| x{ERROR_GAIN}")):
        put_text(header, title, (column * tile + 4, HEADER_PX - 7), colour=(0, 0, 0))
    return np.concatenate([header, body], axis=0)


def put_text(image: np.ndarray, text: str, origin, colour=(1, 1, 1)) -> None:
    """Write ``text`` into the float RGB ``image`` ``[H, W, 3]`` at ``origin`` (its baseline's
    left end, pixels), in place. OpenCV writes text into 8-bit images only (OpenCV 5 refuses
    float ones): it writes the text's coverage, which blends ``colour`` in."""
    coverage = np.zeros(image.shape[:2], np.uint8)
    cv2.putText(coverage, text, origin, cv2.FONT_HERSHEY_SIMPLEX, 0.42, 255, 1, cv2.LINE_AA)
    cover = coverage[..., None].astype(np.float32) / 255
    image[...] = image * (1 - cover) + np.asarray(colour, np.float32) * cover


def write_comparison(path: Path, results, targets, labels) -> Path:
    write_image(path, np.ascontiguousarray(comparison_image(results, targets, labels)), data=True)
    return path


def curves_image(progress: list[dict], width: int = 720, height: int = 300) -> np.ndarray:
    """sRGB float [height, 2 * width, 3]: training loss (log scale) and PSNR against the
    iteration, one line per pass, from the job's progress events (``pass``, ``iteration``,
    ``loss``, ``psnr``)."""
    panels = [_plot(progress, "loss", "training loss (log)", width, height, log=True),
              _plot(progress, "psnr", "training PSNR (dB)", width, height, log=False)]
    return np.concatenate(panels, axis=1)


PASS_COLOURS = {PassName.SURFACE: (0.85, 0.35, 0.1), PassName.TEXTURES: (0.1, 0.35, 0.8)}
MARGIN = (58, 16, 28, 34)  # left, right, top, bottom


def _plot(progress, key, title, width, height, log) -> np.ndarray:
    image = np.ones((height, width, 3), np.float32)
    left, right, top, bottom = MARGIN
    put_text(image, title, (left, 18), colour=(0, 0, 0))
    points = [(e["pass"], e["iteration"], float(e[key])) for e in progress
              if np.isfinite(float(e.get(key, np.nan))) and (not log or float(e[key]) > 0)]
    if not points:
        put_text(image, "no data", (width // 2 - 30, height // 2), colour=(0, 0, 0))
        return image
    passes = list(dict.fromkeys(name for name, _, _ in points))
    # passes are drawn one after the other along the x axis
    offsets, total = {}, 0
    for name in passes:
        offsets[name] = total
        total += max(it for n, it, _ in points if n == name)
    values = np.array([np.log10(v) if log else v for _, _, v in points])
    low, high = values.min(), values.max()
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5

    def to_pixel(x, y):
        px = left + (width - left - right) * x / max(total, 1)
        py = height - bottom - (height - top - bottom) * (y - low) / (high - low)
        return round(px), round(py)

    cv2.rectangle(image, (left, top), (width - right, height - bottom), (0.6, 0.6, 0.6), 1)
    for fraction in (0.0, 0.5, 1.0):
        y = low + (high - low) * fraction
        label = f"{10 ** y:.3g}" if log else f"{y:.1f}"
        put_text(image, label, (2, to_pixel(0, y)[1] + 4), colour=(0, 0, 0))
    put_text(image, "0", (left - 4, height - bottom + 16), colour=(0, 0, 0))
    put_text(image, f"{total} iterations", (width - right - 110, height - bottom + 16),
             colour=(0, 0, 0))
    for name in passes:
        line = [to_pixel(offsets[name] + it, np.log10(v) if log else v)
                for n, it, v in points if n == name]
        colour = PASS_COLOURS.get(name, (0.2, 0.2, 0.2))
        cv2.polylines(image, [np.array(line, np.int32)], False, colour, 2, cv2.LINE_AA)
        put_text(image, name, (line[-1][0] - 44, max(line[-1][1] - 8, top + 12)), colour=colour)
    return image


def write_curves(path: Path, progress: list[dict]) -> Path:
    write_image(path, np.ascontiguousarray(curves_image(progress)), data=True)
    return path
