"""Torch interpolate: known answers, gradients, and attribute pixel derivatives."""

import numpy as np
import pytest
import torch
from raster_reference import barycentrics, coverage, pixel_centres

from diffrec import raster

CTX = raster.RasterContext("cpu", impl="torch")
TRI = torch.tensor([[0, 1, 2]], dtype=torch.int32)
CLIP = [[-0.9, -0.7, 0.2, 1.0], [1.3, -0.5, 0.9, 2.0], [-0.2, 1.1, 0.1, 1.4]]
ATTR = [[1.0, 0.0, 5.0], [0.0, 1.0, -2.0], [0.0, 0.0, 0.5]]


def rasterized(dtype=torch.float64, size=(12, 16)):
    pos = torch.tensor([CLIP], dtype=dtype)
    return raster.rasterize(CTX, pos, TRI, size)


def test_values_are_perspective_correct_and_zero_outside():
    rast, _ = rasterized()
    out, out_da = raster.interpolate(torch.tensor(ATTR, dtype=torch.float64), rast, TRI, ctx=CTX)
    inside, ambiguous, b, _ = coverage(np.array(CLIP), 12, 16)
    expected = b @ np.array(ATTR)
    sel = inside & ~ambiguous
    np.testing.assert_allclose(out[0].numpy()[sel], expected[sel], atol=1e-9)
    assert (out[0][rast[0, ..., 3] == 0] == 0).all()
    assert out_da.numel() == 0


def test_per_image_and_shared_attributes():
    pos = torch.tensor([CLIP, CLIP], dtype=torch.float64)
    rast, _ = raster.rasterize(CTX, pos, TRI, (8, 8))
    shared = torch.tensor(ATTR, dtype=torch.float64)
    per_image = torch.stack([shared, 2 * shared])
    out_shared, _ = raster.interpolate(shared, rast, TRI, ctx=CTX)
    out_batched, _ = raster.interpolate(shared[None], rast, TRI, ctx=CTX)
    out_per_image, _ = raster.interpolate(per_image, rast, TRI, ctx=CTX)
    assert torch.equal(out_shared, out_batched)
    assert torch.allclose(out_per_image[1], 2 * out_shared[1])
    assert torch.allclose(out_per_image[0], out_shared[0])
    with pytest.raises(ValueError, match="batch"):
        raster.interpolate(torch.stack([shared] * 3), rast, TRI, ctx=CTX)


def test_gradients_to_attributes_and_barycentrics():
    rast, _ = rasterized(size=(6, 8))
    uv = rast[..., :2].detach().requires_grad_()
    attr = torch.tensor(ATTR, dtype=torch.float64, requires_grad=True)

    def interpolate(a, barys):  # only u and v are differentiable; depth and id are not
        return raster.interpolate(a, torch.cat([barys, rast[..., 2:]], -1), TRI, ctx=CTX)[0]

    assert torch.autograd.gradcheck(interpolate, (attr, uv))


@pytest.mark.parametrize("diff_attrs", ["all", [2, 0]])
def test_attribute_derivatives_match_pixel_finite_differences(diff_attrs):
    height, width = 12, 16
    rast, rast_db = rasterized(size=(height, width))
    attr = torch.tensor(ATTR, dtype=torch.float64)
    _, out_da = raster.interpolate(attr, rast, TRI, rast_db=rast_db, diff_attrs=diff_attrs,
                                   ctx=CTX)
    channels = [0, 1, 2] if diff_attrs == "all" else diff_attrs
    assert out_da.shape[-1] == 2 * len(channels)

    inside, ambiguous, _, _ = coverage(np.array(CLIP), height, width)
    X, Y = pixel_centres(height, width)
    h = 1e-4
    sel = inside & ~ambiguous
    for axis, (dx, dy) in enumerate(((h, 0), (0, h))):
        plus = barycentrics(CLIP, X + dx * 2 / width, Y + dy * 2 / height)[0] @ np.array(ATTR)
        minus = barycentrics(CLIP, X - dx * 2 / width, Y - dy * 2 / height)[0] @ np.array(ATTR)
        fd = (plus - minus) / (2 * h)
        for k, channel in enumerate(channels):
            got = out_da[0, ..., 2 * k + axis].numpy()
            np.testing.assert_allclose(got[sel], fd[..., channel][sel], atol=1e-6)


def test_bad_diff_attrs_rejected():
    rast, rast_db = rasterized()
    with pytest.raises(IndexError, match="diff_attrs"):
        raster.interpolate(torch.tensor(ATTR, dtype=torch.float64), rast, TRI, rast_db, [3],
                           ctx=CTX)
