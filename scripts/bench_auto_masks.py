"""Masks made for photos without any (``diffrec.pipeline.auto_masks``), scored against the
truth: the ball-on-a-table-in-a-room capture of ``diffrec_bench.photo_capture`` (the
scene the test scores, so that these figures extend the test's) at a few view counts and
sizes; prints the IoU of every view, their mean and least, and the time taken.

    python scripts/bench_auto_masks.py [--runs 12x96,16x128,24x128] [--palette wood]
        [--picture PNG]

``--picture``: the first run's views, with their masks outlined, as one PNG strip (the
guide's picture).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from diffrec.color import linear_to_srgb
from diffrec.io import write_image
from diffrec.pipeline.auto_masks import make_masks
from diffrec_bench import photo_capture  # the test's scene


def score(views: int, size: int, palette: str
          ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """``(IoU per view, seconds to make the masks, photos, masks)``."""
    cameras = photo_capture.object_cameras(views, size)
    images, truth = photo_capture.photos(cameras, palette=palette)
    start = time.perf_counter()
    masks = make_masks(cameras, torch.from_numpy(images)).numpy() > 0.5
    seconds = time.perf_counter() - start
    ious = photo_capture.mask_iou(masks, truth)
    return ious, seconds, images, masks


def picture(images: np.ndarray, masks: np.ndarray, path: Path, count: int = 6) -> None:
    """The first ``count`` views over the same views dimmed outside their masks."""
    shown = linear_to_srgb(images[:count])
    dimmed = shown * np.where(masks[:count, ..., None], 1.0, 0.25)
    strip = np.concatenate([np.concatenate(list(shown), 1), np.concatenate(list(dimmed), 1)], 0)
    write_image(path, strip.astype(np.float32), data=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="12x96,16x128,24x128",
                        help="VIEWSxSIZE, comma-separated")
    parser.add_argument("--palette", default="warm", choices=sorted(photo_capture.PALETTES),
                        help="the ball's stripes: warm, or wood (the table's browns)")
    parser.add_argument("--picture", type=Path)
    args = parser.parse_args()
    for number, run in enumerate(args.runs.split(",")):
        views, size = (int(value) for value in run.split("x"))
        ious, seconds, images, masks = score(views, size, args.palette)
        print(f"{views} views at {size} px: IoU mean {ious.mean():.3f}, least {ious.min():.3f}, "
              f"{seconds:.1f} s; per view {' '.join(f'{v:.3f}' for v in ious)}")
        if number == 0 and args.picture:
            picture(images, masks, args.picture)


if __name__ == "__main__":
    main()
