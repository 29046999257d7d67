"""The fit of the textures' mip levels (``pipeline.mip_fit``): the engine's box levels and the
fit's start against sums done here by hand, and the fit against the box levels it replaces,
judged by supersampled renders of the full-resolution textures."""

import math

import pytest
import torch
import torch.nn.functional as F
from running import config, scene, sky

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.color import linear_to_srgb, premultiplied_to_straight, srgb_to_linear
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec.mesh.tangents import with_tangents
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.mip_fit import (
    FIT_VIEWS,
    TURN,
    box_levels,
    engine_levels,
    fit_mips,
    fit_scales,
    novel_views,
    reading,
    start_levels,
)
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views
from diffrec.protocol.events import PassName, describe
from diffrec.protocol.settings import Settings
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D

CTX = raster.RasterContext("cpu", impl="torch")


def material(kd, ks, normal=None) -> TextureMaterial:
    """Textures with the renderer's ranges."""
    return TextureMaterial(Texture2D(kd, [0.0] * 3, [1.0] * 3),
                           Texture2D(ks, [0.0, 0.08, 0.0], [1.0] * 3),
                           None if normal is None else Texture2D(normal, [-1, -1, 0], [1] * 3))


def ridges(size: int, tilt: float) -> torch.Tensor:
    """``[size, size, 3]`` unit normals tilted by ``tilt`` radians about v, the sign
    alternating from one texel column to the next."""
    sign = 1 - 2 * (torch.arange(size) % 2)
    x = (math.sin(tilt) * sign).float().expand(size, size)
    return torch.stack([x, torch.zeros_like(x), torch.full_like(x, math.cos(tilt))], -1)


def level_sizes(height: int, width: int) -> list[tuple[int, int]]:
    """The sizes of ``box_levels`` of a ``height x width`` texture."""
    return [tuple(level.shape[:2]) for level in box_levels(torch.zeros(height, width, 1))]


def test_level_sizes_halve_to_one_texel_or_stop_at_an_odd_side():
    assert level_sizes(8, 2) == [(4, 1), (2, 1), (1, 1)]
    assert level_sizes(12, 12) == [(6, 6), (3, 3)]
    assert level_sizes(1, 1) == []


def test_new_views_turn_about_the_centre_and_keep_it_where_the_capture_put_it():
    centre = torch.tensor([0.3, -0.2, 0.5])
    cameras = orbit_cameras(5, 3.0, 16, target=centre.tolist())
    fit = novel_views(cameras, centre, FIT_VIEWS, torch.Generator().manual_seed(1))
    assert len(fit) == FIT_VIEWS
    before, after = cameras.centers() - centre, fit.centers() - centre
    # as far from the centre as the capture's views, each within TURN of one of them, and
    # not all turned by the same
    assert torch.allclose(after.norm(dim=-1), before.norm(dim=-1)[0], atol=1e-5)
    angles = torch.acos((F.normalize(after, dim=-1) @ F.normalize(before, dim=-1).T)
                        .clamp(-1, 1))
    nearest = angles.min(dim=1).values
    assert float(nearest.max()) <= TURN + 1e-4 and float(nearest.std()) > 0.05
    # the whole camera turns with its centre: it still looks at the centre
    look = -fit.camera_to_world[:, :3, 2]
    assert torch.allclose(F.cosine_similarity(look, -after, dim=-1), torch.ones(FIT_VIEWS),
                          atol=1e-5)
    # none is a view of the capture
    assert torch.cdist(fit.centers(), cameras.centers()).min() > 1e-3


def test_engine_levels_average_colour_in_linear_or_srgb_encoding():
    kd = torch.zeros(4, 4, 3)
    kd[:, ::2] = 1.0  # black and white columns: level 1 is a 50 % mix
    flat = material(kd, torch.full((4, 4, 3), 0.5))
    linear = engine_levels(flat, srgb_colour=False)["kd"]
    srgb = engine_levels(flat, srgb_colour=True)["kd"]
    assert len(linear) == 2 and linear[0].shape == (2, 2, 3)
    assert torch.allclose(linear[0], torch.full((2, 2, 3), 0.5))
    # averaged as stored in an sRGB file, the mix comes out darker: decode(0.5) ~ 0.214
    half = srgb_to_linear(torch.tensor(0.5))
    assert torch.allclose(srgb[0], half.expand(2, 2, 3), atol=1e-5)
    assert float(linear_to_srgb(srgb[0]).mean()) == pytest.approx(0.5, abs=1e-5)


def test_start_raises_roughness_where_the_normals_spread_and_keeps_it_where_flat():
    size, tilt, roughness = 16, 0.5, 0.3
    normal = ridges(size, tilt)
    normal[: size // 2] = torch.tensor([0.0, 0.0, 1.0])  # the top half is flat
    ks = torch.tensor([0.0, roughness, 0.0]).expand(size, size, 3).clone()
    start = start_levels(material(torch.full((size, size, 3), 0.5), ks, normal))
    level1 = start["ks"][0][..., 1]
    # by hand: the mean of two normals tilted +-tilt has length r = cos(tilt); the von
    # Mises-Fisher lobe of that mean length widens alpha^2 by 2 / kappa
    r = math.cos(tilt)
    kappa = (3 * r - r ** 3) / (1 - r ** 2)
    expected = (roughness ** 4 + 2 / kappa) ** 0.25
    assert torch.allclose(level1[size // 4:], torch.tensor(expected), atol=1e-4)
    assert torch.allclose(level1[: size // 4], torch.tensor(roughness), atol=1e-6)
    for level in start["normal"]:
        assert torch.allclose(level.norm(dim=-1), torch.ones(level.shape[:2]), atol=1e-5)
    assert start["kd"][0].shape == (8, 8, 3)


def bumpy_sphere(texels: int = 64):
    """A glossy sphere with fine normal-map ridges and a checker base colour under a sky with a
    bright patch; tangents and vertex normals as a result mesh has them."""
    mesh = with_tangents(with_vertex_normals(uv_sphere(32, 16)))
    v, u = torch.meshgrid(torch.linspace(0, 1, texels), torch.linspace(0, 1, texels),
                          indexing="ij")
    wave = 2 * math.pi * texels / 4
    slope_u, slope_v = 0.8 * torch.cos(wave * u), 0.4 * torch.cos(wave / 2 * v)
    normal = F.normalize(torch.stack([-slope_u, -slope_v, torch.ones_like(u)], -1), dim=-1)
    check = ((u * 16).floor() + (v * 8).floor()) % 2
    kd = torch.stack([0.8 * check + 0.05, torch.full_like(u, 0.3), 0.75 - 0.7 * check], -1)
    ks = torch.stack([torch.zeros_like(u), torch.full_like(u, 0.25), torch.zeros_like(u)], -1)
    image = sky(32, 64)
    image[2:6, 4:12] += 20.0  # a small bright source high up: sharp highlights
    light = EnvironmentLight.from_equirect(image, resolution=32)
    return mesh, material(kd, ks, normal), light


def seen_from(mesh, textures, light, cameras) -> Views:
    """The views' images: the full-resolution textures (level 0 only) at 4x4 samples a
    pixel, the truth that picks the levels kept."""
    with torch.no_grad(), reading(textures, None, mip_bias=-16.0):
        light.build_mips()
        out = render_mesh(CTX, mesh, textures, cameras, light, spp=4)
    return Views(cameras, premultiplied_to_straight(torch.cat([out.color, out.alpha], -1)))


def test_fit_beats_the_engines_box_levels_against_supersampled_renders():
    mesh, textures, light = bumpy_sphere()
    cameras = orbit_cameras(16, 3.2, 32, seed=3, elevations_degrees=(-20, 50))
    seen = seen_from(mesh, textures, light, cameras)
    reports = []

    class Heard:
        def progress(self, progress):
            reports.append(progress)

    settings = Settings(batch=2, log_every=10, seed=0)
    fit = fit_mips(CTX, mesh, textures, light, seen, settings, Heard(), iterations=40,
                   passes=2)
    assert fit.scales == fit_scales(cameras) == [0, 1, 2]
    # the loss is the squared display error on wholly covered pixels against the views'
    # images (level 0 at 4x4 samples) box-reduced; box levels flatten the ridges'
    # highlights, the start widens them (0.90 of the box levels' loss), the fit, on views it
    # makes, does better still (0.72 at seed 0, 0.71-0.73 over seeds 0-2)
    assert fit.start_loss < 0.95 * fit.box_loss, fit
    assert fit.kept == "fitted" and fit.loss == fit.fitted_loss < 0.85 * fit.box_loss, fit
    assert fit.fitted_loss < 0.9 * fit.start_loss, fit
    assert [r.iteration for r in reports] == [10, 20, 30, 40]
    assert all(r.pass_name == PassName.MIPS and r.passes == 2 for r in reports)
    assert describe(reports[0]).startswith("Mip levels · 10/40")
    for name, levels in fit.levels.items():
        base = getattr(textures, name).data
        assert [tuple(level.shape[:2]) for level in levels] == level_sizes(*base.shape[:2])
    assert all(torch.allclose(level.norm(dim=-1), torch.ones(level.shape[:2]), atol=1e-5)
               for level in fit.levels["normal"])
    assert all(float(level[..., 1].min()) >= 0.08 for level in fit.levels["ks"])
    # the material and the light are left as they were: no levels, still trainable
    assert textures.mips is None and textures.mip_bias == 0.0
    maps = (textures.kd, textures.ks, textures.normal)
    assert all(p.requires_grad for p in (*(t.data for t in maps), light.base))
    assert not textures.f0.requires_grad  # not trained before the fit: nor after it
    assert not any(p.requires_grad for p in light.sun.parameters())  # it has none to train
    # no steps: the start as it is, judged beside the box levels
    unfitted = fit_mips(CTX, mesh, textures, light, seen, settings, iterations=0)
    assert unfitted.fitted_loss == unfitted.start_loss == pytest.approx(fit.start_loss)
    assert unfitted.kept in ("start", "box") and unfitted.box_loss == pytest.approx(fit.box_loss)


def test_the_fit_shades_under_the_map_alone_as_an_engine_does_and_gives_the_sources_back():
    """A fixed light's brightest parts, shaded as directional sources in the passes, are
    folded back into the prefiltered map for the fit: its losses are those under a light
    built without sources, and the job's light has its sources again afterwards."""
    mesh, textures, plain = bumpy_sphere()
    with_sources = EnvironmentLight(base=plain.base.detach(), sources=8)
    cameras = orbit_cameras(8, 3.2, 32, seed=3, elevations_degrees=(-20, 50))
    seen = seen_from(mesh, textures, with_sources, cameras)
    settings = Settings(batch=2, seed=0)
    folded = fit_mips(CTX, mesh, textures, with_sources, seen, settings, iterations=0)
    alone = fit_mips(CTX, mesh, textures, plain, seen, settings, iterations=0)
    assert folded.box_loss == pytest.approx(alone.box_loss, rel=1e-5)
    assert folded.start_loss == pytest.approx(alone.start_loss, rel=1e-5)
    assert with_sources.source_count == 8 and with_sources.sources is not None


def test_a_run_fits_the_levels_after_its_last_pass_and_keeps_them_on_its_material(tmp_path):
    mesh = uv_sphere(16, 8)
    inputs = Inputs(scene(mesh, 6, seed=1, size=32), None, mesh, sky())
    settings = config(tmp_path, mode="materials", iterations=10, train_res=32,
                      mip_iterations=10, validation=False).settings
    result = optimize(settings, inputs)
    summary = result.metrics["mips"]
    # 10 steps of Adam on smooth textures lose to the box levels they start near: the lowest
    # of the three is kept
    assert summary["scales"] == [0, 1, 2]
    assert summary["loss"] == min(summary[name] for name in ("box_loss", "start_loss",
                                                              "fitted_loss"))
    assert result.metrics["time_s"]["mips"] == summary["seconds"] > 0
    levels = result.material.mips
    assert set(levels) == {"kd", "ks"}  # materials mode trains no normal map by default
    assert levels["kd"][0].shape == (16, 16, 3)
    off = optimize(config(tmp_path, mode="materials", iterations=10, train_res=32,
                          mip_iterations=0, validation=False).settings, inputs)
    assert off.material.mips is None and off.metrics["mips"] is None
