"""diffrec.render.texture2d.Texture2D.resized: resampling keeps the texture's ranges, its
trainability, and what it shows."""

import torch

from diffrec.render.texture2d import Texture2D


def test_a_resized_texture_keeps_ranges_trainability_and_its_image():
    v, u = torch.meshgrid(torch.linspace(0, 1, 32), torch.linspace(0, 1, 32), indexing="ij")
    ramp = torch.stack([u, v, 0.5 * torch.ones_like(u)], -1)
    texture = Texture2D(ramp, min_value=[0.0, 0.1, 0.0], max_value=[1.0, 0.9, 1.0])
    texture.clamp_()
    larger, smaller = texture.resized(128), texture.resized(8)
    assert larger.resolution == (128, 128) and smaller.resolution == (8, 8)
    assert larger.data.requires_grad and torch.equal(larger.max_value, texture.max_value)
    green = larger.data.detach()[..., 1]
    assert float(green.min()) >= 0.1 and float(green.max()) <= 0.9
    # a smooth ramp resampled up and back down is itself again, to within a texel's step
    back = larger.resized(32).data
    assert (back - texture.data).abs().max() < 1 / 31
    # shrinking averages (antialiased): the mean is kept
    assert torch.allclose(smaller.data.mean((0, 1)), texture.data.mean((0, 1)), atol=1e-3)


def test_a_frozen_texture_stays_frozen():
    texture = Texture2D(torch.rand(4, 4, 3), trainable=False)
    assert not texture.resized(8).data.requires_grad


def test_blur_gradient_spreads_each_texel_as_a_wrapped_gaussian():
    """A gradient on one corner texel becomes a Gaussian around it that wraps to the other
    edges (float64 reference by wrapped distance); every channel keeps its total; a sigma
    of 0 and a texture without a gradient are left alone."""
    texture = Texture2D(torch.zeros(32, 24, 2))
    texture.blur_gradient_(2.0)
    assert texture.data.grad is None
    grad = torch.zeros(32, 24, 2)
    grad[0, 0, 0], grad[10, 20, 1] = 1.0, 2.0
    texture.data.grad = grad.clone()
    texture.blur_gradient_(0.0)
    assert torch.equal(texture.data.grad, grad)
    texture.blur_gradient_(2.0)
    row, col = torch.meshgrid(torch.arange(32.0), torch.arange(24.0), indexing="ij")
    dy, dx = torch.minimum(row, 32 - row), torch.minimum(col, 24 - col)
    reference = torch.exp(-(dx.double() ** 2 + dy.double() ** 2) / (2 * 2.0**2))
    reference /= reference.sum()
    blurred = texture.data.grad
    torch.testing.assert_close(blurred[..., 0].double(), reference, rtol=0, atol=2e-4)
    torch.testing.assert_close(blurred.sum((0, 1)), torch.tensor([1.0, 2.0]))
    assert blurred[31, 23, 0] > 0.02  # the wrapped neighbour across both edges


def test_a_side_that_is_not_a_power_of_two_reads_its_chain_down_to_the_first_odd_side():
    """A 12-texel side halves to 6 and 3 and stops there (as the export writes the chain):
    seen from afar, the texture's middle texel is the mean of its middle 4x4 block."""
    from diffrec import raster
    data = torch.rand(12, 12, 3, generator=torch.Generator().manual_seed(0))
    texture = Texture2D(data)
    uv = torch.full((1, 1, 1, 2), 0.5)
    far = torch.tensor([1.0, 0.0, 0.0, 1.0]).expand(1, 1, 1, 4)  # a footprint of the whole texture
    seen = texture.sample(uv, far, ctx=raster.RasterContext("cpu", impl="torch"))
    assert torch.allclose(seen[0, 0, 0], data[4:8, 4:8].mean((0, 1)), atol=1e-6)
