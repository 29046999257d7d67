"""A before / after figure for the docs from two ``scripts/bench_quality --relight`` runs of
one scene: the target and each run's result side by side, one row per light and one for the
base colour (the rows of the scene's ``relit.png`` in each run), all rendered by Cycles.

    python scripts/relit_figure.py out/A/materials/critter/relit.png \\
        out/B/materials/critter/relit.png --labels "normal map" "none" \\
        --out docs/images/relit_critter.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np

from diffrec_bench.demo import report


def columns(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(target column, result column) of a ``relit.png``, uint8 BGR, header cut off."""
    picture = cv2.imread(str(path))
    if picture is None:
        raise SystemExit(f"relit_figure: cannot read {path}")
    body = picture[report.HEADER_PX:]
    tile = body.shape[1] // 3
    return body[:, :tile], body[:, tile:2 * tile]


def figure(before: Path, after: Path, labels: tuple[str, str], tile: int) -> np.ndarray:
    """uint8 BGR: a header, then target | before | after, each tile resized to ``tile`` px."""
    target, first = columns(before)
    same_target, second = columns(after)
    if target.shape != same_target.shape or np.abs(
            target.astype(int) - same_target.astype(int)).max() > 1:
        raise SystemExit("relit_figure: the two pictures show different targets")
    scale = tile / target.shape[1]
    body = np.concatenate([target, first, second], axis=1)
    body = cv2.resize(body, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    header = np.full((report.HEADER_PX, body.shape[1], 3), 255, np.uint8)
    for column, title in enumerate(("target (Cycles)", *labels)):
        report.put_text(header, title, (column * tile + 4, report.HEADER_PX - 7),
                        colour=(0, 0, 0))
    return np.concatenate([header, body], axis=0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the first run's relit.png")
    parser.add_argument("after", type=Path, help="the second run's relit.png")
    parser.add_argument("--labels", nargs=2, default=("before", "after"))
    parser.add_argument("--tile", type=int, default=128, help="tile size in pixels")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(args.out), figure(args.before, args.after, tuple(args.labels), args.tile),
                [cv2.IMWRITE_PNG_COMPRESSION, 9])
    print(f"relit_figure: {args.out}")


if __name__ == "__main__":
    main()
