"""The sun measures: the brightest direction of a blurred map, the power within a cone and
the angle between directions, against values known in closed form."""

import math

import pytest
import torch

from diffrec.light.cube import direction_to_face, texel_directions
from diffrec.light.measure import angle_degrees, brightest_direction, cone_power, cone_share


def spot_map(direction, degrees: float, radiance: float, resolution: int = 32) -> torch.Tensor:
    """A cube map of radiance 1 with a disc ``degrees`` wide of ``radiance`` at
    ``direction``."""
    towards = texel_directions(resolution) @ torch.tensor(direction, dtype=torch.float64)
    disc = towards >= math.cos(math.radians(degrees / 2))
    return torch.where(disc, radiance, 1.0)[..., None].expand(-1, -1, -1, 3).float()


def test_the_brightest_direction_is_the_spots_and_not_a_single_brighter_texel():
    sun = torch.nn.functional.normalize(torch.tensor([0.6, -0.3, 0.5]), dim=0).tolist()
    base = spot_map(sun, 12.0, 20.0).clone()
    face, s, t = direction_to_face(torch.tensor([[-0.2, 0.1, -0.9]]))
    base[face[0], int(t[0] * 32), int(s[0] * 32)] = 60.0  # one texel: brighter, but alone
    assert angle_degrees(brightest_direction(base), sun) < 3.0


def test_cone_power_of_a_uniform_light_is_its_radiance_times_the_cones_solid_angle():
    base = torch.full((6, 64, 64, 3), 2.0)
    for degrees in (10.0, 30.0, 90.0):
        solid_angle = 2 * math.pi * (1 - math.cos(math.radians(degrees)))
        assert cone_power(base, (0.3, 0.4, 0.5), degrees) == pytest.approx(
            2.0 * solid_angle, rel=0.03)
    assert cone_power(base, (0, 0, 1), 180.0) == pytest.approx(8 * math.pi, rel=1e-6)


def test_cone_share_is_the_cones_part_of_the_power_whatever_the_scale():
    base = torch.full((6, 64, 64, 3), 2.0)
    for scale in (1.0, 50.0):
        share = cone_share(base * scale, (0.3, 0.4, 0.5), 30.0)
        assert share == pytest.approx((1 - math.cos(math.radians(30.0))) / 2, rel=0.03)


def test_angle_degrees():
    assert angle_degrees((1, 0, 0), (0, 2, 0)) == pytest.approx(90.0)
    assert angle_degrees((1, 1, 0), (1, 0, 0)) == pytest.approx(45.0)
