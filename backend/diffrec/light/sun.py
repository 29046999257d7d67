"""A sun a learned light can steer: a small smooth lobe with a direction, a power and a width
of its own, added to the light's cube map wherever the map is read.

A sun written into the map as texels stays where it was written: the fit steps each texel's
radiance, and nothing steps a bright disc sideways (the sun finder's seed was 1-17 degrees
off on Blender's HDRIs, and the learned light's brightest direction stayed exactly there:
docs/BENCHMARKS.md, "Learning a sun"). As parameters, the direction takes the gradient of
every highlight and every terminator the sun casts, and the power moves by factors
(``LogAdam``) as a sun's must. So does the width: a sun seen through leaves or haze, or a
window, is wider than the lobe starts, and a lobe held narrow is pulled towards the bright
sky beside such a sun (docs/BENCHMARKS.md, "Learning a sun, round five").

The lobe is ``exp(kappa (d.s - 1))`` about the unit direction ``s`` (a Gaussian of angular
``radius`` near its centre, ``kappa = 1 / radius^2``), normalised over the map's texels so
that ``radiance x solid angle`` summed over the map is ``power`` at any resolution:
``power`` is the irradiance the sun gives a surface facing it.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from diffrec.light.cube import texel_directions, texel_solid_angles

__all__ = ["RADIUS_DEGREES", "RADIUS_RANGE_DEGREES", "Sun"]

RADIUS_DEGREES = 3.0
"""The lobe's angular radius at the start: a few texels of a 32- or 64-sided map, so that its
weights move smoothly with its direction (the true sun is half a degree; a light's texels are
1.4-2.8 degrees)."""
RADIUS_RANGE_DEGREES = (3.0, 10.0)
"""The radii a step may leave the lobe at: never narrower than it starts (a few texels), and
no wider than a sun through haze or leaves: broader light is the map's to carry
(docs/BENCHMARKS.md, "Learning a sun, round six")."""


class Sun(torch.nn.Module):
    """``direction`` ``[3]`` (normalised where read), ``power`` ``[3]`` (linear, >= 0; zero:
    no sun, the map alone) and ``radius`` ``[1]`` (radians, within
    ``RADIUS_RANGE_DEGREES``)."""

    def __init__(self):
        super().__init__()
        self.direction = torch.nn.Parameter(torch.tensor([0.0, 0.0, 1.0]))
        self.power = torch.nn.Parameter(torch.zeros(3))
        self.radius = torch.nn.Parameter(torch.tensor([math.radians(RADIUS_DEGREES)]))

    def shines(self) -> bool:
        """Whether there is a sun (any power)."""
        return bool((self.power.detach() > 0).any())

    def radiance(self, resolution: int) -> torch.Tensor:
        """The sun as a cube map ``[6, R, R, 3]`` of linear radiance, on ``power``'s device
        and in its dtype; differentiable with respect to all three parameters."""
        directions, solid_angle = _texels(resolution, self.power.dtype, self.power.device)
        kappa = self.radius.to(self.power.dtype).square().reciprocal()
        lobe = torch.exp(kappa * (directions @ F.normalize(self.direction, dim=0) - 1.0))
        return (lobe / (lobe * solid_angle).sum())[..., None] * self.power

    @torch.no_grad()
    def set_(self, direction: torch.Tensor, power: torch.Tensor) -> None:
        """Point the sun along ``direction`` ``[3]`` (any length) with ``power`` ``[3]``."""
        self.direction.copy_(F.normalize(direction.to(self.direction), dim=0))
        self.power.copy_(power.to(self.power).clamp_min(0))

    @torch.no_grad()
    def clamp_(self) -> None:
        """After a step: the direction back to unit length, the power at least 0, the radius
        within ``RADIUS_RANGE_DEGREES``."""
        self.direction.copy_(F.normalize(self.direction, dim=0))
        self.power.clamp_(min=0)
        self.radius.clamp_(*(math.radians(degrees) for degrees in RADIUS_RANGE_DEGREES))


@functools.lru_cache(maxsize=8)
def _texels(resolution: int, dtype: torch.dtype, device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """A cube map's texel directions ``[6, R, R, 3]`` and solid angles ``[6, R, R]``, made
    once per resolution, dtype and device (a step reads them each time the light is built)."""
    return (texel_directions(resolution, dtype=dtype, device=device),
            texel_solid_angles(resolution).to(dtype=dtype, device=device))
