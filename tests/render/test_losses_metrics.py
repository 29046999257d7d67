"""Image losses against the reference formulas (float64 numpy) and metrics against known values."""

import numpy as np
import pytest
import torch

from diffrec.color import srgb_to_linear
from diffrec.render.losses import LOSSES, clipped_like, image_loss
from diffrec.render.metrics import psnr, ssim


def srgb(x):
    power = 1.055 * np.power(np.maximum(x, 0.0031308), 1 / 2.4) - 0.055
    return np.where(x <= 0.0031308, 12.92 * x, power)


def tone_slope(a):
    """d/da of srgb(log(a + 1)), analytically."""
    u = np.log(a + 1)
    srgb_slope = np.where(u <= 0.0031308, 12.92,
                          1.055 / 2.4 * np.power(np.maximum(u, 0.0031308), 1 / 2.4 - 1))
    return srgb_slope / (a + 1)


def reference(kind, x, y):
    tone = lambda a: srgb(np.log(np.clip(a, 0, 65535) + 1))  # noqa: E731
    return {
        "logl2_linearized": (tone_slope(y) * (x - y)) ** 2,
        "logl1": np.abs(tone(x) - tone(y)),
        "logl2": (tone(x) - tone(y)) ** 2,
        "mse": (x - y) ** 2,
        "l1": np.abs(x - y),
        "smape": np.abs(x - y) / (np.abs(x) + np.abs(y) + 0.01),
        "relmse": (x - y) ** 2 / (x**2 + y**2 + 0.1),
    }[kind].mean()


@pytest.mark.parametrize("kind", sorted(LOSSES))
def test_losses_match_reference_formulas(kind):
    rng = np.random.default_rng(0)
    x = rng.exponential(2.0, (2, 5, 6, 3))  # HDR values, some well above 1
    y = rng.exponential(2.0, (2, 5, 6, 3))
    x[0, 0, 0, 0] = 1e6  # beyond the log losses' clamp
    got = image_loss(torch.from_numpy(x), torch.from_numpy(y), kind)
    assert got.item() == pytest.approx(reference(kind, x, y), rel=1e-6)
    assert image_loss(torch.from_numpy(x), torch.from_numpy(x), kind).item() == 0


def test_noise_biases_logl1_but_not_logl2_linearized():
    """A Monte Carlo render with the right mean under skewed noise (rare bright samples), its
    gradient estimated from other samples, as path replay does: the expected gradient of the
    linearised loss is zero at the right mean, while logl1's pushes the render up (L1 fits
    the samples' median, which lies below their mean)."""
    generator = torch.Generator().manual_seed(0)
    shape = (40000, 1, 1, 3)
    target = torch.full(shape, 0.5, dtype=torch.float64)
    primal, adjoint = (-torch.log(torch.rand(shape, generator=generator, dtype=torch.float64))
                       for _ in range(2))  # exponential samples, mean 1
    scale = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)  # the right mean
    gradients = {}
    for kind in ("logl1", "logl2_linearized"):
        # the value of scale * primal, the derivative of scale * adjoint
        render = (scale * primal).detach() + scale * adjoint - (scale * adjoint).detach()
        (gradient,) = torch.autograd.grad(image_loss(render, target, kind), scale)
        gradients[kind] = float(gradient)
    assert gradients["logl1"] < -0.1, gradients  # a descent step brightens the render
    assert abs(gradients["logl2_linearized"]) < 0.05 * abs(gradients["logl1"]), gradients


def test_a_clipped_white_target_is_met_by_any_render_at_least_as_bright():
    """Where a target channel is white as 8 bits store it (sRGB 255), a brighter render costs
    nothing and gets no gradient, a darker one is pulled up; elsewhere (254 and below, or an
    HDR target) the render is compared as it is."""
    white = srgb_to_linear(torch.tensor([255.0, 254.0]) / 255.0)
    target = torch.stack([white[0], white[1], torch.tensor(3.0)])[None].expand(2, 3).clone()
    render = torch.tensor([[4.0, 4.0, 4.0], [0.5, 0.5, 0.5]], requires_grad=True)
    clipped = clipped_like(render, target)
    assert clipped.tolist() == [[1.0, 4.0, 4.0], [0.5, 0.5, 0.5]]
    image_loss(clipped, target, "logl1").backward()
    grad = render.grad
    assert grad[0, 0] == 0 and grad[0, 1] > 0 and grad[0, 2] > 0  # brighter than 254: down
    assert (grad[1] < 0).all()  # darker than white: up
    assert image_loss(clipped_like(render, target)[:1, :1], target[:1, :1]) == 0


def test_mask_restricts_the_mean():
    x, y = torch.zeros(1, 2, 2, 3), torch.zeros(1, 2, 2, 3)
    y[0, 0, 0] = 1.0
    mask = torch.zeros(1, 2, 2, 1)
    mask[0, 0, 0] = 1
    assert image_loss(x, y, "mse", mask).item() == pytest.approx(1.0)
    assert image_loss(x, y, "mse", 1 - mask).item() == 0
    with pytest.raises(ValueError, match="unknown loss"):
        image_loss(x, y, "l3")
    with pytest.raises(ValueError, match="differ"):
        image_loss(x, y[..., :2], "mse")


def test_psnr_of_a_known_error_in_display_space():
    target = srgb_to_linear(torch.full((2, 8, 8, 3), 0.5, dtype=torch.float64))
    render = srgb_to_linear(torch.full((2, 8, 8, 3), 0.6, dtype=torch.float64))
    assert psnr(render, target).tolist() == pytest.approx([20.0, 20.0])  # mse 0.01


def test_ssim_of_constant_images_is_the_luminance_term():
    a, b = 0.3, 0.7
    render = srgb_to_linear(torch.full((1, 16, 16, 3), a, dtype=torch.float64))
    target = srgb_to_linear(torch.full((1, 16, 16, 3), b, dtype=torch.float64))
    c1 = 0.01**2
    expected = (2 * a * b + c1) / (a * a + b * b + c1)  # zero variance: structure term is 1
    assert ssim(render, target).item() == pytest.approx(expected, rel=1e-9)
    assert ssim(target, target).item() == pytest.approx(1.0)


def test_ssim_falls_with_noise():
    gen = torch.Generator().manual_seed(0)
    image = torch.rand(1, 32, 32, 3, generator=gen)
    scores = [ssim(image + s * torch.randn(image.shape, generator=gen), image).item()
              for s in (0.01, 0.05, 0.2)]
    assert 1.0 > scores[0] > scores[1] > scores[2]
    with pytest.raises(ValueError, match="at least 11"):
        ssim(image[:, :8, :8], image[:, :8, :8])
