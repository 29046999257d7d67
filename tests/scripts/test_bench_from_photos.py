"""bench_from_photos through its command line at its smallest size (8 photos of 64 px,
trained at 48 px, 2 iterations a pass on a 16-cell grid; at 32 px the made masks are refused):
the scored views counted, a row per run with a finite PSNR on the object and the made masks'
IoU, and the gap to the truth run consistent with the two PSNR printed."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffrec.io import write_image
from diffrec_bench.from_photos import mask_ious

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_from_photos.py"
ROW = re.compile(r"\| (truth|auto) \| (true|made \(IoU ([\d.]+), least ([\d.]+)\)) \| true \| "
                 r"(-?[\d.]+) dB \| (-?[\d.]+) dB \| \d+ s \| [\d.]+ \|")


@pytest.mark.slow
def test_bench_from_photos_scores_each_run_on_the_same_held_out_views(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--views", "8", "--size", "64",
                           "--train-res", "48", "--iterations", "2", "--dmtet-grid", "16",
                           "--runs", "truth,auto", "--scratch", str(tmp_path / "scratch")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {match[1]: match for match in ROW.finditer(done.stdout)}
    assert set(rows) == {"truth", "auto"}, done.stdout[-2000:]
    assert "scored at 3 other views" in done.stdout
    assert 0 < float(rows["auto"][4]) <= float(rows["auto"][3]) <= 1
    psnr = {name: float(row[5]) for name, row in rows.items()}
    assert all(0 < value < 60 for value in psnr.values()), psnr
    gap = re.search(r"auto: ([+-][\d.]+) dB below truth \(target: within 2 dB\): (met|missed)",
                    done.stdout)
    assert gap and float(gap[1]) == pytest.approx(psnr["truth"] - psnr["auto"], abs=0.011)
    assert (gap[2] == "met") == (float(gap[1]) <= 2)


def test_made_masks_are_paired_with_the_true_ones_by_photo_number(tmp_path):
    """A posed run makes masks of its posed photos alone (here 1 and 3 of 4)."""
    truth = np.zeros((4, 4, 4), bool)
    for view in range(4):
        truth[view, : view + 1] = True  # view v: its first v + 1 rows
    folder = tmp_path / "masks_auto" / "images"
    folder.mkdir(parents=True)
    for view in (1, 3):
        made = np.repeat(truth[view, ..., None], 3, -1).astype(np.float32)
        made[0] = 0.0  # one row of the mask lost
        write_image(folder / f"view_{view:02d}.png", made)
    assert mask_ious(tmp_path, truth) == pytest.approx([1 / 2, 3 / 4])
