"""Capture tools' ``transforms.json`` (nerfstudio, instant-ngp) read by the one capture
reader: shared and per-frame intrinsics, lenses, masks, splits, the keys noted and left as
they are, and one sentence for each thing refused."""

import json

import numpy as np
import pytest

from diffrec.protocol.captures import CaptureError, detect_layout, read_capture, read_nerf

TARGET = np.array([0.4, -0.3, 0.2])  # where the cameras look
SHARED = {"fl_x": 150.0, "fl_y": 140.0, "cx": 83.0, "cy": 57.5, "w": 160, "h": 120}
OPENCV = {"camera_model": "OPENCV", "k1": -0.28, "k2": 0.09, "p1": 0.001, "p2": -0.0015}


def looking_at(eye: np.ndarray, target: np.ndarray = TARGET) -> np.ndarray:
    """Camera-to-world ``[4, 4]`` of an OpenGL camera at ``eye`` looking at ``target``, world
    +Z up."""
    back = (eye - target) / np.linalg.norm(eye - target)
    right = np.cross([0.0, 0.0, 1.0], back)
    right /= np.linalg.norm(right)
    matrix = np.eye(4)
    matrix[:3, :3] = np.stack([right, np.cross(back, right), back], -1)
    matrix[:3, 3] = eye
    return matrix


def ring(count: int) -> np.ndarray:
    angles = np.arange(count) * 2 * np.pi / count
    eyes = TARGET + np.stack([3 * np.cos(angles), 3 * np.sin(angles),
                              np.where(np.arange(count) % 2, -0.5, 0.8)], -1)
    return np.stack([looking_at(eye) for eye in eyes])


def write_capture(folder, count=4, top=None, per_frame=None, masks=False):
    """``images/frame_0000N.jpg`` (their content is not read here) and ``transforms.json``
    with ``top`` keys (default: ``SHARED`` intrinsics) and ``per_frame(i)`` keys."""
    frames = []
    for index, matrix in enumerate(ring(count)):
        name = f"images/frame_{index:05d}.jpg"
        (folder / "images").mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"not decoded here")
        frame = {"file_path": name, "transform_matrix": matrix.tolist()}
        if masks:
            (folder / "masks").mkdir(exist_ok=True)
            (folder / f"masks/frame_{index:05d}.png").write_bytes(b"mask")
            frame["mask_path"] = f"masks/frame_{index:05d}.png"
        frame.update(per_frame(index) if per_frame else {})
        frames.append(frame)
    content = {**(SHARED if top is None else top), "frames": frames}
    (folder / "transforms.json").write_text(json.dumps(content))
    return content


def test_shared_pinhole_intrinsics_and_world_units(tmp_path):
    """One split, every frame; intrinsics as stated; the cameras moved by the offset that
    puts their focus at the origin, nothing else (rotations, distances kept)."""
    write_capture(tmp_path, 5)
    assert detect_layout(tmp_path) == "nerfstudio"
    capture = read_capture(tmp_path)
    assert capture.layout == "nerfstudio" and len(capture.frames) == 5
    np.testing.assert_allclose(capture.offset, -TARGET, atol=1e-9)
    np.testing.assert_allclose(capture.camera_to_world()[:, :3, 3] - capture.offset,
                               ring(5)[:, :3, 3], atol=1e-12)
    np.testing.assert_allclose(capture.camera_to_world()[:, :3, :3], ring(5)[:, :3, :3])
    np.testing.assert_allclose(capture.intrinsics(160, 120), [[150.0, 140.0, 83.0, 57.5]] * 5)
    np.testing.assert_allclose(capture.intrinsics(80, 60)[0], [75.0, 70.0, 41.5, 28.75])
    assert capture.names()[0] == "images/frame_00000"
    assert any("moved by" in note for note in capture.notes)


def test_per_frame_intrinsics_and_camera_angle_x(tmp_path):
    write_capture(tmp_path, 3, top={"w": 160, "h": 120},
                  per_frame=lambda i: {"fl_x": 100.0 + 10 * i, "cx": 80.0 + i, "cy": 60.0})
    capture = read_capture(tmp_path)
    np.testing.assert_allclose(capture.intrinsics(160, 120),
                               [[100, 100, 80, 60], [110, 110, 81, 60], [120, 120, 82, 60]])
    write_capture(tmp_path, 2, top={"camera_angle_x": 2 * np.arctan(0.5)})
    assert read_capture(tmp_path).intrinsics(160, 120)[0, 0] == pytest.approx(160.0)


def test_an_opencv_lens_gives_the_undistorted_pinhole_camera(tmp_path):
    """The frame keeps its lens; its pinhole is the lens's (zoom 1 for this barrel lens), and
    the reader refuses the capture to a caller that does not undistort (the add-on's Dataset
    targets call read_capture, its File > Import read_nerf)."""
    write_capture(tmp_path, 3, top={**SHARED, **OPENCV})
    for read in (lambda: read_capture(tmp_path), lambda: read_nerf(tmp_path / "transforms.json")):
        with pytest.raises(CaptureError, match=r"3 of 3 cameras have lens distortion \(opencv"):
            read()
    capture = read_capture(tmp_path, undistorts=True)
    lens = capture.frames[0].lens
    assert lens.model == "opencv" and lens.coefficients == (-0.28, 0.09, 0.001, -0.0015, 0.0)
    assert lens.intrinsics == (150.0, 140.0, 83.0, 57.5) and lens.size == (160, 120)
    np.testing.assert_allclose(capture.intrinsics(160, 120)[0], lens.pinhole())
    photo = np.random.default_rng(0).random((120, 160, 4)).astype(np.float32)
    np.testing.assert_array_equal(capture.frames[0].undistort(photo), lens.undistort(photo))


def test_per_frame_lenses_fisheye_and_instant_ngps_is_fisheye(tmp_path):
    write_capture(tmp_path, 2, top={**SHARED, "is_fisheye": True},
                  per_frame=lambda i: {"k1": 0.05 * (i + 1), "k2": -0.01})
    frames = read_capture(tmp_path, undistorts=True).frames
    assert [frame.lens.model for frame in frames] == ["fisheye", "fisheye"]
    assert [frame.lens.coefficients for frame in frames] == [(0.05, -0.01, 0.0, 0.0),
                                                             (0.1, -0.01, 0.0, 0.0)]
    write_capture(tmp_path, 2, top={**SHARED, "camera_model": "OPENCV_FISHEYE", "k1": 0.0})
    assert read_capture(tmp_path).frames[0].lens is None, "zero coefficients: a pinhole"


def test_masks_and_noted_keys(tmp_path):
    """mask_path per frame; instant-ngp's scale / offset / aabb_scale and nerfstudio's
    applied_transform and depth_file_path noted and not applied: instant-ngp's loader would
    put camera 0 at cycle(p * 0.33 + 0.5), here it stays at p (plus the recentring)."""
    applied = [[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0]]
    top = {**SHARED, "scale": 0.33, "offset": [0.5, 0.5, 0.5], "aabb_scale": 16,
           "applied_transform": applied}
    write_capture(tmp_path, 3, top=top, masks=True,
                  per_frame=lambda i: {"depth_file_path": f"depths/{i}.png"})
    capture = read_capture(tmp_path)
    assert [frame.mask.name for frame in capture.frames] == [
        "frame_00000.png", "frame_00001.png", "frame_00002.png"]
    file_position = ring(3)[0, :3, 3]
    ngp_position = np.roll(file_position * 0.33 + 0.5, -1)
    read_position = capture.frames[0].camera_to_world[:3, 3] - capture.offset
    np.testing.assert_allclose(read_position, file_position, atol=1e-12)
    assert not np.allclose(read_position, ngp_position)
    notes = " ".join(capture.notes)
    for phrase in ("applied_transform", "scale 0.33 and offset [0.5, 0.5, 0.5] are not applied",
                   "aabb_scale 16", "depth_file_path (3 frames) is not used"):
        assert phrase in notes


def test_nerfstudios_split_lists(tmp_path):
    write_capture(tmp_path, 4, top={**SHARED,
                                    "train_filenames": ["images/frame_00000.jpg",
                                                        "images/frame_00002.jpg",
                                                        "./images/frame_00003.jpg"],
                                    "val_filenames": ["images/frame_00001.jpg"]})
    train, test = read_capture(tmp_path, "train"), read_capture(tmp_path, "test")
    assert train.names() == ["images/frame_00000", "images/frame_00002", "images/frame_00003"]
    assert test.names() == ["images/frame_00001"]
    np.testing.assert_allclose(train.offset, test.offset, err_msg="one recentring for both")

    write_capture(tmp_path, 2)
    with pytest.raises(CaptureError, match=r"lists no splits .* one split, 'train', not 'test'"):
        read_capture(tmp_path, "test")


def test_transforms_train_json_still_wins(tmp_path):
    write_capture(tmp_path, 2)
    (tmp_path / "transforms_train.json").write_text(json.dumps(
        {"camera_angle_x": 0.7, "frames": [{"file_path": "images/frame_00000.jpg",
                                            "transform_matrix": np.eye(4).tolist()}]}))
    assert detect_layout(tmp_path) == "nerf"
    capture = read_capture(tmp_path)
    assert capture.layout == "nerf" and len(capture.frames) == 1
    np.testing.assert_array_equal(capture.offset, np.zeros(3))


REFUSALS = {
    "unknown camera model": (lambda c: c.update(camera_model="EQUIRECTANGULAR"),
                             r"frame 0 \(images/frame_00000.jpg\): camera_model "
                             r"'EQUIRECTANGULAR' is not read: diffrec reads PINHOLE, OPENCV, "
                             r"OPENCV_FISHEYE"),
    "instant-ngp's f-theta lens": (lambda c: c.update(ftheta_p0=1.0),
                                   r"'ftheta_p0' states a lens diffrec does not read"),
    "intrinsics missing": (lambda c: c.pop("fl_x"),
                           r"frame 0 .*neither fl_x nor camera_angle_x is given"),
    "a non-finite matrix": (lambda c: c["frames"][1]["transform_matrix"][0].__setitem__(
        3, float("nan")), r"frame 1 \(images/frame_00001.jpg\): transform_matrix holds NaN"),
    "an image missing": (lambda c: c["frames"][2].update(file_path="images/gone.jpg"),
                         r"1 of 3 images named in transforms.json are missing \(images/gone"),
    "a mask missing": (lambda c: c["frames"][0].update(mask_path="masks/gone.png"),
                       r"1 of 3 masks named in transforms.json \(mask_path\) are missing "
                       r"\(masks/gone.png\)"),
    "a mask outside the folder": (lambda c: c["frames"][0].update(mask_path="../x.png"),
                                  r"frame 0 .*'../x.png' leads outside"),
    "mixed image sizes": (lambda c: c["frames"][1].update(w=120, h=160),
                          r"the frames state images of different sizes \(160x120 \(frame 0, "
                          r"images/frame_00000.jpg\); 120x160 \(frame 1"),
    "a pinhole with coefficients": (lambda c: c.update(camera_model="PINHOLE", k1=0.1),
                                    r"camera_model PINHOLE has no lens distortion, but k1 = "
                                    r"0.1 is given"),
    "k4 on an OPENCV lens": (lambda c: c.update(OPENCV, k4=0.01),
                             r"OPENCV takes k1, k2, p1, p2, k3, not k4"),
    "p1 on a fisheye": (lambda c: c.update(camera_model="OPENCV_FISHEYE", k1=0.1, p1=0.01),
                        r"OPENCV_FISHEYE takes k1, k2, k3, k4, not p1"),
    "a coefficient not a number": (lambda c: c.update(OPENCV, k2="0.1"),
                                   r"k2 must be a finite number, got '0.1'"),
    "distortion without the image size": (lambda c: (c.update(OPENCV), c.pop("w")),
                                          r"w and h \(the image size the intrinsics are given "
                                          r"at\) are needed with lens distortion"),
    "a lens too strong": (lambda c: c.update(OPENCV, k1=-40.0),
                          r"frame 0 .*leaves part of the image without data or folds it back"),
    "applied_transform malformed": (lambda c: c.update(applied_transform=[[1, 0, 0]]),
                                    r"transforms.json: applied_transform must be a 3x4 list"),
    "a split naming no frame": (lambda c: c.update(train_filenames=["images/other.jpg"]),
                                r"train_filenames names 1 files that no frame has "
                                r"\(images/other\)"),
    "a coefficient in capitals": (lambda c: c.update(camera_model="OPENCV", K1=-0.15),
                                  r"transforms.json: the key 'K1' is not read: it is spelt "
                                  r"'k1' \(keys are case-sensitive\)"),
    "a frame's intrinsic in capitals": (lambda c: c["frames"][1].update(FL_X=120.0),
                                        r"frame 1 \(images/frame_00001.jpg\): the key 'FL_X' "
                                        r"is not read: it is spelt 'fl_x'"),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_each_refusal_is_one_sentence_naming_the_element(tmp_path, name):
    change, message = REFUSALS[name]
    content = write_capture(tmp_path, 3, masks=True)
    change(content)
    (tmp_path / "transforms.json").write_text(json.dumps(content))
    with pytest.raises(CaptureError, match=message) as caught:
        read_capture(tmp_path, undistorts=True)
    assert "\n" not in str(caught.value)


def test_a_masks_folder_beside_the_file_is_read_and_mask_path_wins(tmp_path):
    """Without mask_path, each frame's mask is its image's in masks/ (by stem; else the
    masks in sorted order paired with the images in sorted order, whatever the frames'
    order); a frame's mask_path wins."""
    content = write_capture(tmp_path, 3)
    (tmp_path / "masks").mkdir()
    for index in range(3):
        (tmp_path / f"masks/frame_{index:05d}.png").write_bytes(b"mask")
    assert [frame.mask.name for frame in read_capture(tmp_path).frames] == [
        "frame_00000.png", "frame_00001.png", "frame_00002.png"]

    (tmp_path / "other.png").write_bytes(b"mask")
    content["frames"][1]["mask_path"] = "other.png"
    content["frames"] = content["frames"][::-1]  # frames 2, 1, 0
    (tmp_path / "transforms.json").write_text(json.dumps(content))
    for index, name in enumerate("cab"):  # sorted: a, b, c for frames 0, 1, 2
        (tmp_path / f"masks/frame_{index:05d}.png").rename(tmp_path / f"masks/{name}.png")
    masks = [frame.mask.relative_to(tmp_path).as_posix() for frame in read_capture(tmp_path).frames]
    assert masks == ["masks/c.png", "other.png", "masks/a.png"]


def test_photos_of_another_shape_than_stated_are_refused_downscales_read(tmp_path):
    """Photos stored rotated (an EXIF orientation tag) would stretch the intrinsics: the
    first image is named; a downscale, rounded to whole pixels, is read."""
    write_capture(tmp_path, 2)
    capture = read_capture(tmp_path)
    with pytest.raises(CaptureError, match=r"^images/frame_00000.jpg: the image is 120x160 "
                       r"pixels but its camera is stated for 160x120 \(w x h\), another shape: "
                       r"most likely the photo is stored rotated with an EXIF orientation tag"):
        capture.intrinsics(120, 160, stored=(120, 160))
    with pytest.raises(CaptureError, match="the image is 120x160 pixels"):
        capture.intrinsics(60, 80, stored=(120, 160))
    scale = np.tile([53 / 160, 40 / 120], 2)  # 160x120 / 3, rounded
    np.testing.assert_allclose(capture.intrinsics(53, 40, stored=(53, 40))[0],
                               [150, 140, 83, 57.5] * scale)


def test_an_absolute_file_path_is_refused_as_absolute(tmp_path):
    """One inside the folder does not lead outside it: the sentence says what is wrong."""
    content = write_capture(tmp_path, 2)
    content["frames"][0]["file_path"] = str(tmp_path / "images/frame_00000.jpg")
    (tmp_path / "transforms.json").write_text(json.dumps(content))
    with pytest.raises(CaptureError, match=r"frame 0 .*' is an absolute path \(written where "
                       r"the capture was made, most likely\): a file may only name files of "
                       r"its own folder by a path relative"):
        read_capture(tmp_path)
    for elsewhere in ("/home/someone/capture/images/frame_00000.jpg",
                      "C:\\capture\\images\\frame_00000.jpg"):
        content["frames"][0]["file_path"] = elsewhere
        (tmp_path / "transforms.json").write_text(json.dumps(content))
        with pytest.raises(CaptureError, match="is an absolute path"):
            read_capture(tmp_path)


def test_unknown_keys_in_other_cases_pass(tmp_path):
    """Only the names of read keys in another case are refused: capture tools add others."""
    write_capture(tmp_path, 2, top={**SHARED, "Orientation": 1, "colmap_im_id": 4, "K9": 0})
    assert len(read_capture(tmp_path).frames) == 2
