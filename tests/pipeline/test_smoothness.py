"""What holds the materials together: the smoothness regularisers, albedo
(``albedo_smoothness``) and occlusion / roughness / metallic (``ks_smoothness``), nvdiffrec's
``|t(x + eps) - t(x)|`` terms with the two sides of each UV seam; and ks's steps spread over
neighbouring texels (``ks_gradient_blur``)."""

import math

import pytest
import stand_ins
import torch

from diffrec import raster
from diffrec.mesh import Mesh
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import parse_settings
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D

CTX = raster.RasterContext("cpu", impl="torch")


def test_texture_smoothness_is_the_mean_step_of_each_texture():
    """A roughness of slope 2 along u (``|2u - 1|``, continuous where the texture wraps) under
    jitter ``eps ~ N(0, std)`` steps ``2 E|eps_u| = 2 std sqrt(2 / pi)`` on average: a third
    of that over ks's three channels; constant albedo steps nothing."""
    size, std = 256, 0.005
    u = (torch.arange(size) + 0.5) / size
    ks = torch.zeros(size, size, 3)
    ks[..., 1] = (2.0 * u - 1.0).abs()
    material = TextureMaterial(Texture2D(torch.full((size, size, 3), 0.4)), Texture2D(ks))
    generator = torch.Generator().manual_seed(0)
    kd_step, ks_step = material.smoothness(uv_sphere(4, 8), generator, points=16384, std=std,
                                           ctx=CTX)
    assert kd_step < 1e-6
    expected = 2.0 * std * math.sqrt(2.0 / math.pi) / 3.0
    assert abs(ks_step.item() - expected) < 0.05 * expected


def two_chart_square() -> Mesh:
    """A unit square of two triangles that share the edge from vertex 0 to 2, mapped to two
    charts: the first triangle into the texture's left half, the second into its right."""
    positions = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    uvs = torch.tensor([[0.1, 0.1], [0.4, 0.1], [0.4, 0.4],     # left: vertices 0, 1, 2
                        [0.6, 0.1], [0.9, 0.4], [0.6, 0.4]])    # right: vertices 0, 2, 3
    return Mesh(positions, torch.tensor([[0, 1, 2], [0, 2, 3]]), uvs=uvs,
                uv_triangles=torch.tensor([[0, 1, 2], [3, 4, 5]]))


def test_texture_smoothness_ties_the_two_sides_of_a_uv_seam():
    """Jitter inside a chart never reaches across a seam: the seam's two sides are compared
    directly. Left half 0.2, right half 0.8: the step along the seam is 0.6 (no jitter pairs),
    none where the two halves agree, and its gradient pulls the sides together and leaves the
    texels away from the seam alone."""
    kd = torch.full((16, 16, 3), 0.2)
    kd[:, 8:] = 0.8
    material = TextureMaterial(Texture2D(kd), Texture2D(torch.full((16, 16, 3), 0.5)))
    generator = torch.Generator().manual_seed(0)
    kd_step, ks_step = material.smoothness(two_chart_square(), generator, points=0, ctx=CTX)
    assert kd_step.item() == pytest.approx(0.6, abs=1e-6) and ks_step.item() == 0.0
    kd_step.backward()
    grad = material.kd.data.grad[..., 0]
    assert grad[:, :8].sum() < 0 < grad[:, 8:].sum(), "the dark side up, the bright side down"
    assert grad[:4].abs().sum() == 0 and grad[:, 15].abs().sum() == 0, "far from the seam"


def texel_steps(data: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference between neighbouring texels of ``[H, W, C]``, per channel."""
    return torch.cat([data.diff(dim=0).abs().flatten(0, 1), data.diff(dim=1).abs().flatten(0, 1)]
                     ).mean(0)


@pytest.mark.parametrize("setting, value, start", [("ks_smoothness", 100.0, "random"),
                                                   ("ks_gradient_blur", 0.1, "constant")])
def test_ks_settings_even_out_a_noisy_roughness(setting, value, start):
    """The same run with ``ks_smoothness`` (a loss: it evens out random textures) or
    ``ks_gradient_blur`` (steps spread over neighbours: constant textures stay even) leaves
    roughness and metallic with clearly smaller texel-to-texel steps (together; each
    smaller), and the base colour's not evened out (they follow the roughness a little: up to
    10 % larger, measured)."""
    cameras = stand_ins.ring_cameras(4, 16, 16)
    train = Views(cameras, stand_ins.render(cameras))
    inputs = Inputs(train, train, stand_ins.ball_asset().mesh, envmap=stand_ins.sky())
    steps = {}
    for chosen in (0.0, value):
        settings = parse_settings({"mode": "materials", "iterations": 40, "batch": 2,
                                   "train_res": 16, "texture_res": 16, "light": "fixed",
                                   "light_res": 32, "init_textures": start,
                                   setting: chosen, "validation": False,
                                   "checkpoint_every": 0})
        material = optimize(settings, inputs, device="cpu").material
        steps[chosen] = (texel_steps(material.ks.data.detach())[1:],
                         texel_steps(material.kd.data.detach()))
    (ks_without, kd_without), (ks_with, kd_with) = steps[0.0], steps[value]
    assert ks_with.sum() < 0.75 * ks_without.sum() and (ks_with < ks_without).all(), steps
    assert (kd_with > 0.95 * kd_without).all(), steps
