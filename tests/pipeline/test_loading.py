"""Capture folders loaded as views: NeRF folders, decoding, resizing, errors."""

import json
import logging
import math

import numpy as np
import pytest
import torch
from view_helpers import HEIGHT, WIDTH, camera_matrices, linear_of_codes, random_codes

from diffrec.camera import capture_cameras
from diffrec.errors import UserError
from diffrec.io import write_image
from diffrec.pipeline.loading import load_dataset
from diffrec.protocol.captures import read_nerf


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


# ---------------------------------------------------------------- NeRF folders


def test_png_folder_round_trip_decodes_srgb_and_matches_nerf_cameras(tmp_path):
    codes = random_codes(3)
    codes[0, 0, 0] = torch.tensor([128, 128, 128, 255])
    write_folder(tmp_path, linear_of_codes(codes))
    views = load_dataset(tmp_path)

    torch.testing.assert_close(views.images, linear_of_codes(codes), atol=1e-6, rtol=0)
    assert abs(views.images[0, 0, 0, 0].item() - 0.2158605) < 1e-5, "sRGB 128 decodes to 0.216"
    expected = capture_cameras(read_nerf(tmp_path / "transforms_train.json"), WIDTH, HEIGHT)
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


def test_images_without_alpha_get_alpha_one_and_a_warning_without_auto_masks(tmp_path, caplog):
    codes = random_codes(2, channels=3)
    write_folder(tmp_path, linear_of_codes(codes))
    with caplog.at_level(logging.WARNING):
        views = load_dataset(tmp_path, auto_masks=False)
    assert (views.images[..., 3] == 1).all()
    torch.testing.assert_close(views.images[..., :3], linear_of_codes(codes), atol=1e-6, rtol=0)
    assert "no alpha channel" in caplog.text and "r_0.png" in caplog.text


def test_resizing_keeps_a_constant_colour_and_scales_the_intrinsics(tmp_path):
    image = torch.zeros(HEIGHT, WIDTH, 4)
    image[..., :3] = torch.tensor([0.3, 0.6, 0.1])
    image[4:12, 5:17, 3] = 1.0
    image[3, 5:17, 3] = 0.5  # a soft edge
    image[image[..., 3] == 0, :3] = 1.0  # uncovered pixels carry another colour
    write_folder(tmp_path, image[None].expand(2, -1, -1, -1).numpy(), suffix=".exr")
    full = capture_cameras(read_nerf(tmp_path / "transforms_train.json"), WIDTH, HEIGHT)

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


# ---------------------------------------------------------------- masks and shapes


def with_masks(root, transforms, masks: dict, split="train"):
    """Masks ``{frame index: [H, W] values 0..1}`` written as 8-bit PNGs ``masks/r_i.png``
    and named by those frames' mask_path."""
    for index, mask in masks.items():
        write_image(root / "masks" / f"r_{index}.png", mask, data=True)
        transforms["frames"][index]["mask_path"] = f"masks/r_{index}.png"
    (root / f"transforms_{split}.json").write_text(json.dumps(transforms))


def test_photos_stored_rotated_are_refused_and_downscales_read(tmp_path):
    """w x h swapped against the pixels (a phone's photo stored rotated, with an EXIF
    orientation tag): fx and fy were scaled apart; a uniform downscale of w x h is read."""
    write_folder(tmp_path, linear_of_codes(random_codes(2)), transforms={"w": HEIGHT, "h": WIDTH})
    message = folder_error(tmp_path)
    assert message.startswith(f"{tmp_path / 'transforms_train.json'}: train/r_0.png: the image is "
                              f"{WIDTH}x{HEIGHT} pixels but its camera is stated for "
                              f"{HEIGHT}x{WIDTH} (w x h), another shape"), message
    assert "EXIF orientation tag, which diffrec does not apply: save the photos upright" in message
    write_folder(tmp_path, linear_of_codes(random_codes(2)),
                 transforms={"w": 3 * WIDTH + 1, "h": 3 * HEIGHT, "fl_x": 30.0})
    views = load_dataset(tmp_path)
    assert views.cameras.fx[0].item() == pytest.approx(30.0 * WIDTH / (3 * WIDTH + 1))
    assert views.cameras.fy[0].item() == pytest.approx(10.0)


def test_masks_for_some_photos_only_are_refused(tmp_path):
    """The photos without one were taken as all object (held-out 7 dB instead of 20); photos
    with alpha of their own need no mask."""
    transforms = write_folder(tmp_path, linear_of_codes(random_codes(4, channels=3)))
    with_masks(tmp_path, transforms, {1: np.ones((HEIGHT, WIDTH))})
    assert folder_error(tmp_path) == (
        f"{tmp_path / 'transforms_train.json'}: 3 of 4 photos have no mask (and no alpha) "
        "though the others have one (r_0.png, r_2.png, r_3.png): give a mask for every "
        "photo, or for none (masks are then made)")

    codes = random_codes(2)
    transforms = write_folder(tmp_path, linear_of_codes(codes))
    with_masks(tmp_path, transforms, {1: np.zeros((HEIGHT, WIDTH))})
    views = load_dataset(tmp_path)
    torch.testing.assert_close(views.images[0, ..., 3], codes[0, ..., 3] / 255)
    assert (views.images[1, ..., 3] == 0).all()


def test_masks_of_zero_and_one_are_refused(tmp_path):
    """An 8-bit mask saved 0 / 1 instead of 0 / 255 was read as alpha 0.004."""
    transforms = write_folder(tmp_path, linear_of_codes(random_codes(2, channels=3)))
    binary = np.zeros((HEIGHT, WIDTH))
    binary[4:12, 6:18] = 1 / 255  # written as the code 1
    with_masks(tmp_path, transforms, {0: binary, 1: binary})
    assert folder_error(tmp_path) == (
        f"mask {tmp_path / 'masks/r_0.png'} holds only the values 0 and 1: masks are 0 for "
        "background to 255 for the object (white), so save it with 255 where it holds 1")
    with_masks(tmp_path, transforms, {0: binary * 255, 1: binary * 255})
    assert load_dataset(tmp_path).images[..., 3].sum() == 2 * 8 * 12


def test_made_masks_of_photos_since_cropped_are_named_as_made_by_an_earlier_run(tmp_path):
    write_folder(tmp_path, linear_of_codes(random_codes(2, channels=3)))
    for index in range(2):
        write_image(tmp_path / "masks_auto" / "train" / f"r_{index}.png",
                    np.ones((HEIGHT, HEIGHT)), data=True)
    assert folder_error(tmp_path) == (
        f"mask {tmp_path / 'masks_auto/train/r_0.png'} is {HEIGHT}x{HEIGHT} but its image is "
        f"{WIDTH}x{HEIGHT}: it was made by an earlier run, for the photos as they were then: "
        f"delete {tmp_path / 'masks_auto'} to have masks made again")
