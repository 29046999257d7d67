"""The ball of ``diffrec_bench.sun_scene``, as ``scripts/bench_light_sun.py`` sees it: where its
views see the sun's mirror reflection, and how rough the ball is there."""

import math

import pytest
import torch

from diffrec import raster
from diffrec.render.renderer import surface_layers
from diffrec_bench.sun_scene import ELEVATIONS, SUN_DIRECTION, ball, sun_sky, views

NEAR_DEGREES = 8.0
"""How close to the sun a pixel's mirror direction must be to count as reflecting it."""


def _roughness_where_the_sun_reflects(elevations) -> torch.Tensor:
    """The ball's roughness at the pixels of the bench's 12 training views (48 px, seed 1) at
    ``elevations`` whose mirror direction lies within ``NEAR_DEGREES`` of the sun."""
    cameras = views(sun_sky(ratio=0), 12, 48, seed=1, truth_res=32,
                    elevations=elevations).cameras
    asset = ball()
    surface = surface_layers(raster.RasterContext("cpu", impl="torch"), asset.mesh,
                             cameras).layers[0]
    facing = (surface.normal * surface.view).sum(-1, keepdim=True)
    mirror = 2 * facing * surface.normal - surface.view
    sun = torch.tensor(SUN_DIRECTION, dtype=mirror.dtype)
    near = (surface.mask[..., 0] > 0) & (mirror @ sun > math.cos(math.radians(NEAR_DEGREES)))
    roughness = torch.as_tensor(asset.materials[0].ks[..., 1]).float()
    rows, columns = roughness.shape
    u, v = surface.uv[near].unbind(-1)  # bottom-left origin: row 0 is the top, v = 1
    row = ((1 - v) * rows).long().clamp(0, rows - 1)
    column = (u * columns).long().clamp(0, columns - 1)
    return roughness[row, column]


def test_the_bench_views_see_the_suns_reflection_only_on_rough_bands():
    seen = _roughness_where_the_sun_reflects(ELEVATIONS)
    assert len(seen) > 20
    assert float(seen.min()) == pytest.approx(0.6)


def test_views_from_below_see_it_in_the_glossy_band():
    seen = _roughness_where_the_sun_reflects((-60.0, 60.0))
    assert int((seen < 0.3).sum()) > 5
