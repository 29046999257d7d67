"""Trainable 2D textures sampled with mipmaps, clamped to per-channel ranges.

Storage follows the image convention (``[H, W, C]``, rows top-down, scene-linear), and UVs
follow Blender and glTF (origin bottom-left). ``diffrec.raster.texture`` reads row 0 at v = 0,
so ``sample`` flips v here, in this one place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from diffrec import raster
from diffrec.raster._torch.texture_mip import halvable_levels
from diffrec.render.metrics import gaussian_kernel


def flip_v(uv: torch.Tensor, uv_da: torch.Tensor | None = None):
    """Map bottom-left-origin UVs (and their pixel derivatives) to top-down texture rows."""
    flipped = torch.stack((uv[..., 0], 1.0 - uv[..., 1]), -1)
    if uv_da is None:
        return flipped, None
    du_dx, du_dy, dv_dx, dv_dy = uv_da.unbind(-1)
    return flipped, torch.stack((du_dx, du_dy, -dv_dx, -dv_dy), -1)


class Texture2D(torch.nn.Module):
    """A ``[H, W, C]`` texture, trainable, with optional per-channel value range.

    ``min_value`` / ``max_value``: sequences of C floats (or None for unbounded); ``clamp_()``
    projects the texels back into range after an optimiser step.
    """

    def __init__(
        self,
        data: torch.Tensor,
        min_value: Sequence[float] | None = None,
        max_value: Sequence[float] | None = None,
        trainable: bool = True,
    ):
        super().__init__()
        data = torch.as_tensor(data, dtype=torch.float32)
        if data.ndim != 3 or data.shape[0] < 1 or data.shape[1] < 1:
            raise ValueError(f"texture data must be [H, W, C], got shape {tuple(data.shape)}")
        if not torch.isfinite(data).all():
            raise ValueError("texture data contains NaN or infinite values")
        self.data = torch.nn.Parameter(data.clone(), requires_grad=trainable)
        channels = data.shape[-1]
        for name, bound in (("min_value", min_value), ("max_value", max_value)):
            if bound is not None and len(bound) != channels:
                raise ValueError(f"{name} has {len(bound)} values for {channels} channels")
            value = None if bound is None else torch.tensor(bound, dtype=torch.float32)
            self.register_buffer(name, value)

    @classmethod
    def constant(cls, value: Sequence[float], size: int = 1, **kwargs) -> Texture2D:
        """A ``size x size`` texture filled with ``value``."""
        data = torch.tensor(value, dtype=torch.float32).expand(size, size, len(value))
        return cls(data, **kwargs)

    @property
    def resolution(self) -> tuple[int, int]:
        return self.data.shape[0], self.data.shape[1]

    def sample(self, uv: torch.Tensor, uv_da: torch.Tensor | None = None, *,
               ctx: raster.RasterContext, mip: Sequence[torch.Tensor] | None = None
               ) -> torch.Tensor:
        """Values at ``uv [B, H, W, 2]``; trilinear mipmapped when ``uv_da`` is given; with
        ``ctx``'s engine. ``mip``: levels 1..n ``[h, w, C]`` to read instead of 2x2 box
        averages of the texels (gradients reach them). A chain ends at 1x1 or at the first
        level with an odd side (a 100 texel side: 50, 25), as ``io.mips`` exports it."""
        tex_uv, tex_da = flip_v(uv, uv_da)
        mode = "linear" if tex_da is None else "linear-mipmap-linear"
        chain = None if mip is None else [level[None] for level in mip]
        return raster.texture(self.data[None], tex_uv.contiguous(), tex_da, filter_mode=mode,
                              mip=chain, max_mip_level=halvable_levels(*self.resolution),
                              ctx=ctx)

    @torch.no_grad()
    def resized(self, size: int) -> Texture2D:
        """A copy ``size`` texels square, resampled bilinearly (antialiased when shrinking),
        with the same ranges and trainability."""
        image = F.interpolate(self.data.detach().permute(2, 0, 1)[None], size=(size, size),
                              mode="bilinear", align_corners=False,
                              antialias=size < max(self.resolution))[0].permute(1, 2, 0)
        bounds = [None if bound is None else bound.tolist()
                  for bound in (self.min_value, self.max_value)]
        resized = Texture2D(image.contiguous(), *bounds, trainable=self.data.requires_grad)
        resized.clamp_()
        return resized.to(self.data.device)

    @torch.no_grad()
    def blur_gradient_(self, sigma: float) -> None:
        """Replace the texels' gradient by itself blurred with a Gaussian of ``sigma`` texels
        (the texture wraps), in place; nothing without a gradient or with ``sigma`` 0. A step
        along it moves each texel as its neighbourhood's pixels ask, not as its own few do."""
        if self.data.grad is None or sigma <= 0:
            return
        grad = self.data.grad.permute(2, 0, 1)[:, None]  # [C, 1, H, W]
        for axis in (-1, -2):
            radius = min(math.ceil(3.0 * sigma), (grad.shape[axis] - 1) // 2)
            if radius < 1:
                continue
            kernel = gaussian_kernel(2 * radius + 1, sigma, grad.dtype, grad.device)
            shape = [1, 1, 1, 1]
            shape[axis] = kernel.numel()
            pad = (radius, radius, 0, 0) if axis == -1 else (0, 0, radius, radius)
            grad = F.conv2d(F.pad(grad, pad, mode="circular"), kernel.view(shape))
        self.data.grad.copy_(grad[:, 0].permute(1, 2, 0))

    @torch.no_grad()
    def clamp_(self) -> None:
        """Project texels into ``[min_value, max_value]`` (in place)."""
        if self.min_value is not None or self.max_value is not None:
            self.data.clamp_(min=self.min_value, max=self.max_value)
