"""Self-shadowing (diffrec.render.shadowing): visibility per vertex against geometry with known
answers, the shadowed light against analytic form factors and the unshadowed light, gradients."""

import math

import pytest
import torch
from render_scenes import constant_material, front_camera, interior, sphere

from diffrec import raster
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh import Mesh
from diffrec.mesh.primitives import cube, plane
from diffrec.render.renderer import render_mesh
from diffrec.render.shadowing import (
    ShadowedLight,
    lobe_exponent,
    shadow_directions,
    vertex_visibility,
)

CTX = raster.RasterContext("cpu", impl="torch")
ENGINE = "brute-force"  # the reference engine: these tests need no optional package


def open_box() -> tuple[Mesh, int]:
    """The cube [-1, 1]^3 without its top face, and the index of the vertex at the centre of
    its floor."""
    floor = plane(resolution=2, size=2.0)
    positions = torch.cat([floor.positions + torch.tensor([0.0, 0.0, -1.0]),
                           torch.tensor([[-1.0, -1, 1], [1, -1, 1], [-1, 1, 1], [1, 1, 1]])])
    walls = torch.tensor([[0, 2, 10], [0, 10, 9], [2, 8, 12], [2, 12, 10],
                          [8, 6, 11], [8, 11, 12], [6, 0, 9], [6, 9, 11]])
    triangles = torch.cat([floor.triangles, walls])
    return Mesh(positions, triangles, uvs=positions[:, :2] / 4 + 0.5, uv_triangles=triangles), 4


def rectangle_solid_angle(half_x: float, half_y: float, distance: float) -> float:
    """Solid angle of a rectangle [-a, a] x [-b, b] seen from ``distance`` above its centre."""
    return 4 * math.atan(half_x * half_y / (distance * math.hypot(half_x, half_y, distance)))


def rectangle_form_factor(half_x: float, half_y: float, distance: float) -> float:
    """(1/pi) * integral of cos over the same rectangle (four corner-aligned quarters)."""
    a, b = half_x / distance, half_y / distance
    ra, rb = math.sqrt(1 + a * a), math.sqrt(1 + b * b)
    quarter = (a / ra * math.atan(b / ra) + b / rb * math.atan(a / rb)) / (2 * math.pi)
    return 4 * quarter


def one_pixel_light(light, normal, visibility):
    """A ShadowedLight over a single covered pixel with ``normal`` [3] and ``visibility`` [K]."""
    shadowed = ShadowedLight(light, torch.ones(1, 1, 1, dtype=torch.bool), visibility[None])
    return shadowed, torch.as_tensor(normal, dtype=torch.float32).reshape(1, 1, 1, 3)


def constant_light(value=1.0, resolution=32):
    light = EnvironmentLight(resolution, init=value)
    light.build_mips()
    return light


def test_every_direction_is_dark_inside_a_closed_box():
    outer, inner = cube(2.0), cube(0.25)
    mesh = Mesh(torch.cat([outer.positions, inner.positions]),
                torch.cat([outer.triangles, inner.triangles + len(outer.positions)]))
    visibility = vertex_visibility(mesh.positions, mesh.triangles, engine=ENGINE)
    assert visibility[8:].max() == 0, "the inner cube's vertices see nothing"
    assert visibility[:8].max() == 1, "the outer corners see their own octant"


def test_an_open_plane_sees_every_direction_from_either_side():
    mesh = plane(resolution=3)
    visibility = vertex_visibility(mesh.positions, mesh.triangles, engine=ENGINE)
    assert torch.equal(visibility, torch.ones_like(visibility))


def test_the_floor_of_an_open_box_sees_the_sky_through_the_opening_only():
    mesh, centre = open_box()
    visibility = vertex_visibility(mesh.positions, mesh.triangles, engine=ENGINE)[centre]
    directions, solid_angles = shadow_directions()
    above = directions[:, 2] > 0
    # the opening's edges fall on texel edges of the cube's +z face: the quadrature is exact
    assert float((visibility * solid_angles)[above].sum()) == pytest.approx(
        rectangle_solid_angle(1.0, 1.0, 2.0), rel=1e-4)
    # below the floor nothing is in the way: its underside sees the whole lower hemisphere
    assert torch.equal(visibility[directions[:, 2] < 0], torch.ones(int((~above).sum())))


def test_shadowed_irradiance_at_the_floor_is_the_openings_form_factor():
    mesh, centre = open_box()
    visibility = vertex_visibility(mesh.positions, mesh.triangles, engine=ENGINE)[centre]
    shadowed, up = one_pixel_light(constant_light(2.0), (0.0, 0.0, 1.0), visibility)
    expected = 2.0 * rectangle_form_factor(1.0, 1.0, 2.0)  # about 0.48, not the open 2.0
    irradiance = shadowed.diffuse(up, ctx=CTX)[0, 0, 0].tolist()
    assert irradiance == pytest.approx([expected] * 3, rel=0.02)


def test_the_floor_renders_darker_than_an_unshadowed_floor():
    mesh, _ = open_box()
    visibility = vertex_visibility(mesh.positions, mesh.triangles, engine=ENGINE)
    from diffrec.camera import Cameras, look_at
    camera = Cameras(look_at([[0.0, 0.0, 6.0]], (0, 0, 0), up=(0.0, 1.0, 0.0)).float(),
                     fx=40.0, fy=40.0, cx=16, cy=16, width=32, height=32)
    light = constant_light()
    args = (CTX, mesh, constant_material(), camera, light)
    plain = render_mesh(*args, mode="shading-only").color[0, 16, 16]
    shadowed = render_mesh(*args, mode="shading-only", visibility=visibility).color[0, 16, 16]
    assert plain.tolist() == pytest.approx([1.0] * 3, rel=0.01)
    assert (shadowed < 0.5 * plain).all()


def test_with_nothing_occluding_the_render_is_todays_split_sum_render():
    torch.manual_seed(0)
    light = EnvironmentLight(32, base=2 * torch.rand(6, 32, 32, 3))
    light.build_mips()
    mesh = sphere()
    clear = torch.ones(len(mesh.positions), len(shadow_directions()[1]))
    for ks in [(0.0, 0.5, 0.0), (0.0, 0.9, 0.0), (0.0, 0.3, 1.0)]:
        material = constant_material((0.8, 0.6, 0.4), ks)
        plain = render_mesh(CTX, mesh, material, front_camera(), light)
        seen = render_mesh(CTX, mesh, material, front_camera(), light, visibility=clear)
        keep = interior(plain)[0]
        relative = (seen.color - plain.color).abs()[0][keep] / plain.color[0][keep]
        assert relative.max() < 0.01, f"ks {ks}: the cube-8 quadrature of the cosine lobe"


def test_the_specular_factor_averages_visibility_over_the_reflection_lobe():
    directions, _ = shadow_directions()
    up_half = (directions[:, 2] > 0).float()
    shadowed, _ = one_pixel_light(constant_light(), (0.0, 0.0, 1.0), up_half)
    up = torch.tensor([0.0, 0.0, 1.0]).reshape(1, 1, 1, 3)
    sideways = torch.tensor([1.0, 0.0, 0.0]).reshape(1, 1, 1, 3)
    shiny, rough = torch.full((1, 1, 1, 1), 0.1), torch.full((1, 1, 1, 1), 1.0)
    straight_up = shadowed.specular(up, shiny, ctx=CTX)[0, 0, 0].tolist()
    assert straight_up == pytest.approx([1.0] * 3, rel=1e-4)
    # a lobe lying on the horizon is half hidden; a down-facing one entirely
    on_horizon = shadowed.specular(sideways, shiny, ctx=CTX)[0, 0, 0].tolist()
    assert on_horizon == pytest.approx([0.5] * 3, abs=0.02)
    assert shadowed.specular(-up, rough, ctx=CTX)[0, 0, 0].max() < 1e-6
    assert lobe_exponent(torch.tensor([1.0]))[0] == 0


def test_gradients_reach_the_base_colour_and_the_light_as_finite_differences_say():
    mesh, _ = open_box()
    visibility = vertex_visibility(mesh.positions, mesh.triangles, engine=ENGINE)
    from diffrec.camera import Cameras, look_at
    camera = Cameras(look_at([[0.5, -1.0, 5.0]], (0, 0, 0)).float(),
                     fx=30.0, fy=30.0, cx=12, cy=12, width=24, height=24)
    torch.manual_seed(1)
    base = torch.rand(6, 32, 32, 3)

    def total(kd: float, light_base: torch.Tensor, grad: bool = False):
        light = EnvironmentLight(32, base=light_base)
        material = constant_material((kd, kd, kd), (0.0, 0.6, 0.0))
        kd_param = next(material.parameters())
        light.build_mips()
        out = render_mesh(CTX, mesh, material, camera, light, visibility=visibility)
        value = out.color.sum()
        if grad:
            value.backward()
            return kd_param.grad.sum(), light.base.grad
        return float(value.detach())

    kd_grad, light_grad = total(0.5, base, grad=True)
    step = 0.05
    numeric_kd = (total(0.5 + step, base) - total(0.5 - step, base)) / (2 * step)
    assert float(kd_grad) == pytest.approx(numeric_kd, rel=0.02)
    texel = (4, 16, 16, 1)  # the +z face's centre: seen through the opening
    bumped = base.clone()
    bumped[texel] += 1.0
    numeric_light = total(0.5, bumped) - total(0.5, base)  # the image is linear in the light
    assert numeric_light > 0
    assert float(light_grad[texel]) == pytest.approx(numeric_light, rel=0.02)
