"""Image quality metrics on display-referred images: PSNR and SSIM.

Both take scene-linear images ``[B, H, W, C]``, encode them with the sRGB curve and clamp to
[0, 1] (what a viewer sees), and return one value per image (``[B]``).
SSIM follows Wang et al. 2004: 11x11 Gaussian window (sigma 1.5), K1 = 0.01, K2 = 0.03,
data range 1, valid-region mean, channels averaged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diffrec.color import linear_to_srgb


def display(image: torch.Tensor) -> torch.Tensor:
    """Scene-linear -> sRGB-encoded, clamped to [0, 1]."""
    return linear_to_srgb(image.clamp(min=0.0)).clamp(0.0, 1.0)


def psnr(render: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB per image (peak 1 on the sRGB-encoded images)."""
    mse = (display(render) - display(target)).square().flatten(1).mean(1)
    return -10.0 * torch.log10(mse.clamp(min=1e-10))


def gaussian_kernel(size: int, sigma: float, dtype=torch.float32, device=None) -> torch.Tensor:
    """``[size]`` weights of a Gaussian of ``sigma`` taps centred on the middle, summing to 1."""
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def _gaussian_window(size: int, sigma: float, dtype, device) -> torch.Tensor:
    g = gaussian_kernel(size, sigma, dtype, device)
    return g[:, None] * g[None, :]


def ssim(render: torch.Tensor, target: torch.Tensor, window: int = 11, sigma: float = 1.5):
    """Structural similarity per image (1 for identical images)."""
    x = display(render).permute(0, 3, 1, 2)
    y = display(target).permute(0, 3, 1, 2)
    channels = x.shape[1]
    if min(x.shape[-2:]) < window:
        raise ValueError(f"images must be at least {window} pixels on each side for SSIM")
    kernel = _gaussian_window(window, sigma, x.dtype, x.device).expand(channels, 1, -1, -1)

    def blur(t):
        return F.conv2d(t, kernel, groups=channels)

    mu_x, mu_y = blur(x), blur(y)
    var_x = blur(x * x) - mu_x**2
    var_y = blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    c1, c2 = 0.01**2, 0.03**2
    ssim_map = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / (
        (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    )
    return ssim_map.flatten(1).mean(1)
