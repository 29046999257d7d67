"""PBR shading, microfacet terms and shading normals."""

import math

import pytest
import torch

from diffrec import raster
from diffrec.light import EnvironmentLight, brdf_lut
from diffrec.light.brdf_lut import split_sum_terms
from diffrec.shading import (
    DIELECTRIC_F0,
    dielectric_f0,
    ggx_ndf,
    ior_of,
    pbr,
    perturb_normal,
    shade,
    shading_normal,
    specular_brdf,
)

CTX = raster.RasterContext("cpu", impl="torch")


@pytest.fixture(scope="module")
def lut(tmp_path_factory):
    return brdf_lut(32, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def white_light():
    light = EnvironmentLight(16, init=1.0, min_resolution=4)
    light.build_mips()
    return light


def unit(n):
    return torch.nn.functional.normalize(torch.randn(n, 3), dim=-1)


class DiffuseOnly:
    """Wraps a light with its specular lookup switched off."""

    def __init__(self, light):
        self.diffuse, self.source_specular = light.diffuse, light.source_specular

    def specular(self, reflect, roughness, *, ctx):
        return torch.zeros_like(reflect)


def test_white_furnace(white_light, lut):
    """A white dielectric under a uniform white sky: Blender's layered model (the diffuse
    under the coat gets what the coat does not reflect) sends back exactly what arrives, at
    every angle; nvdiffrec's sum sends back 1 + the coat's albedo ``0.04 A + B``, with A and
    B integrated here in float64 (``split_sum_terms``), not read from the table."""
    n = unit(100)
    view = torch.nn.functional.normalize(n + 0.5 * unit(100), dim=-1)
    kd = torch.ones(100, 3)
    ks = torch.tensor([0.0, 0.6, 0.0]).expand(100, 3)
    n_dot_v = (n * view).sum(-1).clamp(1e-4, 1).double()
    a, b = split_sum_terms(n_dot_v, torch.tensor(0.6, dtype=torch.float64))
    coat = 0.04 * a + b
    assert coat.min() > 0.03  # the two models differ by at least this much
    for layered, diffuse_expected, full_expected in ((True, 1 - coat, torch.ones_like(coat)),
                                                      (False, torch.ones_like(coat), 1 + coat)):
        diffuse = pbr(DiffuseOnly(white_light), lut, kd, ks, n, view, ctx=CTX, layered=layered)
        assert torch.allclose(diffuse[:, 0].double(), diffuse_expected, atol=2e-3), layered
        full = pbr(white_light, lut, kd, ks, n, view, ctx=CTX, layered=layered)
        assert torch.allclose(full[:, 0].double(), full_expected, atol=2e-3), layered


def test_a_clear_coat_reflects_its_albedo_and_dims_what_lies_under_it(white_light, lut):
    """Under a uniform white sky a coat ``(w, r_c)`` adds its albedo ``w E_c`` and dims the
    material beneath by ``1 - w E_c``, with ``E_c = 0.04 A + B`` (single scattering, as
    Cycles' coat) from float64 integrals: a white dielectric still reflects exactly what
    arrives, a black one what the coat alone reflects; a coat of weight 0 changes nothing."""
    n = unit(300)
    view = torch.nn.functional.normalize(n + 1.5 * unit(300), dim=-1)
    facing = (n * view).sum(-1) > 0.05
    n, view = n[facing][:100], view[facing][:100]
    ks = torch.tensor([0.0, 0.7, 0.0]).expand(100, 3)
    coat = torch.tensor([0.8, 0.1])
    n_dot_v = (n * view).sum(-1).clamp(1e-4, 1).double()
    a, b = split_sum_terms(n_dot_v, torch.tensor(0.1, dtype=torch.float64))
    albedo = 0.04 * a + b
    assert albedo.max() > 0.1  # grazing views: the coat matters
    white = pbr(white_light, lut, torch.ones(100, 3), ks, n, view, ctx=CTX, coat=coat)
    assert torch.allclose(white, torch.ones_like(white), atol=3e-3)
    black = torch.zeros(100, 3)
    bare = pbr(white_light, lut, black, ks, n, view, ctx=CTX)[:, 0].double()
    coated = pbr(white_light, lut, black, ks, n, view, ctx=CTX, coat=coat)[:, 0].double()
    assert torch.allclose(coated, bare * (1 - 0.8 * albedo) + 0.8 * albedo, atol=3e-3)
    kd = torch.rand(100, 3)
    assert torch.equal(pbr(white_light, lut, kd, ks, n, view, ctx=CTX),
                       pbr(white_light, lut, kd, ks, n, view, ctx=CTX,
                           coat=torch.tensor([0.0, 0.1])))


def test_a_brighter_dielectric_reflects_its_albedo_and_the_diffuse_gets_the_rest(white_light,
                                                                                lut):
    """A non-metal of IOR 2.6 (``f0`` 0.197) under a uniform white sky: black, it reflects its
    albedo ``(f0 A + B) M(f0)``, ``M(f0) = 1 + f0 (1 - E) / E`` with ``A``, ``B`` and
    ``E = A + B`` integrated in float64; white, exactly what arrives (its diffuse gets what
    the coat does not reflect). ``f0`` None is IOR 1.5's 0.04."""
    assert dielectric_f0(1.5) == pytest.approx(0.04)
    assert dielectric_f0(3.0) == pytest.approx(0.25)
    assert ior_of(dielectric_f0(2.6)) == pytest.approx(2.6)
    n = unit(100)
    view = torch.nn.functional.normalize(n + 0.8 * unit(100), dim=-1)
    ks = torch.tensor([0.0, 0.3, 0.0]).expand(100, 3)
    f0 = torch.tensor(dielectric_f0(2.6))
    n_dot_v = (n * view).sum(-1).clamp(1e-4, 1).double()
    a, b = split_sum_terms(n_dot_v, torch.tensor(0.3, dtype=torch.float64))
    albedo = (f0.double() * a + b) * (1 + f0.double() * (1 - (a + b)) / (a + b))
    assert albedo.min() > 0.19  # five times glass's
    black = pbr(white_light, lut, torch.zeros(100, 3), ks, n, view, ctx=CTX, f0=f0)
    assert torch.allclose(black[:, 0].double(), albedo, atol=3e-3)
    white = pbr(white_light, lut, torch.ones(100, 3), ks, n, view, ctx=CTX, f0=f0)
    assert torch.allclose(white, torch.ones_like(white), atol=3e-3)
    kd = torch.rand(100, 3)
    assert torch.equal(pbr(white_light, lut, kd, ks, n, view, ctx=CTX),
                       pbr(white_light, lut, kd, ks, n, view, ctx=CTX,
                           f0=torch.tensor(DIELECTRIC_F0)))


def test_metallic_and_occlusion(white_light, lut):
    """A metal under a white sky reflects its single-scattering albedo ``kd A + B`` and the
    light lost between the microfacets, ``kd (1 - E) / E`` of it (Blender's Multiscatter
    GGX), or the albedo alone as nvdiffrec shades; full occlusion leaves nothing."""
    n = unit(10)
    kd = torch.rand(10, 3)
    ks = torch.tensor([0.0, 0.5, 1.0]).expand(10, 3)
    a, b = split_sum_terms(torch.ones(10, dtype=torch.float64), torch.tensor(0.5).double())
    single = kd.double() * a[:, None] + b[:, None]
    metal = pbr(white_light, lut, kd, ks, n, n, ctx=CTX)
    energy = a[:, None] + b[:, None]
    assert torch.allclose(metal.double(), single * (1 + kd.double() * (1 - energy) / energy),
                          atol=2e-3)
    assert torch.allclose(pbr(white_light, lut, kd, ks, n, n, ctx=CTX, layered=False).double(),
                          single, atol=2e-3)
    occluded = pbr(white_light, lut, kd, torch.tensor([1.0, 0.5, 0.0]).expand(10, 3), n, n,
                   ctx=CTX)
    assert torch.allclose(occluded, torch.zeros_like(occluded))


def test_a_white_metal_reflects_all_the_sky_at_every_roughness(white_light, lut):
    """Energy conservation of the multiple-scattering term: a white metal (F0 = 1) under a
    uniform white sky reflects exactly what arrives, at any roughness and angle; single
    scattering alone (nvdiffrec) loses up to a third of it at roughness 1 (E from float64
    integrals, not from the table)."""
    n = unit(200)
    view = torch.nn.functional.normalize(n + 0.8 * unit(200), dim=-1)
    roughness = torch.rand(200, 1)
    ks = torch.cat([torch.zeros(200, 1), roughness, torch.ones(200, 1)], -1)
    kd = torch.ones(200, 3)
    reflected = pbr(white_light, lut, kd, ks, n, view, ctx=CTX)
    assert torch.allclose(reflected, torch.ones_like(reflected), atol=3e-3)
    n_dot_v = (n * view).sum(-1).clamp(1e-4, 1).double()
    a, b = split_sum_terms(n_dot_v, roughness[:, 0].double())
    single = pbr(white_light, lut, kd, ks, n, view, ctx=CTX, layered=False)[:, 0].double()
    assert torch.allclose(single, a + b, atol=0.015)  # the fixture's table is 32x32
    assert (a + b).min() < 0.8


def test_ggx_is_normalised():
    theta = (torch.arange(4000, dtype=torch.float64) + 0.5) / 4000 * math.pi / 2
    for alpha in (0.05, 0.3, 1.0):
        integrand = ggx_ndf(torch.cos(theta), alpha) * torch.cos(theta) * torch.sin(theta)
        assert (integrand.sum() * 2 * math.pi * (math.pi / 2 / 4000)).item() == pytest.approx(
            1, abs=2e-3
        )


def test_specular_brdf_integrates_to_the_split_sum_terms():
    mu, roughness, f0 = 0.6, 0.5, 0.3
    n_grid = 400
    theta = (torch.arange(n_grid, dtype=torch.float64) + 0.5) / n_grid * math.pi / 2
    phi = (torch.arange(2 * n_grid, dtype=torch.float64) + 0.5) / (2 * n_grid) * 2 * math.pi
    th, ph = torch.meshgrid(theta, phi, indexing="ij")
    l = torch.stack([th.sin() * ph.cos(), th.sin() * ph.sin(), th.cos()], -1)
    v = torch.tensor([math.sqrt(1 - mu * mu), 0, mu], dtype=torch.float64).expand_as(l)
    n = torch.tensor([0.0, 0, 1], dtype=torch.float64).expand_as(l)
    f = specular_brdf(n, v, l, torch.tensor([f0], dtype=torch.float64), torch.tensor([roughness]))
    d_omega = th.sin() * (math.pi / 2 / n_grid) * (math.pi / n_grid)
    albedo = (f[..., 0] * th.cos() * d_omega).sum().item()
    a, b = split_sum_terms(torch.tensor(mu).double(), torch.tensor(roughness).double())
    assert albedo == pytest.approx(f0 * a.item() + b.item(), abs=2e-3)


def test_normal_map_identity_and_tilts():
    n = torch.tensor([[0.0, 0.0, 1.0]])
    t = torch.tensor([[1.0, 0.0, 0.2]])  # not orthogonal: Gram-Schmidt makes it +x
    assert torch.allclose(perturb_normal(n, t, torch.tensor([[0.0, 0.0, 1.0]])), n)
    tilted = perturb_normal(n, t, torch.tensor([[0.5, 0.0, 0.866]]))
    assert tilted[0, 0] > 0.45 and tilted[0, 1].abs() < 1e-6
    # OpenGL (+Y up): y tilts toward the bitangent cross(N, T) = +y here; sign -1 flips it.
    up = perturb_normal(n, t, torch.tensor([[0.0, 0.5, 0.866]]))
    down = perturb_normal(n, t, torch.tensor([[0.0, 0.5, 0.866]]), -1.0)
    assert up[0, 1] > 0.45 and down[0, 1] < -0.45


def test_two_sided_shading_normal():
    view = torch.tensor([[0.0, 0.0, 1.0]])
    back = torch.tensor([[0.0, 0.0, -1.0]])
    assert torch.allclose(shading_normal(view, back, back), view)
    assert torch.allclose(shading_normal(view, back, back, two_sided=False).sum(-1), torch.ones(1))
    # A smooth normal slightly away from the eye on a front face is bent to n.v = 0.01.
    grazing = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0, -0.2]]), dim=-1)
    bent = shading_normal(view, grazing, view)[0]
    assert bent.norm().item() == pytest.approx(1)
    assert 0 < bent[2].item() < 0.02  # just in front of the eye's horizon
    assert bent[0].item() > 0.99 and bent[1].item() == 0  # in the plane of n and v
    facing = torch.nn.functional.normalize(torch.tensor([[0.3, 0.0, 1.0]]), dim=-1)
    assert torch.allclose(shading_normal(view, facing, view), facing)


def test_display_modes(white_light, lut):
    n, kd, ks = unit(5), torch.rand(5, 3), torch.rand(5, 3)
    assert torch.equal(shade("kd", white_light, lut, kd, ks, n, n, ctx=CTX), kd)
    assert torch.equal(shade("ks", white_light, lut, kd, ks, n, n, ctx=CTX), ks)
    assert torch.allclose(shade("normal", white_light, lut, kd, ks, n, n, ctx=CTX), (n + 1) / 2)
    only = shade("shading-only", white_light, lut, kd, ks, n, n, ctx=CTX)
    assert torch.allclose(only, torch.ones_like(only), atol=1e-5)
    with pytest.raises(ValueError, match="display mode"):
        shade("bogus", white_light, lut, kd, ks, n, n, ctx=CTX)


def test_gradients_reach_material_normal_and_light(lut):
    light = EnvironmentLight(16, init=0.5, min_resolution=4)
    light.build_mips()
    kd = torch.rand(20, 3, requires_grad=True)
    ks = torch.tensor([0.1, 0.4, 0.3]).repeat(20, 1).requires_grad_()
    n = unit(20).requires_grad_()
    out = pbr(light, lut, kd, ks, torch.nn.functional.normalize(n, dim=-1), unit(20).abs(),
              ctx=CTX)
    out.sum().backward()
    for grad in (kd.grad, ks.grad, n.grad, light.base.grad):
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0
