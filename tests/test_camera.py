"""Cameras: clip matrices against the direct pinhole formula, the rasterizer's pixel
convention end to end, rays, and NeRF transforms."""

import json
import math

import pytest
import torch

from diffrec import raster
from diffrec.camera import Cameras, capture_cameras
from diffrec.errors import UserError
from diffrec.protocol.captures import CaptureError, read_nerf

WIDTH, HEIGHT = 40, 30


def _rotation(axis_angle):
    """Rodrigues' formula in float64, [3, 3]."""
    axis_angle = torch.tensor(axis_angle, dtype=torch.float64)
    angle = axis_angle.norm()
    k = axis_angle / angle
    cross = torch.tensor([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return (
        torch.eye(3, dtype=torch.float64) + angle.sin() * cross + (1 - angle.cos()) * cross @ cross
    )


def _pose(axis_angle, center, scale=1.0):
    c2w = torch.eye(4, dtype=torch.float64)
    c2w[:3, :3] = _rotation(axis_angle) * scale  # Blender keeps the object scale in here
    c2w[:3, 3] = torch.tensor(center, dtype=torch.float64)
    return c2w


def _cameras():
    """Off-centre principal points, non-square pixels, a scaled camera object."""
    c2w = torch.stack(
        [_pose([0.3, -0.5, 0.2], [1.0, -4.0, 2.0]), _pose([1.2, 0.1, -0.7], [-3.0, 1.0, 0.5], 2.5)]
    )
    return Cameras(
        c2w,
        fx=torch.tensor([50.0, 35.0]),
        fy=torch.tensor([60.0, 28.0]),
        cx=torch.tensor([23.5, 12.0]),
        cy=torch.tensor([11.0, 19.25]),
        width=WIDTH,
        height=HEIGHT,
        near=0.5,
        far=20.0,
    ), c2w


def _camera_space_points(count, generator):
    """Points in front of a camera (camera space, -Z forward), float64 [count, 3]."""
    depth = 1.0 + 8.0 * torch.rand(count, generator=generator, dtype=torch.float64)
    lateral = (torch.rand(count, 2, generator=generator, dtype=torch.float64) - 0.5) * depth[
        :, None
    ]
    return torch.cat([lateral, -depth[:, None]], dim=1)


def _to_world(c2w, points):
    rotation = c2w[:3, :3] / c2w[:3, :3].norm(dim=0, keepdim=True)
    return points @ rotation.T + c2w[:3, 3]


def _clip_to_image_pixels(clip, width, height):
    """Continuous image coordinates (px right, py down from the top-left corner) from clip
    space through the raster convention: pixel centre (c + 0.5) at NDC 2(c + 0.5)/W - 1, and
    raster row 0 at the bottom, i.e. image row H - 1 - raster row."""
    ndc = clip[:, :3] / clip[:, 3:]
    raster_x = (ndc[:, 0] + 1) * width / 2
    raster_y = (ndc[:, 1] + 1) * height / 2
    return torch.stack([raster_x, height - raster_y], dim=1), ndc[:, 2]


def test_clip_matrix_projects_like_the_pinhole_formula():
    cameras, c2w = _cameras()
    generator = torch.Generator().manual_seed(0)
    for i in range(len(cameras)):
        local = _camera_space_points(50, generator)
        world = _to_world(c2w[i], local)
        clip = torch.cat([world, torch.ones(50, 1, dtype=torch.float64)], 1) @ (
            cameras.world_to_clip()[i].double().T
        )
        pixels, _ = _clip_to_image_pixels(clip, WIDTH, HEIGHT)
        x, y, z = local.unbind(1)
        expected = torch.stack(
            [cameras.cx[i] + cameras.fx[i] * x / -z, cameras.cy[i] - cameras.fy[i] * y / -z], 1
        ).double()
        torch.testing.assert_close(pixels, expected, atol=2e-3, rtol=0)


def test_depth_is_minus_one_at_near_and_plus_one_at_far():
    cameras, c2w = _cameras()
    for i in range(len(cameras)):
        for plane, expected in ((cameras.near[i], -1.0), (cameras.far[i], 1.0)):
            local = torch.tensor([[0.3, -0.2, -1.0], [-0.1, 0.4, -1.0]], dtype=torch.float64)
            world = _to_world(c2w[i], local * float(plane))
            clip = torch.cat([world, torch.ones(2, 1, dtype=torch.float64)], 1) @ (
                cameras.world_to_clip()[i].double().T
            )
            torch.testing.assert_close(
                clip[:, 2] / clip[:, 3],
                torch.full((2,), expected, dtype=torch.float64),
                atol=1e-5,
                rtol=0,
            )
            torch.testing.assert_close(clip[:, 3], -local[:, 2] * float(plane), atol=1e-4, rtol=0)


@pytest.mark.parametrize(("column", "row"), [(3, 2), (31, 25), (20, 14)])
def test_rasterizer_lights_the_pixel_the_pinhole_formula_predicts(column, row):
    cameras, c2w = _cameras()
    cameras, c2w = cameras[0], c2w[:1]
    # A tiny triangle around the camera-space point that projects to the pixel's centre.
    depth = 4.0
    x = (column + 0.5 - float(cameras.cx[0])) / float(cameras.fx[0]) * depth
    y = -(row + 0.5 - float(cameras.cy[0])) / float(cameras.fy[0]) * depth
    local = torch.tensor(
        [[x - 0.01, y - 0.01, -depth], [x + 0.01, y - 0.01, -depth], [x, y + 0.01, -depth]],
        dtype=torch.float64,
    )
    world = _to_world(c2w[0], local)
    clip = torch.cat([world, torch.ones(3, 1, dtype=torch.float64)], 1) @ (
        cameras.world_to_clip()[0].double().T
    )
    ctx = raster.RasterContext(device="cpu", impl="torch")
    rast, _ = raster.rasterize(
        ctx, clip.float()[None], torch.tensor([[0, 1, 2]], dtype=torch.int32), (HEIGHT, WIDTH)
    )
    image = rast[0, ..., 3].flip(0)  # raster row 0 is the bottom: flip to rows top-down
    covered = torch.nonzero(image > 0).tolist()
    assert covered == [[row, column]]


def test_rays_pass_through_the_pixel_centres():
    cameras, _ = _cameras()
    rays = cameras.ray_directions()
    assert rays.shape == (2, HEIGHT, WIDTH, 3)
    torch.testing.assert_close(rays.norm(dim=-1), torch.ones(2, HEIGHT, WIDTH))
    # A point along each ray projects back to its own pixel centre.
    points = cameras.centers()[:, None, None] + 3.0 * rays
    homogeneous = torch.cat([points, torch.ones(2, HEIGHT, WIDTH, 1)], -1).double()
    rows, cols = torch.meshgrid(
        torch.arange(HEIGHT, dtype=torch.float64),
        torch.arange(WIDTH, dtype=torch.float64),
        indexing="ij",
    )
    for i in range(2):
        clip = homogeneous[i].reshape(-1, 4) @ cameras.world_to_clip()[i].double().T
        pixels, _ = _clip_to_image_pixels(clip, WIDTH, HEIGHT)
        expected = torch.stack([cols + 0.5, rows + 0.5], -1).reshape(-1, 2)
        torch.testing.assert_close(pixels, expected, atol=2e-3, rtol=0)


def test_camera_looks_down_its_minus_z_axis():
    # Blender's default-ish camera: at +Y... simply a camera rotated 90 deg about X looks
    # along world +Y; its centre ray must be +Y and its up (top rows) must be world +Z.
    c2w = _pose([math.pi / 2, 0.0, 0.0], [0.0, -5.0, 0.0])[None]
    cameras = Cameras(c2w, fx=10.0, fy=10.0, cx=5.0, cy=5.0, width=10, height=10)
    rays = cameras.ray_directions()[0]
    centre = (rays[4, 4] + rays[5, 5] + rays[4, 5] + rays[5, 4]) / 4
    torch.testing.assert_close(centre / centre.norm(), torch.tensor([0.0, 1.0, 0.0]))
    assert rays[0, :, 2].min() > 0 and rays[-1, :, 2].max() < 0  # top rows look up
    assert rays[:, 0, 0].max() < 0 and rays[:, -1, 0].min() > 0  # left columns look left


def test_object_scale_is_ignored():
    cameras, c2w = _cameras()
    unscaled = c2w.clone()
    unscaled[:, :3, :3] /= unscaled[:, :3, :3].norm(dim=1, keepdim=True)
    other = Cameras(
        unscaled, cameras.fx, cameras.fy, cameras.cx, cameras.cy, WIDTH, HEIGHT, 0.5, 20.0
    )
    torch.testing.assert_close(other.world_to_clip(), cameras.world_to_clip())


def nerf_cameras(folder, transforms, width, height, **near_far):
    """Cameras of a ``transforms`` dict through the one NeRF reader (``protocol.captures``)
    and ``capture_cameras``, as ``load_dataset`` builds them; the image files are empty
    stand-ins (their names are all the reader needs)."""
    frames = [{"file_path": f"./r_{i}", **frame} for i, frame in enumerate(transforms["frames"])]
    for i in range(len(frames)):
        (folder / f"r_{i}.png").touch()
    path = folder / "transforms_train.json"
    path.write_text(json.dumps({**transforms, "frames": frames}))
    return capture_cameras(read_nerf(path, **near_far), width, height)


def test_nerf_transforms_match_wire_cameras(tmp_path):
    c2w = torch.stack([_pose([0.1, 0.2, 0.3], [0.0, 0.0, 4.0]), _pose([1.0, 0.0, 0.0], [1, 2, 3])])
    angle_x = 0.6911112070083618  # the NeRF synthetic scenes' field of view
    transforms = {
        "camera_angle_x": angle_x,
        "frames": [
            {"file_path": f"./r_{i}", "transform_matrix": m.tolist()} for i, m in enumerate(c2w)
        ],
    }
    cameras = nerf_cameras(tmp_path, transforms, 80, 60, near=2.0, far=6.0)
    focal = 40.0 / math.tan(angle_x / 2)
    expected = Cameras(c2w, focal, focal, 40.0, 30.0, 80, 60, 2.0, 6.0)
    torch.testing.assert_close(cameras.world_to_clip(), expected.world_to_clip())
    torch.testing.assert_close(cameras.camera_to_world, expected.camera_to_world)


def test_nerf_pixel_intrinsics_are_rescaled_and_frames_override(tmp_path):
    c2w = _pose([0.1, 0.2, 0.3], [0.0, 0.0, 4.0])
    transforms = {
        "fl_x": 500.0,
        "fl_y": 400.0,
        "cx": 300.0,
        "cy": 250.0,
        "w": 800,
        "h": 600,
        "frames": [
            {"transform_matrix": c2w.tolist()},
            {"transform_matrix": c2w.tolist(), "cx": 420.0},
        ],
    }
    cameras = nerf_cameras(tmp_path, transforms, 200, 300)  # x / 4, y / 2
    torch.testing.assert_close(cameras.fx, torch.tensor([125.0, 125.0]))
    torch.testing.assert_close(cameras.fy, torch.tensor([200.0, 200.0]))
    torch.testing.assert_close(cameras.cx, torch.tensor([75.0, 105.0]))
    torch.testing.assert_close(cameras.cy, torch.tensor([125.0, 125.0]))
    vertical = nerf_cameras(
        tmp_path, {"camera_angle_x": 1.0, "camera_angle_y": 0.5,
                   "frames": transforms["frames"][:1]}, 64, 32
    )
    torch.testing.assert_close(vertical.fy, torch.tensor([16.0 / math.tan(0.25)]))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"camera_to_world": torch.full((1, 4, 4), float("nan"))}, "NaN"),
        ({"camera_to_world": torch.zeros(1, 3, 4)}, r"\[N>0, 4, 4\]"),
        ({"near": 0.0}, "near"),
        ({"far": 0.05}, "near < far"),
        ({"fx": -1.0}, "positive"),
        ({"width": 0}, "positive integers"),
        ({"cx": torch.zeros(3)}, r"scalar or \[1\]"),
    ],
)
def test_bad_cameras_get_clear_errors(changes, message):
    arguments = {
        "camera_to_world": torch.eye(4)[None],
        "fx": 10.0,
        "fy": 10.0,
        "cx": 5.0,
        "cy": 5.0,
        "width": 10,
        "height": 10,
    }
    with pytest.raises(UserError, match=message):
        Cameras(**{**arguments, **changes})


def test_nerf_errors_name_the_problem(tmp_path):
    with pytest.raises(CaptureError, match="frames"):
        nerf_cameras(tmp_path, {"camera_angle_x": 1.0, "frames": []}, 8, 8)
    with pytest.raises(CaptureError, match="camera_angle_x"):
        nerf_cameras(tmp_path, {"frames": [{"transform_matrix": torch.eye(4).tolist()}]}, 8, 8)
