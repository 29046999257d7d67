"""bench_from_photos through its command line at its smallest size (8 photos of 64 px,
trained at 48 px, 2 iterations a pass on a 16-cell grid; at 32 px the made masks are refused):
the scored views counted, a row per run with a finite PSNR on the object and the made masks'
IoU, and the gap to the truth run consistent with the two PSNR printed."""

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from diffrec.io import write_image
from diffrec_bench import photo_capture
from diffrec_bench.from_photos import _nudged, mask_ious, registered

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_from_photos.py"
ROW = re.compile(r"\| (truth|auto) \| (true|made \(IoU ([\d.]+), least ([\d.]+)\)) \| true \| "
                 r"(-?[\d.]+) dB \| (-?[\d.]+) dB \| (-?[\d.]+) dB \| \d+ s \| [\d.]+ \|")


@pytest.mark.slow
def test_bench_from_photos_scores_each_run_on_the_same_held_out_views(tmp_path):
    command = [sys.executable, str(SCRIPT), "--views", "8", "--size", "64", "--train-res", "48",
               "--iterations", "2", "--dmtet-grid", "16", "--register-rounds", "1",
               "--runs", "truth,auto", "--scratch", str(tmp_path / "scratch")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {match[1]: match for match in ROW.finditer(done.stdout)}
    assert set(rows) == {"truth", "auto"}, done.stdout[-2000:]
    assert "scored at 3 other views" in done.stdout
    assert 0 < float(rows["auto"][4]) <= float(rows["auto"][3]) <= 1
    psnr = {name: float(row[6]) for name, row in rows.items()}
    assert all(0 < value < 60 for value in psnr.values()), psnr
    # registering a scored view keeps only the steps that lower the score's own error
    assert all(float(row[6]) >= float(row[5]) - 0.005 for row in rows.values()), rows
    gap = re.search(r"auto: ([+-][\d.]+) dB below truth \(target: within 2 dB\): (met|missed)",
                    done.stdout)
    assert gap and float(gap[1]) == pytest.approx(psnr["truth"] - psnr["auto"], abs=0.011)
    assert (gap[2] == "met") == (float(gap[1]) <= 2)

    again = subprocess.run([*command, "--score-only"], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
    assert again.returncode == 0 and "scored again" in again.stdout, again.stderr[-2000:]
    assert [match[0] for match in ROW.finditer(again.stdout)] == [row[0] for row in rows.values()]


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


class BallJudge:
    """A stand-in for ``Judge``: the ray-cast ball alone, over black (``photo_capture``)."""

    @staticmethod
    def render(cameras):
        colour, ball = photo_capture.photos(cameras, noise=0.0)
        return torch.from_numpy(colour * ball[..., None])


def ball_pixel(cameras) -> np.ndarray:
    """Where each camera sees the ball's centre, pixels ``[N, 2]``."""
    local = (cameras.world_to_camera().double() @ torch.tensor(
        [*photo_capture.BALL_CENTRE, 1.0], dtype=torch.float64))[:, :3]
    return np.stack([(cameras.cx + cameras.fx * local[:, 0] / -local[:, 2]).numpy(),
                     (cameras.cy - cameras.fy * local[:, 1] / -local[:, 2]).numpy()], -1)


def test_a_scored_view_placed_off_is_registered_back():
    true = photo_capture.object_cameras(1, 64, seed=5)
    target, ball = photo_capture.photos(true, noise=0.0)
    off = true.camera_to_world[0].double()
    for axis, amount in ((0, math.radians(1.2)), (1, math.radians(-0.9)), (3, 0.04)):
        off = _nudged(off, axis, amount)
    placed = dataclasses.replace(true, camera_to_world=off[None].float())
    found = registered(BallJudge(), placed, target, ball)

    def error(cameras) -> float:  # the score's own measure
        return float(np.square(BallJudge.render(cameras).numpy() - target)[ball].mean())

    before = np.linalg.norm(ball_pixel(placed) - ball_pixel(true))
    after = np.linalg.norm(ball_pixel(found) - ball_pixel(true))
    print(f"the ball's centre {before:.2f} -> {after:.2f} px off; error {error(placed):.5f} -> "
          f"{error(found):.5f}, {error(true):.5f} at the true camera")
    assert before > 1.5 and after < 0.3
    assert error(found) < 0.2 * error(placed)


def test_a_nudge_turns_about_the_cameras_own_axis():
    matrix = photo_capture.object_cameras(1, 8).camera_to_world[0].double()
    turned = _nudged(matrix, 2, math.radians(30))  # about the camera's own z (its view axis)
    np.testing.assert_allclose(turned[:3, 2], matrix[:3, 2], atol=1e-12)
    cos, sin = math.cos(math.radians(30)), math.sin(math.radians(30))
    expected = cos * matrix[:3, 0] + sin * matrix[:3, 1]  # x turned towards y
    np.testing.assert_allclose(turned[:3, 0], expected, atol=1e-12)
    np.testing.assert_allclose(_nudged(matrix, 4, 0.5)[:3, 3], matrix[:3, 3] + 0.5 * matrix[:3, 1])
