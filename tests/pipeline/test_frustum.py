"""Whether cameras see the object's box."""

import logging

import pytest
import torch
from view_helpers import front_camera, join

from diffrec.camera import orbit_cameras
from diffrec.errors import UserError
from diffrec.pipeline.frustum import _convex_hulls_overlap, check_views_see_box

# ---------------------------------------------------------------- box visibility


BOX = ((-0.5, -0.5, -0.5), (0.5, 0.5, 0.5))


def test_a_good_ring_of_cameras_passes_silently(caplog):
    with caplog.at_level(logging.WARNING):
        check_views_see_box(orbit_cameras(8, 4.0, 32), *BOX)
    assert caplog.text == ""


def test_cameras_that_miss_the_box_are_named():
    good = orbit_cameras(1, 4.0, 32)
    away = front_camera((0.0, -4.0, 0.0), (0.0, -8.0, 0.0))  # looks away from the box
    aside = front_camera((0.0, -4.0, 0.0), (4.0, 0.0, 0.0))  # box 45 degrees off a 40-degree view
    beyond = front_camera((0.0, -4.0, 0.0), (0.0, 0.0, 0.0), far=3.0)
    cams = join([good, away, aside, beyond])
    with pytest.raises(UserError) as caught:
        check_views_see_box(cams, *BOX, names=["ok", "back", "side", "far"])
    message = str(caught.value)
    assert "3 of 4 cameras do not see the object's box [-0.5, -0.5, -0.5] .. [0.5, 0.5, 0.5]" \
        in message
    assert "1 (back): the box is behind it" in message
    assert "2 (side): the box is outside its image" in message
    assert "3 (far): the box is outside its image" in message
    assert "(ok)" not in message


def test_a_camera_too_close_or_off_centre_warns(caplog):
    close = front_camera((0.0, -1.2, 0.0), (0.0, 0.0, 0.0))
    off_centre = front_camera((0.0, -4.0, 0.0), (1.45, 0.0, 0.0))  # box straddles the edge
    with caplog.at_level(logging.WARNING):
        check_views_see_box(join([orbit_cameras(1, 4.0, 32), close, off_centre]), *BOX)
    assert "2 of 3 cameras see only part of the object's box" in caplog.text
    assert "(1, 2)" in caplog.text
    # the object itself clear of every image's edges (a mask inside the frame): no warning
    # (the demo's own dataset warned of every camera); touching one edge: warned
    caplog.clear()
    masks = torch.zeros(3, 32, 32)
    masks[:, 8:24, 8:24] = 1.0
    masks[2, 8:24, 24:] = 1.0
    with caplog.at_level(logging.WARNING):
        check_views_see_box(join([orbit_cameras(1, 4.0, 32), close, off_centre]), *BOX,
                            masks=masks)
    assert "1 of 3 cameras see only part of the object's box" in caplog.text
    assert "(2)" in caplog.text


def test_box_verdicts_agree_with_dense_point_sampling(caplog):
    """Independent check: project a dense grid of points of the box. A camera that sees any
    of them must not be rejected; one with all of them inside the image must not warn."""
    generator = torch.Generator().manual_seed(3)
    ticks = torch.linspace(-0.5, 0.5, 21)
    grid = torch.stack(torch.meshgrid(ticks, ticks, ticks, indexing="ij"), -1).reshape(-1, 3)
    rejected = warned = 0
    for _ in range(40):
        eye = (torch.rand(3, generator=generator) - 0.5) * 6
        target = (torch.rand(3, generator=generator) - 0.5) * 4
        camera = front_camera(eye.tolist(), target.tolist(), far=4.5)
        local = torch.cat([grid, torch.ones(len(grid), 1)], -1) @ camera.world_to_camera()[0].T
        depth = -local[:, 2]
        px = camera.cx + camera.fx * local[:, 0] / depth
        py = camera.cy - camera.fy * local[:, 1] / depth
        visible = (depth > 0.1) & (depth < 4.5) & (px > 0) & (px < 32) & (py > 0) & (py < 32)
        centre_in_front = -(camera.world_to_camera()[0, 2, 3]) > 0
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            try:
                check_views_see_box(camera, *BOX)
            except UserError:
                rejected += 1
                assert not (visible.any() and centre_in_front)
                continue
        if caplog.text:
            warned += 1
        else:
            assert visible.all()
    assert rejected >= 5 and warned >= 5, "the random cameras exercise all three verdicts"


def test_separating_axes_catch_a_triangle_beside_the_image_corner():
    rectangle = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0], [4.0, 4.0]], dtype=torch.float64)
    # its bounding box overlaps the rectangle, the triangle itself does not
    beside = torch.tensor([[-1.0, 0.5], [0.5, -1.0], [-1.0, -1.0]], dtype=torch.float64)
    assert not _convex_hulls_overlap(beside, rectangle)
    assert _convex_hulls_overlap(beside + 0.6, rectangle)


# ---------------------------------------------------------------- reference renders
