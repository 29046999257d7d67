"""The surface an object stands on, found from photos and their cameras: on the ray-cast
ball on a wooden table (``photo_capture``: each view's exposure its own), the plane found is
the table top; the pixels said to show it are table, the ball's shadow among them, and never
ball; those said to show something standing on it are the ball's lower half and nothing
else; photos in which nothing agrees from view to view show no plane."""

import math

import cv2
import numpy as np
import pytest
import torch

from diffrec.pipeline.auto_masks import object_region
from diffrec.pipeline.support_plane import Plane, find_support_plane, plane_pixels
from diffrec_bench import photo_capture


@pytest.fixture(scope="module")
def scene():
    """``(cameras, linear RGB [N, H, W, 3], true masks)``: 12 views of 96 px."""
    cameras = photo_capture.object_cameras(12, 96)
    images, truth = photo_capture.photos(cameras, exposure_stops=0.15)
    return cameras, torch.from_numpy(images), truth


def table_points(cameras) -> tuple[np.ndarray, np.ndarray]:
    """``(where each pixel's ray meets the table's plane z = 0 [N, H, W, 3], whether that
    is on the table top and in front of the camera [N, H, W])``."""
    rays = cameras.ray_directions().double().numpy()
    origins = cameras.centers().double().numpy()[:, None, None]
    depth = -origins[..., 2] / np.where(rays[..., 2] < 0, rays[..., 2], -1e-12)
    points = origins + rays * depth[..., None]
    on_top = (rays[..., 2] < 0) & (np.abs(points[..., :2]) < photo_capture.TABLE_HALF).all(-1)
    return points, on_top


def in_shadow(points: np.ndarray) -> np.ndarray:
    """Whether the sun's ray from each of ``points [..., 3]`` meets the ball."""
    to_ball = photo_capture.BALL_CENTRE - points
    along = to_ball @ photo_capture.SUN
    return (along > 0) & ((to_ball ** 2).sum(-1) - along ** 2 < photo_capture.BALL_RADIUS ** 2)


def test_the_plane_found_is_the_table_top(scene):
    cameras, images, _ = scene
    region = object_region(cameras)
    plane = find_support_plane(cameras, images, region.centre, region.radius)
    assert plane is not None
    tilt = math.degrees(math.acos(plane.normal[2]))
    print(f"tilt {tilt:.3f} degrees, offset {plane.offset:+.4f}")
    assert tilt < 1.0 and abs(plane.offset) < 0.01  # the table top: z = 0


def test_its_pixels_are_the_table_and_never_the_ball(scene):
    cameras, images, truth = scene
    region = object_region(cameras)
    pixels = plane_pixels(cameras, images, Plane(np.array([0.0, 0.0, 1.0]), 0.0),
                          region.centre, region.radius)
    shown, standing = pixels.plane, pixels.standing
    points, on_top = table_points(cameras)
    table = on_top & ~truth
    near = table & (np.linalg.norm(points[..., :2], axis=-1) < 1.0)  # the ball's surroundings
    shadow = table & in_shadow(points)
    print(f"ball {(shown & truth).sum()}, near the ball {(shown & near).sum() / near.sum():.3f}, "
          f"shadow {(shown & shadow).sum() / shadow.sum():.3f}, beyond the table "
          f"{(shown & ~on_top).sum() / shown.sum():.4f}")
    assert not (shown & truth).any()
    assert (shown & near).sum() >= 0.6 * near.sum()
    assert (shown & shadow).sum() >= 0.6 * shadow.sum()
    assert (shown & ~on_top).sum() <= 0.01 * shown.sum()

    rows = np.arange(truth.shape[1])[None, :, None]
    lowest, highest = (np.where(truth, rows, fill).reshape(len(truth), -1) for fill in (-1, 1e9))
    middle = (lowest.max(1) + highest.min(1)) / 2  # each view's ball's middle row
    lower_half = truth & (rows > middle[:, None, None])
    print(f"standing: outside the ball {(standing & ~truth).sum()}, of the ball's lower half "
          f"{(standing & lower_half).sum() / lower_half.sum():.3f}")
    outline = np.stack([cv2.dilate(view.astype(np.uint8), np.ones((3, 3), np.uint8))
                        for view in truth]).astype(bool)  # the ball and a pixel around it
    assert not (standing & ~outline).any()
    assert (standing & lower_half).sum() >= 0.1 * lower_half.sum()


def test_photos_that_agree_nowhere_show_no_plane(scene):
    cameras, images, _ = scene
    noise = torch.from_numpy(np.random.default_rng(3).uniform(size=images.shape)).float()
    region = object_region(cameras)
    assert find_support_plane(cameras, noise, region.centre, region.radius) is None
