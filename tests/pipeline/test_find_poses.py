"""Poses found for photos that have none (pycolmap's SIFT, matching and mapping): every view of
a ray-cast textured box in a textured room registered, the recovered cameras (read back by the
COLMAP reader) the true ones up to a similarity, photos COLMAP's thresholds leave out posed
by lowered ones, blank photos refused naming the counts, and existing cameras never
replaced."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from diffrec import cli
from diffrec.errors import UserError
from diffrec.io import write_image
from diffrec.protocol.captures import CaptureError
from diffrec_bench import textured_room

pytest.importorskip("pycolmap")

from diffrec.pipeline import find_poses as find_poses_module
from diffrec.pipeline.captures import read_any_capture
from diffrec.pipeline.colmap_capture import read_colmap
from diffrec.pipeline.find_poses import find_poses

VIEWS, SIZE = 16, 256
FEATURES = 2048


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A folder with only ``images/`` (JPEG), the true cameras, and the found poses."""
    folder = tmp_path_factory.mktemp("photos")
    cameras = textured_room.ring_cameras(VIEWS, SIZE)
    textured_room.write_photos(folder, textured_room.photos(cameras))
    found = find_poses(folder, max_image_size=SIZE, max_features=FEATURES, matching_threads=1)
    return folder, cameras, found


def test_every_photo_gets_the_pose_it_was_taken_from(capture):
    folder, cameras, found = capture
    assert (found.registered, found.photos, found.unregistered) == (VIEWS, VIEWS, ())
    assert found.model == folder / "sparse" / "0"
    assert sorted(p.name for p in folder.iterdir()) == ["images", "sparse"]  # no database left

    _assert_true_cameras(folder, cameras)


def test_the_same_photos_give_the_same_poses(capture, tmp_path):
    """Every random step (the pairs' RANSAC, the mapper's) is seeded: a second run on a copy
    of the photos finds the same cameras, up to the world frame COLMAP picks (with the
    RANSAC unseeded, two runs differed by 1.5e-5 of the orbit, or in the points found). The
    photos are numbered in name order, not in the order the extractor's threads finish them (8
    runs in 10 numbered them otherwise, and once in CI the second run found other points).
    Both runs match on one thread: on every core, 2 runs in 40 found other points."""
    import pycolmap

    folder, _, found = capture
    images = pycolmap.Reconstruction(str(found.model)).images
    names = [images[image_id].name for image_id in sorted(images)]
    assert names == sorted(names)
    shutil.copytree(folder / "images", tmp_path / "images")
    again = find_poses(tmp_path, max_image_size=SIZE, max_features=FEATURES,
                       matching_threads=1)
    assert (again.registered, again.points) == (found.registered, found.points)
    first, second = (np.stack([frame.camera_to_world for frame in read_colmap(path).frames])
                     for path in (folder, tmp_path))
    distances, angles = textured_room.alignment_errors(second, first)  # in any world frame
    # threads still sum in their own order: seeded, 6e-7 of the orbit at most in the runs tried
    assert distances.max() < 5e-6 * np.linalg.norm(first[:, :3, 3], axis=1).mean(), distances
    assert angles.max() < 1e-3, angles


def test_images_in_a_subfolder_of_images_are_not_posed(capture, tmp_path):
    """Only the photos of ``images/`` itself are posed: a subfolder (thumbnails, say) is not
    walked, so no photo is posed twice under another name (COLMAP's extractor walked it)."""
    import pycolmap

    folder, _, _ = capture
    shutil.copytree(folder / "images", tmp_path / "images")
    first = sorted((tmp_path / "images").iterdir())[0]
    (tmp_path / "images" / "thumbs").mkdir()
    shutil.copy(first, tmp_path / "images" / "thumbs" / first.name)
    found = find_poses(tmp_path, max_image_size=SIZE, max_features=FEATURES,
                       matching_threads=1)
    names = [image.name for image in pycolmap.Reconstruction(str(found.model)).images.values()]
    assert (found.photos, len(names)) == (VIEWS, found.registered)
    assert not any("/" in name for name in names), names


def test_photos_colmaps_thresholds_leave_out_are_posed(capture, tmp_path, monkeypatch):
    """At 512 features a photo COLMAP's own thresholds for registering a photo pose 9 of the
    16 photos (in every run tried); the lowered ones pose all of them as exactly as the first
    test asks."""
    folder, cameras, _ = capture
    for thresholds in ("colmap", "ours"):
        shutil.copytree(folder / "images", tmp_path / thresholds / "images")
    with monkeypatch.context() as patched:
        patched.setattr(find_poses_module, "REGISTRATION", {})
        try:  # fewer than half posed is refused: fewer still
            colmaps = find_poses(tmp_path / "colmap", max_image_size=SIZE,
                                 max_features=512).registered
        except UserError:
            colmaps = 0
    assert colmaps < VIEWS - 2
    found = find_poses(tmp_path / "ours", max_image_size=SIZE, max_features=512)
    assert (found.registered, found.unregistered) == (VIEWS, ())
    _assert_true_cameras(tmp_path / "ours", cameras)


def _assert_true_cameras(folder, cameras):
    """The cameras ``folder``'s model holds (every photo's, read as any COLMAP capture) are
    ``cameras`` up to a similarity: centres within 2 % of the orbit, axes within a degree,
    the focal length within 1 %."""
    frames = read_colmap(folder).frames
    order = [int(frame.image.stem.split("_")[1]) for frame in frames]
    assert sorted(order) == list(range(VIEWS))
    recovered = np.stack([frame.camera_to_world for frame in frames])
    distances, angles = textured_room.alignment_errors(
        recovered, cameras.camera_to_world.double().numpy()[order])
    assert distances.max() < 0.02 * textured_room.ORBIT_RADIUS, distances
    assert angles.max() < 1.0, angles  # the axes too: the reader's OpenGL camera is right
    focal = frames[0].pinhole.fl_x
    assert focal == pytest.approx(float(cameras.fx[0]), rel=0.01)


def test_a_folder_with_cameras_is_left_alone(capture):
    folder, _, _ = capture
    before = {p: p.stat().st_mtime_ns for p in (folder / "sparse" / "0").iterdir()}
    with pytest.raises(UserError, match=r"already has cameras .*never replaces them"):
        find_poses(folder)
    assert {p: p.stat().st_mtime_ns for p in (folder / "sparse" / "0").iterdir()} == before


def test_blank_photos_are_refused_with_the_counts(tmp_path, capfd):
    """The sentence alone: COLMAP's own error lines ("Failed to create any sparse model")
    come only with -v (read at the file descriptor, where COLMAP's C++ log writes)."""
    (tmp_path / "images").mkdir()
    rng = np.random.default_rng(1)
    for i in range(6):  # nearly plain grey, as a wall or a sky: nothing to match
        write_image(tmp_path / "images" / f"blank_{i}.png",
                    np.full((96, 96, 3), 0.4 + 0.002 * rng.random((96, 96, 3))))
    assert cli.main(["poses", str(tmp_path), "--max-image-size", "96"]) == 2
    message = capfd.readouterr().err.strip()
    assert message.startswith("diffrec: error: COLMAP found poses for 0 of 6 photos")
    assert "overlap" in message and message.count(". ") == 0 and "\n" not in message
    assert not (tmp_path / "sparse").exists()


def test_photos_of_another_size_are_named(tmp_path):
    rng = np.random.default_rng(2)
    for name, size in (("a", 64), ("b", 64), ("c", 64), ("odd", 80)):
        write_image(tmp_path / "images" / f"{name}.png", rng.random((size, size, 3)))
    with pytest.raises(UserError, match=r"could not use 1 of 4 photos .*\(odd.png\): give "
                                        "photos of one size"):
        find_poses(tmp_path, max_image_size=80)
    assert not (tmp_path / "sparse").exists()


def test_a_count_of_matching_threads_that_is_none_is_refused(tmp_path):
    for threads in ("0", "-2"):
        assert cli.main(["poses", str(tmp_path), "--matching-threads", threads]) == 2
    with pytest.raises(UserError, match=r"matching_threads 0: give -1 \(every core\) or a "
                                        "count of threads, 1 or more"):
        find_poses(tmp_path, matching_threads=0)


def test_photos_outside_images_are_pointed_to_it(tmp_path):
    write_image(tmp_path / "a.jpg", np.zeros((8, 8, 3)))
    with pytest.raises(UserError, match=r"no images/ folder \(it holds 1 photos itself\)"):
        find_poses(tmp_path)


def test_a_folder_of_photos_alone_points_to_the_pose_finder(tmp_path):
    write_image(tmp_path / "images" / "a.jpg", np.zeros((8, 8, 3)))
    with pytest.raises(CaptureError, match="for photos without cameras, find them first with "
                                           f"diffrec poses {tmp_path}$"):
        read_any_capture(tmp_path)


def test_the_command_line_finds_poses_and_names_the_next_step(capture, tmp_path, capsys):
    folder, _, _ = capture
    copy = tmp_path / "copy"
    (copy / "images").mkdir(parents=True)
    for photo in sorted((folder / "images").iterdir())[:8]:
        (copy / "images" / photo.name).write_bytes(photo.read_bytes())
    assert cli.main(["poses", str(copy), "--max-image-size", str(SIZE),
                     "--max-features", "1024", "--matcher", "sequential"]) == 0
    out = capsys.readouterr().out
    assert "poses for 8 of 8 photos" in out
    assert f"next: diffrec optimize --mode reconstruct --dataset {copy}" in out
    assert read_colmap(copy).frames
    assert Path(copy / "sparse" / "0" / "images.bin").is_file()


def test_a_second_model_is_said_to_be_one_in_the_log(tmp_path, caplog):
    """Where COLMAP starts another model, its first pair is logged as that model's, not as
    the count of photos registered falling back to 2 (a stand-in mapper calls the callbacks
    as COLMAP does: a pair, one photo more, then a second model's pair)."""
    from types import SimpleNamespace

    def mapping(database, images, scratch, options, initial_image_pair_callback,
                next_image_callback):
        initial_image_pair_callback()
        next_image_callback()
        initial_image_pair_callback()
        return {0: SimpleNamespace(num_reg_images=lambda: 3)}

    stand_in = SimpleNamespace(
        IncrementalPipelineOptions=lambda: SimpleNamespace(
            mapper=SimpleNamespace(), triangulation=SimpleNamespace()),
        incremental_mapping=mapping)
    with caplog.at_level("INFO", logger="diffrec"):
        find_poses_module._map(stand_in, tmp_path / "db", tmp_path, tmp_path / "scratch", 4, 0)
    lines = [record.getMessage() for record in caplog.records if "registered" in record.message]
    assert lines == ["poses: 2 of 4 photos registered (the first pair)",
                     "poses: 3 of 4 photos registered",
                     "poses: model 2, of photos the last one left out: 2 of 4 photos "
                     "registered in it (its first pair)"], lines
