"""The far-view benchmark (scripts/bench_mips.py), its cheap parts: the score counts only the
pixels wholly covered in both images, and the summary reads issue 51's targets right
(against the asset; against the object, alongside)."""

import math

import numpy as np
import pytest

from diffrec_bench import mips as bench_mips


def test_the_score_counts_only_pixels_wholly_covered_in_both():
    truth = np.zeros((1, 4, 4, 4), np.float32)
    truth[..., 3] = 1.0
    truth[..., :3] = 0.5
    render = truth.copy()
    render[0, 0, :, :3] = 0.0  # a wrong row, wholly covered in both: counted
    render[0, 3, :, 3] = 0.5  # a wrong, half-covered row: not counted
    render[0, 3, :, :3] = 1.0
    error = (0.5 ** (1 / 2.4) * 1.055 - 0.055) ** 2  # sRGB of 0.5 against black
    expected = -10 * math.log10(4 * error / 12)  # 4 of 12 counted pixels wrong
    assert bench_mips.object_psnr(render, truth) == pytest.approx(expected, abs=1e-3)
    assert math.isnan(bench_mips.object_psnr(render, np.zeros_like(truth)))


def record(scene: str, bump: float, gains: dict[str, float]) -> dict:
    """A scene's record whose fitted levels beat linear box by ``gains[scale]`` dB against
    the asset, and by half that against the object."""
    return {"scene": scene, "recipe": {"material": {"bump": bump}},
            "scores": {scale: {"box_srgb": 29.0, "box_linear": 30.0, "fitted": 30.0 + gain}
                       for scale, gain in gains.items()},
            "object_scores": {scale: {"box_srgb": 25.0, "box_linear": 26.0,
                                      "fitted": 26.0 + gain / 2}
                              for scale, gain in gains.items()}}


def test_the_summary_reads_the_targets():
    met = [record("blob", 0.5, {"1": 0.2, "2": 1.5, "3": 1.2}),
           record("critter", 0.6, {"1": 0.1, "2": 2.1, "3": 2.5})]
    summary = bench_mips.summary(met)
    assert summary["bumpiest"] == "critter" and summary["targets_met"]
    assert summary["mean_gain_db"]["2"] == pytest.approx(1.8)
    assert summary["object_mean_gain_db"]["2"] == pytest.approx(0.9)
    # the bumpiest scene 1.9 dB up at 1/8 misses its 2 dB
    assert not bench_mips.summary([met[0], record("critter", 0.6,
                                                  {"1": 0.1, "2": 2.1, "3": 1.9})])["targets_met"]
    # one scale of one scene below linear box misses "never worse", whatever the means
    worse = [record("blob", 0.5, {"1": -0.1, "2": 1.5, "3": 1.2}), met[1]]
    summary = bench_mips.summary(worse)
    assert summary["worst_gain_db"] == pytest.approx(-0.1) and not summary["targets_met"]
    assert "| critter | 1/8 | 29.00 | 30.00 | 32.50 | +2.50 | +1.25 |" in bench_mips.table(met)
