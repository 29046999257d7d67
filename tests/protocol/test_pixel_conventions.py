"""``diffrec.protocol.images``: the one source of the image conventions the add-on and the
backend share. Its numpy formulas against independent references, the backend's torch versions
(``diffrec.color``) against it, and the one longest-side rule against the views' resize."""

import dataclasses

import numpy as np
import pytest
import torch

from diffrec import color
from diffrec.camera import orbit_cameras
from diffrec.pipeline.views import Views, at_longest_side
from diffrec.protocol import images

# both sides of each threshold, the linear segment, the power segment, HDR and negatives
SAMPLES = [-0.1, 0.0, 0.001, 0.0031308, 0.0031309, 0.01, 0.04045, 0.04046, 0.2, 0.5, 1.0, 4.0]


def test_the_curve_and_its_inverse_round_trip_and_follow_the_thresholds():
    x = np.array(SAMPLES)
    np.testing.assert_allclose(images.srgb_to_linear(images.linear_to_srgb(x)), x, rtol=1e-12)
    below = x <= images.LINEAR_THRESHOLD
    np.testing.assert_allclose(images.linear_to_srgb(x)[below], 12.92 * x[below], rtol=1e-12)
    assert images.SRGB_THRESHOLD == pytest.approx(12.92 * images.LINEAR_THRESHOLD, abs=1e-6)
    assert images.linear_to_srgb(np.float32(0.5)).dtype == np.float32
    assert images.srgb_to_linear(np.array([0, 255]) / 255).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("name", ["linear_to_srgb", "srgb_to_linear"])
def test_torch_versions_compute_the_protocol_formulas(name):
    x = np.linspace(-0.5, 3.0, 4001)
    ours = getattr(color, name)(torch.from_numpy(x))
    np.testing.assert_allclose(ours.numpy(), getattr(images, name)(x), rtol=1e-12, atol=0)
    assert isinstance(getattr(color, name)(x), np.ndarray), "numpy in, numpy out"


def test_premultiplied_to_straight_divides_where_covered_and_keeps_the_rest_and_back():
    rng = np.random.default_rng(0)
    straight = rng.random((5, 6, 4)).astype(np.float32)
    straight[0, :, 3] = 0.0  # uncovered: colour kept as it is
    premultiplied = np.concatenate([straight[..., :3] * straight[..., 3:], straight[..., 3:]],
                                   -1)
    back = images.premultiplied_to_straight(premultiplied)
    assert back.dtype == np.float32
    np.testing.assert_allclose(back[1:], straight[1:], rtol=1e-5)
    np.testing.assert_array_equal(back[0], premultiplied[0])
    torch.testing.assert_close(color.premultiplied_to_straight(torch.from_numpy(premultiplied)),
                               torch.from_numpy(back))
    # and back: straight to premultiplied is the product it was made with
    torch.testing.assert_close(color.straight_to_premultiplied(torch.from_numpy(straight)),
                               torch.from_numpy(premultiplied))
    with pytest.raises(ValueError, match="RGBA"):
        images.premultiplied_to_straight(straight[..., :3])


@pytest.mark.parametrize(("size", "longest", "expected"), [
    ((1920, 1080), 512, (512, 288)), ((1080, 1920), 512, (288, 512)),
    ((300, 300), 64, (64, 64)), ((5000, 2), 100, (100, 1)), ((30, 20), 45, (45, 30))])
def test_longest_side_size(size, longest, expected):
    assert images.longest_side_size(*size, longest) == expected


def test_views_resize_to_the_protocols_size():
    cameras = orbit_cameras(2, 4.0, 30)
    wide = Views(dataclasses.replace(cameras, width=30, height=20), torch.rand(2, 20, 30, 4))
    resized = at_longest_side(wide, 45)
    assert (resized.cameras.width, resized.cameras.height) == images.longest_side_size(30, 20, 45)
    assert tuple(resized.images.shape[1:3]) == (30, 45)


def test_the_add_on_reaches_them_through_its_protocol_package():
    """The add-on loads the protocol as a package of its own (``addon.core.wire``, no torch)."""
    from addon.core.wire import protocol

    wire = protocol()
    assert wire.images.longest_side_size(1920, 1080, 512) == (512, 288)
    x = np.linspace(0.0, 1.0, 11)
    np.testing.assert_array_equal(wire.images.linear_to_srgb(x), images.linear_to_srgb(x))
