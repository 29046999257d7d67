"""``scripts/relit_figure.py``: two runs' ``relit.png`` of one scene side by side (target,
first result, second result per row); pictures of different targets are refused."""

from pathlib import Path

import numpy as np
import pytest

from diffrec_bench import relit_figure
from diffrec_bench.demo import report

ROWS, SIZE = 4, 32


def relit_picture(path: Path, targets: np.ndarray, results: np.ndarray) -> Path:
    """A ``relit.png`` as ``relight.judge`` writes it: straight-alpha RGBA renders, one a row."""
    alpha = np.ones((*targets.shape[:3], 1), np.float32)
    return report.write_comparison(path, np.concatenate([results, alpha], -1),
                                   np.concatenate([targets, alpha], -1),
                                   [f"light {row}" for row in range(ROWS)])


def flat_rows(values) -> np.ndarray:
    """[ROWS, SIZE, SIZE, 3] linear images, each row one grey."""
    return np.broadcast_to(np.asarray(values, np.float32)[:, None, None, None],
                           (ROWS, SIZE, SIZE, 3)).copy()


def test_the_figure_shows_the_target_then_each_runs_result_row_by_row(tmp_path):
    targets = flat_rows([0.2, 0.4, 0.6, 0.8])
    before = relit_picture(tmp_path / "a.png", targets, flat_rows([0.1, 0.1, 0.1, 0.1]))
    after = relit_picture(tmp_path / "b.png", targets, flat_rows([0.9, 0.9, 0.9, 0.9]))
    shown = relit_figure.figure(before, after, ("first", "second"), tile=SIZE)
    body = shown[report.HEADER_PX:].astype(float)
    assert body.shape == (ROWS * SIZE, 3 * SIZE, 3)
    middle = body[SIZE // 2::SIZE, SIZE // 2::SIZE].mean(-1)  # [row, column], 8-bit sRGB
    assert np.all(np.diff(middle[:, 0]) > 20), "the targets, brighter row by row"
    assert np.ptp(middle[:, 1]) < 2 and np.ptp(middle[:, 2]) < 2
    assert middle[0, 1] < middle[0, 0] < middle[-1, 0] < middle[0, 2]


def test_pictures_of_different_targets_are_refused(tmp_path):
    results = flat_rows([0.5] * ROWS)
    before = relit_picture(tmp_path / "a.png", flat_rows([0.2] * ROWS), results)
    after = relit_picture(tmp_path / "b.png", flat_rows([0.3] * ROWS), results)
    with pytest.raises(SystemExit, match="different targets"):
        relit_figure.figure(before, after, ("first", "second"), tile=SIZE)
