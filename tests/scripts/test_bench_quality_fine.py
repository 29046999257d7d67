"""The quality benchmark's fine-detail scenes (issue 30): ``dots`` (small sharp dots on a torus)
and ``glyphs`` (thin strokes on a tilted box). Their true base colour, rendered unlit by Cycles
at 256 pixels from one camera (``fine_detail_truth.py`` in a child Python with bpy), shows the
recipe's two colours at full contrast, with features as wide as ``recipes.feature_size`` says:
every dot and stroke is gone after an erosion three times that wide (the glyphs are laid out
in x and y, so a stroke on a face seen at a grazing angle to that plane widens up to 2.8 times),
and some survive one of 3 pixels (a dot is a slice of a ball, so many are smaller than the
largest). ``--albedo``'s targets
(the true albedo alone) are rendered once, then found in the cache."""

from pathlib import Path

import numpy as np
import pytest
from truth_scripts import run_truth_script

from diffrec_bench.quality.recipes import RECIPES, feature_size

pytestmark = pytest.mark.blender
SCRIPT = Path(__file__).with_name("fine_detail_truth.py")

OBJECT_SIZE = 2.0  # scene units: every scene fits the unit sphere


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    out = tmp_path_factory.mktemp("fine_detail")
    figures = run_truth_script(SCRIPT, out, timeout_s=900)
    with np.load(out / "albedo.npz") as stored:
        return dict(stored), figures


def _eroded(mask: np.ndarray, width: int) -> np.ndarray:
    """``mask`` eroded by a ``width`` x ``width`` square (odd width; outside counts as off)."""
    radius = width // 2
    padded = np.pad(mask, radius)
    out = np.ones_like(mask)
    for dy in range(width):
        for dx in range(width):
            out &= padded[dy:dy + mask.shape[0], dx:dx + mask.shape[1]]
    return out


def test_features_are_a_few_percent_of_the_object_and_ink_on_white():
    for name in ("dots", "glyphs"):
        material = RECIPES[name]["material"]
        assert 0.015 <= feature_size(material) / OBJECT_SIZE <= 0.04, name
        background, ink = (np.mean(colour) for colour in material["colors"])
        assert background / ink > 20, name
    with pytest.raises(ValueError, match="no single feature size"):
        feature_size(RECIPES["box"]["material"])


@pytest.mark.parametrize("name", ["dots", "glyphs"])
def test_the_true_base_colour_has_the_recipes_contrast_and_feature_size(truth, name):
    images, _ = truth
    image, pixels_per_unit = images[name], float(images[f"{name}_pixels_per_unit"])
    background, ink = (colour[0] for colour in RECIPES[name]["material"]["colors"])
    covered = image[..., 3] > 0.5
    red = image[..., 0][covered]
    assert np.percentile(red, 2) == pytest.approx(ink, abs=0.01)  # unlit, unblurred
    assert np.percentile(red, 98) == pytest.approx(background, abs=0.01)
    features = covered & (image[..., 0] < (ink + background) / 2)
    assert 0.05 < features.sum() / covered.sum() < 0.5  # features on a background
    width = feature_size(RECIPES[name]["material"]) * pixels_per_unit
    assert width > 3  # pixels: enough to tell the sizes apart
    assert not _eroded(features, 2 * round(1.5 * width) + 1).any()  # nothing much wider
    assert _eroded(features, 3).sum() > 0.05 * features.sum()  # not all thinner than 3 pixels


def test_the_true_albedo_alone_is_rendered_once_then_cached(truth):
    _, figures = truth
    assert figures["albedo_keys"] == ["albedo"]
    assert figures["built"] and not figures["built_again"] and figures["same_again"]
