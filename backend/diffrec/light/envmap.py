"""The trainable environment light: a cube map with split-sum prefiltered lookups.

Structure after ``build_mips()`` (``R`` the base resolution, ``G`` the number of GGX levels,
``S`` the diffuse map's resolution):

- ``specular_levels[i]``, ``i = 0 .. G``, at resolution ``R / 2^i``: levels ``0 .. G-1`` are the
  box-downsampled base GGX-prefiltered for roughness ``r_i = r_min + (r_max - r_min) i/(G-1)``
  (defaults 0.08 .. 0.5; ``r_min`` alone when ``G = 1``), the last level (``(R / 2^G)^2``) for
  roughness 1: the cosine convolution of the base box-downsampled to that size.
- ``diffuse``, ``S^2``: the cosine convolution of the box-downsampled ``S^2`` level, normalised
  so a constant environment of radiance ``L`` gives ``L``. (GGX at roughness 1 has the same
  kernel, so where ``R / 2^G = S`` it is the same tensor as ``specular_levels[-1]``.)

``G`` defaults to ``log2(R/S)`` (nvdiffrec's chain: five GGX levels at its 512^2, the 16^2
level at roughness 1) but to at least 4, so that a small light still has levels between
``r_min`` and ``r_max``: a lookup between two levels blends a narrow and a wide lobe, not the
lobe between them, and with the two levels a 64^2 chain down to 16^2 would have, the
prefiltered radiance at roughness 0.25 is off by up to 2.7x its own size under small bright
lamps (docs/BENCHMARKS.md, "The light's roughness levels").

Lookups go through ``diffrec.raster.texture`` with cube boundaries: ``diffuse(n)`` bilinear,
``specular(r, roughness)`` trilinear across ``specular_levels`` at the fractional level
``roughness_to_mip(roughness)``, the piecewise-linear inverse of the table above (roughness
below ``r_min`` uses level 0, above 1 the last level).

The map read (``radiance()``) is ``base`` plus a ``sun`` (``diffrec.light.sun``) when one
shines: a lobe with a direction and a power of its own, for a learned light to steer.

With ``sources`` > 0 the light's brightest parts are shaded exactly (``diffrec.light.sources``):
``build_mips`` takes them out of the map before prefiltering; ``diffuse`` adds their exact
irradiance to the rest's, ``specular`` reads the rest only, and ``source_specular`` gives their
specular reflection. ``sources_folded`` shades without them for a while, as an engine's
image-based lighting reads the whole map prefiltered.

Everything is differentiable with respect to ``base`` and the sun's parameters. Directions
are world directions (Blender's frame); see ``diffrec.light.cube`` for the face layout and
``diffrec.light.equirect`` for how equirect images map to directions.
"""

from __future__ import annotations

import contextlib
import math

import torch

from diffrec.light.equirect import cube_to_equirect, equirect_to_cube
from diffrec.light.prefilter import box_pyramid, cosine_convolve, ggx_prefilter
from diffrec.light.sources import DirectionalSources, split_bright_sources
from diffrec.light.sun import Sun
from diffrec.raster import texture_points

__all__ = ["EnvironmentLight"]

MIN_GGX_LEVELS = 4
"""GGX-prefiltered levels a light has at least (where its resolution allows): see above."""


def _is_power_of_two(x: int) -> bool:
    return x >= 1 and (x & (x - 1)) == 0


class EnvironmentLight(torch.nn.Module):
    """Trainable cube-map environment ``base`` ``[6, R, R, 3]`` (linear radiance, >= 0).

    ``resolution`` and ``min_resolution`` (the diffuse map's) are powers of two with
    ``resolution >= 2 * min_resolution``. ``ggx_levels`` (``G`` above) defaults to
    ``max(log2(resolution / min_resolution), min(4, log2(resolution)))``. ``base``, when
    given, is used as the initial map (its resolution wins). ``sources``: how many of the
    map's brightest texels (of a 32-sided copy) are shaded as directional sources (0: none).
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
        ggx_levels: int | None = None,
        sources: int = 0,
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
        depth = int(math.log2(resolution))
        if ggx_levels is None:
            ggx_levels = max(depth - int(math.log2(min_resolution)), min(MIN_GGX_LEVELS, depth))
        if not 1 <= ggx_levels <= depth:
            raise ValueError(f"ggx_levels must be 1 to {depth} for resolution {resolution}, "
                             f"got {ggx_levels}")
        self.base = torch.nn.Parameter(base.detach().clone())
        self.sun = Sun().requires_grad_(False)
        self.min_resolution = min_resolution
        self.ggx_levels = ggx_levels
        self.min_roughness = min_roughness
        self.max_roughness = max_roughness
        if sources < 0:
            raise ValueError(f"sources must be at least 0, got {sources}")
        self.source_count = sources
        self.sources: DirectionalSources | None = None
        self.specular_levels: list[torch.Tensor] = []
        self.diffuse_map: torch.Tensor | None = None
        self._built_for: tuple | None = None
        """(``base``, (its data pointer, its version, the sun's versions)) at the last build
        without a graph."""

    @classmethod
    def from_equirect(cls, image: torch.Tensor, resolution: int = 512, **kwargs):
        """A light initialised from an equirect image ``[H, W, 3]`` (rows top-down, Blender's
        Environment Texture mapping)."""
        base = equirect_to_cube(image.float(), resolution)
        return cls(base=base.clamp_min(0), **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """``torch.nn.Module``'s; a state saved without a sun (before lights had one) loads as
        a light without one."""
        unlit = {f"sun.{name}": value for name, value in Sun().state_dict().items()}
        return super().load_state_dict({**unlit, **state_dict}, strict, assign)

    def radiance(self) -> torch.Tensor:
        """The map the light shines with, ``[6, R, R, 3]``: ``base``, the sun's added."""
        if not self.sun.shines():
            return self.base
        return self.base + self.sun.radiance(self.base.shape[1]).to(self.base.dtype)

    def to_equirect(self, height: int = 512, width: int = 1024) -> torch.Tensor:
        """``radiance()`` as an equirect image ``[height, width, 3]`` (differentiable)."""
        return cube_to_equirect(self.radiance(), height, width)

    def level_roughness(self) -> list[float]:
        """Roughness each ``specular_levels`` level is prefiltered for."""
        inner = self.ggx_levels
        span = self.max_roughness - self.min_roughness
        return [self.min_roughness + span * i / max(inner - 1, 1) for i in range(inner)] + [1.0]

    def roughness_to_mip(self, roughness: torch.Tensor) -> torch.Tensor:
        """Fractional ``specular_levels`` index for ``roughness`` (see the module docstring)."""
        inner = self.ggx_levels - 1
        r_min, r_max = self.min_roughness, self.max_roughness
        if inner == 0:
            low = torch.zeros_like(roughness)
        else:
            low = (roughness.clamp(r_min, r_max) - r_min) / (r_max - r_min) * inner
        high = inner + (roughness.clamp(r_max, 1) - r_max) / (1 - r_max)
        return torch.where(roughness < r_max, low, high)

    def build_mips(self) -> None:
        """Recompute ``sources``, ``specular_levels`` and ``diffuse_map`` from ``radiance()``
        (after each step). A light that takes no gradients is built once: while ``base`` is the
        same tensor with the same values (its storage and version counter unchanged), the sun
        unchanged, and the last build kept no graph, the call keeps what it built."""
        graph = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        values = (self.base.data_ptr(), self.base._version,
                  *(p._version for p in self.sun.parameters()))
        if not graph and self._built_for is not None and self._built_for[0] is self.base \
                and self._built_for[1] == values:
            return
        self._built_for = None if graph else (self.base, values)
        prefiltered = radiance = self.radiance()
        if self.source_count:
            self.sources, prefiltered = split_bright_sources(radiance, self.source_count)
        pyramid = box_pyramid(prefiltered)
        roughness = self.level_roughness()
        levels = [
            ggx_prefilter(pyramid, self.base.shape[1] >> i, r) for i, r in enumerate(roughness[:-1])
        ]
        diffuse_level = int(math.log2(self.base.shape[1] // self.min_resolution))
        self.diffuse_map = cosine_convolve(pyramid[diffuse_level])
        roughest = (self.diffuse_map if diffuse_level == self.ggx_levels
                    else cosine_convolve(pyramid[self.ggx_levels]))
        self.specular_levels = [*levels, roughest]

    def _require_mips(self) -> None:
        if self.diffuse_map is None:
            raise RuntimeError("call build_mips() before looking up the light")

    def diffuse(self, normal: torch.Tensor, *, ctx) -> torch.Tensor:
        """Irradiance / pi for unit normals ``[..., 3]`` -> ``[..., 3]``, looked up with
        ``ctx``'s engine (a ``RasterContext``, required), the sources' added."""
        self._require_mips()
        out = texture_points(self.diffuse_map[None], normal.reshape(-1, 3), filter_mode="linear",
                             boundary_mode="cube", ctx=ctx)
        out = out.reshape(*normal.shape[:-1], 3)
        return out if self.sources is None else out + self.sources.irradiance(normal)

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

    def source_specular(self, normal, view, spec_col, roughness, covered=None
                        ) -> torch.Tensor | float:
        """The sources' specular reflection (``DirectionalSources.specular``), ``[..., 3]``,
        evaluated only where ``covered`` (a boolean mask of ``normal``'s leading shape; None:
        everywhere) and 0 elsewhere; 0 without sources."""
        self._require_mips()
        if self.sources is None:
            return 0.0
        if covered is None:
            return self.sources.specular(normal, view, spec_col, roughness)
        shape = normal.shape[:-1]
        picked = [x.expand(*shape, x.shape[-1])[covered]
                  for x in (normal, view, spec_col, roughness)]
        out = normal.new_zeros(*shape, 3)
        out[covered] = self.sources.specular(*picked).to(out.dtype)
        return out

    @contextlib.contextmanager
    def sources_folded(self):
        """Inside the block the light has no directional sources: their radiance is
        prefiltered with the rest of the map (built without a graph). After it, the light is
        as it was."""
        if not self.source_count:
            yield self
            return
        kept = (self.source_count, self.sources, self.specular_levels, self.diffuse_map,
                self._built_for)
        self.source_count, self.sources, self._built_for = 0, None, None
        try:
            with torch.no_grad():
                self.build_mips()
            yield self
        finally:
            (self.source_count, self.sources, self.specular_levels, self.diffuse_map,
             self._built_for) = kept

    @torch.no_grad()
    def clamp_(self, min: float = 0.0) -> None:
        """Clamp the base map to ``>= min`` in place, the sun to a unit direction and a
        power of at least 0 (after optimiser steps)."""
        self.base.clamp_(min=min)
        self.sun.clamp_()

    def white_balance_loss(self) -> torch.Tensor:
        """``mean |L - mean_rgb(L)|`` over the base map: penalises coloured light."""
        return (self.base - self.base.mean(-1, keepdim=True)).abs().mean()
