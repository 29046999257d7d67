"""Training views' poses refined with the fit (``pipeline.pose_refinement``): the rotations
against Rodrigues' formula, moved cameras against the matrices written out, the shared part
taken out, poses knocked off by a degree found again by the trainer, and which captures
"auto" refines."""

from __future__ import annotations

import json
import math
import shutil

import stand_ins
import torch
from running import albedo, scene, sky

from diffrec import raster
from diffrec.camera import Cameras, orbit_cameras
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.config import build_config
from diffrec.pipeline.geometry_models import ExplicitGeometry
from diffrec.pipeline.inputs import load_inputs
from diffrec.pipeline.pass_config import textured_pass
from diffrec.pipeline.pose_refinement import PoseCorrections, cross_matrices, rotation_matrices
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.sampler import ViewSampler
from diffrec.pipeline.trainer import Pass, PassTrainer
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import parse_settings
from diffrec.render.material import TextureMaterial
from diffrec.render.texture2d import Texture2D


def test_rotations_are_rodrigues_formula():
    vectors = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    vectors[0] = 0.0
    angle = vectors.norm(dim=-1, keepdim=True)[..., None]
    axis = cross_matrices(vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=1e-30))
    rodrigues = (torch.eye(3, dtype=torch.float64) + angle.sin() * axis
                 + (1 - angle.cos()) * axis @ axis)
    assert torch.allclose(rotation_matrices(vectors), rodrigues, atol=1e-12)
    turned = rotation_matrices(torch.tensor([[0.0, 0.0, math.pi / 2]], dtype=torch.float64))
    assert torch.allclose(turned[0] @ torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64),
                          torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64), atol=1e-12)


def test_moved_cameras_turn_about_their_centres_and_shift_in_world_axes():
    cameras = orbit_cameras(3, 3.0, 32, seed=1)
    turn = rotation_matrices(torch.tensor([[0.1, -0.2, 0.05]] * 3))
    shift = torch.tensor([[0.3, 0.0, -0.1]] * 3)
    moved = cameras.moved(turn, shift)
    axes, centre = cameras.camera_to_world[:, :3, :3], cameras.centers()
    point = torch.tensor([0.2, -0.4, 0.5])
    # a world point in each moved camera's frame: its new axes' components of the offset
    expected = ((turn @ axes).transpose(1, 2) @ (point - centre - shift)[..., None])[..., 0]
    world_to_camera = moved.world_to_camera()
    seen = (world_to_camera[:, :3, :3] @ point + world_to_camera[:, :3, 3])
    assert torch.allclose(seen, expected, atol=1e-5)


def test_what_every_view_shares_is_taken_out_and_what_one_view_has_is_kept():
    cameras = orbit_cameras(8, 3.0, 32, seed=2)
    poses = PoseCorrections(cameras)
    # the whole rig turned by w about its centre, scaled by 1 + s and moved by v (first order)
    w, v, s = torch.tensor([0.01, -0.02, 0.005]), torch.tensor([0.003, 0.0, -0.004]), 0.02
    with torch.no_grad():
        poses.turn.copy_(w.expand(8, 3))
        poses.shift.copy_(torch.linalg.cross(w.expand(8, 3), poses.relative, dim=-1)
                          + s * poses.relative + v)
    poses.settle_()
    assert poses.turn.abs().max() < 1e-6 and poses.shift.abs().max() < 1e-6
    with torch.no_grad():
        poses.turn.zero_()
        poses.shift.zero_()
        poses.turn[3] = torch.tensor([0.0, 0.01, 0.0])
    poses.settle_()
    # at most its mean over the views goes (less: the shifts, all zero, hold the rig's turn)
    assert poses.turn[3, 1] >= 0.01 * 7 / 8 - 1e-7
    assert poses.turn.norm(dim=-1)[torch.arange(8) != 3].max() <= 0.01 / 8 + 1e-7


def _pixel_error(cameras: Cameras, truth: Cameras) -> float:
    """Mean distance, in pixels, between where ``cameras`` and ``truth`` see points on the
    unit sphere (the object)."""
    points = torch.nn.functional.normalize(
        torch.randn(200, 3, generator=torch.Generator().manual_seed(5)), dim=-1)

    def seen(views: Cameras) -> torch.Tensor:
        clip = torch.cat([points, torch.ones(200, 1)], -1) @ views.world_to_clip().transpose(1, 2)
        return clip[..., :2] / clip[..., 3:] * (views.width / 2)

    return float((seen(cameras) - seen(truth)).norm(dim=-1).mean())


def _striped_albedo(size: int = 64) -> torch.Tensor:
    v, u = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size),
                          indexing="ij")
    stripes = 0.5 + 0.5 * torch.sign(torch.sin(24 * math.pi * u) * torch.sin(12 * math.pi * v))
    return albedo(size) * (0.4 + 0.6 * stripes[..., None])


def test_the_trainer_finds_poses_knocked_off_by_a_degree_again():
    mesh = uv_sphere(32, 16)
    kd, ks = _striped_albedo(), torch.tensor([0.0, 0.6, 0.0])
    truth = scene(mesh, 8, seed=3, kd=kd, ks=tuple(ks.tolist()))
    # every view turned by about a degree and moved by about 2 % of its distance, relative
    # to the others (the part they share taken out: no refinement could tell it)
    knock = PoseCorrections(truth.cameras)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        knock.turn.copy_(torch.randn(8, 3, generator=generator) * math.radians(1.0))
        knock.shift.copy_(torch.randn(8, 3, generator=generator) * 0.02)
    knock.settle_()
    knocked = knock.corrected(truth.cameras)
    before = _pixel_error(knocked, truth.cameras)
    assert before > 1.0, before

    settings = parse_settings({"mode": "materials", "preset": "preview", "light": "fixed",
                               "iterations": 60, "batch": 2, "learning_rate": [1e-9, 1e-9],
                               "pose_learning_rate": 0.005, "plateau_window": 0,
                               "log_every": 1000, "checkpoint_every": 0})
    config = textured_pass(settings, clips_white=False, given_start=False, later_iterations=0)
    material = TextureMaterial(Texture2D(kd), Texture2D(ks.expand(4, 4, 3).clone()))
    train = Views(knocked, truth.images)
    poses = PoseCorrections(train.cameras)
    run = Pass.of(config, ExplicitGeometry(mesh, False), material,
                  EnvironmentLight.from_equirect(sky(), 32), poses)
    trainer = PassTrainer(raster.RasterContext("cpu", impl="torch"), run,
                          ViewSampler(train, 2, seed=0), Reporter())
    trainer.train()
    after = _pixel_error(poses.corrected(train.cameras), truth.cameras)
    assert after < before / 4, (before, after)
    assert trainer.state_dict()["poses"]["turn"].abs().max() > 0


def test_auto_refines_the_poses_of_captures_whose_poses_were_found(tmp_path):
    settings = parse_settings({})
    assert settings.refines_poses(True) and not settings.refines_poses(False)
    assert parse_settings({"refine_poses": "on"}).refines_poses(False)
    assert not parse_settings({"refine_poses": "off"}).refines_poses(True)
    cameras = stand_ins.ring_cameras(4, 32, 24)
    renders = stand_ins.render(cameras)
    stand_ins.write_nerf_folder(tmp_path / "rendered", cameras, renders)  # transforms_train
    tool = tmp_path / "tool"  # a capture tool's transforms.json, the same views
    shutil.copytree(tmp_path / "rendered" / "train", tool / "images")
    frames = [{"file_path": f"images/r_{index}.png",
               "transform_matrix": cameras.camera_to_world[index].tolist()}
              for index in range(4)]
    (tool / "transforms.json").write_text(json.dumps(
        {"fl_x": float(cameras.fx[0]), "fl_y": float(cameras.fy[0]), "cx": 16.0, "cy": 12.0,
         "w": 32, "h": 24, "frames": frames}))
    ctx = raster.RasterContext("cpu", impl="torch")
    found = {name: load_inputs(build_config({"dataset": str(tmp_path / name),
                                             "train_res": 32}), ctx, hold_out=False
                               ).poses_found for name in ("tool", "rendered")}
    assert found == {"tool": True, "rendered": False}
