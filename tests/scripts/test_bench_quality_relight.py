"""The quality benchmark's relighting (issue 25) on the true scene, at a tiny size: the
``box``'s targets under its two other HDRIs and the sun are rendered once and then found in
the cache; the true albedo render shows the recipe's two checker colours, unlit; the true
scene judged against its own relit targets reproduces them under every light and has no
base-colour error (Cycles with the same seed renders the same image, so any difference in
how the lights or the base colour are set up between targets and judging shows), and with
the seed results are judged with it carries noise of its own. Runs
``relight_truth.py`` in a child Python (bpy)."""

from pathlib import Path

import numpy as np
import pytest
from truth_scripts import run_truth_script

from diffrec_bench.quality.lights import relight_lights
from diffrec_bench.quality.recipes import RECIPES

pytestmark = pytest.mark.blender
SCRIPT = Path(__file__).with_name("relight_truth.py")


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    cache = tmp_path_factory.mktemp("relight")
    return run_truth_script(SCRIPT, cache, timeout_s=600)


def test_relit_targets_are_rendered_once_then_cached(figures):
    assert figures["built"] and not figures["built_again"] and figures["same_again"]
    names = [light["name"] for light in relight_lights("box")]
    assert figures["keys"] == sorted(["albedo", *names])


def test_the_true_albedo_is_the_recipes_colours_unlit(figures):
    pixels = np.asarray(figures["albedo_pixels"])
    white, ink = (colour[0] for colour in RECIPES["box"]["material"]["colors"])  # greys
    assert np.ptp(pixels, axis=1).max() < 1e-3  # grey, as both colours are: no light's tint
    assert pixels.min() > ink - 1e-3 and pixels.max() < white + 1e-3  # no highlight
    low, high = np.percentile(pixels[:, 0], [2, 98])
    assert low == pytest.approx(ink, abs=0.005) and high == pytest.approx(white, abs=0.005)


def test_the_truth_relit_reproduces_its_targets_and_has_no_albedo_error(figures):
    for name, psnr in figures["truth_psnr"].items():
        assert psnr > 60.0, (name, psnr)
    # with the results' seed: noise of its own under an HDRI (a sun over black is all but
    # noiseless)
    hdris = [light["name"] for light in relight_lights("box") if light["kind"] == "hdri"]
    assert hdris and all(15.0 < figures["truth_psnr_judge_seed"][name] < 50.0
                         for name in hdris), figures["truth_psnr_judge_seed"]
    assert figures["between_lights_psnr"] < 25.0  # the lights do differ
    albedo = figures["truth_albedo"]
    assert albedo["relative"] < 1e-3 and albedo["rmse_raw"] < 1e-3
    assert albedo["scale"] == pytest.approx([1, 1, 1], abs=1e-3)


def test_the_relit_picture_shows_each_light_and_the_base_colour(figures):
    assert figures["picture_rows"] == len(relight_lights("box")) + 1
    assert figures["picture_target_max"] > 100  # the targets are shown, lit
    assert figures["picture_error_max"] <= 8  # each result beside its own light's target
