"""The trainable environment light: a cube map with split-sum prefiltered lookups.

Structure after ``build_mips()`` (``R`` the base resolution, ``S`` the minimum resolution,
``L = log2(R/S) + 1`` levels):

- ``specular_levels[i]``, ``i = 0 .. L-1``, at resolution ``R / 2^i``: levels ``0 .. L-2`` are the
  box-downsampled base GGX-prefiltered for roughness ``r_i = r_min + (r_max - r_min) i/(L-2)``
  (defaults 0.08 .. 0.5; ``r_min`` alone when ``L = 2``), the last level (``S^2``) for roughness 1.
- ``diffuse``, ``S^2``: the cosine convolution of the box-downsampled ``S^2`` level, normalised
  so a constant environment of radiance ``L`` gives ``L``. (GGX at roughness 1 has the same
  kernel, so it is the same tensor as ``specular_levels[-1]``.)

Lookups go through ``diffrec.raster.texture`` with cube boundaries: ``diffuse(n)`` bilinear,
``specular(r, roughness)`` trilinear across ``specular_levels`` at the fractional level
``roughness_to_mip(roughness)``, the piecewise-linear inverse of the table above (roughness
below ``r_min`` uses level 0, above 1 the last level).

Everything is differentiable with respect to ``base``. Directions are world directions
(Blender's frame); see ``diffrec.light.cube`` for the face layout and ``diffrec.light.equirect``
for how equirect images map to directions.
"""

from __future__ import annotations

import math

import torch

from diffrec.light.equirect import cube_to_equirect, equirect_to_cube
from diffrec.light.prefilter import box_pyramid, cosine_convolve, ggx_prefilter
from diffrec.raster import texture_points

__all__ = ["EnvironmentLight"]


def _is_power_of_two(x: int) -> bool:
    return x >= 1 and (x & (x - 1)) == 0


class EnvironmentLight(torch.nn.Module):
    """Trainable cube-map environment ``base`` ``[6, R, R, 3]`` (linear radiance, >= 0).

    ``resolution`` and ``min_resolution`` are powers of two with ``resolution >=
    2 * min_resolution``. ``base``, when given, is used as the initial map (its resolution wins).
    """

    def __init__(
        self,
        resolution: int = 512,
        init: float = 0.5,
        *,
        base: torch.Tensor | None = None,
        min_resolution: int = 16,
        min_roughness: float = 0.08,
        max_roughness: float = 0.5,
    ):
        super().__init__()
        if base is None:
            base = torch.full((6, resolution, resolution, 3), float(init))
        if base.ndim != 4 or base.shape[0] != 6 or base.shape[1] != base.shape[2]:
            raise ValueError(f"cube map must be [6, R, R, 3], got {tuple(base.shape)}")
        if base.shape[-1] != 3 or not base.is_floating_point():
            raise ValueError(f"cube map must be floating-point RGB, got {base.dtype} {base.shape}")
        if not torch.isfinite(base).all():
            raise ValueError("cube map holds NaN or infinite values")
        resolution = base.shape[1]
        if not (_is_power_of_two(resolution) and _is_power_of_two(min_resolution)):
            raise ValueError(f"resolutions must be powers of two: {resolution}, {min_resolution}")
        if resolution < 2 * min_resolution:
            raise ValueError(f"resolution {resolution} must be >= 2 * {min_resolution}")
        if not 0 < min_roughness <= max_roughness < 1:
            raise ValueError(
                f"need 0 < min_roughness <= max_roughness < 1, got {min_roughness}, {max_roughness}"
            )
        self.base = torch.nn.Parameter(base.detach().clone())
        self.min_resolution = min_resolution
        self.min_roughness = min_roughness
        self.max_roughness = max_roughness
        self.specular_levels: list[torch.Tensor] = []
        self.diffuse_map: torch.Tensor | None = None

    @classmethod
    def from_equirect(cls, image: torch.Tensor, resolution: int = 512, **kwargs):
        """A light initialised from an equirect image ``[H, W, 3]`` (rows top-down, Blender's
        Environment Texture mapping)."""
        base = equirect_to_cube(image.float(), resolution)
        return cls(base=base.clamp_min(0), **kwargs)

    def to_equirect(self, height: int = 512, width: int = 1024) -> torch.Tensor:
        """The base map as an equirect image ``[height, width, 3]`` (differentiable)."""
        return cube_to_equirect(self.base, height, width)

    @property
    def num_levels(self) -> int:
        return int(math.log2(self.base.shape[1] // self.min_resolution)) + 1

    def level_roughness(self) -> list[float]:
        """Roughness each ``specular_levels`` level is prefiltered for."""
        inner = self.num_levels - 1
        span = self.max_roughness - self.min_roughness
        return [self.min_roughness + span * i / max(inner - 1, 1) for i in range(inner)] + [1.0]

    def roughness_to_mip(self, roughness: torch.Tensor) -> torch.Tensor:
        """Fractional ``specular_levels`` index for ``roughness`` (see the module docstring)."""
        inner = self.num_levels - 2
        r_min, r_max = self.min_roughness, self.max_roughness
        if inner == 0:
            low = torch.zeros_like(roughness)
        else:
            low = (roughness.clamp(r_min, r_max) - r_min) / (r_max - r_min) * inner
        high = inner + (roughness.clamp(r_max, 1) - r_max) / (1 - r_max)
        return torch.where(roughness < r_max, low, high)

    def build_mips(self) -> None:
        """Recompute ``specular_levels`` and ``diffuse_map`` from ``base`` (after each step)."""
        pyramid = box_pyramid(self.base)
        roughness = self.level_roughness()
        levels = [
            ggx_prefilter(pyramid, self.base.shape[1] >> i, r) for i, r in enumerate(roughness[:-1])
        ]
        self.diffuse_map = cosine_convolve(pyramid[self.num_levels - 1])
        self.specular_levels = [*levels, self.diffuse_map]

    def _require_mips(self) -> None:
        if self.diffuse_map is None:
            raise RuntimeError("call build_mips() before looking up the light")

    def diffuse(self, normal: torch.Tensor, *, ctx) -> torch.Tensor:
        """Irradiance / pi for unit normals ``[..., 3]`` -> ``[..., 3]``, looked up with
        ``ctx``'s engine (a ``RasterContext``, required)."""
        self._require_mips()
        out = texture_points(self.diffuse_map[None], normal.reshape(-1, 3), filter_mode="linear",
                             boundary_mode="cube", ctx=ctx)
        return out.reshape(*normal.shape[:-1], 3)

    def specular(self, reflect: torch.Tensor, roughness: torch.Tensor, *, ctx
                 ) -> torch.Tensor:
        """Prefiltered radiance for reflection directions ``[..., 3]`` and roughness
        ``[..., 1]`` -> ``[..., 3]``, looked up with ``ctx``'s engine (as ``diffuse``)."""
        self._require_mips()
        out = texture_points(
            self.specular_levels[0][None],
            reflect.reshape(-1, 3),
            self.roughness_to_mip(roughness.reshape(-1)),
            mip=[m[None] for m in self.specular_levels[1:]],
            filter_mode="linear-mipmap-linear",
            boundary_mode="cube",
            ctx=ctx,
        )
        return out.reshape(*reflect.shape[:-1], 3)

    @torch.no_grad()
    def clamp_(self, min: float = 0.0) -> None:
        """Clamp the base map to ``>= min`` in place (after optimiser steps)."""
        self.base.clamp_(min=min)

    def white_balance_loss(self) -> torch.Tensor:
        """``mean |L - mean_rgb(L)|`` over the base map: penalises coloured light."""
        return (self.base - self.base.mean(-1, keepdim=True)).abs().mean()
