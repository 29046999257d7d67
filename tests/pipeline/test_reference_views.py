"""Reference views rendered from a mesh under an HDRI."""


import numpy as np
import pytest
import torch
from view_helpers import front_camera, join

from diffrec import raster
from diffrec.io import Asset, Material
from diffrec.light.brdf_lut import brdf_lut
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.shading.bsdf import lookup_brdf_lut


def test_reference_render_of_a_textured_sphere_under_white_light():
    north, south = (0.7, 0.3, 0.1), (0.1, 0.4, 0.8)
    kd = torch.empty(8, 8, 3)
    kd[:4], kd[4:] = torch.tensor(north), torch.tensor(south)  # rows top-down: v > 0.5 north
    asset = Asset(uv_sphere(48, 24), [Material(kd=kd, ks=torch.tensor([0.0, 0.6, 0.0]))],
                  torch.zeros(0, dtype=torch.long))
    assert asset.mesh.normals is None
    near_camera = front_camera((0.0, -4.0, 0.0), (0.0, 0.0, 0.0), fov=35.0)
    far_camera = front_camera((0.0, -12.0, 0.0), (0.0, 0.0, 0.0), fov=35.0)
    ctx = raster.RasterContext("cpu", impl="torch")
    views = render_reference_views(ctx, asset, np.ones((16, 32, 3)),
                                   join([near_camera, far_camera]), spp=2, light_resolution=32,
                                   chunk=1)
    assert views.images[1, 16, 16, 3] == 1 and views.images[1, 10, 16, 3] == 0, "far view"
    image = views.images[0]
    a, b = lookup_brdf_lut(brdf_lut(), torch.ones(1), torch.full((1,), 0.6), ctx=ctx)
    coat = (0.04 * a + b).item()  # white light: kd under the coat, plus the coat's albedo
    assert image[16, 16, 3].item() == pytest.approx(1.0, abs=1e-6)
    assert image[0, 0].tolist() == [0.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(image[10, 16, :3], torch.tensor(north) * (1 - coat) + coat,
                               atol=0.01, rtol=0)
    torch.testing.assert_close(image[22, 16, :3], torch.tensor(south) * (1 - coat) + coat,
                               atol=0.01, rtol=0)
    edge = (image[..., 3] > 0.05) & (image[..., 3] < 0.95)
    assert edge.any()
    assert (image[edge][:, :3] > 0.09).all(), "edge colour is straight, not darkened by alpha"
