"""Lens distortion and undistortion (numpy), checked against OpenCV's own functions: the
models' formulas, points landing where the pinhole camera puts them, images resampled onto
the pinhole camera, the zoom that leaves no pixel without data."""

import cv2
import numpy as np
import pytest
from helpers.opencv_lens import CRITERIA, undistort_points

from diffrec.protocol.lens import MAX_ZOOM, Lens

SIZE = (160, 120)  # width, height
INTRINSICS = (150.0, 140.0, 83.0, 57.5)  # fx, fy, cx, cy
LENSES = {
    "opencv barrel": Lens("opencv", (-0.28, 0.09, 0.001, -0.0015, -0.01), INTRINSICS, SIZE),
    "opencv pincushion": Lens("opencv", (0.12, 0.02, 0.0, 0.0, 0.0), INTRINSICS, SIZE),
    "fisheye": Lens("fisheye", (0.05, -0.02, 0.004, -0.001), INTRINSICS, SIZE),
}


def camera_matrix(fx, fy, cx, cy) -> np.ndarray:
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


def opencv_project(lens: Lens, points: np.ndarray) -> np.ndarray:
    """Pixels ``[N, 2]`` of camera-space points ``[N, 3]`` (OpenCV camera: z forward) through
    OpenCV's projection of ``lens``' model. The formulas are the same in the wire's pixel
    convention (origin at the top-left corner): only pixel indices would differ by 0.5."""
    zero = np.zeros(3)
    k = camera_matrix(*lens.intrinsics)
    d = np.array(lens.coefficients)
    if lens.model == "fisheye":
        return cv2.fisheye.projectPoints(points[None], zero, zero, k, d)[0][0]
    return cv2.projectPoints(points, zero, zero, k, d)[0][:, 0]


def points_in_view(lens: Lens, count: int, seed: int = 0) -> np.ndarray:
    """Camera-space points ``[N, 3]`` that the lens's pinhole camera sees inside its image,
    away from the border."""
    width, height = lens.size
    fx, fy, cx, cy = lens.pinhole()
    generator = np.random.default_rng(seed)
    u = generator.uniform(0.1 * width, 0.9 * width, count)
    v = generator.uniform(0.1 * height, 0.9 * height, count)
    depth = generator.uniform(1.0, 4.0, count)
    return np.stack([(u - cx) / fx * depth, (v - cy) / fy * depth, depth], -1)


@pytest.mark.parametrize("name", LENSES)
def test_the_models_are_opencvs(name):
    lens = LENSES[name]
    points = np.random.default_rng(1).uniform([-1.0, -0.8, 1.0], [1.0, 0.8, 3.0], (50, 3))
    fx, fy, cx, cy = lens.intrinsics
    xd, yd = lens.distort(points[:, 0] / points[:, 2], points[:, 1] / points[:, 2])
    ours = np.stack([fx * xd + cx, fy * yd + cy], -1)
    np.testing.assert_allclose(ours, opencv_project(lens, points), atol=1e-6)


@pytest.mark.parametrize("name", LENSES)
def test_points_land_where_the_pinhole_camera_puts_them(name):
    """A point seen through the lens (OpenCV's projection) is found by the undistortion at
    the undistorted pinhole camera's projection of that point, within 0.5 px: the sample
    position the undistortion reads for that pixel is the photo's projection of the point,
    and a bright dot drawn there in the photo comes out centred on the pinhole projection."""
    lens = LENSES[name]
    points = points_in_view(lens, 12)
    fx, fy, cx, cy = lens.pinhole()
    pinhole = np.stack([fx * points[:, 0] / points[:, 2] + cx,
                        fy * points[:, 1] / points[:, 2] + cy], -1)
    photo = opencv_project(lens, points)
    read = np.stack(lens.photo_positions(pinhole[:, 0], pinhole[:, 1], *lens.size), -1)
    np.testing.assert_allclose(read, photo, atol=1e-6)

    width, height = lens.size
    v, u = np.mgrid[0:height, 0:width] + 0.5
    for (pu, pv), (du, dv) in zip(pinhole, photo, strict=True):
        dot = np.exp(-((u - du) ** 2 + (v - dv) ** 2) / (2 * 1.5**2))[..., None]
        seen = lens.undistort(dot)[..., 0]
        seen = np.where(seen > 0.05 * seen.max(), seen, 0.0)
        centre = np.array([(seen * u).sum(), (seen * v).sum()]) / seen.sum()
        assert np.abs(centre - (pu, pv)).max() < 0.5, (centre, (pu, pv))


def pattern(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A smooth picture on normalised image coordinates, 3 channels."""
    return np.stack([0.5 + 0.4 * np.sin(4 * x) * np.cos(3 * y), 0.5 + 0.4 * np.cos(5 * x + y),
                     0.3 + 0.2 * x * y], -1)


@pytest.mark.parametrize("name", LENSES)
def test_undistorted_image_is_the_pinhole_image(name):
    """The photo: the pattern where OpenCV's inverse of the lens (undistortPoints) says each
    pixel looks. Undistorted, it is the pattern seen by the pinhole camera within 0.01."""
    lens = LENSES[name]
    width, height = lens.size
    v, u = np.mgrid[0:height, 0:width] + 0.5
    pixels = np.stack([u, v], -1).reshape(-1, 1, 2)
    k, d = camera_matrix(*lens.intrinsics), np.array(lens.coefficients)
    if lens.model == "fisheye":
        normalised = cv2.fisheye.undistortPoints(pixels, k, d, criteria=CRITERIA)
    else:
        normalised = undistort_points(pixels, k, d)
    normalised = normalised.reshape(height, width, 2)
    photo = pattern(normalised[..., 0], normalised[..., 1])

    fx, fy, cx, cy = lens.pinhole()
    expected = pattern((u - cx) / fx, (v - cy) / fy)
    result = lens.undistort(photo)
    assert result.dtype == np.float32 and result.shape == photo.shape
    assert np.abs(result - expected).max() < 0.01

    half = lens.undistort(photo[::2, ::2])  # any size: the intrinsics scale with it
    assert np.abs(half - expected[::2, ::2]).mean() < 0.02


def test_zoom_keeps_the_lens_focal_length_unless_pixels_would_lack_data():
    """Barrel distortion (and the fisheye) crop the photo's corners at the lens's own focal
    length; pincushion would leave the pinhole image's corners without data, so it zooms in
    just enough: the centre of every pixel on the image's border then reads inside the
    photo, the outermost on its edge."""
    assert LENSES["opencv barrel"].zoom() == 1.0
    assert LENSES["fisheye"].zoom() == 1.0
    lens = LENSES["opencv pincushion"]
    zoom = lens.zoom()
    assert 1.0 < zoom < 1.5
    width, height = lens.size
    along_u, along_v = np.arange(width) + 0.5, np.arange(height) + 0.5
    border_u = np.concatenate([along_u, along_u, np.full(height, 0.5),
                               np.full(height, width - 0.5)])
    border_v = np.concatenate([np.full(width, 0.5), np.full(width, height - 0.5), along_v,
                               along_v])
    u, v = lens.photo_positions(border_u, border_v, width, height)
    assert u.min() >= 0 and v.min() >= 0 and u.max() <= width and v.max() <= height
    outermost = min(u.min(), v.min(), width - u.max(), height - v.max())
    assert outermost < 1e-6, "zoomed in no further than needed"
    fx, fy, cx, cy = lens.pinhole()
    assert (fx, fy, cx, cy) == pytest.approx((zoom * 150.0, zoom * 140.0, 83.0, 57.5))


def test_a_lens_that_folds_back_is_zoomed_past_the_fold_or_refused():
    """k1 = -0.9 turns back at r = 0.61, inside the image's corners (r = 0.69): zoomed in
    until the view ends before it. k1 = -40 turns back at r = 0.09: refused."""
    assert Lens("opencv", (-0.9, 0.0, 0.0, 0.0, 0.0), INTRINSICS, SIZE).zoom() > 1.1
    folding = Lens("opencv", (-40.0, 0.0, 0.0, 0.0, 0.0), INTRINSICS, SIZE)
    with pytest.raises(ValueError, match=f"even when zoomed in {MAX_ZOOM:g} times"):
        folding.zoom()
    with pytest.raises(ValueError, match="takes the coefficients"):
        Lens("opencv", (0.1, 0.2), INTRINSICS, SIZE)
