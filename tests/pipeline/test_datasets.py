"""Datasets: NeRF folders, in-memory arrays, reference renders, box checks, splits, sampling."""

import io
import json
import logging
import math

import numpy as np
import pytest
import torch

from diffrec import raster
from diffrec.camera import Cameras, from_nerf_transforms, look_at, orbit_cameras
from diffrec.color import srgb_to_linear
from diffrec.errors import UserError
from diffrec.io import Asset, Material, write_image
from diffrec.light.brdf_lut import brdf_lut
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.datasets import (
    Views,
    ViewSampler,
    _convex_hulls_overlap,
    check_views_see_box,
    from_arrays,
    load_dataset,
    premultiplied_to_straight,
    render_reference_views,
    split_views,
)
from diffrec.shading.bsdf import lookup_brdf_lut

WIDTH, HEIGHT = 24, 16  # not square, so a swapped width and height shows


def camera_matrices(count):
    eyes = torch.tensor([[4 * math.cos(a), 4 * math.sin(a), 1.0] for a in range(count)])
    return look_at(eyes, (0.0, 0.0, 0.0))


def write_folder(root, images, suffix=".png", split="train", transforms=None, matrices=None):
    """A NeRF-synthetic folder: ``images`` [N, H, W, C] linear, file_path without extension."""
    matrices = camera_matrices(len(images)) if matrices is None else matrices
    matrices = matrices.tolist() if isinstance(matrices, torch.Tensor) else matrices
    frames = []
    for i, image in enumerate(images):
        write_image(root / split / f"r_{i}{suffix}", image)
        frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": matrices[i]})
    transforms = {"camera_angle_x": 0.7, "frames": frames, **(transforms or {})}
    (root / f"transforms_{split}.json").write_text(json.dumps(transforms))
    return transforms


def random_codes(count, channels=4, seed=0):
    """8-bit codes; their sRGB decode is what a PNG of them must load as."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, HEIGHT, WIDTH, channels), generator=generator)


def linear_of_codes(codes):
    encoded = codes.double() / 255
    return torch.cat([srgb_to_linear(encoded[..., :3]), encoded[..., 3:]], -1).float()


# ---------------------------------------------------------------- NeRF folders


def test_png_folder_round_trip_decodes_srgb_and_matches_nerf_cameras(tmp_path):
    codes = random_codes(3)
    codes[0, 0, 0] = torch.tensor([128, 128, 128, 255])
    transforms = write_folder(tmp_path, linear_of_codes(codes))
    views = load_dataset(tmp_path)

    torch.testing.assert_close(views.images, linear_of_codes(codes), atol=1e-6, rtol=0)
    assert abs(views.images[0, 0, 0, 0].item() - 0.2158605) < 1e-5, "sRGB 128 decodes to 0.216"
    expected = from_nerf_transforms(transforms, WIDTH, HEIGHT)
    torch.testing.assert_close(views.cameras.camera_to_world, expected.camera_to_world)
    for key in ("fx", "fy", "cx", "cy"):
        torch.testing.assert_close(getattr(views.cameras, key), getattr(expected, key))
    assert (views.cameras.width, views.cameras.height) == (WIDTH, HEIGHT)
    assert abs(views.cameras.fx[0].item() - 0.5 * WIDTH / math.tan(0.35)) < 1e-4
    assert views.names == ["train/r_0", "train/r_1", "train/r_2"]


def test_exr_folder_stays_linear_and_is_unpremultiplied(tmp_path):
    straight = torch.tensor([[[3.0, 0.5, 0.25, 0.5], [0.2, 7.0, 0.1, 1.0], [0.0, 0.0, 0.0, 0.0]]])
    premultiplied = torch.cat([straight[..., :3] * straight[..., 3:], straight[..., 3:]], -1)
    write_folder(tmp_path, premultiplied[None].expand(2, 1, 3, 4).numpy(), suffix=".exr")
    views = load_dataset(tmp_path)
    torch.testing.assert_close(views.images[1], straight, atol=1e-6, rtol=0)
    as_written = load_dataset(tmp_path, exr_premultiplied=False)
    torch.testing.assert_close(as_written.images[0], premultiplied, atol=0, rtol=0)


def test_images_without_alpha_get_alpha_one_and_a_warning(tmp_path, caplog):
    codes = random_codes(2, channels=3)
    write_folder(tmp_path, linear_of_codes(codes))
    with caplog.at_level(logging.WARNING):
        views = load_dataset(tmp_path)
    assert (views.images[..., 3] == 1).all()
    torch.testing.assert_close(views.images[..., :3], linear_of_codes(codes), atol=1e-6, rtol=0)
    assert "no alpha channel" in caplog.text and "r_0.png" in caplog.text


def test_resizing_keeps_a_constant_colour_and_scales_the_intrinsics(tmp_path):
    image = torch.zeros(HEIGHT, WIDTH, 4)
    image[..., :3] = torch.tensor([0.3, 0.6, 0.1])
    image[4:12, 5:17, 3] = 1.0
    image[3, 5:17, 3] = 0.5  # a soft edge
    image[image[..., 3] == 0, :3] = 1.0  # uncovered pixels carry another colour
    transforms = write_folder(tmp_path, image[None].expand(2, -1, -1, -1).numpy(), suffix=".exr")
    full = from_nerf_transforms(transforms, WIDTH, HEIGHT)

    for resolution in (12, (12, 8), (31, 9)):
        views = load_dataset(tmp_path, resolution=resolution, exr_premultiplied=False)
        width, height = (12, 8) if resolution == 12 else resolution
        assert views.images.shape == (2, height, width, 4)
        covered = views.images[..., 3] > 0
        assert covered.any() and (views.images[..., 3] < 1).any(), "edges are antialiased"
        colour = views.images[..., :3][covered]
        torch.testing.assert_close(colour, torch.tensor([0.3, 0.6, 0.1]).expand_as(colour))
        cams = views.cameras
        for key, scale in (("fx", width / WIDTH), ("cx", width / WIDTH),
                           ("fy", height / HEIGHT), ("cy", height / HEIGHT)):
            torch.testing.assert_close(getattr(cams, key), getattr(full, key) * scale)


def test_focal_length_in_pixels_refers_to_the_files_image_size(tmp_path):
    codes = random_codes(1)
    write_folder(tmp_path, linear_of_codes(codes), transforms={"fl_x": 30.0, "cx": 11.0})
    views = load_dataset(tmp_path, resolution=(48, 32))
    assert views.cameras.fx.item() == pytest.approx(60.0)
    assert views.cameras.fy.item() == pytest.approx(60.0)
    assert views.cameras.cx.item() == pytest.approx(22.0)


def folder_error(tmp_path, **kwargs) -> str:
    with pytest.raises(UserError) as caught:
        load_dataset(tmp_path, **kwargs)
    return str(caught.value)


def test_error_folder_missing(tmp_path):
    assert "dataset folder not found" in folder_error(tmp_path / "nowhere")


def test_error_no_transforms_file_lists_what_is_there(tmp_path):
    write_folder(tmp_path, linear_of_codes(random_codes(1)), split="test")
    message = folder_error(tmp_path)
    assert "no transforms_train.json" in message and "found transforms_test.json" in message


def test_error_transforms_not_json(tmp_path):
    (tmp_path / "transforms_train.json").write_text("{frames: oops")
    assert "not valid JSON" in folder_error(tmp_path)


def test_error_no_frames(tmp_path):
    (tmp_path / "transforms_train.json").write_text(json.dumps({"camera_angle_x": 0.7,
                                                                "frames": []}))
    assert "has no frames" in folder_error(tmp_path)


def test_error_missing_images_are_named(tmp_path):
    write_folder(tmp_path, linear_of_codes(random_codes(8)))
    for i in (1, 2, 4, 5, 6, 7):
        (tmp_path / "train" / f"r_{i}.png").unlink()
    message = folder_error(tmp_path)
    assert "6 of 8 images" in message
    assert "./train/r_1, ./train/r_2, ./train/r_4, ./train/r_5, ./train/r_6, ..." in message
    assert "r_7" not in message


def test_error_images_of_differing_sizes(tmp_path):
    write_folder(tmp_path, linear_of_codes(random_codes(2)))
    write_image(tmp_path / "train" / "r_1.png", np.zeros((8, 8, 4)))
    message = folder_error(tmp_path)
    assert "differ in size" in message and "r_0.png is 24x16" in message
    assert "r_1.png is 8x8" in message


def test_error_matrix_not_4x4(tmp_path):
    matrices = camera_matrices(2).tolist()
    matrices[1] = matrices[1][:3]
    write_folder(tmp_path, linear_of_codes(random_codes(2)), matrices=matrices)
    message = folder_error(tmp_path)
    assert "frame 1 (./train/r_1): transform_matrix must be a 4x4" in message


def test_error_matrix_not_finite(tmp_path):
    matrices = camera_matrices(2)
    matrices[0, 1, 3] = float("nan")
    write_folder(tmp_path, linear_of_codes(random_codes(2)), matrices=matrices)
    assert "frame 0 (./train/r_0): transform_matrix holds NaN" in folder_error(tmp_path)


def test_error_matrix_not_affine_names_the_file(tmp_path):
    matrices = camera_matrices(2)
    matrices[0, 3, 0] = 1.0
    write_folder(tmp_path, linear_of_codes(random_codes(2)), matrices=matrices)
    message = folder_error(tmp_path)
    assert "transforms_train.json" in message and "must be affine" in message


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
        "images must be float32 or float16 or uint8, got float64": {
            "images": images.astype(np.float64)},
        "images must be float32 or float16 or uint8, got >f4": {"images": images.astype(">f4")},
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


# ---------------------------------------------------------------- box visibility


def front_camera(eye, target, size=32, fov=40.0, far=1000.0):
    focal = 0.5 * size / math.tan(math.radians(fov) / 2)
    return Cameras(look_at([eye], target).float(), fx=focal, fy=focal, cx=size / 2,
                   cy=size / 2, width=size, height=size, far=far)


def join(cameras):
    """One ``Cameras`` batch of several single cameras of one size."""
    fields = {key: torch.cat([getattr(c, key) for c in cameras])
              for key in ("camera_to_world", "fx", "fy", "cx", "cy", "near", "far")}
    return Cameras(**fields, width=cameras[0].width, height=cameras[0].height)


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


def test_reference_render_of_a_textured_sphere_under_white_light():
    north, south = (0.7, 0.3, 0.1), (0.1, 0.4, 0.8)
    kd = torch.empty(8, 8, 3)
    kd[:4], kd[4:] = torch.tensor(north), torch.tensor(south)  # rows top-down: v > 0.5 north
    asset = Asset(uv_sphere(48, 24), [Material(kd=kd, ks=torch.tensor([0.0, 0.6, 0.0]))],
                  torch.zeros(0, dtype=torch.long))
    assert asset.mesh.normals is None
    near_camera = front_camera((0.0, -4.0, 0.0), (0.0, 0.0, 0.0), fov=35.0)
    far_camera = front_camera((0.0, -12.0, 0.0), (0.0, 0.0, 0.0), fov=35.0)
    ctx = raster.RasterContext("cpu", impl="torch")
    views = render_reference_views(ctx, asset, np.ones((16, 32, 3)),
                                   join([near_camera, far_camera]), spp=2, light_resolution=32,
                                   chunk=1)
    assert views.images[1, 16, 16, 3] == 1 and views.images[1, 10, 16, 3] == 0, "far view"
    image = views.images[0]
    a, b = lookup_brdf_lut(brdf_lut(), torch.ones(1), torch.full((1,), 0.6))
    specular = (0.04 * a + b).item()  # white furnace: diffuse kd + split-sum specular
    assert image[16, 16, 3].item() == pytest.approx(1.0, abs=1e-6)
    assert image[0, 0].tolist() == [0.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(image[10, 16, :3], torch.tensor(north) + specular, atol=0.01,
                               rtol=0)
    torch.testing.assert_close(image[22, 16, :3], torch.tensor(south) + specular, atol=0.01,
                               rtol=0)
    edge = (image[..., 3] > 0.05) & (image[..., 3] < 0.95)
    assert edge.any()
    assert (image[edge][:, :3] > 0.09).all(), "edge colour is straight, not darkened by alpha"


# ---------------------------------------------------------------- splits and sampling


def toy_views(count):
    images = torch.arange(float(count))[:, None, None, None].expand(count, 4, 4, 4)
    return Views(orbit_cameras(count, 4.0, 4), images.contiguous())


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


def test_sampler_is_deterministic_and_covers_each_epoch():
    views = toy_views(6)
    first = [ViewSampler(views, 3, seed=1).next_indices() for _ in range(2)]
    torch.testing.assert_close(first[0], first[1])
    sampler = ViewSampler(views, 3, seed=1)
    epochs = torch.stack([torch.cat([sampler.next_indices(), sampler.next_indices()])
                          for _ in range(4)])
    assert (epochs.sort(dim=1).values == torch.arange(6)).all(), "each epoch sees every view"
    assert len({tuple(e.tolist()) for e in epochs}) > 1, "epochs are reshuffled"
    other = ViewSampler(views, 3, seed=2)
    assert not torch.equal(torch.cat([other.next_indices() for _ in range(8)]), epochs.flatten())
    cameras, images = next(ViewSampler(views, 4, seed=1))
    assert len(cameras) == 4 and images.shape == (4, 4, 4, 4)


def test_sampler_state_round_trip_resumes_the_same_batches():
    views = toy_views(5)
    sampler = ViewSampler(views, 2, seed=9)
    for _ in range(3):  # stop mid-epoch
        sampler.next_indices()
    buffer = io.BytesIO()
    torch.save(sampler.state_dict(), buffer)
    expected = [sampler.next_indices() for _ in range(7)]
    resumed = ViewSampler(views, 2, seed=0)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer))
    assert [r.tolist() for r in (resumed.next_indices() for _ in range(7))] == [
        e.tolist() for e in expected]
    with pytest.raises(UserError, match="made for 5 views but this dataset has 6"):
        ViewSampler(toy_views(6), 2).load_state_dict(sampler.state_dict())
