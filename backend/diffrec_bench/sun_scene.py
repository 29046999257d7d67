"""A ball under a sky with a sun, rendered by diffrec's own renderer (no Blender): the scene
of ``scripts/bench_light_sun.py`` and of the tests of ``diffrec.pipeline.sun_finder``.

The sky (``sun_sky``): a smooth gradient, and a sun disc ``SUN_DEGREES`` wide whose radiance
is ``ratio`` (``SUN_RATIO``, 50) times the sky's mean radiance (the mean over the sphere,
weighted by solid angle, of the sky without the sun). At 50 the sun carries 2.4 % of the
light's power, at 500 about a fifth, at 2000 about half.

The ball (``ball``): a UV sphere in coloured bands, rough dielectric (roughness 0.6) but for
one glossy band (0.2); ``views`` renders it from random cameras around it.
"""

from __future__ import annotations

import math

import torch

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.io import Asset, Material
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.views import Views

__all__ = ["ELEVATIONS", "OTHER_SUN_DIRECTION", "RADIUS", "SUN_DEGREES", "SUN_DIRECTION",
           "SUN_RATIO", "TRUTH_RESOLUTION", "ball", "sun_sky", "views"]

SUN_RATIO = 50.0
"""The sun disc's radiance over the sky's mean radiance."""
SUN_DEGREES = 5.0
"""The sun disc's angular diameter."""
SUN_DIRECTION = (math.cos(math.radians(35)) * math.cos(math.radians(40)),
                 math.cos(math.radians(35)) * math.sin(math.radians(40)),
                 math.sin(math.radians(35)))
"""Where the sun stands: elevation 35 degrees, azimuth 40 degrees from +X towards +Y."""
OTHER_SUN_DIRECTION = (math.cos(math.radians(10)) * math.cos(math.radians(-120)),
                       math.cos(math.radians(10)) * math.sin(math.radians(-120)),
                       math.sin(math.radians(10)))
"""A second sun, low on the other side: elevation 10 degrees, azimuth -120."""
TRUTH_RESOLUTION = 128
"""The side of the cube map the targets are rendered with and the truth is measured on
(``--truth-res``)."""
RADIUS = 0.8
"""The ball's radius, metres."""
ELEVATIONS = (-20.0, 60.0)
"""The range of the views' elevations, degrees. The glossy band lies between latitudes -45
and 0, and seen from at most 20 degrees below, a sun above 20 degrees never reflects in it:
its highlights are the rough bands' alone (docs/BENCHMARKS.md, "Learning a sun, round
eight")."""


def sun_sky(height: int = 256, direction=SUN_DIRECTION, degrees: float = SUN_DEGREES,
            ratio: float = SUN_RATIO) -> torch.Tensor:
    """An equirect ``[height, 2 height, 3]`` sky (linear): brighter overhead and towards +X,
    slightly warm, with a white sun disc ``degrees`` wide at ``direction`` whose radiance is
    ``ratio`` times the sky's solid-angle-weighted mean (of R, G and B); no disc at 0."""
    d = equirect_pixel_directions(height, 2 * height)
    sky = (0.6 + 0.5 * d[..., 2:3] + 0.4 * d[..., 0:1]).clamp(min=0.1) * torch.tensor(
        [1.0, 0.95, 0.9], dtype=d.dtype)
    if ratio == 0:
        return sky.float()
    weight = torch.sqrt((1 - d[..., 2:3] ** 2).clamp(min=0))  # sin(polar angle): solid angle
    mean = float((sky.mean(-1, keepdim=True) * weight).sum() / weight.sum())
    towards = d @ torch.as_tensor(direction, dtype=d.dtype)
    disc = (towards >= math.cos(math.radians(degrees / 2)))[..., None]
    return torch.where(disc, torch.full_like(sky, ratio * mean), sky).float()


def ball() -> Asset:
    """A UV sphere of ``RADIUS`` in four colour bands, roughness 0.6 but 0.2 in the third."""
    kd = torch.empty(16, 16, 3)
    ks = torch.tensor([0.0, 0.6, 0.0]).repeat(16, 16, 1)
    for band, colour in enumerate(((0.7, 0.25, 0.15), (0.2, 0.55, 0.25), (0.8, 0.75, 0.3),
                                   (0.2, 0.3, 0.7))):
        kd[4 * band : 4 * band + 4] = torch.tensor(colour)
    ks[8:12, :, 1] = 0.2
    mesh = uv_sphere(48, 24)
    mesh = mesh.replace(positions=mesh.positions * RADIUS)
    return Asset(mesh, [Material(kd=kd.numpy(), ks=ks.numpy())], torch.zeros(0, dtype=torch.long))


def views(sky: torch.Tensor, count: int, size: int, seed: int,
          truth_res: int = TRUTH_RESOLUTION, elevations=ELEVATIONS) -> Views:
    """``count`` straight-alpha views of ``ball()`` under ``sky`` from random cameras at
    ``elevations`` (low, high; degrees), lit by a cube map of side ``truth_res``."""
    cameras = orbit_cameras(count, 3.2, size, seed=seed, elevations_degrees=tuple(elevations))
    return render_reference_views(raster.RasterContext("cpu", impl="torch"), ball(), sky,
                                  cameras, spp=2, light_resolution=truth_res)
