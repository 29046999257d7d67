"""The base colour a materials run starts from, levelled to its views
(``diffrec.pipeline.albedo_level``): exact where the model holds (a constant base colour under
the start's own ks), clamped into the base colour's range, only where the light is known, and
what it does to a dark object's fit."""

import pytest
import torch
from running import config, optimize_into, scene, sky

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.color import premultiplied_to_straight
from diffrec.io import read_gltf
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.albedo_level import level_albedo_, starts_levelled
from diffrec.pipeline.initial_state import initial_textures, make_light
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import parse_settings
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D

CTX = raster.RasterContext("cpu", impl="torch")
SETTINGS = {"mode": "materials", "light": "fixed", "light_res": 32, "texture_res": 8,
            "batch": 4}
START_KS = (0.0, 0.5, 0.0)  # what "constant" starting textures hold


def sphere_views(kd, ks=START_KS, count=6, size=24):
    """``count`` views of a unit sphere of one material under the test sky, and its mesh and
    light (the run's own: ``make_light`` with the settings above)."""
    mesh = with_vertex_normals(uv_sphere(24, 12))
    light = make_light(parse_settings(SETTINGS), sky(), "cpu")
    light.build_mips()
    truth = TextureMaterial(Texture2D.constant(kd), Texture2D.constant(ks))
    cameras = orbit_cameras(count, 3.2, size, seed=3, elevations_degrees=(-20, 50))
    with torch.no_grad():
        out = render_mesh(CTX, mesh, truth, cameras, light)
    premultiplied = torch.cat([out.color, out.alpha], -1)
    return mesh, light, Views(cameras, premultiplied_to_straight(premultiplied).contiguous())


def levelled(views_kd, **settings):
    values = {**SETTINGS, **settings}
    mesh, light, views = sphere_views(views_kd)
    parsed = parse_settings(values)
    material = initial_textures(parsed, "cpu")
    return level_albedo_(CTX, mesh, material, light, views, parsed), material


def test_a_constant_base_colour_under_the_start_s_ks_is_found_exactly():
    truth = (0.12, 0.31, 0.05)
    level, material = levelled(truth)
    assert torch.allclose(level, torch.tensor(truth), atol=2e-4), level
    assert torch.allclose(material.kd.data, torch.tensor(truth).expand(8, 8, 3), atol=2e-4)
    assert torch.equal(material.ks.data, torch.tensor(START_KS).expand(8, 8, 3))


@pytest.mark.parametrize(("truth", "kd_max", "expected"), [
    ((0.9, 0.9, 0.9), (0.4, 0.5, 1.0), (0.4, 0.5, 0.9)),  # the range's top
    ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0)),  # views darker than the coat alone
])
def test_the_level_stays_in_the_base_colour_s_range(truth, kd_max, expected):
    level, material = levelled(truth, kd_max=kd_max)
    assert torch.allclose(level, torch.tensor(expected), atol=2e-4), level
    assert material.kd.data.max() <= max(kd_max)


def test_views_that_miss_the_object_leave_the_start_as_it_was():
    mesh, light, views = sphere_views((0.3, 0.3, 0.3))
    views = Views(views.cameras, torch.zeros_like(views.images))  # empty: no pixel counts
    settings = parse_settings(SETTINGS)
    material = initial_textures(settings, "cpu")
    level = level_albedo_(CTX, mesh, material, light, views, settings)
    assert torch.equal(level, torch.full((3,), 0.5))


def test_a_four_channel_base_colour_keeps_its_alpha():
    level, material = levelled((0.2, 0.2, 0.2), layers=2, kd_min=(0, 0, 0, 0.3),
                               kd_max=(1, 1, 1, 1))
    assert material.kd.data.shape[-1] == 4
    assert torch.allclose(material.kd.data[..., 3], torch.tensor(1.0))
    assert torch.allclose(level, torch.tensor(0.2), atol=2e-4)


@pytest.mark.parametrize(("given", "levels"), [
    ({}, True), ({"light": "learn-from-envmap"}, True), ({"light": "learn"}, False),
    ({"init_textures": "random"}, False), ({"init_textures": "base_mesh"}, False),
    ({"ks_min": (0.0, 0.08, 0.2)}, False), ({"mode": "refine"}, False)])
def test_only_materials_runs_from_constant_textures_under_a_known_light_are_levelled(given,
                                                                                  levels):
    assert starts_levelled(parse_settings({**SETTINGS, **given})) == levels


@pytest.mark.slow
def test_a_dark_sphere_fits_closer_from_the_level(tmp_path, monkeypatch):
    """The suite's bowl in small: a near-black (0.015) dielectric. From mid grey the fit
    darkens through metal and occlusion as well as the base colour; from the level it need
    not."""
    mesh = uv_sphere(24, 12)
    black = torch.tensor([0.015, 0.015, 0.018]).expand(32, 32, 3)
    inputs = Inputs(scene(mesh, 12, 1, kd=black), scene(mesh, 4, 2, kd=black), mesh, sky())
    fits = {}
    for start in ("level", "grey"):
        if start == "grey":
            monkeypatch.setattr("diffrec.pipeline.run.starts_levelled", lambda settings: False)
        metrics = optimize_into(config(tmp_path / start, iterations=100), inputs)
        ks = torch.as_tensor(read_gltf(tmp_path / start / "out" / "mesh.glb").materials[0].ks)
        fits[start] = (metrics["psnr_mean"], ks[..., 0].mean().item(), ks[..., 2].mean().item())
    (level, occlusion, metallic), (grey, *_) = fits["level"], fits["grey"]
    # measured: 43.9 dB, occlusion 0.07, metallic 0.04 against grey's 21.7 dB, 0.32, 0.28
    assert level > grey + 3.0, fits
    assert occlusion < 0.15 and metallic < 0.15, fits
