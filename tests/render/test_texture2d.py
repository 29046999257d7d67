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
