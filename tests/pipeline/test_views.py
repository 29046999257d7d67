"""Views: the container, in-memory arrays, alpha conversion, splits."""


import numpy as np
import pytest
import torch
from view_helpers import HEIGHT, WIDTH, camera_matrices, linear_of_codes, random_codes, toy_views

from diffrec.camera import orbit_cameras
from diffrec.color import premultiplied_to_straight
from diffrec.errors import UserError
from diffrec.pipeline.views import Views, from_arrays, split_views

# ---------------------------------------------------------------- in-memory arrays


def valid_arrays(count=2, dtype=np.float32):
    c2w = camera_matrices(count).numpy().astype(np.float32)
    intrinsics = np.tile(np.array([[20.0, 20.0, 12.0, 8.0]], dtype=np.float32), (count, 1))
    images = np.random.default_rng(0).random((count, HEIGHT, WIDTH, 4)).astype(dtype)
    return c2w, intrinsics, images


def test_from_arrays_builds_views_as_given():
    c2w, intrinsics, images = valid_arrays()
    intrinsics[1] = [21.0, 22.0, 11.5, 8.5]
    views = from_arrays(c2w, intrinsics, images, near=0.5, far=20.0, names=["a", "b"])
    torch.testing.assert_close(views.images, torch.from_numpy(images), atol=0, rtol=0)
    torch.testing.assert_close(views.cameras.camera_to_world, torch.from_numpy(c2w))
    assert views.cameras.fy[1].item() == 22.0 and views.cameras.cy[1].item() == 8.5
    assert (views.cameras.width, views.cameras.height) == (WIDTH, HEIGHT)
    assert views.cameras.near[0].item() == 0.5 and views.names == ["a", "b"]


def test_from_arrays_converts_float16_and_decodes_uint8():
    c2w, intrinsics, images = valid_arrays(dtype=np.float16)
    views = from_arrays(c2w, intrinsics, images)
    assert views.images.dtype == torch.float32
    torch.testing.assert_close(views.images, torch.from_numpy(images.astype(np.float32)))
    codes = random_codes(2)
    views = from_arrays(torch.from_numpy(c2w), intrinsics, codes.numpy().astype(np.uint8))
    torch.testing.assert_close(views.images, linear_of_codes(codes), atol=1e-6, rtol=0)


def arrays_error(**changes) -> str:
    c2w, intrinsics, images = valid_arrays()
    arrays = {"camera_to_world": c2w, "intrinsics": intrinsics, "images": images, **changes}
    with pytest.raises(UserError) as caught:
        from_arrays(**arrays)
    return str(caught.value)


def test_from_arrays_rejects_bad_input():
    _, _, images = valid_arrays()
    nan_image, bad_alpha = images.copy(), images.copy()
    nan_image[0, 1, 1, 0] = np.nan
    bad_alpha[1, 2, 2, 3] = 1.5
    nan_matrix = camera_matrices(2).numpy()
    nan_matrix[0, 0, 0] = np.inf
    cases = {
        "images must be float32 or float16 or float64 or uint8 or uint16, got int32": {
            "images": images.astype(np.int32)},
        "images must be float32 or float16 or float64 or uint8 or uint16, got >f4": {
            "images": images.astype(">f4")},
        "camera_to_world must be float32 or float64, got int64": {
            "camera_to_world": np.zeros((2, 4, 4), dtype=np.int64)},
        "images must be [N, *, *, 4], got [2, 16, 24, 3]": {"images": images[..., :3]},
        "intrinsics must be [N, 4], got [2, 3]": {"intrinsics": np.ones((2, 3), np.float32)},
        "camera_to_world must be [N, 4, 4], got [2, 3, 4]": {
            "camera_to_world": np.zeros((2, 3, 4), np.float32)},
        "view counts do not match (2 camera_to_world, 2 intrinsics, 1 images)": {
            "images": images[:1]},
        "view counts do not match (2 camera_to_world, 2 intrinsics, 2 images, 3 names)": {
            "names": ["a", "b", "c"]},
        "no images": {"images": images[:0]},
        "images hold NaN": {"images": nan_image},
        "camera_to_world holds NaN or infinite": {"camera_to_world": nan_matrix},
        "alpha must lie in [0, 1], found": {"images": bad_alpha},
        "focal lengths fx, fy must be positive": {
            "intrinsics": np.array([[20.0, -1.0, 12.0, 8.0]] * 2, np.float32)},
    }
    for expected, change in cases.items():
        assert expected in arrays_error(**change), expected


# ---------------------------------------------------------------- alpha and views


def test_premultiplied_to_straight_divides_where_covered():
    premultiplied = torch.tensor([[0.2, 0.4, 0.1, 0.5], [0.3, 0.0, 2.0, 1.0], [0.0, 0.1, 0.0, 0.0]])
    expected = torch.tensor([[0.4, 0.8, 0.2, 0.5], [0.3, 0.0, 2.0, 1.0], [0.0, 0.1, 0.0, 0.0]])
    torch.testing.assert_close(premultiplied_to_straight(premultiplied), expected)
    straight = torch.rand(5, 7, 4) + torch.tensor([0.0, 0.0, 0.0, 0.01])
    straight[..., 3].clamp_(max=1.0)
    again = torch.cat([straight[..., :3] * straight[..., 3:], straight[..., 3:]], -1)
    torch.testing.assert_close(premultiplied_to_straight(again), straight)


def test_views_batch_and_subset_pick_matching_cameras_and_images():
    cams = orbit_cameras(5, 4.0, 8)
    images = torch.arange(5.0)[:, None, None, None].expand(5, 8, 8, 4).contiguous()
    views = Views(cams, images)
    batch_cameras, batch_images = views.batch([3, 1])
    torch.testing.assert_close(batch_cameras.camera_to_world, cams.camera_to_world[[3, 1]])
    assert batch_images[:, 0, 0, 0].tolist() == [3.0, 1.0]
    assert views.subset(torch.tensor([4])).names == ["view_004"]
    with pytest.raises(UserError, match="float32 \\[5, 8, 8, 4\\]"):
        Views(cams, images[..., :3])



# ---------------------------------------------------------------- splits and sampling


def test_split_views_is_a_seeded_partition():
    views = toy_views(10)
    train, test = split_views(views, 3, seed=5)
    assert len(train) == 7 and len(test) == 3
    assert sorted(train.names + test.names) == views.names
    assert test.names == split_views(views, 3, seed=5)[1].names
    assert test.names != split_views(views, 3, seed=6)[1].names
    assert [int(n[-3:]) for n in test.names] == test.images[:, 0, 0, 0].int().tolist()
    assert len(split_views(views, 0.25)[1]) == 2
    with pytest.raises(UserError, match="cannot hold out 10 of 10 views"):
        split_views(views, 10)
