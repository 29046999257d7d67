"""A learned light's sun (``diffrec.light.sun``): its power at any resolution and radius, its
gradients against central differences, and the light that reads it
(``EnvironmentLight.radiance``)."""

import math

import pytest
import torch

from diffrec.light.cube import texel_directions, texel_solid_angles
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.measure import angle_degrees, brightest_direction
from diffrec.light.sun import RADIUS_DEGREES, RADIUS_RANGE_DEGREES, Sun

DIRECTION = torch.nn.functional.normalize(torch.tensor([0.3, -0.5, 0.6]), dim=0)


def _sun(dtype=torch.float32) -> Sun:
    sun = Sun().to(dtype)
    sun.set_(DIRECTION, torch.tensor([4.0, 2.0, 1.0]))
    return sun


@pytest.mark.parametrize("resolution", [16, 32, 64])
def test_the_sun_carries_its_power_at_any_resolution_towards_its_direction(resolution):
    radiance = _sun(torch.float64).radiance(resolution).detach()
    power = (radiance * texel_solid_angles(resolution)[..., None]).sum((0, 1, 2))
    assert torch.allclose(power, torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64))
    texel_degrees = math.degrees(2 / resolution)
    assert angle_degrees(brightest_direction(radiance), DIRECTION) < texel_degrees
    beyond = texel_directions(resolution) @ DIRECTION.double() < math.cos(math.radians(20))
    assert float(radiance[beyond].sum()) < 1e-6 * float(radiance.sum())  # a small lobe


def test_its_gradients_match_central_differences():
    sun = _sun(torch.float64).requires_grad_(True)
    weights = torch.rand(6, 16, 16, 3, generator=torch.Generator().manual_seed(0),
                         dtype=torch.float64)

    def read() -> torch.Tensor:
        return (sun.radiance(16) * weights).sum()

    read().backward()
    for parameter in (sun.direction, sun.power, sun.radius):
        for index in range(len(parameter)):
            with torch.no_grad():
                parameter[index] += 1e-6
                above = float(read())
                parameter[index] -= 2e-6
                below = float(read())
                parameter[index] += 1e-6
            assert float(parameter.grad[index]) == pytest.approx((above - below) / 2e-6,
                                                                 rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("degrees", [5.0, 10.0, 20.0])
def test_its_radius_holds_its_share_of_the_power_within_twice_that_angle(degrees):
    """A lobe ``exp(kappa (d.s - 1))`` with ``kappa = 1 / r^2`` holds ``1 - exp(-kappa (1 -
    cos 2r))`` of its power within ``2 r`` of its direction (about 86 %), at any radius."""
    sun = _sun(torch.float64)
    with torch.no_grad():
        sun.radius.fill_(math.radians(degrees))
    radiance = sun.radiance(64).detach().mean(-1)
    omega = texel_solid_angles(64)
    power = radiance * omega
    within = texel_directions(64) @ DIRECTION.double() > math.cos(math.radians(2 * degrees))
    kappa = 1 / math.radians(degrees) ** 2
    expected = (1 - math.exp(-kappa * (1 - math.cos(math.radians(2 * degrees))))) / (
        1 - math.exp(-2 * kappa))
    assert float(power[within].sum() / power.sum()) == pytest.approx(expected, abs=0.02)
    assert float(power.sum()) == pytest.approx(7 / 3)  # the power, whatever the radius


def test_a_light_reads_its_map_alone_until_a_sun_shines_then_both_and_keeps_it():
    light = EnvironmentLight(resolution=32, init=0.5)
    assert not light.sun.shines() and light.radiance() is light.base
    light.sun.set_(DIRECTION, torch.tensor([4.0, 2.0, 1.0]))
    radiance = light.radiance()
    omega = texel_solid_angles(32).float()[..., None]
    added = ((radiance - light.base) * omega).sum((0, 1, 2))
    assert torch.allclose(added, torch.tensor([4.0, 2.0, 1.0]), rtol=1e-4)
    probe = light.to_equirect(64, 128)  # what the asset exports: the sun in it
    assert angle_degrees(brightest_direction(radiance), DIRECTION) < 4.0
    assert float(probe.detach().max()) > 10 * float(light.base.detach().max())
    again = EnvironmentLight(resolution=32, init=0.1)
    again.load_state_dict(light.state_dict())  # a checkpoint holds the sun
    assert torch.equal(again.radiance(), radiance)


def test_a_light_that_takes_no_gradients_is_built_once_until_its_sun_moves():
    light = EnvironmentLight(resolution=32, init=0.5).requires_grad_(False)
    light.sun.set_(DIRECTION, torch.tensor([4.0, 4.0, 4.0]))
    light.build_mips()
    built = light.diffuse_map
    light.build_mips()
    assert light.diffuse_map is built
    light.sun.set_(-DIRECTION, torch.tensor([4.0, 4.0, 4.0]))
    light.build_mips()
    assert light.diffuse_map is not built
    assert float(light.diffuse_map.max()) > float(built.min())


def test_a_step_leaves_a_unit_direction_and_no_negative_power():
    light = EnvironmentLight(resolution=32, init=0.5)
    with torch.no_grad():
        light.sun.direction.copy_(torch.tensor([0.0, 3.0, 4.0]))
        light.sun.power.copy_(torch.tensor([-1.0, 2.0, 0.5]))
        light.sun.radius.fill_(1.0)  # radians: beyond the widest lobe
    light.clamp_()
    assert torch.allclose(light.sun.direction, torch.tensor([0.0, 0.6, 0.8]))
    assert torch.equal(light.sun.power, torch.tensor([0.0, 2.0, 0.5]))
    assert math.degrees(float(light.sun.radius.detach())) == pytest.approx(RADIUS_RANGE_DEGREES[1])
    with torch.no_grad():
        light.sun.radius.fill_(0.0)
    light.clamp_()
    assert math.degrees(float(light.sun.radius.detach())) == pytest.approx(RADIUS_RANGE_DEGREES[0])


def test_a_state_saved_before_lights_had_a_sun_loads_as_one_without():
    light = EnvironmentLight(resolution=32, init=0.5)
    light.sun.set_(DIRECTION, torch.tensor([4.0, 2.0, 1.0]))
    light.load_state_dict({"base": torch.full_like(light.base, 2.0)})
    assert not light.sun.shines()
    assert torch.equal(light.radiance(), torch.full_like(light.base, 2.0))


def test_a_state_saved_before_suns_had_a_radius_loads_with_the_first_one():
    light = EnvironmentLight(resolution=32, init=0.5)
    light.sun.set_(DIRECTION, torch.tensor([4.0, 2.0, 1.0]))
    state = {key: value for key, value in light.state_dict().items() if key != "sun.radius"}
    again = EnvironmentLight(resolution=32, init=0.5)
    with torch.no_grad():
        again.sun.radius.fill_(0.2)
    again.load_state_dict(state)
    assert math.degrees(float(again.sun.radius.detach())) == pytest.approx(RADIUS_DEGREES)
    assert torch.allclose(again.radiance(), light.radiance())
