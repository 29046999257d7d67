"""diffrec.render.material: CorrectedMaterial (a trained smooth factor on a frozen base
colour) and fold_occlusion_ (occlusion moved into the base colour)."""

import torch
from render_scenes import front_camera, sphere

from diffrec import raster
from diffrec.light.envmap import EnvironmentLight
from diffrec.render.material import CorrectedMaterial, TextureMaterial
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D

CTX = raster.RasterContext("cpu", impl="torch")


def textured(size=16):
    generator = torch.Generator().manual_seed(3)
    return TextureMaterial(Texture2D(torch.rand(size, size, 3, generator=generator) * 0.8,
                                     [0.0] * 3, [1.0] * 3),
                           Texture2D(torch.tensor([0.3, 0.5, 0.1]).expand(size, size, 3).clone()))


def test_a_zero_factor_changes_nothing_and_only_the_factor_trains():
    mesh, camera = sphere(24, 12), front_camera()
    light = EnvironmentLight(32, init=1.0)
    light.build_mips()
    base = textured()
    before = render_mesh(CTX, mesh, base, camera, light).color.detach()
    corrected = CorrectedMaterial(base, mesh, CTX)
    out = render_mesh(CTX, mesh, corrected, camera, light).color
    assert torch.allclose(out.detach(), before, atol=1e-6)
    out.mean().backward()
    assert corrected.latent.grad.abs().sum() > 0
    assert [name for name, p in corrected.named_parameters() if p.requires_grad] == ["latent"]


def test_the_baked_base_colour_is_the_scaled_texture_clamped_into_range():
    mesh = sphere(24, 12)
    base = textured()
    corrected = CorrectedMaterial(base, mesh, CTX)
    with torch.no_grad():
        corrected.latent.fill_(0.5)  # a constant is its own smoothing: x 1.65 everywhere
    kd = base.kd.data.detach().clone()
    baked = corrected.baked()
    inside = corrected.field.filled.reshape(kd.shape[:2])
    assert torch.allclose(baked.kd.data[inside], (kd[inside] * 1.6487).clamp(max=1.0), atol=1e-3)
    assert torch.equal(baked.kd.data[~inside], kd[~inside])  # no chart: no factor
    assert torch.equal(baked.ks.data, base.ks.data) and baked.kd.data.requires_grad


def test_folding_occlusion_darkens_the_base_colour_and_holds_occlusion_at_zero():
    material = textured()
    kd = material.kd.data.detach().clone()
    material.fold_occlusion_()
    assert torch.allclose(material.kd.data, kd * 0.7)
    assert (material.ks.data[..., 0] == 0).all()
    with torch.no_grad():
        material.ks.data[..., 0] = 0.5
    material.clamp_()
    assert (material.ks.data[..., 0] == 0).all(), "its range holds it at 0"
