"""``diffrec submit`` with what ``diffrec optimize`` reads: a NeRF-style folder or a settings
file becomes an ``optimize`` job whose arrays mean what ``optimize`` would load, as the
server reads them back; and one such job through a real server."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest
import torch
from helpers.servers import fit_spec, free_port, target_images

from diffrec import cli, raster
from diffrec.camera import look_at, orbit_cameras
from diffrec.color import linear_to_srgb
from diffrec.commands import submit
from diffrec.commands.submit import load_submission
from diffrec.errors import UserError
from diffrec.io import Asset, Material, read_image, write_image, write_obj
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.config import build_config, read_config_file
from diffrec.pipeline.inputs import load_inputs
from diffrec.pipeline.job_arrays import from_job_arrays
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.protocol import Client

WIDTH, HEIGHT = 24, 16  # not square, so swapped sides show
ANGLE_X = 0.8


def srgb_codes_to_linear(codes: np.ndarray) -> np.ndarray:
    """IEC 61966-2-1 decoding of 8-bit codes, written out here (not diffrec's)."""
    c = codes.astype(np.float64) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def write_png_folder(root, codes: np.ndarray, matrices: np.ndarray, split="train") -> None:
    """A NeRF-synthetic folder: RGBA 8-bit ``codes`` [N, H, W, 4] written with OpenCV."""
    frames = []
    for i, image in enumerate(codes):
        (root / split).mkdir(parents=True, exist_ok=True)
        bgra = image[..., [2, 1, 0, 3]].astype(np.uint8)
        assert cv2.imwrite(str(root / split / f"r_{i}.png"), bgra)
        frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": matrices[i].tolist()})
    (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": ANGLE_X,
                                                               "frames": frames}))


def ring(count: int) -> np.ndarray:
    eyes = torch.tensor([[3 * math.cos(a), 3 * math.sin(a), 1.0] for a in range(count)])
    return look_at(eyes, (0.0, 0.0, 0.0)).numpy()


@pytest.fixture
def nerf_folder(tmp_path):
    """(folder, codes, matrices, base mesh path): 3 training views and 1 test view."""
    folder = tmp_path / "scene"
    codes = np.random.default_rng(4).integers(0, 256, (3, HEIGHT, WIDTH, 4))
    matrices = ring(4)
    write_png_folder(folder, codes, matrices[:3])
    write_png_folder(folder, codes[:1], matrices[3:], split="test")
    base = tmp_path / "start.obj"
    write_obj(base, uv_sphere(8, 4), Material(kd=np.array([0.5, 0.5, 0.5], np.float32)))
    return folder, codes, matrices[:3], base


def test_a_dataset_folder_sends_what_optimize_loads(nerf_folder):
    folder, codes, matrices, base = nerf_folder
    spec, arrays = load_submission(folder, {"mode": "materials", "base_mesh": str(base),
                                            "train_res": WIDTH, "light": None})
    assert spec == {"task": "optimize", "settings": {"mode": "materials", "train_res": WIDTH}}
    assert set(arrays) == {"images", "cameras", "intrinsics", "vertices", "faces", "uvs",
                           "uv_faces"}, "a learnt light needs no envmap"

    # independently of diffrec: the files' pixels, matrices and field of view
    assert arrays["images"].dtype == np.float32 and arrays["images"].shape == (3, HEIGHT, WIDTH, 4)
    expected = np.concatenate([srgb_codes_to_linear(codes[..., :3]), codes[..., 3:] / 255], -1)
    np.testing.assert_allclose(arrays["images"], expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(arrays["cameras"], matrices, atol=1e-6, rtol=0)
    focal = 0.5 * WIDTH / math.tan(0.5 * ANGLE_X)
    np.testing.assert_allclose(arrays["intrinsics"],
                               np.tile([focal, focal, WIDTH / 2, HEIGHT / 2, 0.1, 1000.0], (3, 1)),
                               rtol=1e-6)
    assert arrays["intrinsics"].dtype == arrays["cameras"].dtype == np.float32

    # what `diffrec optimize --dataset FOLDER --base-mesh ...` trains on
    config = build_config({}, {"dataset": str(folder), "mode": "materials",
                               "base_mesh": str(base), "train_res": WIDTH})
    loaded = load_inputs(config, raster.RasterContext("cpu", impl="torch"))
    assert len(loaded.train) == 3 and len(loaded.test) == 1, "the test split stays at home"
    np.testing.assert_array_equal(arrays["images"], loaded.train.images.numpy())
    np.testing.assert_array_equal(arrays["cameras"], loaded.train.cameras.camera_to_world.numpy())
    for column, key in enumerate(("fx", "fy", "cx", "cy", "near", "far")):
        np.testing.assert_array_equal(arrays["intrinsics"][:, column],
                                      getattr(loaded.train.cameras, key).numpy())

    # and the server reads the same views and mesh back
    views, mesh, envmap = from_job_arrays(arrays)
    assert envmap is None and (views.cameras.width, views.cameras.height) == (WIDTH, HEIGHT)
    torch.testing.assert_close(views.images, loaded.train.images, atol=0, rtol=0)
    torch.testing.assert_close(views.cameras.world_to_clip(), loaded.train.cameras.world_to_clip())
    torch.testing.assert_close(mesh.positions, loaded.base_mesh.positions)
    torch.testing.assert_close(mesh.triangles, loaded.base_mesh.triangles)
    torch.testing.assert_close(mesh.uvs, loaded.base_mesh.uvs)
    torch.testing.assert_close(mesh.uv_triangles, loaded.base_mesh.uv_triangles)


def test_a_capture_whose_poses_were_found_is_sent_with_its_poses_refined(nerf_folder,
                                                                          tmp_path):
    """The server sees arrays, not the folder: submit says "on" where "auto" would refine
    (a capture tool's transforms.json), and nothing for renders' poses (NeRF-style)."""
    folder = tmp_path / "tool"
    (folder / "images").mkdir(parents=True)
    codes = np.random.default_rng(5).integers(0, 256, (3, HEIGHT, WIDTH, 4)).astype(np.uint8)
    frames = []
    for i, (image, matrix) in enumerate(zip(codes, ring(3), strict=True)):
        assert cv2.imwrite(str(folder / "images" / f"{i}.png"), image[..., [2, 1, 0, 3]])
        frames.append({"file_path": f"images/{i}.png", "transform_matrix": matrix.tolist()})
    (folder / "transforms.json").write_text(json.dumps(
        {"fl_x": 20.0, "fl_y": 20.0, "cx": WIDTH / 2, "cy": HEIGHT / 2, "w": WIDTH,
         "h": HEIGHT, "frames": frames}))
    tool, _ = load_submission(folder, {"mode": "reconstruct"})
    assert tool["settings"] == {"mode": "reconstruct", "refine_poses": "on"}
    told, _ = load_submission(folder, {"mode": "reconstruct", "refine_poses": "off"})
    assert told["settings"]["refine_poses"] == "off"
    rendered, _ = load_submission(nerf_folder[0], {"mode": "reconstruct"})
    assert "refine_poses" not in rendered["settings"]


def test_a_base_mesh_the_run_would_start_from_sends_its_material(nerf_folder, tmp_path):
    """With init_textures "base_mesh" the base mesh's material goes as start textures (what
    the local run would start from); not without it, nor on a mesh the budget decimates."""
    folder, _, _, _ = nerf_folder
    base = tmp_path / "textured.obj"
    kd = np.random.default_rng(5).random((8, 8, 3)).astype(np.float32)
    write_obj(base, uv_sphere(8, 4), Material(kd=kd, ks=np.float32([0.0, 0.7, 0.2])))
    flags = {"mode": "materials", "base_mesh": str(base), "train_res": WIDTH}
    _, arrays = load_submission(folder, {**flags, "init_textures": "base_mesh"})
    config = build_config({}, {"dataset": str(folder), **flags})
    material = load_inputs(config, raster.RasterContext("cpu", impl="torch")).base_material
    np.testing.assert_array_equal(arrays["start_kd"], material.kd.numpy())
    np.testing.assert_allclose(arrays["start_kd"], kd, atol=0.01)  # 8-bit sRGB in the file
    np.testing.assert_allclose(arrays["start_ks"], [[[0.0, 0.7, 0.2]]], atol=1e-6)
    assert "start_normal" not in arrays, "no normal map, none sent"
    for others in ({}, {"init_textures": "base_mesh", "target_triangles": 10}):
        _, arrays = load_submission(folder, {**flags, **others})
        assert not {"start_kd", "start_ks"} & set(arrays), others


def test_start_renders_go_with_a_given_start(nerf_folder, tmp_path, capsys):
    """``--start-renders FOLDER``: its images, read as the targets are (8-bit sRGB decoded
    here independently), go as ``start_images`` in the targets' order, in materials and refine;
    a reconstruction, which starts from no mesh, does not send them."""
    folder, _, matrices, base = nerf_folder
    start = np.random.default_rng(5).integers(0, 256, (3, HEIGHT, WIDTH, 4))
    write_png_folder(tmp_path / "start", start, matrices)
    flags = {"mode": "materials", "base_mesh": str(base), "train_res": WIDTH,
             "start_renders": str(tmp_path / "start")}
    _, arrays = load_submission(folder, flags)
    expected = np.concatenate([srgb_codes_to_linear(start[..., :3]), start[..., 3:] / 255], -1)
    assert arrays["start_images"].shape == arrays["images"].shape
    np.testing.assert_allclose(arrays["start_images"], expected, atol=1e-6, rtol=0)
    _, arrays = load_submission(folder, {**flags, "mode": "reconstruct"})
    assert "start_images" not in arrays
    # the flag reaches the loading: a folder that is no capture is named
    assert f"start_renders {folder / 'test'}: no capture there" in submit_error(
        capsys, folder, "--base-mesh", base, "--start-renders", folder / "test")


def test_train_res_resizes_before_sending_and_scales_the_intrinsics(nerf_folder):
    folder, _, _, base = nerf_folder
    settings = {"mode": "materials", "base_mesh": str(base)}
    _, full = load_submission(folder, {**settings, "train_res": WIDTH})
    _, half = load_submission(folder, {**settings, "train_res": WIDTH // 2})
    assert half["images"].shape == (3, HEIGHT // 2, WIDTH // 2, 4)
    np.testing.assert_allclose(half["intrinsics"][:, :4], full["intrinsics"][:, :4] / 2,
                               rtol=1e-6)
    config = build_config({}, {**settings, "dataset": str(folder), "train_res": WIDTH // 2})
    loaded = load_inputs(config, raster.RasterContext("cpu", impl="torch"))
    np.testing.assert_array_equal(half["images"], loaded.train.images.numpy())
    # the resize filters premultiplied colour: the mean of colour x alpha barely moves
    covered = [images[..., :3] * images[..., 3:] for images in (full["images"], half["images"])]
    np.testing.assert_allclose(covered[1].mean((1, 2)), covered[0].mean((1, 2)), atol=0.02)


def write_ball(path, scale=0.5, offset=(0.3, -0.2, 0.1)):
    ball = uv_sphere(12, 6)
    ball = ball.replace(positions=ball.positions * scale + torch.tensor(offset))
    write_obj(path, ball, Material(kd=np.array([0.7, 0.3, 0.2], np.float32)))


@pytest.mark.slow  # about 10 s on two cores: the HDRI's prefiltered light for the render
def test_a_config_renders_its_ref_mesh_under_its_envmap_as_optimize_does(tmp_path):
    write_ball(tmp_path / "ball.obj")  # off centre and small: the fit to the box shows
    rows = np.linspace(1.5, 0.2, 8, dtype=np.float32)[:, None, None]
    write_image(tmp_path / "sky.hdr", np.broadcast_to(rows, (8, 16, 3)).copy())
    config_path = tmp_path / "run.toml"
    config_path.write_text('ref_mesh = "ball.obj"\nbase_mesh = "ball.obj"\nenvmap = "sky.hdr"\n'
                           'mode = "refine"\nlight = "learn-from-envmap"\nviews = 3\n'
                           'test_views = 1\ntrain_res = 16\nout_dir = "here"\ndevice = "cpu"\n')
    spec, arrays = load_submission(config_path, {"iterations": 5})
    assert spec["task"] == "optimize"
    assert spec["settings"] == {"mode": "refine", "light": "learn-from-envmap", "views": 3,
                                "test_views": 1, "train_res": 16, "iterations": 5}, \
        "the paths, out_dir and device stay at home"
    assert arrays["images"].shape == (3, 16, 16, 4)
    np.testing.assert_array_equal(arrays["envmap"], read_image(tmp_path / "sky.hdr")[..., :3])

    # the reference system's mesh mode: a unit box, cameras at radius 3 with a 45 degree view
    np.testing.assert_allclose(np.linalg.norm(arrays["cameras"][:, :3, 3], axis=1), 3.0,
                               rtol=1e-5)
    focal = 8 / math.tan(math.radians(22.5))
    np.testing.assert_allclose(arrays["intrinsics"][:, :4], np.tile([focal, focal, 8, 8], (3, 1)),
                               rtol=1e-5)
    vertices = arrays["vertices"]
    np.testing.assert_allclose(vertices.max(0) + vertices.min(0), 0, atol=1e-5)
    assert abs((vertices.max(0) - vertices.min(0)).max() - 2.0) < 1e-4
    alpha = arrays["images"][..., 3]
    assert alpha.max() == 1.0 and alpha.min() == 0.0, "the ball is seen, with sky around it"

    # `diffrec optimize --config run.toml` renders the same targets from the same cameras
    config = build_config(read_config_file(config_path))
    loaded = load_inputs(config, raster.RasterContext("cpu", impl="torch"))
    np.testing.assert_array_equal(arrays["cameras"], loaded.train.cameras.camera_to_world.numpy())
    np.testing.assert_allclose(arrays["images"], loaded.train.images.numpy(), atol=1e-6, rtol=0)
    np.testing.assert_array_equal(vertices, loaded.base_mesh.positions.numpy())


def submit_error(capsys, *args) -> str:
    assert cli.main(["submit", *map(str, args), "--server", "tcp://127.0.0.1:9"]) == 2
    return capsys.readouterr().err


def test_mistakes_are_sentences(tmp_path, nerf_folder, capsys):
    folder, _, _, base = nerf_folder
    (tmp_path / "empty").mkdir()
    assert "holds neither job.json (a job file) nor transforms_train.json" in submit_error(
        capsys, tmp_path / "empty")
    (tmp_path / "settings.json").write_text(json.dumps({"mode": "reconstruct"}))
    assert "settings.json names no target images: set dataset" in submit_error(
        capsys, tmp_path / "settings.json")
    assert "mode 'materials' needs a starting mesh: pass --base-mesh" in submit_error(
        capsys, folder)
    assert "light 'fixed' needs an envmap" in submit_error(
        capsys, folder, "--base-mesh", base, "--light", "fixed")
    # a file that is not there is said without a server too (tcp://127.0.0.1:9 is none)
    assert f"base_mesh {tmp_path / 'nope.obj'}: no such file" in submit_error(
        capsys, folder, "--base-mesh", tmp_path / "nope.obj")
    (tmp_path / "job.json").write_text(json.dumps({"spec": {"task": "fit_texture"}}))
    assert "--mode: settings flags apply to a dataset folder or a settings file" in submit_error(
        capsys, tmp_path / "job.json", "--mode", "refine")
    with pytest.raises(UserError, match="does not exist"):
        load_submission(tmp_path / "nowhere")


def test_a_dataset_loads_only_for_a_server_that_answers_and_a_new_job(server, nerf_folder,
                                                                     capsys, monkeypatch):
    """A dataset's images are decoded (or a reference rendered) only once the server has
    answered and does not hold the --job already (both were said after the load); its
    mistakes are still said without a server (``test_mistakes_are_sentences``)."""
    folder = nerf_folder[0]
    monkeypatch.setattr(submit, "optimize_job", lambda *a, **k: pytest.fail("loaded"))
    closed = f"tcp://127.0.0.1:{free_port()}"
    assert cli.main(["submit", str(folder), "--mode", "reconstruct", "--server", closed,
                     "--timeout", "1"]) == 2
    assert f"no diffrec server at {closed}" in capsys.readouterr().err
    with Client(server.address, timeout=2.0, retry_for=30.0) as client:
        client.submit("there", fit_spec(iterations=5), {"images": target_images()})
    assert cli.main(["submit", str(folder), "--mode", "reconstruct", "--job", "there",
                     "--server", server.address, "--timeout", "2"]) == 0
    assert "(already submitted: " in capsys.readouterr().out


@pytest.mark.slow
def test_a_dataset_folder_runs_as_an_optimize_job(server, tmp_path, capsys):
    """Targets rendered from a ball, written as a NeRF folder; materials on the ball itself."""
    write_ball(tmp_path / "ball.obj", scale=1.0, offset=(0.0, 0.0, 0.0))
    ball = uv_sphere(12, 6)
    asset = Asset(ball, [Material(kd=np.array([0.7, 0.3, 0.2], np.float32))],
                  torch.zeros(ball.num_triangles, dtype=torch.long))
    cameras = orbit_cameras(4, 3.2, 16, fov_degrees=40.0, seed=1)
    sky = np.full((8, 16, 3), 0.8, np.float32)
    views = render_reference_views(raster.RasterContext("cpu", impl="torch"), asset, sky,
                                   cameras, spp=2)
    encoded = torch.cat([linear_to_srgb(views.images[..., :3].clamp(0, 1)),
                         views.images[..., 3:]], -1)
    codes = (encoded * 255).round().numpy().astype(np.uint8)
    folder = tmp_path / "ball"
    write_png_folder(folder, codes, cameras.camera_to_world.numpy())
    transforms = json.loads((folder / "transforms_train.json").read_text())
    transforms["camera_angle_x"] = math.radians(40.0)
    (folder / "transforms_train.json").write_text(json.dumps(transforms))

    where = ["--server", server.address, "--timeout", "2"]
    assert cli.main(["submit", str(folder), "--mode", "materials", "--base-mesh",
                     str(tmp_path / "ball.obj"), "--preset", "preview", "--iterations", "2",
                     "--train-res", "16", "--texture-res", "8", "--job", "from-folder", "--wait",
                     *where]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job from-folder: queued") and "done: " in out and "mesh.glb" in out
    assert cli.main(["fetch", "from-folder", "--out", str(tmp_path / "out"), *where]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["mode"] == "materials" and metrics["iterations"] == 2
    assert metrics["settings"]["preset"] == "preview" and len(metrics["views"]) == 1
