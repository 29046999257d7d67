"""A capture tool's transforms.json loaded as views: renders of the ball distorted with an
OpenCV lens (OpenCV's remap), written as RGB photos without alpha plus masks, read back
undistorted onto the pinhole cameras they were rendered with; and a short run on one."""

import json
import logging

import cv2
import numpy as np
import pytest
import stand_ins
import torch
from helpers.opencv_lens import undistort_points

from diffrec import cli
from diffrec.io import write_image
from diffrec.pipeline.loading import load_dataset

SIZE = (64, 48)  # width, height
TARGET = (0.3, -0.2, 0.1)  # where the cameras look: recentred to the origin on reading
LENS = {"k1": -0.45, "k2": 0.15, "p1": 0.002, "p2": -0.002}  # barrel: the lens's own focal


def distort(image: np.ndarray, intrinsics, coefficients) -> np.ndarray:
    """The photo the lens makes of the pinhole ``image`` ``[H, W, C]``: each photo pixel
    takes the pinhole image where OpenCV's inverse of the lens puts it (cv2.remap, bilinear;
    pixel centres at integers in OpenCV's indices, at +0.5 in the wire's coordinates)."""
    height, width = image.shape[:2]
    fx, fy, cx, cy = intrinsics
    k = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
    v, u = np.mgrid[0:height, 0:width] + 0.5
    pinhole = undistort_points(np.stack([u, v], -1).reshape(-1, 1, 2), k,
                               np.array(coefficients), k)
    maps = pinhole.reshape(height, width, 2).astype(np.float32) - 0.5
    return cv2.remap(image, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REPLICATE)


def write_distorted_capture(folder, count: int, frame_lens: bool = False, target=TARGET):
    """``images/`` (distorted RGB PNGs, no alpha), ``masks/`` and ``transforms.json`` with
    OPENCV intrinsics shared (or, with ``frame_lens``, given per frame), the cameras looking
    at ``target``. Returns the pinhole cameras and renders."""
    cameras = stand_ins.ring_cameras(count, *SIZE, target=target)
    renders = stand_ins.render(cameras)
    intrinsics = (float(cameras.fx[0]), float(cameras.fy[0]), float(cameras.cx[0]),
                  float(cameras.cy[0]))
    coefficients = [LENS["k1"], LENS["k2"], LENS["p1"], LENS["p2"]]
    stated = {"fl_x": intrinsics[0], "fl_y": intrinsics[1], "cx": intrinsics[2],
              "cy": intrinsics[3], "w": SIZE[0], "h": SIZE[1], "camera_model": "OPENCV"}
    frames = []
    for index, render in enumerate(renders.numpy()):
        photo = distort(render, intrinsics, coefficients)
        write_image(folder / "images" / f"frame_{index:05d}.png", photo[..., :3])
        write_image(folder / "masks" / f"frame_{index:05d}.png", photo[..., 3], data=True)
        frame = {"file_path": f"images/frame_{index:05d}.png",
                 "mask_path": f"masks/frame_{index:05d}.png",
                 "transform_matrix": cameras.camera_to_world[index].tolist()}
        frames.append({**frame, **(stated if frame_lens else {}), **(LENS if frame_lens else {})})
    content = {**({} if frame_lens else {**stated, **LENS}), "frames": frames,
               "applied_transform": np.eye(4)[:3].tolist()}
    (folder / "transforms.json").write_text(json.dumps(content))
    return cameras, renders


@pytest.mark.parametrize("frame_lens", [False, True], ids=["shared lens", "per-frame lens"])
def test_undistorted_photos_are_the_pinhole_renders(tmp_path, frame_lens, caplog):
    cameras, renders = write_distorted_capture(tmp_path, 4, frame_lens)
    with caplog.at_level(logging.INFO):
        views = load_dataset(tmp_path)
    assert "applied_transform" in caplog.text and "moved by" in caplog.text
    for key in ("fx", "fy", "cx", "cy"):  # a barrel lens: the pinhole is the lens's own
        torch.testing.assert_close(getattr(views.cameras, key), getattr(cameras, key))
    centres = views.cameras.camera_to_world[:, :3, 3].double()
    torch.testing.assert_close(centres - centres.new_tensor(TARGET).neg(),
                               cameras.camera_to_world[:, :3, 3].double(), atol=1e-5, rtol=0)

    # measured: alpha 0.0116 and colour 0.0013 (two bilinear resamplings); with the lens
    # keys dropped from the file (the photos read as pinhole ones) 0.028 and 0.0046
    inner = (slice(None), slice(2, -2), slice(2, -2))  # the edge pixels replicate the border
    alpha_error = (views.images[..., 3] - renders[..., 3])[inner].abs()
    assert alpha_error.mean() < 0.016, "masks become alpha, undistorted with the photos"
    solid = (renders[..., 3] > 0.99) & (views.images[..., 3] > 0.99)
    colour_error = (views.images[..., :3] - renders[..., :3]).abs()[solid]
    assert colour_error.mean() < 0.0025, colour_error.mean()


@pytest.mark.slow
def test_optimize_runs_on_a_distorted_capture(tmp_path, caplog):
    """`diffrec optimize --dataset` on a capture tool's folder: 8 distorted photos (1 held
    out, one in 8), the true sphere and sky; 20 iterations of materials: 22.4 dB measured.
    Cameras off by the recentring scored 10.8 dB; at this size the lens itself changes less
    (21.2 dB with the lens keys dropped from the file: the test above checks the
    undistortion). The cameras look at the ball, at the origin, so that recentring leaves it
    there."""
    write_distorted_capture(tmp_path / "capture", 8, target=(0.0, 0.0, 0.0))
    mesh, hdri = stand_ins.write_mesh_and_sky(tmp_path)
    out = tmp_path / "out"
    small = tmp_path / "small.toml"  # a small light keeps the run to seconds
    small.write_text('mode = "materials"\nlight = "fixed"\nlight_res = 32\nbatch = 4\n')
    with caplog.at_level(logging.INFO):
        status = cli.main(["optimize", "--config", str(small), "--preset", "preview",
                           "--device", "cpu", "--dataset", str(tmp_path / "capture"),
                           "--base-mesh", str(mesh), "--envmap", str(hdri), "--iterations",
                           "20", "--train-res", "48", "--texture-res", "32", "--out-dir",
                           str(out), "--quiet"])
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["views"]) == 1
    assert "1 of its 8 views held out for validation" in caplog.text
    assert metrics["psnr_mean"] > 20.0, metrics["psnr_mean"]
    # a capture tool's poses are taken as found, so corrected with the fit; these are exact
    corrections = metrics["pose_corrections"]
    assert corrections["views"] == 7 and "poses were corrected" in caplog.text
    assert corrections["turn_degrees"]["max"] < 0.5, corrections  # measured 0.24


def test_a_masks_folder_without_mask_path_gives_the_photos_alpha(tmp_path):
    """masks/ beside transforms.json, not named by mask_path, is read as LLFF's and COLMAP's
    are (by name): the photos were taken as having no masks."""
    write_distorted_capture(tmp_path, 3)
    named = load_dataset(tmp_path)
    content = json.loads((tmp_path / "transforms.json").read_text())
    for frame in content["frames"]:
        del frame["mask_path"]
    (tmp_path / "transforms.json").write_text(json.dumps(content))
    unnamed = load_dataset(tmp_path, auto_masks=False)
    assert (unnamed.images[..., 3] < 0.5).any()
    torch.testing.assert_close(unnamed.images, named.images)
