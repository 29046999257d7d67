"""COLMAP models (text and binary) read as captures through pycolmap: a hand-written text model
of the rendered ball, reprojection of known points within 0.1 px, masks, refusals."""

import json
import sys

import numpy as np
import pytest
import stand_ins
import torch
from view_helpers import quaternion

from diffrec import cli
from diffrec.camera import Cameras
from diffrec.commands.submit import source_kind
from diffrec.errors import UserError
from diffrec.pipeline.captures import capture_layout
from diffrec.pipeline.colmap_capture import detect_colmap, read_colmap
from diffrec.pipeline.config import build_config, read_config_file
from diffrec.pipeline.loading import load_dataset

FULL = (64, 48)  # width, height of images/; images_2/ holds 32 x 24
TARGET = (0.3, -0.2, 0.1)
# the eight views' cameras: (COLMAP camera id, model, parameters besides the image size)
CAMERA_OF_VIEW = [1, 1, 1, 1, 2, 2, 3, 3]
IMAGE_IDS = [17, 3, 8, 40, 1, 22, 5, 9]  # unordered, as COLMAP's ids may be


def project(cameras, points: torch.Tensor) -> torch.Tensor:
    """Pixel positions ``[N, P, 2]`` (x right, y down, origin at the top-left corner)."""
    homogeneous = torch.cat([points, torch.ones(len(points), 1)], -1).double()
    local = homogeneous @ cameras.world_to_camera().double().transpose(1, 2)
    depth = -local[..., 2]
    x = cameras.cx.double()[:, None] + cameras.fx.double()[:, None] * local[..., 0] / depth
    y = cameras.cy.double()[:, None] - cameras.fy.double()[:, None] * local[..., 1] / depth
    return torch.stack([x, y], -1)


def true_cameras() -> Cameras:
    """The ring of stand_ins, with off-centre principal points and non-square pixels for
    the views of camera 1."""
    ring = stand_ins.ring_cameras(8, *FULL, target=TARGET)
    (width, height), focal = FULL, float(ring.fx[0])
    fx = [focal * 1.04] * 4 + [focal] * 4
    cx = [width / 2 + 2.5] * 4 + [width / 2] * 2 + [width / 2 - 1.0] * 2
    cy = [height / 2 - 1.5] * 4 + [height / 2] * 2 + [height / 2 + 1.0] * 2
    return Cameras(ring.camera_to_world, fx, focal, cx, cy, width, height)


def camera_lines(cameras: Cameras, distortion: float = 0.0) -> list[str]:
    """cameras.txt rows (CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]) for the three cameras."""
    size = f"{cameras.width} {cameras.height}"
    first, second, third = (CAMERA_OF_VIEW.index(c) for c in (1, 2, 3))
    fx, fy, cx, cy = (getattr(cameras, k).double().tolist() for k in ("fx", "fy", "cx", "cy"))
    return [f"1 PINHOLE {size} {fx[first]!r} {fy[first]!r} {cx[first]!r} {cy[first]!r}",
            f"2 SIMPLE_PINHOLE {size} {fx[second]!r} {cx[second]!r} {cy[second]!r}",
            f"3 SIMPLE_RADIAL {size} {fx[third]!r} {cx[third]!r} {cy[third]!r} {distortion}"]


def write_text_model(model, cameras: Cameras, points: np.ndarray, distortion: float = 0.0):
    """cameras.txt, images.txt (cam_from_world: OpenCV camera axes) and points3D.txt as
    COLMAP's doc/format.rst describes them."""
    model.mkdir(parents=True, exist_ok=True)
    (model / "cameras.txt").write_text(
        "# Camera list with one line of data per camera:\n"
        "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n"
        + "\n".join(camera_lines(cameras, distortion)) + "\n")
    rows = ["# Image list with two lines of data per image:",
            "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME",
            "#   POINTS2D[] as (X, Y, POINT3D_ID)"]
    for view in reversed(range(len(cameras))):  # not in name order
        camera_to_world = cameras.camera_to_world[view].double().numpy()
        opencv = camera_to_world[:3, :3] @ np.diag([1.0, -1.0, -1.0])  # y down, z forward
        rotation = opencv.T  # world -> camera
        translation = -rotation @ camera_to_world[:3, 3]
        numbers = " ".join(repr(float(v)) for v in (*quaternion(rotation), *translation))
        rows += [f"{IMAGE_IDS[view]} {numbers} {CAMERA_OF_VIEW[view]} IMG_{view:04d}.png", ""]
    (model / "images.txt").write_text("\n".join(rows) + "\n")
    (model / "points3D.txt").write_text(
        "# 3D point list with one line of data per point:\n"
        "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)\n"
        + "".join(f"{i + 1} {x!r} {y!r} {z!r} 128 128 128 0.5\n"
                  for i, (x, y, z) in enumerate(points.tolist())))


def ball_points(count: int = 200) -> np.ndarray:
    generator = np.random.default_rng(2)
    directions = generator.normal(size=(count, 3))
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    return np.asarray(TARGET) + stand_ins.RADIUS * directions


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A COLMAP capture of the ball (images/, images_2/, masks/ as image.png.png,
    sparse/0/ as text), the cameras aimed off the origin (so recentring shows)."""
    pytest.importorskip("pycolmap")
    folder = tmp_path_factory.mktemp("colmap")
    cameras = true_cameras()
    images = stand_ins.render(cameras)
    stand_ins.write_llff_capture(folder, cameras, images)  # images/, images_2/, masks/
    (folder / "poses_bounds.npy").unlink()
    for mask in sorted((folder / "masks").iterdir()):  # COLMAP's mask names
        mask.rename(mask.with_name(mask.name + ".png"))
    write_text_model(folder / "sparse" / "0", cameras, ball_points())
    return folder, cameras, images


def test_detects_the_model_folder(capture, tmp_path):
    folder = capture[0]
    assert detect_colmap(folder) == folder / "sparse" / "0"
    assert capture_layout(folder) == "colmap"
    assert detect_colmap(folder / "sparse" / "0") == folder / "sparse" / "0"
    assert detect_colmap(tmp_path) is None and capture_layout(tmp_path) is None
    assert source_kind(folder) == "dataset"


def test_cameras_reproject_known_points_within_a_tenth_of_a_pixel(capture):
    folder, truth, _images = capture
    views = load_dataset(folder, resolution=32)  # picks images_2 (32 x 24)
    assert (views.cameras.width, views.cameras.height) == (32, 24)
    assert views.names == [f"images_2/IMG_{i:04d}" for i in range(8)], "sorted by name"
    read = read_colmap(folder)
    offset = torch.from_numpy(read.offset).float()
    assert read.notes == [f"the cameras are moved by {np.round(read.offset, 6).tolist()} so "
                          "that the point nearest to all their optical axes is the origin"]
    torch.testing.assert_close(offset, -torch.tensor(TARGET), atol=1e-5, rtol=0)
    generator = torch.Generator().manual_seed(1)
    points = torch.tensor(TARGET) + 0.8 * (torch.rand(50, 3, generator=generator) - 0.5)
    scaled = Cameras(truth.camera_to_world, truth.fx / 2, truth.fy / 2, truth.cx / 2,
                     truth.cy / 2, 32, 24)
    expected = project(scaled, points)
    got = project(views.cameras, points + offset)
    assert (got - expected).norm(dim=-1).max() < 0.1
    # near / far: the 3D points' depths, widened; the ball lies between them
    depth = (truth.centers().double() - torch.tensor(TARGET).double()).norm(dim=-1)
    assert (views.cameras.near < depth - stand_ins.RADIUS).all()
    assert (views.cameras.far > depth + stand_ins.RADIUS).all()


def test_masks_become_alpha(capture):
    folder, _cameras, images = capture
    views = load_dataset(folder)  # full size
    assert (views.cameras.width, views.cameras.height) == FULL
    torch.testing.assert_close(views.images[..., 3], images[..., 3], atol=1 / 255, rtol=0)


def test_the_binary_model_gives_the_same_cameras(capture, tmp_path):
    import pycolmap

    folder = capture[0]
    (tmp_path / "sparse").mkdir()
    pycolmap.Reconstruction(folder / "sparse" / "0").write_binary(tmp_path / "sparse")
    (tmp_path / "sparse" / "points3D.bin").unlink()  # optional: read without points
    (tmp_path / "images").symlink_to(folder / "images")
    text, binary = read_colmap(folder), read_colmap(tmp_path)
    assert binary.source == tmp_path / "sparse" / "images.bin"
    np.testing.assert_allclose(binary.camera_to_world(), text.camera_to_world(), atol=1e-9)
    np.testing.assert_allclose(binary.intrinsics(32, 24), text.intrinsics(32, 24), atol=1e-9)
    assert [f.image.name for f in binary.frames] == [f.image.name for f in text.frames]
    assert all(0 < frame.near < frame.far for frame in binary.frames)
    assert binary.points.shape == (0, 3), "a model without points3D has none"


def test_sparse_points_come_with_the_capture_moved_with_the_cameras(capture):
    capture_read = read_colmap(capture[0])
    expected = ball_points() + capture_read.offset
    by_x = capture_read.points[np.argsort(capture_read.points[:, 0])]
    np.testing.assert_allclose(by_x, expected[np.argsort(expected[:, 0])], atol=1e-9)


def test_distorted_cameras_and_mixed_sizes_are_refused(tmp_path):
    pytest.importorskip("pycolmap")
    cameras = true_cameras()
    write_text_model(tmp_path / "sparse", cameras, ball_points(), distortion=0.01)
    with pytest.raises(UserError, match=r"camera 3 is SIMPLE_RADIAL .*images IMG_0006\.png, "
                                        r"IMG_0007\.png.*colmap image_undistorter"):
        load_dataset(tmp_path)
    rows = camera_lines(cameras)
    rows[1] = rows[1].replace("64 48", "32 24")
    (tmp_path / "sparse" / "cameras.txt").write_text("\n".join(rows) + "\n")
    with pytest.raises(UserError, match=r"different sizes \(32x24: camera 2; 64x48: camera "
                                        r"1, 3\)"):
        load_dataset(tmp_path)
    with pytest.raises(UserError, match="one split"):
        load_dataset(tmp_path, "test")


def test_without_pycolmap_the_message_says_what_to_install(tmp_path, monkeypatch):
    write_text_model(tmp_path / "sparse" / "0", true_cameras(), ball_points(5))
    monkeypatch.setitem(sys.modules, "pycolmap", None)  # import pycolmap fails
    with pytest.raises(UserError, match=r"pip install 'diffrec\[colmap\]'"):
        load_dataset(tmp_path)


def test_ref_mesh_naming_a_colmap_folder_is_a_dataset(capture, tmp_path, capsys):
    folder = capture[0]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"ref_mesh": str(folder), "iter": 3}))
    assert build_config(read_config_file(config)).sources.dataset == str(folder)
    assert cli.main(["optimize", "--config", str(config), "--check"]) == 0
    printed = capsys.readouterr().out
    assert "a COLMAP model" in printed and "NOT FOUND" not in printed


def test_a_folder_of_nothing_names_colmap_too(tmp_path):
    with pytest.raises(UserError, match=r"neither transforms_train\.json.*COLMAP model"):
        load_dataset(tmp_path)
