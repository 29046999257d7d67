"""Start textures on the wire (``start_kd``, ``start_ks``, ``start_normal``, a clear coat,
``start_coat``, and an IOR, ``start_ior``): what the add-on bakes onto the start mesh's UVs
travels as image-like arrays, becomes the base material and is where a job's textures start."""

import json

import numpy as np
import pytest
import torch
from running import config
from stand_ins import ball_asset, render, ring_cameras, sky

from diffrec import raster
from diffrec.errors import UserError
from diffrec.io import Asset, Material, read_gltf
from diffrec.mesh.primitives import plane
from diffrec.pipeline.albedo_level import starts_levelled
from diffrec.pipeline.initial_state import _resampled, initial_textures
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.job_arrays import (
    START_COAT,
    START_IOR,
    settings_for_start,
    start_material,
    to_job_arrays,
)
from diffrec.pipeline.outputs import write_result
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import parse_settings

CTX = raster.RasterContext("cpu", impl="torch")
SIZE = 32


def _views(count: int) -> Views:
    cameras = ring_cameras(count, SIZE, SIZE)
    return Views(cameras, render(cameras))


def _blank_views() -> Views:
    """Two views of nothing: what a test of the mesh's arrays sends beside them."""
    return Views(ring_cameras(2, 8, 8), torch.zeros(2, 8, 8, 4))


def test_start_textures_travel_both_ways():
    generator = torch.Generator().manual_seed(0)
    normal = torch.randn(6, 4, 3, generator=generator) + torch.tensor([0.0, 0.0, 3.0])
    material = Material(kd=torch.rand(8, 8, 4, generator=generator),
                        ks=torch.tensor([0.0, 0.3, 1.0]),
                        normal=normal / normal.norm(dim=-1, keepdim=True))
    arrays = to_job_arrays(_blank_views(), plane(2), None, material)
    assert {arrays[name].dtype for name in ("start_kd", "start_ks", "start_normal")} == \
        {np.dtype(np.float32)}
    np.testing.assert_array_equal(arrays["start_kd"], material.kd[..., :3].numpy())
    np.testing.assert_array_equal(arrays["start_ks"], np.float32([[[0.0, 0.3, 1.0]]]))
    np.testing.assert_allclose(arrays["start_normal"], (material.normal.numpy() + 1) / 2)
    back = start_material(arrays)
    torch.testing.assert_close(back.kd, material.kd[..., :3])
    torch.testing.assert_close(back.ks, torch.tensor([[[0.0, 0.3, 1.0]]]))
    torch.testing.assert_close(back.normal, material.normal)


def test_channels_not_sent_are_the_constant_start():
    encoded = np.full((4, 4, 3), [0.5, 0.5, 1.0], np.float32)
    material = start_material({"start_normal": encoded})
    torch.testing.assert_close(material.kd, torch.tensor([0.5, 0.5, 0.5]))
    torch.testing.assert_close(material.ks, torch.tensor([0.0, 0.5, 0.0]))
    torch.testing.assert_close(material.normal, torch.tensor([0.0, 0.0, 1.0]).expand(4, 4, 3))
    assert start_material({"images": encoded}) is None


def test_row_zero_of_a_start_texture_is_the_top_of_uv_space():
    """Rows top-down, as images: texel (row 0, column 0) of a 5 x 5 texture covers u in
    [0, 0.2] and v in [0.8, 1], so UV (0.1, 0.9), its centre, reads it."""
    kd = np.zeros((5, 5, 3), np.float32)
    kd[..., 2] = 1.0
    kd[0, 0] = (1.0, 0.0, 0.0)
    settings = settings_for_start(parse_settings({"texture_res": 5}),
                                  start_material({"start_kd": kd}))
    textures = initial_textures(settings, "cpu", start_material({"start_kd": kd}))
    uv = torch.tensor([[0.1, 0.9], [0.1, 0.1], [0.9, 0.9]]).reshape(1, 1, 3, 2)
    read = textures.kd.sample(uv, ctx=CTX).reshape(3, 3)
    torch.testing.assert_close(read, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0],
                                                   [0.0, 0.0, 1.0]]))


def test_a_job_with_start_textures_starts_from_them_unless_told_otherwise():
    material = Material(kd=torch.rand(4, 4, 3), normal=torch.tensor([0.0, 0.0, 1.0])
                        .expand(4, 4, 3))
    given = settings_for_start(parse_settings({"light": "fixed"}), material)
    assert (given.material.init_textures, given.material.normal_map) == ("base_mesh", "on")
    assert not starts_levelled(given), "a baked base colour is not levelled to the views"
    kept = settings_for_start(parse_settings({"init_textures": "random", "normal_map": "off"}),
                              material)
    assert (kept.material.init_textures, kept.material.normal_map) == ("random", "off")
    plain = parse_settings({})
    assert settings_for_start(plain, None) is plain


def test_a_materials_run_renders_the_start_textures_from_its_first_iteration(tmp_path):
    """The ball's own textures sent as start textures: the first iteration already renders
    the targets (a grey start is far off), and the textures the run holds are the ones given,
    resampled to texture_res, not levelled to the views."""
    asset = ball_asset()
    truth = asset.materials[0]
    arrays = to_job_arrays(_blank_views(), asset.mesh, None, Material(kd=truth.kd, ks=truth.ks))
    material = start_material(arrays)
    run = config(tmp_path, train_res=SIZE, texture_res=16, iterations=1, log_every=1,
                 plateau_window=0, validation=False, learning_rate=[0.03, 1e-12])
    settings = settings_for_start(run.settings, material)
    result = optimize(settings, Inputs(_views(6), None, asset.mesh, sky(), material),
                      device="cpu")
    first = result.metrics["history"][0]
    assert first["iteration"] == 1 and first["psnr"] > 30, first
    kd = result.material.kd.data.detach()
    torch.testing.assert_close(kd, _resampled(truth.kd, 16, kd), atol=1e-4, rtol=0)


def test_a_start_coat_travels_and_is_checked():
    material = Material(kd=torch.rand(4, 4, 3), coat=(0.8, 0.05))
    arrays = to_job_arrays(_blank_views(), plane(2), None, material)
    assert arrays[START_COAT].dtype == np.float32
    np.testing.assert_array_equal(arrays[START_COAT], np.float32([0.8, 0.05]))
    torch.testing.assert_close(start_material(arrays).coat, torch.tensor([0.8, 0.05]))
    assert start_material({START_COAT: np.float32([1.0, 0.1])}).coat.tolist() == \
        pytest.approx([1.0, 0.1])
    for bad in (np.float32([1.5, 0.1]), np.float32([0.5, 0.1, 0.2])):
        with pytest.raises(UserError, match="start_coat"):
            start_material({START_COAT: bad})


def test_a_start_ior_travels_and_is_checked():
    material = Material(kd=torch.rand(4, 4, 3), ior=2.4)
    arrays = to_job_arrays(_blank_views(), plane(2), None, material)
    assert arrays[START_IOR].dtype == np.float32
    np.testing.assert_array_equal(arrays[START_IOR], np.float32([2.4]))
    assert start_material(arrays).ior == pytest.approx(2.4)
    assert START_IOR not in to_job_arrays(_blank_views(), plane(2), None,
                                          Material(kd=torch.rand(4, 4, 3)))
    assert start_material({START_IOR: np.float32([1.33])}).ior == pytest.approx(1.33)
    for bad in (np.float32([0.5]), np.float32([np.nan])):
        with pytest.raises(UserError, match="IOR"):
            start_material({START_IOR: bad})


def test_a_job_starts_from_the_ior_it_is_sent(tmp_path):
    """The ball at IOR 2.6 sent its own textures, with its IOR and without (1.5), the IOR
    held (``learn_ior`` off): sent, the first iteration renders the targets better by dB, and
    the result and mesh.glb keep it."""
    ball = ball_asset()
    glossy = Material(kd=ball.materials[0].kd, ks=torch.tensor([0.0, 0.25, 0.0]), ior=2.6)
    cameras = ring_cameras(4, SIZE, SIZE)
    targets = render_reference_views(CTX, Asset(ball.mesh, [glossy], ball.material_ids),
                                     sky(), cameras, spp=2, light_resolution=32).images
    fits = {}
    for ior in (2.6, None):
        sent = start_material(to_job_arrays(_blank_views(), ball.mesh, None,
                                            Material(kd=glossy.kd, ks=glossy.ks, ior=ior)))
        run = config(tmp_path, train_res=SIZE, texture_res=16, iterations=1, log_every=1,
                     plateau_window=0, validation=False, learn_ior="off")
        fits[ior] = optimize(settings_for_start(run.settings, sent),
                             Inputs(Views(cameras, targets), None, ball.mesh, sky(), sent),
                             device="cpu")
    assert fits[2.6].metrics["ior"] == pytest.approx(2.6, abs=1e-4)
    assert fits[None].metrics["ior"] == pytest.approx(1.5, abs=1e-4)
    first = {ior: fit.metrics["history"][0]["psnr"] for ior, fit in fits.items()}
    assert first[2.6] > first[None] + 3, first
    write_result(tmp_path / "gem", fits[2.6])
    assert read_gltf(tmp_path / "gem" / "mesh.glb").materials[0].ior == pytest.approx(2.6,
                                                                                       abs=1e-4)


def test_a_coated_start_is_kept_shaded_and_exported(tmp_path):
    """The ball under a glossy clear coat: sent its textures and its coat, a materials run
    renders the targets from its first iteration; sent the textures alone, the coat's
    reflections are missing (lower by dB). The coat is kept as given, mesh.glb carries it,
    and a warning says that mesh.obj cannot."""
    ball = ball_asset()
    truth = ball.materials[0]
    coated = Material(kd=truth.kd, ks=truth.ks, coat=(1.0, 0.1))
    cameras = ring_cameras(6, SIZE, SIZE)
    targets = render_reference_views(CTX, Asset(ball.mesh, [coated], ball.material_ids),
                                     sky(), cameras, spp=2, light_resolution=32).images
    run = config(tmp_path, train_res=SIZE, texture_res=16, iterations=1, log_every=1,
                 plateau_window=0, validation=False, learning_rate=[0.03, 1e-12])
    first = {}
    for name, sent in (("coat", coated), ("no coat", Material(kd=truth.kd, ks=truth.ks))):
        material = start_material(to_job_arrays(_blank_views(), ball.mesh, None, sent))
        settings = settings_for_start(run.settings, material)
        result = optimize(settings, Inputs(Views(cameras, targets), None, ball.mesh, sky(),
                                           material), device="cpu")
        first[name] = result.metrics["history"][0]["psnr"]
        if name == "coat":
            torch.testing.assert_close(result.material.coat, torch.tensor([1.0, 0.1]))
            write_result(tmp_path / "coated", result, export_obj=True)
    assert first["coat"] > 30 and first["coat"] > first["no coat"] + 3, first
    exported = read_gltf(tmp_path / "coated" / "mesh.glb").materials[0]
    torch.testing.assert_close(exported.coat, torch.tensor([1.0, 0.1]))
    metrics = json.loads((tmp_path / "coated" / "metrics.json").read_text())
    assert any("mesh.obj has no clear coat" in line for line in metrics["warnings"])


def test_a_start_from_given_textures_learns_a_gloss_brighter_than_glass(tmp_path):
    """The ball at IOR 2.6 (a non-metal five times as glossy as glass) sent its own textures
    at IOR 1.5: the fit (``learn_ior`` auto) brings the IOR to the truth's, renders the
    targets better than a fit that keeps 1.5 (``learn_ior`` off), and says what it came to
    in its log, metrics.json and mesh.glb."""
    ball = ball_asset()
    truth = ball.materials[0]
    glossy = Material(kd=truth.kd, ks=torch.tensor([0.0, 0.25, 0.0]), ior=2.6)
    cameras = ring_cameras(6, SIZE, SIZE)
    targets = render_reference_views(CTX, Asset(ball.mesh, [glossy], ball.material_ids),
                                     sky(), cameras, spp=2, light_resolution=32).images
    sent = Material(kd=glossy.kd, ks=glossy.ks)
    fits = {}
    for learn_ior in ("auto", "off"):
        run = config(tmp_path, train_res=SIZE, texture_res=16, iterations=60,
                     validation=False, learn_ior=learn_ior)
        material = start_material(to_job_arrays(_blank_views(), ball.mesh, None, sent))
        fits[learn_ior] = optimize(settings_for_start(run.settings, material),
                                   Inputs(Views(cameras, targets), None, ball.mesh, sky(),
                                          material), device="cpu")
    learned, kept = fits["auto"], fits["off"]
    assert learned.metrics["ior"] == pytest.approx(2.6, abs=0.25), learned.metrics["ior"]
    assert kept.metrics["ior"] == pytest.approx(1.5)
    assert learned.metrics["history"][-1]["psnr"] > kept.metrics["history"][-1]["psnr"] + 3
    write_result(tmp_path / "glossy", learned)
    exported = read_gltf(tmp_path / "glossy" / "mesh.glb").materials[0]
    assert exported.ior == pytest.approx(learned.metrics["ior"])
    write_result(tmp_path / "glass", kept)
    assert read_gltf(tmp_path / "glass" / "mesh.glb").materials[0].ior is None


@pytest.mark.mitsuba  # where Mitsuba cannot run, the job is refused for that first
@pytest.mark.parametrize(("layer", "message"), [
    ({"coat": (1.0, 0.1)}, "clear coat, which the path-traced pass does not shade"),
    ({"ior": 2.0}, "IOR 2.00, which the path-traced pass does not shade")])
def test_a_coated_or_glossier_start_is_refused_by_the_path_traced_pass(tmp_path, layer,
                                                                        message):
    """The path-traced pass (Mitsuba's principled BSDF as set up) has no coat and shades IOR
    1.5: a job that would path-trace a start with either says so before any pass runs."""
    ball = ball_asset()
    material = Material(kd=ball.materials[0].kd, **layer)
    run = config(tmp_path, train_res=SIZE, texture_res=16, iterations=1, validation=False,
                 renderer="path-traced")
    settings = settings_for_start(run.settings, material)
    with pytest.raises(UserError, match=message):
        optimize(settings, Inputs(_views(4), None, ball.mesh, sky(), material), device="cpu")
