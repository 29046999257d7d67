"""EnvironmentLight: split-sum prefiltering, lookups, gradients."""

import itertools
import math

import pytest
import torch

from diffrec import raster
from diffrec.light import EnvironmentLight
from diffrec.light.cube import texel_directions, texel_solid_angles
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.light.prefilter import box_pyramid, cosine_convolve, ggx_prefilter

CTX = raster.RasterContext("cpu", impl="torch")


def unit(n, dtype=torch.float32):
    return torch.nn.functional.normalize(torch.randn(n, 3, dtype=dtype), dim=-1)


def test_constant_environment_stays_constant_at_every_level():
    light = EnvironmentLight(32, init=0.7, min_resolution=8)
    light.build_mips()
    assert light.level_roughness() == pytest.approx([0.08, 0.22, 0.36, 0.5, 1.0])
    for level in [*light.specular_levels, light.diffuse_map]:
        assert torch.allclose(level, torch.full_like(level, 0.7), atol=1e-5)
    n = unit(50)
    assert torch.allclose(light.diffuse(n, ctx=CTX), torch.full((50, 3), 0.7), atol=1e-5)
    spec = light.specular(n, torch.rand(50, 1), ctx=CTX)
    assert torch.allclose(spec, torch.full((50, 3), 0.7), atol=1e-5)


def test_the_level_table_is_nvdiffrecs_at_512_and_keeps_four_ggx_levels_below():
    nvdiffrecs = EnvironmentLight(512, min_resolution=16)  # not built: 30 s on a CPU
    assert nvdiffrecs.ggx_levels == 5
    assert nvdiffrecs.level_roughness() == pytest.approx([0.08, 0.185, 0.29, 0.395, 0.5, 1.0])
    light = EnvironmentLight(64, min_resolution=16)
    light.build_mips()
    sizes = [level.shape[1] for level in light.specular_levels]
    roughness, diffuse = light.level_roughness(), light.diffuse_map.shape[1]
    assert sizes == [64, 32, 16, 8, 4] and diffuse == 16, "four GGX levels, diffuse kept at 16"
    assert roughness == pytest.approx([0.08, 0.22, 0.36, 0.5, 1.0])
    with pytest.raises(ValueError, match="ggx_levels"):
        EnvironmentLight(8, min_resolution=4, ggx_levels=4)


def test_a_lookup_between_levels_is_near_the_lobe_prefiltered_at_its_roughness():
    """Between two levels a lookup blends a narrow and a wide lobe; under a small bright lamp
    that is far from the lobe of the roughness asked for unless the levels are close."""
    base = torch.full((6, 64, 64, 3), 0.05)
    base[4, 28:32, 30:34] = 200.0  # a lamp towards +z
    n = torch.nn.functional.normalize(torch.randn(4000, 3) + torch.tensor([0.0, 0.0, 2.0]), dim=-1)

    def error(light, roughness):
        light.build_mips()
        exact = ggx_prefilter(box_pyramid(light.base.detach()), 32, roughness)
        want = raster.texture_points(exact[None], n, filter_mode="linear",
                                     boundary_mode="cube", ctx=CTX)
        got = light.specular(n, torch.full((len(n), 1), roughness), ctx=CTX)
        return ((got - want).square().mean() / want.square().mean()).sqrt().item()

    with torch.no_grad():
        for roughness in (0.2, 0.3):
            two_levels = error(EnvironmentLight(base=base, ggx_levels=2), roughness)
            default = error(EnvironmentLight(base=base), roughness)
            assert default < 0.5 < two_levels, (roughness, default, two_levels)


def test_roughness_to_mip_inverts_the_level_table():
    light = EnvironmentLight(64, min_resolution=8)
    r = torch.tensor(light.level_roughness())
    assert torch.allclose(light.roughness_to_mip(r), torch.arange(len(r)).float(), atol=1e-6)
    assert light.roughness_to_mip(torch.tensor([0.0])).item() == 0


def test_cosine_convolution_of_a_linear_environment():
    # L(l) = a.l gives E(n)/pi = (2/3) a.n exactly; 16^2 texel quadrature is within 1%.
    a = torch.tensor([0.3, -0.5, 0.8], dtype=torch.float64)
    d = texel_directions(16)
    out = cosine_convolve((d @ a)[..., None])[..., 0]
    assert (out - 2 / 3 * (d @ a)).abs().max() < 1e-2


def spread(cube, centre):
    """Energy-weighted mean angle from ``centre`` (radians)."""
    d = texel_directions(cube.shape[1]).float()
    w = cube[..., 0] * texel_solid_angles(cube.shape[1]).float()
    return (w * torch.acos((d @ centre).clamp(-1, 1))).sum() / w.sum()


def test_bright_texel_spreads_more_as_roughness_grows():
    base = torch.zeros(6, 32, 32, 3)
    base[4, 15:17, 15:17] = 100.0  # +z
    light = EnvironmentLight(base=base, min_resolution=4)
    light.build_mips()
    z = torch.tensor([0.0, 0.0, 1.0])
    spreads = [spread(level, z).item() for level in light.specular_levels]
    assert all(b > a for a, b in itertools.pairwise(spreads))
    assert spreads[0] < 0.15 and spreads[-1] > 0.7


def test_importance_sampled_prefilter_matches_dense_quadrature():
    # Reference: sum over all base texels of L(l) D(h) max(n.l, 0) dw, normalised.
    torch.manual_seed(1)
    res, roughness = 32, 0.4
    d = texel_directions(res)
    a, b = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    env = (1.5 + torch.sin(3 * (d @ a)) + 0.5 * torch.cos(2 * (d @ b)))[..., None]
    out = ggx_prefilter(box_pyramid(env.float()), 16, roughness)[..., 0].double()
    n = texel_directions(16).reshape(-1, 3)
    l = d.reshape(-1, 3)
    h = torch.nn.functional.normalize(n[:, None] + l[None], dim=-1)
    alpha2 = roughness**4
    nh = (h * n[:, None]).sum(-1)
    ndf = alpha2 / (math.pi * (nh * nh * (alpha2 - 1) + 1) ** 2)
    w = ndf * (n @ l.T).clamp_min(0) * texel_solid_angles(res).reshape(1, -1)
    ref = (w @ env.reshape(-1)) / w.sum(-1)
    rel = (out.reshape(-1) - ref).abs() / ref
    assert rel.mean() < 0.02 and rel.max() < 0.08


def test_the_sparse_prefilter_is_the_weighted_gather_it_replaces():
    """On CPU and CUDA the GGX operator runs as a sparse matrix product (its transpose for the
    backward); it must compute what the per-tap gather (``apply_taps``, MPS's path) does."""
    from diffrec.light.cube import apply_taps
    from diffrec.light.prefilter import _ggx_operator, samples_for_level

    base = torch.rand(6, 16, 16, 3, dtype=torch.float64, requires_grad=True)
    pyramid = box_pyramid(base)
    out = ggx_prefilter(pyramid, 8, 0.35)
    flat = torch.cat([level.reshape(-1, 3) for level in pyramid])
    index, weight = _ggx_operator(16, 8, 0.35, samples_for_level(8), "cpu")
    reference = apply_taps(flat, index, weight.double()).reshape(out.shape)
    torch.testing.assert_close(out, reference, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, base, upstream, retain_graph=True)
    (theirs,) = torch.autograd.grad(reference, base, upstream)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_light_gets_gradients_through_lookups():
    light = EnvironmentLight(16, init=0.5, min_resolution=4)
    light.build_mips()
    n = unit(64)
    loss = light.diffuse(n, ctx=CTX).sum() + light.specular(n, torch.rand(64, 1), ctx=CTX).sum()
    loss.backward()
    grad = light.base.grad
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_a_light_that_takes_gradients_is_built_again_at_every_call():
    light = EnvironmentLight(16, init=0.5, min_resolution=4)
    n = unit(64)
    for _ in range(2):  # a kept build would backward through a freed graph the second time
        light.base.grad = None
        light.build_mips()
        light.specular(n, torch.full((64, 1), 0.3), ctx=CTX).sum().backward()
        assert light.base.grad.abs().sum() > 0


def test_a_fixed_light_is_built_once_until_its_values_change(monkeypatch):
    import diffrec.light.envmap as envmap

    builds = []
    monkeypatch.setattr(envmap, "box_pyramid",
                        lambda cube: builds.append(1) or box_pyramid(cube))
    light = EnvironmentLight(16, init=0.5, min_resolution=4)
    light.base.requires_grad_(False)
    n = unit(64)
    light.build_mips()
    light.build_mips()
    assert len(builds) == 1
    with torch.no_grad():
        light.base[0] *= 4.0  # in place: the version counter moves
    light.build_mips()
    fresh = EnvironmentLight(base=light.base, min_resolution=4)
    fresh.build_mips()
    assert len(builds) == 3
    assert torch.equal(light.diffuse(n, ctx=CTX), fresh.diffuse(n, ctx=CTX))
    light.load_state_dict({"base": torch.full_like(light.base, 2.0)})
    light.build_mips()
    assert len(builds) == 4
    assert torch.allclose(light.diffuse(n, ctx=CTX), torch.full((64, 3), 2.0), rtol=1e-4)


def test_gradcheck_lookups_in_float64():
    base = torch.rand(6, 4, 4, 3, dtype=torch.float64, requires_grad=True)
    n = unit(6, torch.float64)
    roughness = torch.tensor([[0.1], [0.3], [0.5], [0.7], [0.9], [1.0]], dtype=torch.float64)

    def lookups(b):
        light = EnvironmentLight(base=b, min_resolution=2)
        del light.base  # put b itself (not a detached copy) into the graph
        light.base = b
        light.build_mips()
        return light.diffuse(n, ctx=CTX), light.specular(n, roughness, ctx=CTX)

    assert torch.autograd.gradcheck(lookups, (base,), fast_mode=True)


def test_equirect_round_trip_clamp_and_white_balance():
    d = torch.nn.functional.normalize(torch.randn(3), dim=0)
    image = equirect_pixel_directions(16, 32).float() @ torch.eye(3) * 0.4 + 0.5 + 0.1 * d
    light = EnvironmentLight.from_equirect(image, 16, min_resolution=4)
    assert (light.to_equirect(16, 32) - image).abs().max() < 2e-2
    with torch.no_grad():
        light.base[0] = -1
    light.clamp_()
    assert light.base.min().item() == 0
    grey = EnvironmentLight(8, init=0.3, min_resolution=4)
    assert grey.white_balance_loss().item() == 0
    with torch.no_grad():
        grey.base[..., 0] = 0.6  # rgb (0.6, 0.3, 0.3): mean 0.4, deviations 0.2, 0.1, 0.1
    assert grey.white_balance_loss().item() == pytest.approx(0.4 / 3)


def test_bad_configuration_is_rejected():
    with pytest.raises(ValueError, match="power"):
        EnvironmentLight(48)
    with pytest.raises(ValueError, match="NaN"):
        EnvironmentLight(base=torch.full((6, 8, 8, 3), float("nan")), min_resolution=4)
    with pytest.raises(RuntimeError, match="build_mips"):
        EnvironmentLight(8, min_resolution=4).diffuse(unit(2), ctx=CTX)
