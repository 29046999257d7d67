"""The prior that a point is metal or not (``metal_or_not``): ``trainer.undecided_metal``'s
value and gradient, and what it does to fits whose metallic the views leave undecided."""

import pytest
import torch
from running import config, optimize_into, scene, sky

from diffrec.io import read_gltf
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.trainer import undecided_metal


def test_undecided_metal_is_the_mean_of_m_one_minus_m_over_covered_pixels():
    metallic = torch.tensor([[[0.0, 1.0], [0.5, 0.9]]], requires_grad=True)
    covered = torch.tensor([[[True], [True]], [[True], [False]]])[None]
    value = undecided_metal(metallic, covered)
    assert value.item() == pytest.approx(0.25 / 3)  # 0, 0 and 1/4; the 0.9 is not covered
    value.backward()
    # d/dm of m (1 - m) / 3: (1 - 2m) / 3, pulling each point to the nearer of 0 and 1
    expected = torch.tensor([[[1.0, -1.0], [0.0, 0.0]]]) / 3
    assert torch.allclose(metallic.grad, expected)


def test_nothing_covered_gives_zero_and_a_gradient_of_zero():
    metallic = torch.full((1, 2, 2), 0.5, requires_grad=True)
    value = undecided_metal(metallic, torch.zeros(1, 2, 2, 1, dtype=torch.bool))
    value.backward()
    assert value.item() == 0.0 and torch.equal(metallic.grad, torch.zeros(1, 2, 2))


def sunny_sky(height=32, width=64):
    """``running.sky`` with a small sun 60 times as bright, high towards +X."""
    d = equirect_pixel_directions(height, width).float()
    sun = (d @ torch.tensor([0.5, 0.0, 0.866])) > 0.97
    return sky(height, width) * (1.0 + 60.0 * sun[..., None])


@pytest.mark.slow
def test_the_prior_clears_a_glossy_dielectric_s_stray_metal(tmp_path):
    """Glossy paint (metallic 0) under a sky with a sun: the plain fit leaves some metal in
    it; with the prior, ramped in over the pass, under half as much, and the fit scores no
    worse for it. (A metal whose metallic is still under 0.5 when the prior comes in is pulled
    to 0 the same way: why it is off by default, docs/BENCHMARKS.md, "Metal or not".)"""
    mesh = uv_sphere(24, 12)
    truth = {"kd": torch.tensor([0.6, 0.3, 0.2]).expand(32, 32, 3), "ks": (0.0, 0.3, 0.0)}
    light = sunny_sky()
    inputs = Inputs(scene(mesh, 12, 1, light=light, **truth),
                    scene(mesh, 4, 2, light=light, **truth), mesh, light)
    fits = {}
    for weight in (0.0, 0.3):
        out = tmp_path / str(weight)
        metrics = optimize_into(config(out, iterations=150, metal_or_not=weight), inputs)
        metallic = torch.as_tensor(read_gltf(out / "out" / "mesh.glb").materials[0].ks)[..., 2]
        fits[weight] = (metrics["psnr_mean"], metallic.mean().item())
    (plain_psnr, plain_metal), (prior_psnr, prior_metal) = fits[0.0], fits[0.3]
    assert prior_metal < 0.5 * plain_metal, fits
    assert prior_psnr > plain_psnr - 0.2, fits
