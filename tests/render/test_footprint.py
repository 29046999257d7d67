"""diffrec.render.footprint: the mip level views read a texture at, against a plane seen
square-on, where texels per pixel are known in closed form."""

import math

import pytest
import torch

from diffrec import raster
from diffrec.camera import Cameras, look_at
from diffrec.mesh import Mesh
from diffrec.mesh.primitives import plane
from diffrec.render.footprint import nearest_level, seen_texture_level

CTX = raster.RasterContext("cpu", impl="torch")


def overhead(size=64, distance=4.0, count=1):
    """``count`` cameras ``distance`` above the origin looking down, focal ``1.2 size``."""
    eye = torch.tensor([[0.0, 0.0, distance]]).expand(count, 3)
    focal = 1.2 * size
    return Cameras(look_at(eye, (0, 0, 0), up=(0.0, 1.0, 0.0)).float(), fx=focal, fy=focal,
                   cx=size / 2, cy=size / 2, width=size, height=size)


@pytest.mark.parametrize("texture_res, distance", [(256, 4.0), (64, 4.0), (256, 8.0)])
def test_a_plane_seen_square_on_reads_log2_of_its_texels_per_pixel(texture_res, distance):
    square = plane(resolution=4, size=2.0)  # UVs span [0, 1] over its 2 units
    pixels_across = 2.0 * 1.2 * 64 / distance
    expected = math.log2(texture_res / pixels_across)
    level = seen_texture_level(CTX, square, overhead(distance=distance), texture_res)
    assert level == pytest.approx(expected, abs=0.02)


def test_the_level_is_the_median_over_every_view():
    square = plane(resolution=4, size=2.0)
    near, far = overhead(distance=4.0), overhead(distance=16.0)
    both = Cameras(torch.cat([near.camera_to_world, far.camera_to_world, far.camera_to_world]),
                   fx=near.fx[0], fy=near.fy[0], cx=32, cy=32, width=64, height=64)
    # the near view covers 16 times the far one's pixels, so its level is the median
    assert seen_texture_level(CTX, square, both, 256) == pytest.approx(
        seen_texture_level(CTX, square, near, 256), abs=0.02)


def test_a_mesh_without_uvs_is_refused():
    square = plane()
    with pytest.raises(ValueError, match="UVs"):
        seen_texture_level(CTX, Mesh(square.positions, square.triangles), overhead(), 256)


def test_the_nearest_level_is_a_whole_level_and_never_finer_than_the_texture():
    assert [nearest_level(x) for x in (-3.2, 0.4, 0.6, 1.9, float("nan"))] == [0, 0, 1, 2, 0]
