"""sRGB curve against the IEC 61966-2-1 formula; image files round trips and channel order."""

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from diffrec.color import linear_to_srgb, srgb_to_linear
from diffrec.errors import UserError
from diffrec.io import read_image, write_image


def _spec_encode(x: float) -> float:
    return 12.92 * x if x <= 0.0031308 else 1.055 * x ** (1 / 2.4) - 0.055


def _spec_decode(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


# Both sides of each threshold, the linear segment, the power segment, HDR and negatives.
SAMPLES = [-0.1, 0.0, 0.001, 0.0031308, 0.0031309, 0.01, 0.04045, 0.04046, 0.2, 0.5, 1.0, 4.0]


def test_srgb_curve_matches_the_spec_formula():
    x = np.array(SAMPLES)
    np.testing.assert_allclose(linear_to_srgb(x), [_spec_encode(v) for v in SAMPLES], rtol=1e-12)
    np.testing.assert_allclose(srgb_to_linear(x), [_spec_decode(v) for v in SAMPLES], rtol=1e-12)
    t = torch.tensor(SAMPLES, dtype=torch.float64)
    torch.testing.assert_close(linear_to_srgb(t), torch.from_numpy(linear_to_srgb(x)))
    torch.testing.assert_close(srgb_to_linear(t), torch.from_numpy(srgb_to_linear(x)))
    torch.testing.assert_close(srgb_to_linear(linear_to_srgb(t)), t)
    assert linear_to_srgb(np.float32(0.5)).dtype == np.float32


def test_srgb_gradients_are_finite_and_correct():
    t = torch.tensor([0.0, 0.002, 0.3, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(linear_to_srgb, (t,))
    assert torch.autograd.gradcheck(srgb_to_linear, (t,))


@pytest.mark.parametrize(("bit_depth", "channels"), [(8, 3), (8, 4), (16, 3), (16, 1)])
def test_png_round_trip_within_quantisation(tmp_path, bit_depth, channels):
    rng = np.random.default_rng(0)
    image = rng.random((5, 7, channels), dtype=np.float32)
    for data in (False, True):
        write_image(tmp_path / "a.png", image, data=data, bit_depth=bit_depth)
        back = read_image(tmp_path / "a.png", data=data)
        step = 1.0 / (2**bit_depth - 1)
        if data:
            np.testing.assert_allclose(back, image, atol=step / 2 + 1e-7)
        else:  # quantised in sRGB: compare there
            np.testing.assert_allclose(
                linear_to_srgb(back[..., :3]), linear_to_srgb(image[..., :3]), atol=step / 2 + 1e-6
            )
            if channels == 4:  # alpha is linear
                np.testing.assert_allclose(back[..., 3], image[..., 3], atol=step / 2 + 1e-7)


def test_png_channel_order_and_rows_match_pillow(tmp_path):
    image = np.zeros((2, 3, 3), dtype=np.float32)
    image[0, 0] = [1.0, 0.0, 0.0]  # top-left red
    image[1, 2] = [0.0, 0.0, 1.0]  # bottom-right blue
    image[0, 2] = [0.0, 0.2, 0.0]  # encoded as sRGB
    write_image(tmp_path / "a.png", image)
    pixels = np.asarray(Image.open(tmp_path / "a.png"))
    assert pixels[0, 0].tolist() == [255, 0, 0] and pixels[1, 2].tolist() == [0, 0, 255]
    assert pixels[0, 2, 1] == round(_spec_encode(0.2) * 255)
    Image.fromarray(pixels).save(tmp_path / "b.png")
    np.testing.assert_allclose(read_image(tmp_path / "b.png")[0, 0], [1.0, 0.0, 0.0])


def test_exr_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(1)
    for channels in (1, 3, 4):
        image = (rng.standard_normal((6, 4, channels)) * 100).astype(np.float32)
        write_image(tmp_path / "a.exr", image)
        np.testing.assert_array_equal(read_image(tmp_path / "a.exr"), image)


def test_hdr_round_trip_within_rgbe_precision(tmp_path):
    rng = np.random.default_rng(2)
    image = (rng.random((6, 20, 3)) * 50).astype(np.float32)
    write_image(tmp_path / "a.hdr", image)
    back = read_image(tmp_path / "a.hdr")
    # RGBE shares one exponent per pixel: 8 mantissa bits relative to the largest channel.
    largest = image.max(axis=-1, keepdims=True)
    assert (np.abs(back - image) <= largest / 128).all()


def test_hdr_stores_red_first(tmp_path):
    # Narrow images are written without run-length encoding: decode the first pixel by hand.
    write_image(tmp_path / "a.hdr", np.array([[[4.0, 2.0, 1.0]]], dtype=np.float32))
    raw = (tmp_path / "a.hdr").read_bytes()
    r, g, b, e = struct.unpack("4B", raw[raw.index(b"+X 1\n") + 5 :][:4])
    scale = 2.0 ** (e - 136)  # 2^(e - 128) / 256
    np.testing.assert_allclose([r * scale, g * scale, b * scale], [4.0, 2.0, 1.0], rtol=1 / 64)


def test_image_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_image(tmp_path / "missing.png")
    with pytest.raises(UserError, match="unknown image format"):
        write_image(tmp_path / "a.bmp", np.zeros((2, 2, 3)))
    with pytest.raises(UserError, match="NaN"):
        write_image(tmp_path / "a.png", np.full((2, 2, 3), np.nan))
    with pytest.raises(UserError, match="3 channels"):
        write_image(tmp_path / "a.hdr", np.zeros((2, 2, 4)))
    with pytest.raises(UserError, match="bit depth"):
        write_image(tmp_path / "a.png", np.zeros((2, 2, 3)), bit_depth=12)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(UserError, match="cannot decode"):
        read_image(tmp_path / "bad.png")


def test_an_image_cut_short_is_one_sentence_without_opencvs_log(tmp_path, capfd):
    """A truncated PNG or HDR: OpenCV printed its own [ WARN ] / [ERROR] line, and the
    sentence said "not a PNG", where the file is one, cut short."""
    rng = np.random.default_rng(0)
    write_image(tmp_path / "whole.png", rng.uniform(size=(64, 64, 3)))
    write_image(tmp_path / "whole.hdr", rng.uniform(size=(64, 64, 3)).astype(np.float32))
    for name in ("whole.png", "whole.hdr"):
        data = (tmp_path / name).read_bytes()
        cut = tmp_path / f"cut{Path(name).suffix}"
        cut.write_bytes(data[: len(data) // 2])
        with pytest.raises(UserError, match="damaged \\(cut short\\?\\)"):
            read_image(cut)
    captured = capfd.readouterr()
    assert "WARN" not in captured.err and "ERROR" not in captured.err, captured.err
