"""The photo-like capture's camera flaws (``diffrec_bench.photo_capture``): photos taken
through an OpenCV lens and written with its coefficients are brought back by the capture
reader's undistortion onto the same scene rendered without the lens; the exposure changes by
one factor per view, within the stops asked for; the detail scales the albedo within its
bounds; JPEG files hold the photos."""

import json

import numpy as np
import pytest

from diffrec.io import read_image
from diffrec.pipeline.captures import read_any_capture
from diffrec_bench import photo_capture

LENS = (-0.35, 0.1, 0.002, -0.0015)  # k1, k2, p1, p2: barrel, as a wide-angle lens


@pytest.fixture(scope="module")
def cameras():
    return photo_capture.object_cameras(4, 80)


def test_the_reader_undistorts_the_photos_onto_the_pinhole_renders(cameras, tmp_path):
    distorted, distorted_masks = photo_capture.photos(cameras, distortion=LENS, noise=0.0)
    pinhole, _ = photo_capture.photos(cameras, noise=0.0)
    photo_capture.write_capture(tmp_path / "lens", cameras, distorted, distortion=LENS,
                                masks=distorted_masks)
    # the same photos, their lens left out of the file: read as if taken by a pinhole camera
    photo_capture.write_capture(tmp_path / "no_lens", cameras, distorted)
    stated = json.loads((tmp_path / "lens" / "transforms.json").read_text())
    assert stated["camera_model"] == "OPENCV"
    assert [stated[key] for key in ("k1", "k2", "p1", "p2")] == list(LENS)

    def error(folder) -> float:
        """Mean absolute colour error of the folder's photos as the reader undistorts them
        (``Frame.undistort``, what loading does) against the renders without the lens."""
        frames = read_any_capture(folder).frames
        undone = np.stack([frame.undistort(read_image(frame.image)) for frame in frames])
        return float(np.abs(undone - pinhole)[:, 2:-2, 2:-2].mean())  # edges replicate

    frames = read_any_capture(tmp_path / "lens").frames
    for frame, camera in zip(frames, range(len(cameras)), strict=True):
        assert frame.pinhole.fl_x == pytest.approx(float(cameras.fx[camera]))  # barrel: zoom 1
        np.testing.assert_array_equal(read_image(frame.mask, data=True)[..., 0] > 0.5,
                                      distorted_masks[camera])
    # measured: 0.0056 undistorted (one bilinear resampling of 80 px photos), 0.0158 read
    # without the lens
    undistorted, unread = error(tmp_path / "lens"), error(tmp_path / "no_lens")
    assert undistorted < 0.0065 and undistorted < unread / 2.5, (undistorted, unread)


def test_exposure_scales_each_view_by_its_own_factor(cameras):
    plain, _ = photo_capture.photos(cameras, noise=0.0)
    exposed, _ = photo_capture.photos(cameras, exposure_stops=0.3, noise=0.0)
    unclipped = (plain > 0.05) & (plain < 0.7)
    factors = []
    for view in range(len(cameras)):
        ratio = exposed[view][unclipped[view]] / plain[view][unclipped[view]]
        np.testing.assert_allclose(ratio, ratio.mean(), rtol=1e-4)
        factors.append(ratio.mean())
    assert all(2 ** -0.3 <= factor <= 2 ** 0.3 for factor in factors), factors
    assert np.ptp(np.log2(factors)) > 0.05, "the views' exposures differ"


def test_detail_scales_the_albedo_within_its_bounds(cameras):
    plain, _ = photo_capture.photos(cameras[:1], noise=0.0)
    detailed, _ = photo_capture.photos(cameras[:1], noise=0.0, detail=0.5)
    lit = (plain > 0.05) & (detailed < 0.99)
    ratio = detailed[lit] / plain[lit]
    assert ratio.min() >= 0.5 - 1e-3 and ratio.max() <= 1.5 + 1e-3, (ratio.min(), ratio.max())
    assert ratio.std() > 0.1, "the detail varies over the surfaces"


def test_jpeg_photos_hold_the_images_within_the_codecs_loss(cameras, tmp_path):
    images, _ = photo_capture.photos(cameras[:1], noise=0.0)
    photo_capture.write_capture(tmp_path, cameras[:1], images, suffix=".jpg")
    photo_capture.write_capture(tmp_path, cameras[:1], images)
    jpeg, png = tmp_path / "images" / "frame_000.jpg", tmp_path / "images" / "frame_000.png"
    assert jpeg.read_bytes()[:3] == b"\xff\xd8\xff"  # a JPEG file's start
    loss, rounding = (np.abs(read_image(path) - images[0]).mean() for path in (jpeg, png))
    # measured: JPEG's loss 0.0114 (colour halved in each direction, fine tiles), PNG's 8-bit
    # rounding 0.0010
    assert 4 * rounding < loss < 0.02, (loss, rounding)
