"""Equirect mapping (Blender/Cycles convention), cube geometry and resampling round trips."""

import math

import pytest
import torch

from diffrec.io import yup_to_blender
from diffrec.light.cube import (
    apply_taps,
    bilinear_taps,
    direction_to_face,
    texel_directions,
    texel_solid_angles,
)
from diffrec.light.equirect import (
    cube_to_equirect,
    direction_to_equirect_uv,
    equirect_pixel_directions,
    equirect_to_cube,
    equirect_uv_to_direction,
    from_nvdiffrec_layout,
    sample_equirect,
)
from diffrec.raster import RasterContext, texture


def cycles_uv(d):
    """Cycles' direction_to_equirectangular_range with range (-2pi, pi, -pi, pi), written out."""
    x, y, z = d
    u = (math.atan2(y, x) - math.pi) / (-2 * math.pi)
    v = (math.acos(z / math.sqrt(x * x + y * y + z * z)) - math.pi) / (-math.pi)
    return u, v


@pytest.mark.parametrize(
    ("d", "expected"),
    [
        ((1, 0, 0), (0.5, 0.5)),
        ((0, 1, 0), (0.25, 0.5)),
        ((0, -1, 0), (0.75, 0.5)),
        ((-1, 0, 0), (0.0, 0.5)),
        ((0, 0, 1), (None, 1.0)),
        ((0, 0, -1), (None, 0.0)),
    ],
)
def test_axis_directions_map_like_cycles(d, expected):
    u, v = direction_to_equirect_uv(torch.tensor(d, dtype=torch.float64))
    cu, cv = cycles_uv(d)
    assert v.item() == pytest.approx(cv, abs=1e-12) == pytest.approx(expected[1], abs=1e-12)
    if expected[0] is not None:  # u is arbitrary at the poles
        assert u.item() == pytest.approx(cu, abs=1e-12) == pytest.approx(expected[0], abs=1e-12)


def test_random_directions_match_cycles_and_invert():
    d = torch.nn.functional.normalize(torch.randn(200, 3, dtype=torch.float64), dim=-1)
    u, v = direction_to_equirect_uv(d)
    expected = torch.tensor([cycles_uv(x.tolist()) for x in d], dtype=torch.float64)
    assert torch.allclose(torch.stack([u, v], -1), expected, atol=1e-12)
    assert torch.allclose(equirect_uv_to_direction(u, v), d, atol=1e-12)


def test_pixel_rows_are_top_down_and_columns_follow_u():
    h, w = 4, 8
    d = equirect_pixel_directions(h, w)
    assert (d[0, :, 2] > 0.9).all() and (d[-1, :, 2] < -0.9).all()  # zenith on top
    u, v = direction_to_equirect_uv(d)
    assert torch.allclose(u % 1, ((torch.arange(w) + 0.5) / w).double().expand(h, w))
    assert torch.allclose(v, (1 - (torch.arange(h) + 0.5) / h).double()[:, None].expand(h, w))


def test_sampling_at_pixel_centres_returns_pixels():
    image = torch.rand(8, 16, 3, dtype=torch.float64)
    assert torch.allclose(sample_equirect(image, equirect_pixel_directions(8, 16)), image)


def test_seam_wraps_and_poles_clamp():
    image = torch.zeros(4, 8, 1, dtype=torch.float64)
    image[:, 0] = 1.0
    image[:, -1] = 3.0
    image[0] += 10.0
    # -X sits exactly on the seam (u = 0): half of the first column, half of the last.
    at_seam = sample_equirect(image, torch.tensor([[-1.0, 0.0, 0.0]], dtype=torch.float64))
    assert at_seam.item() == pytest.approx(2.0)
    # The zenith is half a row above the first row's centres: clamped to row 0.
    zenith = sample_equirect(image, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64))
    u = direction_to_equirect_uv(torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))[0].item()
    x = u * 8 - 0.5
    row0 = image[0, :, 0]
    expected = row0[math.floor(x) % 8] * (1 - x % 1) + row0[(math.floor(x) + 1) % 8] * (x % 1)
    assert zenith.item() == pytest.approx(expected.item())


def test_opengl_cube_face_table():
    # (direction, face, s, t) from the OpenGL cube-map table, written out independently.
    cases = [
        ((1, -0.5, 0.25), 0, (-0.25 + 1) / 2, (0.5 + 1) / 2),
        ((-1, -0.5, 0.25), 1, (0.25 + 1) / 2, (0.5 + 1) / 2),
        ((0.5, 1, 0.25), 2, (0.5 + 1) / 2, (0.25 + 1) / 2),
        ((0.5, -1, 0.25), 3, (0.5 + 1) / 2, (-0.25 + 1) / 2),
        ((0.5, 0.25, 1), 4, (0.5 + 1) / 2, (-0.25 + 1) / 2),
        ((0.5, 0.25, -1), 5, (-0.5 + 1) / 2, (-0.25 + 1) / 2),
    ]
    for d, face, s, t in cases:
        f, fs, ft = direction_to_face(torch.tensor(d, dtype=torch.float64) * 2)
        assert (f.item(), fs.item(), ft.item()) == (face, pytest.approx(s), pytest.approx(t))


def test_texel_geometry():
    r = 8
    face, s, t = direction_to_face(texel_directions(r))
    centres = (torch.arange(r) + 0.5).double() / r
    assert (face == torch.arange(6)[:, None, None]).all()
    assert torch.allclose(s, centres.expand(6, r, r))
    assert torch.allclose(t, centres[:, None].expand(6, r, r))
    assert texel_solid_angles(r).sum().item() == pytest.approx(4 * math.pi)


def test_seam_aware_taps_agree_with_the_cube_texture_op():
    cube = torch.rand(6, 8, 8, 3, dtype=torch.float64)
    d = torch.nn.functional.normalize(torch.randn(2000, 3, dtype=torch.float64), dim=-1)
    ours = apply_taps(cube.reshape(-1, 3), *bilinear_taps(d, 8))
    ref = texture(cube[None], d.reshape(1, -1, 1, 3), filter_mode="linear", boundary_mode="cube",
                  ctx=RasterContext("cpu", impl="torch"))
    err = (ours - ref.reshape(-1, 3)).abs()
    # Identical away from the 8 corners, where each picks one of three faces for a tap.
    _face, s, t = direction_to_face(d)
    near_corner = ((s - 0.5).abs() > 0.5 - 1 / 8) & ((t - 0.5).abs() > 0.5 - 1 / 8)
    assert err[~near_corner].max() < 1e-6
    assert err.max() < 0.5


def smooth(d):
    return torch.stack(
        [1 + 0.5 * d[..., 0], 1 + 0.3 * d[..., 1] * d[..., 2], 1 + d[..., 2] ** 2], -1
    )


def test_equirect_cube_equirect_round_trip():
    image = smooth(equirect_pixel_directions(32, 64))
    cube = equirect_to_cube(image, 16)
    assert (cube - smooth(texel_directions(16))).abs().max() < 5e-3
    back = cube_to_equirect(cube, 32, 64)
    # Two box filters (cube texel, then equirect pixel) blur the curvature of z^2 at the poles.
    assert (back - image).abs().max() < 2e-2
    assert (back - image).abs().mean() < 3e-3


def test_an_image_finer_than_the_cube_takes_one_bilinear_sample_a_pixel():
    cube = torch.rand(6, 8, 8, 3, generator=torch.Generator().manual_seed(3))
    image = cube_to_equirect(cube, 64, 128)  # 2R / H = 1/4: no supersampling
    index, weight = bilinear_taps(equirect_pixel_directions(64, 128).reshape(-1, 3), 8)
    expected = apply_taps(cube.reshape(-1, 3), index, weight).reshape(64, 128, 3)
    assert (image - expected).abs().max() < 1e-5


def test_cube_equirect_cube_round_trip_and_gradient():
    cube = smooth(texel_directions(16)).requires_grad_()
    back = equirect_to_cube(cube_to_equirect(cube, 64, 128), 16)
    assert (back - cube).abs().max() < 1e-2
    back.sum().backward()
    assert torch.isfinite(cube.grad).all() and (cube.grad > 0).all()


def test_bad_images_are_rejected():
    with pytest.raises(ValueError, match="NaN"):
        equirect_to_cube(torch.full((4, 8, 3), float("nan")), 4)
    with pytest.raises(ValueError, match="3 dims"):
        sample_equirect(torch.zeros(4, 8), torch.zeros(1, 3))


def nvdiffrec_uv(d_file):
    """nvdiffrec's lat-long lookup of a direction of its Y-up world (an OBJ file's frame),
    written out from its formula: ``u = 0.5 + atan2(x, -z) / 2pi``, row fraction ``acos(y) / pi``
    (returned as ``v`` up, as ours)."""
    x, y, z = d_file.unbind(-1)
    return 0.5 + torch.atan2(x, -z) / (2 * math.pi), 1 - torch.acos(y.clamp(-1, 1)) / math.pi


@pytest.mark.parametrize("width", [32, 30])  # a quarter turn of whole pixels, and between two
def test_an_nvdiffrec_light_lights_each_world_direction_as_it_did_there(width):
    generator = torch.Generator().manual_seed(0)
    columns = torch.arange(width, dtype=torch.float64) * (2 * math.pi / width)
    rows = torch.arange(width // 2, dtype=torch.float64)[:, None] / (width // 2)
    theirs = torch.stack([1.5 + torch.sin(columns + k) * torch.cos(rows * (k + 1))
                          for k in range(3)], -1)  # smooth: the half-pixel turn interpolates
    ours = from_nvdiffrec_layout(theirs)
    d_file = torch.nn.functional.normalize(torch.randn(500, 3, generator=generator,
                                                       dtype=torch.float64), dim=-1)
    u, v = nvdiffrec_uv(d_file)
    there = sample_equirect(theirs, equirect_uv_to_direction(u % 1, v))  # their pixel, by uv
    here = sample_equirect(ours, yup_to_blender(d_file))
    torch.testing.assert_close(here, there, rtol=0, atol=1e-12 if width % 4 == 0 else 0.02)
    if width % 4 == 0:
        assert torch.equal(from_nvdiffrec_layout(ours.roll(width // 4, dims=1)), ours)
