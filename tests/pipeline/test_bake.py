"""Texture baking: texel values against positions recomputed from UV barycentrics, sampling the
baked textures at the mesh's UVs, exact dilation growth, and push-pull fill."""

from typing import NamedTuple

import numpy as np
import pytest
import torch
from helpers.uv_reference import texel_world_positions

from diffrec import raster
from diffrec.mesh import primitives
from diffrec.pipeline.bake import bake_textures, dilate, fill_empty
from diffrec.pipeline.unwrap import grid_unwrap
from diffrec.render.texture2d import Texture2D

CPU = raster.RasterContext("cpu", impl="torch")
KD_GRADIENT = 0.5  # largest per-channel change of the test field per world unit


def linear_field(points):
    """kd (RGBA) and normal, affine in the position: bilinear sampling can reproduce it."""
    points = points.double()
    kd = torch.cat([(points + 1) / 2, 0.5 + 0.25 * points[:, :1]], -1)
    normal = torch.stack([0.5 * points[:, 1], -0.25 * points[:, 2], 0.5 + 0 * points[:, 0]], -1)
    return {"kd": kd.float(), "normal": normal.float()}


def plane_inset():
    """The 2 x 2 plane with its UVs squeezed into [1/8, 7/8], away from the texture border."""
    plane = primitives.plane(4, size=2.0)
    return plane.replace(uvs=0.125 + 0.75 * plane.uvs)


def sphere_on_grid(resolution):
    sphere = primitives.uv_sphere(8, 4)
    uvs, uv_triangles = grid_unwrap(sphere.num_triangles, resolution=resolution)
    return sphere.replace(uvs=torch.from_numpy(uvs), uv_triangles=torch.from_numpy(uv_triangles))


def world_per_texel(mesh, resolution):
    """Largest world length of a one-texel step in UV: the top singular value of each
    triangle's affine UV -> world map, maximised over triangles."""
    world = mesh.corner_positions().double()
    uv = mesh.uvs.double()[mesh.uv_triangles] * resolution
    world_edges = torch.stack([world[:, 1] - world[:, 0], world[:, 2] - world[:, 0]], -1)
    uv_edges = torch.stack([uv[:, 1] - uv[:, 0], uv[:, 2] - uv[:, 0]], -1)
    jacobian = world_edges @ torch.linalg.inv(uv_edges)  # [T, 3, 2]
    return float(torch.linalg.matrix_norm(jacobian, ord=2).max())


@pytest.mark.parametrize(("make_mesh", "resolution"), [(plane_inset, 32), (sphere_on_grid, 128)])
def test_baked_texels_hold_the_field_at_their_world_position(make_mesh, resolution):
    mesh = make_mesh(resolution) if make_mesh is sphere_on_grid else make_mesh()
    textures = bake_textures(CPU, mesh, linear_field, resolution)
    assert set(textures) == {"kd", "normal"}
    assert textures["kd"].shape == (resolution, resolution, 4)
    rows, cols, world = texel_world_positions(mesh, resolution)
    assert len(rows) > 0.2 * resolution**2
    expected = linear_field(torch.from_numpy(world))
    for name, texture in textures.items():
        torch.testing.assert_close(texture[rows, cols], expected[name], atol=2e-6, rtol=0)
        assert torch.isfinite(texture).all()


@pytest.mark.parametrize(("make_mesh", "resolution"), [(plane_inset, 32), (sphere_on_grid, 128)])
def test_sampling_the_baked_texture_at_the_uvs_reproduces_the_field(make_mesh, resolution):
    mesh = make_mesh(resolution) if make_mesh is sphere_on_grid else make_mesh()
    textures = bake_textures(CPU, mesh, linear_field, resolution)
    corner_uv = mesh.uvs[mesh.uv_triangles].reshape(1, 1, -1, 2)
    expected = linear_field(mesh.corner_positions().reshape(-1, 3))
    # Inside a chart the texels are exact and the field is affine there, so bilinear sampling is
    # exact. At chart borders footprint texels hold dilated means of filled neighbours: the field
    # at their mean position, within one diagonal step (sqrt 2 texels) of the texel itself.
    tolerance = KD_GRADIENT * world_per_texel(mesh, resolution) * 2**0.5
    for name, texture in textures.items():
        sampled = Texture2D(texture, trainable=False).sample(corner_uv, ctx=CPU)[0, 0]
        error = (sampled - expected[name]).abs()
        assert error.max() <= tolerance, (name, float(error.max()), tolerance)


def test_a_constant_field_fills_the_whole_texture():
    mesh = sphere_on_grid(64)
    colour = torch.tensor([0.2, 0.7, 0.4])
    textures = bake_textures(CPU, mesh, lambda p: {"kd": colour.expand(len(p), 3)}, 64)
    torch.testing.assert_close(textures["kd"], colour.expand(64, 64, 3), atol=1e-6, rtol=0)


class Sample(NamedTuple):
    kd: torch.Tensor
    ks: torch.Tensor


def test_namedtuple_fields_and_chunking_give_the_same_textures():
    mesh = plane_inset()
    calls = []

    def field(points):
        calls.append(len(points))
        return Sample(kd=(points + 1) / 2, ks=points.abs())

    whole = bake_textures(CPU, mesh, field, 16)
    chunked = bake_textures(CPU, mesh, field, 16, chunk=7)
    assert max(calls[1:]) == 7 and len(calls) > 2
    for name in ("kd", "ks"):
        torch.testing.assert_close(whole[name], chunked[name], atol=0, rtol=0)


def test_bake_rejects_bad_input():
    plane = plane_inset()
    with pytest.raises(ValueError, match="UVs"):
        bake_textures(CPU, primitives.cube(), linear_field, 16)
    with pytest.raises(ValueError, match=r"\[.*, C\]"):
        bake_textures(CPU, plane, lambda p: {"kd": p[:, 0]}, 16)
    with pytest.raises(ValueError, match="NaN"):
        bake_textures(CPU, plane, lambda p: {"kd": p * float("nan")}, 16)
    with pytest.raises(TypeError, match="dict"):
        bake_textures(CPU, plane, lambda p: p, 16)


def chebyshev_distance(mask: np.ndarray) -> np.ndarray:
    """Brute-force Chebyshev distance of every pixel to the nearest filled one."""
    filled = np.argwhere(mask)
    grid = np.stack(np.meshgrid(*map(np.arange, mask.shape), indexing="ij"), -1)
    return np.abs(grid[:, :, None, :] - filled[None, None]).max(-1).min(-1)


def random_mask(height, width, seeds=4):
    generator = torch.Generator().manual_seed(3)
    mask = torch.zeros(height, width, 1)
    for _ in range(seeds):
        r, c = (int(torch.randint(0, n - 2, (1,), generator=generator)) for n in (height, width))
        mask[r:r + 3, c:c + 2] = 1
    return mask


@pytest.mark.parametrize("texels", [0, 1, 3, 8])
def test_dilation_grows_the_mask_by_exactly_the_requested_texels(texels):
    mask = random_mask(24, 20)
    texture = torch.rand(24, 20, 3) * mask
    grown_texture, grown = dilate(texture, mask, texels)
    expected = chebyshev_distance(mask[..., 0].numpy() > 0) <= texels
    np.testing.assert_array_equal(grown[..., 0].numpy() > 0, expected)
    covered = mask[..., 0] > 0
    torch.testing.assert_close(grown_texture[covered], texture[covered], atol=0, rtol=0)
    assert (grown_texture[grown[..., 0] == 0] == 0).all()


def test_one_dilation_pass_writes_the_mean_of_filled_neighbours():
    mask = random_mask(12, 10)
    texture = torch.rand(12, 10, 2, dtype=torch.float64) * mask
    out, grown = dilate(texture, mask, 1)
    for r in range(12):
        for c in range(10):
            if mask[r, c, 0] or not grown[r, c, 0]:
                continue
            neighbours = [texture[i, j] for i in range(r - 1, r + 2) for j in range(c - 1, c + 2)
                          if 0 <= i < 12 and 0 <= j < 10 and mask[i, j, 0]]
            torch.testing.assert_close(out[r, c], torch.stack(neighbours).mean(0))


@pytest.mark.parametrize("shape", [(32, 32), (7, 5), (1, 9)])
def test_fill_leaves_no_empty_texel_and_keeps_filled_ones(shape):
    mask = (torch.rand(*shape, 1) < 0.1).float()
    mask[0, 0] = 1
    texture = (torch.rand(*shape, 3) + 0.5) * mask
    filled = fill_empty(texture, mask)
    assert torch.isfinite(filled).all()
    covered = mask[..., 0] > 0
    torch.testing.assert_close(filled[covered], texture[covered], atol=0, rtol=0)
    # every fill is a convex combination of filled texels: inside their range, never black
    low, high = texture[covered].amin(0), texture[covered].amax(0)
    assert (filled >= low - 1e-6).all() and (filled <= high + 1e-6).all()
    constant = torch.tensor([0.3, 0.6, 0.9]) * mask
    torch.testing.assert_close(fill_empty(constant, mask),
                               torch.tensor([0.3, 0.6, 0.9]).expand(*shape, 3))


def test_fill_needs_a_filled_texel():
    with pytest.raises(ValueError, match="no filled texel"):
        fill_empty(torch.zeros(4, 4, 3), torch.zeros(4, 4, 1))
