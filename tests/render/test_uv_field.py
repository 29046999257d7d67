"""diffrec.render.uv_field: per-vertex values spread over a UV layout, against the
rasterizer's own UV-space interpolation (``render_uv``), chart padding and linearity."""

import torch
from render_scenes import sphere

from diffrec import raster
from diffrec.mesh.primitives import plane
from diffrec.render.renderer import render_uv
from diffrec.render.uv_field import UVField

CTX = raster.RasterContext("cpu", impl="torch")


def test_positions_spread_over_the_layout_are_render_uvs_positions():
    mesh = sphere(24, 12)
    field = UVField(CTX, mesh, 64, pad=0)
    position, mask = render_uv(CTX, mesh, 64)
    covered = mask[0, ..., 0] > 0
    spread = field(mesh.positions)
    assert torch.equal(covered, field.filled.reshape(64, 64))
    assert torch.allclose(spread[covered], position[0][covered], atol=1e-5)


def test_charts_are_padded_by_pad_texels_and_the_rest_is_empty():
    square = plane(resolution=2, size=2.0)
    small = square.replace(uvs=square.uvs * 0.5 + 0.25)  # the chart covers the middle half
    values = torch.full((square.num_vertices, 1), 3.0)
    for pad in (0, 2):
        texture = UVField(CTX, small, 32, pad=pad)(values, empty=-1.0)[..., 0]
        row = texture[16]  # the chart spans texels 8..23 of every middle row
        assert (row[8 - pad:24 + pad] == 3.0).all() and (row[:8 - pad] == -1.0).all()
        assert (row[24 + pad:] == -1.0).all()


def test_the_field_is_linear_in_the_values():
    mesh = sphere(12, 6)
    field = UVField(CTX, mesh, 32)
    a, b = torch.rand(mesh.num_vertices, 2), torch.rand(mesh.num_vertices, 2)
    assert torch.allclose(field(2 * a - 3 * b), 2 * field(a) - 3 * field(b), atol=1e-5)
