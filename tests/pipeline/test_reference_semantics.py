"""What the settings taken from the reference system do: the light turned with each camera,
training backgrounds, starting textures and their ranges, env_scale and lock_light."""

import json

import numpy as np
import pytest
import stand_ins
import torch
from running import optimize_into

from diffrec import raster
from diffrec.camera import Cameras, look_at
from diffrec.errors import UserError
from diffrec.io import Material, read_image
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.equirect import from_nvdiffrec_layout
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.config import build_config, read_config_file
from diffrec.pipeline.initial_state import initial_textures
from diffrec.pipeline.inputs import Inputs, load_inputs
from diffrec.pipeline.run import optimize
from diffrec.pipeline.trainer import light_rotation
from diffrec.pipeline.views import Views, at_longest_side
from diffrec.protocol.settings import SettingsError, parse_settings
from diffrec.render.backgrounds import background_for, composite
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D

CTX = raster.RasterContext("cpu", impl="torch")


def two_views(size=32) -> Cameras:
    """Two cameras at the same distance from the origin, far apart in azimuth and height."""
    eyes = torch.tensor([[3.0, 0.0, 0.0], [-1.2, 2.0, 1.9]], dtype=torch.float64)
    eyes = eyes / eyes.norm(dim=-1, keepdim=True) * 3.0
    focal = 0.5 * size / np.tan(np.radians(20))
    return Cameras(look_at(eyes, (0.0, 0.0, 0.0)).float(), focal, focal, size / 2, size / 2,
                   size, size)


def test_camera_space_light_makes_a_uniform_ball_look_the_same_from_everywhere():
    """A ball of one material under a very uneven sky: with the light fixed to the camera,
    every view at the same distance sees the same image; fixed to the world, they differ."""
    ball = with_vertex_normals(uv_sphere(96, 48))
    material = TextureMaterial(Texture2D.constant((0.6, 0.6, 0.6)),
                               Texture2D.constant((0.0, 0.3, 0.0)))
    light = EnvironmentLight.from_equirect(stand_ins.sky() * torch.tensor([1.0, 0.5, 2.0]),
                                           resolution=32)
    light.build_mips()
    cameras = two_views()
    ball = ball.replace(uvs=torch.zeros(1, 2), uv_triangles=torch.zeros_like(ball.triangles))
    images = {}
    for fixed_to_camera in (True, False):
        rotation = light_rotation(cameras, fixed_to_camera)
        out = render_mesh(CTX, ball, material, cameras, light, light_rotation=rotation)
        images[fixed_to_camera] = out.color
    inside = (out.alpha == 1).all(0)[..., 0]  # away from the (faceted) silhouette
    assert inside.sum() > 200
    same, world = images[True][:, inside], images[False][:, inside]
    torch.testing.assert_close(same[0], same[1], atol=0.02, rtol=0)
    assert (world[0] - world[1]).abs().max() > 0.08  # four times the tolerance above


def test_backgrounds_composite_targets_as_named():
    targets = torch.rand(2, 8, 16, 4)
    targets[..., 3] = (torch.arange(16) < 8).float()  # left half covered
    white = composite(targets, background_for("white", targets))
    assert (white[..., 8:, :] == 1).all()
    assert (background_for("random", targets) == 0).all(), "validation judges over black"
    generator = torch.Generator().manual_seed(0)
    random = background_for("random", targets, generator)
    assert random.shape == (2, 1, 1, 3) and not torch.equal(random[0], random[1])
    checker = background_for("checker", targets)[0, ..., 0]
    assert checker[0, 0] == 0.25 and checker[0, 2] == 0.75 and checker[2, 2] == 0.25
    torch.testing.assert_close(composite(targets, background_for("reference", targets)),
                               targets[..., :3])


def test_starting_textures_follow_init_textures_and_the_ranges():
    base = Material(kd=torch.tensor([0.9, 0.1, 0.2]), ks=torch.tensor([0.0, 0.7, 0.3]))
    random = initial_textures(build_config({"init_textures": "random", "texture_res": 16,
                                            "kd_min": [0.1, 0.2, 0.3], "kd_max": [0.4, 0.5, 0.6],
                                            "min_roughness": 0.3}).settings, "cpu", base)
    kd, ks = random.kd.data, random.ks.data
    assert kd.std() > 0.02 and (kd >= torch.tensor([0.1, 0.2, 0.3])).all()
    assert (kd <= torch.tensor([0.4, 0.5, 0.6])).all()
    assert ks[..., 0].max() <= 0.01 and ks[..., 1].min() >= 0.3, "occlusion ~0, roughness floor"
    own = initial_textures(build_config({"init_textures": "base_mesh", "texture_res": 8,
                                         "layers": 2}).settings, "cpu", base)
    torch.testing.assert_close(own.kd.data[3, 5], torch.tensor([0.9, 0.1, 0.2, 1.0]))
    torch.testing.assert_close(own.ks.data[3, 5], torch.tensor([0.0, 0.7, 0.3]))
    assert own.kd.min_value.tolist() == [0.0, 0.0, 0.0, 0.0], "alpha is trained with layers"


@pytest.mark.parametrize(("mode", "normal_map", "trained"), [
    ("materials", "auto", False), ("refine", "auto", True), ("reconstruct", "auto", True),
    ("materials", "on", True), ("refine", "off", False)])
def test_a_normal_map_is_trained_unless_the_mesh_is_given_and_kept(mode, normal_map, trained):
    settings = parse_settings({"mode": mode, "normal_map": normal_map, "texture_res": 8})
    material = initial_textures(settings, "cpu")
    assert (material.normal is not None) == trained == settings.trains_normal_map()
    assert len([p for p in material.parameters() if p.requires_grad]) == 2 + trained


@pytest.mark.parametrize(("init_textures", "learn_ior", "renderer", "trained"), [
    ("base_mesh", "auto", "rasterized", True), ("constant", "auto", "rasterized", False),
    ("base_mesh", "off", "rasterized", False), ("constant", "on", "rasterized", True),
    ("base_mesh", "auto", "path-traced", False)])
def test_the_ior_is_trained_where_the_fit_starts_from_given_textures(init_textures, learn_ior,
                                                                      renderer, trained):
    """``learn_ior`` auto trains the IOR on a start from given textures, rasterized; it
    starts at the base mesh's IOR there, else at 1.5. The path-traced pass refuses "on"."""
    settings = parse_settings({"mode": "materials", "init_textures": init_textures,
                               "learn_ior": learn_ior, "renderer": renderer,
                               "texture_res": 8})
    material = initial_textures(settings, "cpu", Material(ior=2.0))
    assert material.f0.requires_grad == trained == settings.trains_ior()
    assert material.f0.item() == pytest.approx(1 / 9 if init_textures == "base_mesh" else 0.04)
    with pytest.raises(SettingsError, match=r"learn_ior.*shades IOR 1\.5"):
        parse_settings({"mode": "materials", "learn_ior": "on", "renderer": "path-traced"})


def test_env_scale_scales_the_hdri_and_cam_near_far_clips(tmp_path):
    mesh, hdri = stand_ins.write_mesh_and_sky(tmp_path)
    config = build_config({"ref_mesh": str(mesh), "envmap": str(hdri), "env_scale": 2.5,
                           "views": 1, "test_views": 1, "train_res": 16, "near_far": [0.5, 9.0]})
    inputs = load_inputs(config, CTX)
    torch.testing.assert_close(inputs.envmap, 2.5 * torch.from_numpy(read_image(hdri)),
                               rtol=1e-6, atol=0)
    cameras = inputs.train.cameras
    assert (cameras.near.tolist(), cameras.far.tolist()) == ([0.5], [9.0])


def test_an_nvdiffrec_configs_envmap_is_read_in_its_layout(tmp_path):
    mesh, hdri = stand_ins.write_mesh_and_sky(tmp_path)
    image = torch.from_numpy(read_image(hdri))
    ours = {"ref_mesh": str(mesh), "envmap": str(hdri), "views": 1, "test_views": 1,
            "train_res": 16}
    config = build_config(ours)
    assert config.sources.envmap_layout == "blender"
    torch.testing.assert_close(load_inputs(config, CTX).envmap, image, rtol=0, atol=0)

    theirs = tmp_path / "theirs.json"
    theirs.write_text(json.dumps({**ours, "iter": 2}))  # a key only nvdiffrec's configs have
    config = build_config(read_config_file(theirs))
    assert config.sources.envmap_layout == "nvdiffrec"
    torch.testing.assert_close(load_inputs(config, CTX).envmap, from_nvdiffrec_layout(image),
                               rtol=0, atol=0)
    theirs.write_text(json.dumps({"envmap_layout": "blender", **ours, "iter": 2}))
    assert build_config(read_config_file(theirs)).sources.envmap_layout == "blender", (
        "the file's own word wins, wherever it stands")
    with pytest.raises(UserError, match="envmap_layout: must be one of blender, nvdiffrec"):
        build_config({**ours, "envmap_layout": "maya"})


@pytest.mark.slow
def test_lock_light_keeps_the_light_of_pass_1(tmp_path):
    cameras = stand_ins.ring_cameras(4, 16, 16)
    train = Views(cameras, stand_ins.render(cameras))
    probes = {}
    for lock in (True, False):
        config = build_config({"mode": "materials", "iterations": 3, "batch": 2,
                               "texture_res": 16, "light_res": 32, "lock_light": lock,
                               "out_dir": str(tmp_path / str(lock)), "device": "cpu"})
        optimize_into(config, Inputs(train, train, stand_ins.ball_asset().mesh))
        probes[lock] = read_image(tmp_path / str(lock) / "probe.hdr")
    np.testing.assert_allclose(probes[True], 0.5, atol=0.01)  # the learnt light's start
    assert np.abs(probes[False] - 0.5).max() > 0.01


def test_optimize_trains_and_judges_in_memory_views_at_train_res():
    """Targets that arrive as arrays (the add-on's photos, a server job) are resized to
    train_res as files are when loaded: aspect kept, intrinsics scaled, same filter."""
    cameras = stand_ins.ring_cameras(4, 40, 24)
    views = Views(cameras, stand_ins.render(cameras))
    settings = parse_settings({"mode": "materials", "iterations": 1, "batch": 2,
                               "texture_res": 8, "light_res": 32, "train_res": 20,
                               "checkpoint_every": 0, "background": "black"})
    result = optimize(settings, Inputs(views, views, stand_ins.ball_asset().mesh),
                      device="cpu")
    assert tuple(result.validation.renders.shape) == (4, 12, 20, 3)
    small = at_longest_side(views, 20)
    assert (small.cameras.width, small.cameras.height) == (20, 12)
    torch.testing.assert_close(small.cameras.fx, cameras.fx / 2)
    torch.testing.assert_close(small.cameras.cy, cameras.cy / 2)
    # the judged targets are the resized inputs over black: their covered colour averages
    # as the full-size images' does (premultiplied resizing)
    premultiplied = views.images[..., :3] * views.images[..., 3:]
    torch.testing.assert_close(result.validation.targets.mean((1, 2)),
                               premultiplied.mean((1, 2)), atol=0.01, rtol=0)
    assert at_longest_side(small, 20) is small, "already that size: the same views"
