"""An asset's picture for the docs: for each budget, truth | Blender bake | diffrec on its first
held-out view, one row per judging light and one for the base colour (the rows of the routes'
``bake.png`` and ``diffrec.png``, drawn by ``relight.judge``), by ``relit_figure.figure``."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from diffrec_bench import relit_figure


def write_strip(path: Path, runs: list[tuple[str, Path]], tile: int = 128) -> Path | None:
    """``runs``: (budget label, run folder) pairs; those with both pictures are stacked into
    ``path`` (uint8 PNG). None when no run has both."""
    figures = [relit_figure.figure(folder / "bake.png", folder / "diffrec.png",
                                   (f"Blender bake {label}", f"diffrec {label}"), tile)
               for label, folder in runs
               if (folder / "bake.png").is_file() and (folder / "diffrec.png").is_file()]
    if not figures:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.concatenate(figures, axis=0), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    return path
