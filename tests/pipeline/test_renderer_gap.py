"""Start renders (``pipeline.renderer_gap``): targets from another renderer, corrected by how
that renderer shows the start, so that the fit learns how the reference differs from the
start and not how the renderers differ.

The other renderer here is ours with a shadow of its own: every pixel in the lower half of
each image at 0.45 of its radiance (a factor, as occlusion is), the same for the reference
and for the start."""

import pytest
import torch
from running import config
from stand_ins import ball_asset, ring_cameras, sky

from diffrec import raster
from diffrec.errors import UserError
from diffrec.io import Asset, Material
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.job_arrays import settings_for_start
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.pipeline.renderer_gap import gap_corrected, matching_start_renders
from diffrec.pipeline.run import optimize
from diffrec.pipeline.views import Views

CTX = raster.RasterContext("cpu", impl="torch")
SIZE, VIEWS = 32, 4
SHADOW = 0.45
WRONG_BAND = slice(4, 6)  # rows of the 8 x 8 base colour: the third band, the start's error


def _other_renderer(asset: Asset, cameras) -> Views:
    """``asset`` as the other renderer shows it: ours, darkened in each image's lower half."""
    images = render_reference_views(CTX, asset, sky(), cameras, spp=2,
                                    light_resolution=32).images.clone()
    images[:, SIZE // 2:, :, :3] *= SHADOW
    return Views(cameras, images)


def _start_asset() -> tuple[Asset, torch.Tensor]:
    """(the ball with its third band's base colour off by 0.25, the truth's base colour)."""
    truth = ball_asset()
    kd = truth.materials[0].kd.clone()
    start_kd = kd.clone()
    start_kd[WRONG_BAND] = (kd[WRONG_BAND] - 0.25).clamp(0.05, 1.0)
    start = Asset(truth.mesh, [Material(kd=start_kd, ks=truth.materials[0].ks)],
                  truth.material_ids)
    return start, kd


def _fit(tmp_path, start_renders: Views | None) -> torch.Tensor:
    """The base colour a materials run from the start fits to the other renderer's targets
    (the start renders given or not), read back at the start's 8 x 8."""
    start, _ = _start_asset()
    cameras = ring_cameras(VIEWS, SIZE, SIZE)
    targets = _other_renderer(ball_asset(), cameras)
    run = config(tmp_path, mode="materials", train_res=SIZE, texture_res=8, iterations=30,
                 learning_rate=[0.03, 0.03], plateau_window=0, validation=False,
                 mip_iterations=0, batch=2, albedo_smoothness=0.0, start_prior=0.0)
    settings = settings_for_start(run.settings, start.materials[0])
    result = optimize(settings, Inputs(targets, None, start.mesh, sky(), start.materials[0],
                                       start_renders), device="cpu")
    return result.material.kd.data.detach()[..., :3]


@pytest.mark.slow
def test_the_fit_learns_the_reference_not_the_other_renderer(tmp_path):
    """Without start renders the fit paints the other renderer's shadow into the base colour
    (the wrong band gets worse, not better); with them it mends the start's wrong band and
    leaves the rest near the truth. Scored on the texel rows the views see (the last row, at
    the pole, only grazed)."""
    start, truth = _start_asset()
    cameras = ring_cameras(VIEWS, SIZE, SIZE)
    plain = _fit(tmp_path / "plain", None)
    corrected = _fit(tmp_path / "corrected", _other_renderer(start, cameras))
    start_error = (start.materials[0].kd - truth).abs()[WRONG_BAND].mean()
    plain_error, corrected_error = (plain - truth).abs()[:7], (corrected - truth).abs()[:7]
    assert plain_error[WRONG_BAND].mean() > start_error
    assert corrected_error[WRONG_BAND].mean() < 0.5 * start_error, (
        corrected_error[WRONG_BAND].mean(), start_error)
    assert corrected_error.mean() < 0.5 * plain_error.mean(), (
        corrected_error.mean(), plain_error.mean())


def test_start_renders_without_the_material_they_show_are_refused_before_any_pass(tmp_path):
    """The start rendered in its own material while the job starts from no given material
    (the constant start, levelled to the targets): the ratio would carry that grey into the
    targets (on this ball, wearing the reference's own material in its start renders, the
    fitted base colour ended 0.27 from the truth on average, against 0.17 with no start
    renders). Refused with the sentence, before any iteration."""
    truth = ball_asset()
    cameras = ring_cameras(VIEWS, SIZE, SIZE)
    targets = _other_renderer(truth, cameras)
    run = config(tmp_path, mode="materials", train_res=SIZE, texture_res=8, iterations=5,
                 validation=False, mip_iterations=0)
    with pytest.raises(UserError, match="start renders need the material they show"):
        optimize(run.settings, Inputs(targets, None, truth.mesh, sky(), None, targets),
                 device="cpu")


def test_start_renders_of_textures_that_lose_their_uvs_are_not_used(tmp_path):
    """A start whose UVs the run replaces (here three times outside the texture) starts from
    its textures' averages, which its start renders do not show: they are left out, and the
    job's warnings say so."""
    start, _ = _start_asset()
    moved = start.mesh.replace(uvs=start.mesh.uvs * 3)
    cameras = ring_cameras(VIEWS, SIZE, SIZE)
    run = config(tmp_path, mode="materials", train_res=SIZE, texture_res=8, iterations=3,
                 validation=False, mip_iterations=0)
    settings = settings_for_start(run.settings, start.materials[0])
    result = optimize(settings, Inputs(_other_renderer(ball_asset(), cameras), None, moved,
                                       sky(), start.materials[0],
                                       _other_renderer(start, cameras)), device="cpu")
    assert any("start renders show those textures" in warning
               for warning in result.metrics["warnings"]), result.metrics["warnings"]


def test_a_gap_by_a_factor_scales_the_inside_and_shifts_the_silhouettes_alike():
    cameras = ring_cameras(2, SIZE, SIZE)
    train = _other_renderer(ball_asset(), cameras)
    own = train.images.clone()
    own[..., :3] *= 2.0  # our render twice as bright as theirs everywhere
    corrected, gap = gap_corrected(train, train, own)
    whole = train.images[..., 3] >= 0.999
    edge = (train.images[..., 3] > 0) & ~whole
    assert edge.any() and whole.any()
    torch.testing.assert_close(corrected.images[edge][:, :3], 2 * train.images[edge][:, :3])
    torch.testing.assert_close(corrected.images[..., 3], train.images[..., 3])
    ratio = corrected.images[..., :3][whole] / train.images[..., :3][whole].clamp_min(1e-6)
    bright = train.images[..., :3][whole] > 0.2
    assert ratio[bright].min() > 1.8 and ratio.max() <= 4.0
    assert 0 < gap.pixels < 1 and gap.mean_ratio > 1.5
    assert gap.coverage_change == pytest.approx(0, abs=1e-6)


def _wider_filter(images: torch.Tensor) -> torch.Tensor:
    """``images`` ``[N, H, W, 4]`` (straight alpha) through a 3 x 3 tent filter on their
    premultiplied colour and alpha: silhouettes a pixel wider, as Cycles' filter makes them."""
    premultiplied = torch.cat([images[..., :3] * images[..., 3:], images[..., 3:]], -1)
    tent = torch.tensor([0.25, 0.5, 0.25])
    kernel = (tent[:, None] * tent[None, :]).expand(4, 1, 3, 3)
    blurred = torch.nn.functional.conv2d(premultiplied.permute(0, 3, 1, 2), kernel, padding=1,
                                         groups=4).permute(0, 2, 3, 1)
    alpha = blurred[..., 3:]
    return torch.cat([blurred[..., :3] / alpha.clamp_min(1e-6) * (alpha > 0), alpha], -1)


def test_where_the_start_is_the_reference_the_silhouettes_become_ours():
    """The targets' renderer filters edges wider than ours and covers them more (as Cycles
    covers thin parts that one sample a pixel misses); with the start the reference, the
    corrected silhouettes are exactly our render's, their coverage our render's."""
    cameras = ring_cameras(2, SIZE, SIZE)
    own = render_reference_views(CTX, ball_asset(), sky(), cameras, spp=1,
                                 light_resolution=32).images
    wider = _wider_filter(own)
    wider[..., 3] = (1.2 * wider[..., 3]).clamp(max=1.0)
    theirs = Views(cameras, wider)
    corrected, gap = gap_corrected(theirs, theirs, own)
    alphas = theirs.images[..., 3], own[..., 3]
    edge = ~((alphas[0] >= 0.999) & (alphas[1] >= 0.999)) & ((alphas[0] > 0) | (alphas[1] > 0))
    assert (edge & (alphas[0] != alphas[1])).sum() > 10
    torch.testing.assert_close(corrected.images[..., 3][edge], own[..., 3][edge])
    seen = edge & (own[..., 3] > 0.05)
    torch.testing.assert_close(corrected.images[..., :3][seen], own[..., :3][seen],
                               atol=1e-4, rtol=1e-3)
    assert gap.coverage_change == pytest.approx(float(own[..., 3].sum() / alphas[0].sum()) - 1,
                                                rel=1e-3)
    assert gap.coverage_change < -0.01


def test_start_renders_must_match_the_training_views():
    cameras = ring_cameras(3, SIZE, SIZE)
    train = Views(cameras, torch.zeros(3, SIZE, SIZE, 4), ["a", "b", "c"])
    shuffled = Views(cameras[torch.tensor([2, 0, 1])], torch.zeros(3, SIZE, SIZE, 4),
                     ["c", "a", "b"])
    matched = matching_start_renders(shuffled, train)
    assert matched.names == ["a", "b", "c"]
    torch.testing.assert_close(matched.cameras.camera_to_world, cameras.camera_to_world)
    with pytest.raises(UserError, match="no view named 'c'"):
        matching_start_renders(Views(cameras[:2], torch.zeros(2, SIZE, SIZE, 4), ["a", "b"]),
                               train)
    moved = Views(cameras[torch.tensor([1, 0, 2])], torch.zeros(3, SIZE, SIZE, 4),
                  ["a", "b", "c"])
    with pytest.raises(UserError, match="another camera"):
        matching_start_renders(moved, train)


def test_a_fixed_light_is_built_once_and_without_a_transpose(tmp_path, monkeypatch):
    """A run with start renders and the light fixed builds the light's levels once: our own
    render of the start builds them without a graph, and the pass keeps them. Nothing asks
    the prefilter for gradients, so no transpose of its operators is built."""
    from diffrec.light import envmap, prefilter

    start, _ = _start_asset()
    cameras = ring_cameras(VIEWS, SIZE, SIZE)
    inputs = Inputs(_other_renderer(ball_asset(), cameras), None, start.mesh, sky(),
                    start.materials[0], _other_renderer(start, cameras))
    run = config(tmp_path, mode="materials", train_res=SIZE, texture_res=8, iterations=3,
                 plateau_window=0, validation=False, mip_iterations=0)
    assert run.settings.light.mode == "fixed"
    builds = []
    box_pyramid = envmap.box_pyramid
    monkeypatch.setattr(envmap, "box_pyramid", lambda cube: builds.append(1) or box_pyramid(cube))
    prefilter._ggx_transpose.cache_clear()
    optimize(settings_for_start(run.settings, start.materials[0]), inputs, device="cpu")
    assert len(builds) == 1
    assert prefilter._ggx_transpose.cache_info().currsize == 0
