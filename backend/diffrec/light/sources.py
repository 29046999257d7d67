"""A light's brightest parts taken out as directional sources and shaded exactly.

The split-sum prefilter assumes ``n = v = r``: it blurs a lobe as if it were seen head-on, so
under small bright lamps (a studio HDRI's softboxes, a sun) the highlights of rough and glossy
surfaces land in the wrong place with the wrong shape. On a rough gold sphere under Blender's
``studio`` HDRI, exact split-sum is 19 to 22 dB from the exact GGX integral, which Cycles
matches to 45 dB (docs/BENCHMARKS.md, "Small bright lamps"), and a fit pays for the
difference in baked base colour and wandering roughness. So the map is split in two:

- ``sources``: the ``count`` brightest texels (by power, radiance times solid angle) of a
  ``resolution``-sided box-filtered copy, each a directional source at the power-weighted mean
  direction of the base texels under it, with their summed power; shaded with the full
  Cook-Torrance BRDF and an exact cosine for the diffuse lobe (the small irradiance map
  smooths the sharp terminator a lamp casts: 3 dB of a white sphere's agreement with Cycles
  under the ``interior`` HDRI);
- the residual (the base with those texels' footprints set to 0), prefiltered as before.

Nothing is lost or counted twice: the sources' power plus the residual's is the base map's.
The power and the residual are differentiable with respect to the base map; which texels are
chosen, and their directions, are not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from diffrec.color import luminance
from diffrec.light.cube import texel_directions, texel_solid_angles

__all__ = ["DirectionalSources", "split_bright_sources"]


@dataclass
class DirectionalSources:
    """``directions`` ``[K, 3]`` unit, pointing at the sources; ``power`` ``[K, 3]``, each
    source's radiance integrated over its solid angle (the irradiance it gives a surface
    facing it); ``spread`` ``[K]``, its angular radius in radians, by which a glossy lobe
    is widened so that a source shows with its own size."""

    directions: torch.Tensor
    power: torch.Tensor
    spread: torch.Tensor

    def irradiance(self, normal) -> torch.Tensor:
        """The sources' irradiance over pi at unit normals ``[..., 3]``,
        ``sum_k max(n.l_k, 0) power_k / pi``, ``[..., 3]`` (what a white Lambertian reflects)."""
        cosine = (normal @ self.directions.to(normal.dtype).T).clamp_min(0)
        return cosine @ self.power.to(normal.dtype) / math.pi

    def specular(self, normal, view, spec_col, roughness) -> torch.Tensor:
        """Radiance the sources' specular reflection sends along ``view``, ``[..., 3]``:
        ``sum_k D G F / (4 n.l n.v) max(n.l, 0) power_k``, with GGX ``D`` at
        ``alpha^2 = roughness^4 + (spread_k / 2)^2``, height-correlated Smith ``G`` at
        ``roughness^2`` and Schlick's ``F`` from ``spec_col``. ``normal``, ``view`` unit
        ``[..., 3]`` (``n.v`` > 0); ``spec_col`` ``[..., 3]``; ``roughness`` ``[..., 1]``."""
        directions = self.directions.to(normal.dtype)
        power = self.power.to(normal.dtype)
        n_dot_l = (normal @ directions.T).clamp_min(0)  # [..., K]; 0 below the horizon
        v_dot_l = view @ directions.T
        n_dot_v = (normal * view).sum(-1, keepdim=True).clamp_min(1e-4)
        half_length = torch.sqrt((2 + 2 * v_dot_l).clamp_min(1e-12))
        n_dot_h = ((n_dot_v + n_dot_l) / half_length).clamp_max(1)
        v_dot_h = ((1 + v_dot_l) / half_length).clamp(0, 1)
        a2 = roughness ** 4
        widened = a2 + (self.spread.to(a2.dtype) / 2) ** 2
        ndf = widened / (math.pi * (n_dot_h * n_dot_h * (widened - 1) + 1) ** 2)
        # Smith's height-correlated G / (4 n.l n.v), times n.l: the lobe's weight per source
        view_term = n_dot_l * torch.sqrt(n_dot_v * n_dot_v * (1 - a2) + a2)
        light_term = n_dot_v * torch.sqrt(n_dot_l * n_dot_l * (1 - a2) + a2)
        lobe = ndf * n_dot_l * 0.5 / (view_term + light_term)
        schlick = (1 - v_dot_h) ** 5
        return spec_col * (lobe @ power) + (1 - spec_col) * ((lobe * schlick) @ power)


def split_bright_sources(base: torch.Tensor, count: int, resolution: int = 32
                         ) -> tuple[DirectionalSources, torch.Tensor]:
    """``(sources, residual)`` from a cube map ``base`` ``[6, R, R, 3]`` (linear radiance):
    the ``count`` most powerful texels of its ``min(resolution, R)``-sided box-filtered copy
    as sources, and ``base`` with their footprints zeroed (see the module docstring)."""
    size = base.shape[1]
    resolution = min(resolution, size)
    factor = size // resolution
    omega = texel_solid_angles(size).to(base)[..., None]  # [6, R, R, 1]
    fine_power = base * omega

    def pooled_sum(x: torch.Tensor) -> torch.Tensor:  # [6, R, R, C] -> [6, r, r, C]
        return F.avg_pool2d(x.permute(0, 3, 1, 2), factor).permute(0, 2, 3, 1) * factor ** 2

    power = pooled_sum(fine_power).reshape(-1, 3)
    chosen = luminance(power.detach()).topk(min(count, len(power))).indices
    with torch.no_grad():
        weight = luminance(fine_power)  # [6, R, R]
        weighted = texel_directions(size, dtype=base.dtype, device=base.device) * weight[..., None]
        centroid = pooled_sum(weighted).reshape(-1, 3)[chosen]
        fallback = texel_directions(resolution, dtype=base.dtype,
                                    device=base.device).reshape(-1, 3)[chosen]
        lit = centroid.norm(dim=-1, keepdim=True) > 0
        directions = F.normalize(torch.where(lit, centroid, fallback), dim=-1)
        spread = torch.sqrt(texel_solid_angles(resolution).to(base).reshape(-1)[chosen] / math.pi)
        mask = torch.zeros(6 * resolution * resolution, dtype=base.dtype, device=base.device)
        mask[chosen] = 1
        mask = mask.reshape(6, 1, resolution, resolution)
        keep = 1 - F.interpolate(mask, scale_factor=factor, mode="nearest").permute(0, 2, 3, 1)
    return DirectionalSources(directions, power[chosen], spread), base * keep
