"""bench_auto_masks through its command line at a small size: one line per run with the IoU
of every view (fractions, their mean and least consistent with them), and the picture."""

import re
import subprocess
import sys
from pathlib import Path

from diffrec.io import read_image

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_auto_masks.py"


def test_bench_auto_masks_prints_each_views_iou_and_draws_the_picture(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", "8x48",
                           "--picture", str(tmp_path / "masks.png")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    match = re.fullmatch(r"8 views at 48 px: IoU mean ([\d.]+), least ([\d.]+), [\d.]+ s; "
                         r"per view ((?:[\d.]+ ?){8})", done.stdout.strip())
    assert match, done.stdout
    per_view = [float(value) for value in match.group(3).split()]
    assert all(0 < value <= 1 for value in per_view)
    assert abs(float(match.group(1)) - sum(per_view) / 8) < 1e-3
    assert float(match.group(2)) == min(per_view)
    picture = read_image(tmp_path / "masks.png")
    assert picture.shape[:2] == (2 * 48, 6 * 48)
