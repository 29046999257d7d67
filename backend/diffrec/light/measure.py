"""How close a learned light is to a true one where it matters most: its sun.

- ``brightest_direction(base)``: the direction of a cube map's brightest region, after a blur
  (its GGX prefilter at ``BLUR_ROUGHNESS``, a lobe about three degrees wide), so that one
  bright or noisy texel does not decide it;
- ``cone_power(base, direction, degrees)``: the power inside a cone, ``sum L omega`` over the
  texels whose centres lie within ``degrees`` of ``direction`` (the mean of R, G and B, in
  radiance times steradians), which a sun's irradiance is proportional to;
- ``cone_share(base, direction, degrees)``: that power over the whole map's: what images fix
  of a learned light, whose scale trades against the base colour's;
- ``angle_degrees(a, b)``: the angle between two directions.

Cube maps are ``[6, R, R, 3]`` linear radiance (``EnvironmentLight.base``).
"""

from __future__ import annotations

import math

import torch

from diffrec.light.cube import texel_directions, texel_solid_angles
from diffrec.light.prefilter import box_pyramid, ggx_prefilter

__all__ = ["BLUR_ROUGHNESS", "angle_degrees", "brightest_direction", "cone_power", "cone_share"]

BLUR_ROUGHNESS = 0.2
"""The GGX roughness of the blur before the brightest direction is taken: a lobe of about
three degrees half-width at half maximum at any resolution."""


@torch.no_grad()
def brightest_direction(base: torch.Tensor, blur_roughness: float = BLUR_ROUGHNESS
                        ) -> torch.Tensor:
    """The unit direction ``[3]`` (float64) of the texel of ``base`` (a cube map) whose
    ``blur_roughness``-prefiltered mean of R, G and B is largest."""
    base = base.detach().float()
    blurred = ggx_prefilter(box_pyramid(base), base.shape[1], blur_roughness).mean(-1)
    index = int(blurred.reshape(-1).argmax())
    return texel_directions(base.shape[1], device=base.device).reshape(-1, 3)[index].cpu()


@torch.no_grad()
def cone_power(base: torch.Tensor, direction, degrees: float) -> float:
    """``sum L omega`` over the texels of ``base`` within ``degrees`` of ``direction`` (any
    length > 0), ``L`` the mean of R, G and B (radiance x steradians)."""
    resolution = base.shape[1]
    direction = torch.nn.functional.normalize(torch.as_tensor(direction, dtype=torch.float64),
                                              dim=0)
    inside = texel_directions(resolution) @ direction >= math.cos(math.radians(degrees))
    radiance = base.detach().double().cpu().mean(-1)
    return float((radiance * texel_solid_angles(resolution) * inside).sum())


def cone_share(base: torch.Tensor, direction, degrees: float) -> float:
    """``cone_power(base, direction, degrees)`` over the power of the whole of ``base``."""
    return cone_power(base, direction, degrees) / cone_power(base, direction, 180.0)


def angle_degrees(a, b) -> float:
    """The angle between directions ``a`` and ``b`` (any lengths > 0), degrees."""
    a, b = (torch.nn.functional.normalize(torch.as_tensor(x, dtype=torch.float64), dim=-1)
            for x in (a, b))
    return math.degrees(float(torch.dot(a, b).clamp(-1, 1).acos()))
