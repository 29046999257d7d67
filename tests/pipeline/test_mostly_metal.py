"""The prior that a point mostly metal is metal (``mostly_metal``): ``trainer.partial_metal``'s
value and gradient, and what it does to fits of a metal and of a dielectric."""

import pytest
import torch
from running import config, optimize_into, scene, sky

from diffrec.io import read_gltf
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.trainer import partial_metal


def test_partial_metal_pulls_points_past_half_metal_to_one_and_leaves_the_rest():
    metallic = torch.tensor([[[0.2, 0.75], [1.0, 0.9]]], requires_grad=True)
    covered = torch.tensor([[[True], [True]], [[True], [False]]])[None]
    value = partial_metal(metallic, covered)
    # 0.2 counts as 1/2 (1/4), 0.75 gives 3/16, 1 gives 0; the 0.9 is not covered
    assert value.item() == pytest.approx((0.25 + 0.1875) / 3)
    value.backward()
    # d/dm of m (1 - m) / 3 past 1/2: (1 - 2m) / 3, up towards 1; nothing below 1/2
    expected = torch.tensor([[[0.0, -0.5], [-1.0, 0.0]]]) / 3
    assert torch.allclose(metallic.grad, expected)


def test_nothing_covered_gives_zero_and_a_gradient_of_zero():
    metallic = torch.full((1, 2, 2), 0.8, requires_grad=True)
    value = partial_metal(metallic, torch.zeros(1, 2, 2, 1, dtype=torch.bool))
    value.backward()
    assert value.item() == 0.0 and torch.equal(metallic.grad, torch.zeros(1, 2, 2))


def sunny_sky(height=32, width=64):
    """``running.sky`` with a small sun 60 times as bright, high towards +X."""
    d = equirect_pixel_directions(height, width).float()
    sun = (d @ torch.tensor([0.5, 0.0, 0.866])) > 0.97
    return sky(height, width) * (1.0 + 60.0 * sun[..., None])


def fits(tmp_path, truth: dict, light: torch.Tensor, iterations: int) -> dict:
    """weight -> (held-out PSNR dB, the fitted metallic's mean) of a sphere of ``truth``'s
    material fitted without the prior and with it at 0.3."""
    mesh = uv_sphere(24, 12)
    inputs = Inputs(scene(mesh, 12, 1, light=light, **truth),
                    scene(mesh, 4, 2, light=light, **truth), mesh, light)
    result = {}
    for weight in (0.0, 0.3):
        out = tmp_path / str(weight)
        metrics = optimize_into(config(out, iterations=iterations, mostly_metal=weight), inputs)
        metallic = torch.as_tensor(read_gltf(out / "out" / "mesh.glb").materials[0].ks)[..., 2]
        result[weight] = (metrics["psnr_mean"], metallic.mean().item())
    return result


@pytest.mark.slow
def test_the_prior_takes_a_gold_sphere_s_metal_further_and_fits_it_better(tmp_path):
    """Gold (metallic 1) under a smooth sky, where metal and paint look alike and metallic
    climbs slowly: past 0.5, the prior takes it further towards 1, and the held-out views
    agree. (A prior that pulled each point to the nearer of 0 and 1 took this sphere back to
    paint: docs/BENCHMARKS.md, "Mostly metal".)"""
    truth = {"kd": torch.tensor([1.0, 0.71, 0.29]).expand(32, 32, 3), "ks": (0.0, 0.3, 1.0)}
    result = fits(tmp_path, truth, sky(), iterations=300)
    (plain_psnr, plain_metal), (prior_psnr, prior_metal) = result[0.0], result[0.3]
    assert plain_metal > 0.5 and prior_metal > plain_metal + 0.06, result
    assert prior_psnr > plain_psnr + 0.3, result


@pytest.mark.slow
def test_the_prior_leaves_a_glossy_dielectric_as_the_views_put_it(tmp_path):
    """Glossy paint (metallic 0) under a sky with a sun: the fit leaves some metal in it,
    under half everywhere, which the prior does not touch."""
    truth = {"kd": torch.tensor([0.6, 0.3, 0.2]).expand(32, 32, 3), "ks": (0.0, 0.3, 0.0)}
    result = fits(tmp_path, truth, sunny_sky(), iterations=150)
    (plain_psnr, plain_metal), (prior_psnr, prior_metal) = result[0.0], result[0.3]
    assert 0 < plain_metal < 0.5, result
    assert prior_metal == pytest.approx(plain_metal, abs=0.01), result
    assert prior_psnr == pytest.approx(plain_psnr, abs=0.05), result
