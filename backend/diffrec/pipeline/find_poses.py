"""Cameras for a folder of photos that has none, found by COLMAP's own pipeline through the
optional ``pycolmap`` package: SIFT features, matching, incremental mapping.

In: ``FOLDER/images/`` (JPEG or PNG, one size). Out: ``FOLDER/sparse/0/`` (binary model), so
that the folder is a COLMAP capture (``diffrec.pipeline.colmap_capture``) and reads like any
other (masks from ``masks/``, or made by ``diffrec.pipeline.auto_masks``). Nothing else is
written into the folder: COLMAP's database lives in a scratch folder, and an existing model or
camera file is never replaced.

One camera for all photos, ``SIMPLE_PINHOLE`` (one focal length, principal point at the image
centre, no lens distortion): the reader takes pinhole cameras only, and a phone's photos come
with its lens distortion already corrected. Photos matched all against all up to
``EXHAUSTIVE_LIMIT`` of them, else each against its neighbours in name order (a walk or a
turntable, named in the order taken). A photo is registered on fewer matches than COLMAP's
defaults ask (``REGISTRATION``), in every capture (measured on captures of 16 photos).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from diffrec.errors import UserError
from diffrec.pipeline.captures import capture_layout
from diffrec.pipeline.colmap_capture import INSTALL, MODEL_FOLDERS
from diffrec.protocol.captures import image_files

log = logging.getLogger(__name__)

EXHAUSTIVE_LIMIT = 150  # photos matched all against all up to this many
SEQUENTIAL_OVERLAP = 10  # else each photo against this many next ones (and 2^k further)
MIN_REGISTERED_SHARE = 0.5  # fewer registered photos than this share is a failure
MIN_PHOTOS = 3
# COLMAP's thresholds for registering a photo during mapping, lowered from its defaults (30
# matches that agree with the photo's pose, 25 % of its matches): on the photo benchmark's
# capture (16 photos of a ball in a ring), over 8 runs of extraction and matching the defaults
# posed 14 photos in 7 (the two beside a gap left out, the others within 0.094 units of their
# truth) and all 16 wrongly in 1 (11 off by more than 0.1 units), these posed all 16 within
# 0.019 units in all 8 (docs/BENCHMARKS.md, "Photos in, asset out, round two")
REGISTRATION = {"abs_pose_min_num_inliers": 15, "abs_pose_min_inlier_ratio": 0.15}
MATCHERS = ("auto", "exhaustive", "sequential")
_ADVICE = ("take photos that overlap more (a step of 10-20 degrees around the object), of a "
           "textured object and background (not plain or shiny), with fewer blurred ones")


@dataclass(frozen=True)
class FoundPoses:
    """What ``find_poses`` wrote: the model folder, how many photos it holds poses for of how
    many, the 3D points it triangulated and their mean reprojection error in pixels."""
    model: Path
    registered: int
    photos: int
    points: int
    reprojection_px: float
    unregistered: tuple[str, ...]


def find_poses(folder: str | Path, *, max_image_size: int = 1600, max_features: int = 8192,
               matcher: str = "auto", seed: int = 0,
               matching_threads: int = -1) -> FoundPoses:
    """Find the cameras of the photos in ``folder/images/`` and write them to
    ``folder/sparse/0/``. ``max_image_size``: photos are read at most this large (longer side,
    pixels) for features; ``max_features``: SIFT features per photo; ``matcher``: one of
    ``MATCHERS``; ``matching_threads``: COLMAP's matching threads (-1: every core). Every
    random step is seeded by ``seed``, but matching on several threads still verifies a pair
    differently now and then (2 runs in 40 on the test suite's 16 photos found other points);
    on one thread the same photos give the same cameras every run. Raises ``UserError`` where
    the folder already has cameras, where pycolmap is missing, where ``matching_threads`` is
    neither -1 nor a count, and where fewer than ``MIN_REGISTERED_SHARE`` of the photos are
    registered."""
    if matching_threads == 0 or matching_threads < -1:
        raise UserError(f"matching_threads {matching_threads}: give -1 (every core) or a "
                        "count of threads, 1 or more")
    folder = Path(folder)
    photos = _photos(folder)
    pycolmap = _pycolmap()
    # COLMAP's own log (every photo, every bundle adjustment, its errors: ours say them in a
    # sentence) only with diffrec -v; 3 is glog's FATAL
    pycolmap.logging.minloglevel = 0 if log.isEnabledFor(logging.DEBUG) else 3
    with tempfile.TemporaryDirectory(prefix="diffrec-poses-") as scratch:
        database = Path(scratch) / "database.db"
        _extract(pycolmap, database, folder / "images", photos, max_image_size, max_features)
        _match(pycolmap, database, len(photos), matcher, seed, matching_threads)
        reconstruction = _map(pycolmap, database, folder / "images", Path(scratch) / "sparse",
                              len(photos), seed)
        model = folder / "sparse" / "0"
        model.mkdir(parents=True, exist_ok=True)
        reconstruction.write_binary(str(model))
    registered = {image.name for image in reconstruction.images.values() if image.has_pose}
    names = [path.relative_to(folder / "images").as_posix() for path in photos]
    found = FoundPoses(model, len(registered), len(photos), reconstruction.num_points3D(),
                       float(reconstruction.compute_mean_reprojection_error()),
                       tuple(name for name in names if name not in registered))
    log.info("poses: %d of %d photos registered, %d points (mean reprojection error %.2f px); "
             "written to %s", found.registered, found.photos, found.points,
             found.reprojection_px, model)
    if found.unregistered:
        log.warning("poses: no pose for %s; those photos are left out",
                    ", ".join(found.unregistered))
    return found


def _photos(folder: Path) -> list[Path]:
    """The photos of ``folder/images/``; refuses a folder that already has cameras, a
    missing ``images/`` and too few photos."""
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder")
    layout = capture_layout(folder)
    if layout is not None or any((folder / name).is_dir() and any((folder / name).iterdir())
                                 for name in MODEL_FOLDERS[:2]):
        found = layout or "a sparse/ folder"
        raise UserError(f"{folder} already has cameras ({found}): diffrec never replaces them; "
                        "give it to diffrec optimize as it is, or move them away to find poses "
                        "again")
    if not (folder / "images").is_dir():
        loose = [path.name for path in image_files(folder)]
        where = f" (it holds {len(loose)} photos itself)" if loose else ""
        raise UserError(f"{folder} has no images/ folder{where}: put the photos in "
                        f"{folder / 'images'} and run again")
    photos = image_files(folder / "images")
    if len(photos) < MIN_PHOTOS:
        raise UserError(f"{folder / 'images'} holds {len(photos)} photos: finding poses needs "
                        f"at least {MIN_PHOTOS}, better 20 or more around the object")
    return photos


def _pycolmap():
    try:
        import pycolmap
    except ImportError:
        raise UserError(f"finding poses needs the pycolmap package: {INSTALL}") from None
    return pycolmap


def _extract(pycolmap, database: Path, images: Path, photos: list[Path], max_image_size: int,
             max_features: int) -> None:
    """SIFT features of every photo into ``database``; logs how many per photo."""
    log.info("poses: finding features in %d photos (longer side at most %d px, at most %d "
             "features each)", len(photos), max_image_size, max_features)
    options = pycolmap.FeatureExtractionOptions()
    options.max_image_size = max_image_size
    options.sift.max_num_features = max_features
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = "SIMPLE_PINHOLE"
    # ids in name order: the extractor numbers a new photo when its features are done, in
    # whichever order its threads finish, and matching and mapping follow the ids
    # the photos named, not every image below the folder (a subfolder of thumbnails)
    names = [path.relative_to(images).as_posix() for path in photos]
    pycolmap.Database.open(str(database)).close()
    pycolmap.import_images(database, images, camera_mode=pycolmap.CameraMode.SINGLE,
                           image_names=names, options=reader)
    pycolmap.extract_features(database, images, image_names=names,
                              camera_mode=pycolmap.CameraMode.SINGLE, reader_options=reader,
                              extraction_options=options, device=pycolmap.Device.auto)
    with pycolmap.Database.open(str(database)) as db:
        read = {image.name: db.num_keypoints_for_image(image.image_id)
                for image in db.read_all_images()}
    skipped = [path.name for path in photos if path.relative_to(images).as_posix() not in read]
    if skipped:  # COLMAP skips a photo it cannot decode, or of another size than the first
        raise UserError(f"COLMAP could not use {len(skipped)} of {len(photos)} photos in "
                        f"{images} ({', '.join(skipped[:5])}{', ...' if len(skipped) > 5 else ''})"
                        ": give photos of one size (one camera, one zoom) that open as images")
    counts = np.array(list(read.values()))
    log.info("poses: %d features per photo (least %d, most %d)",
             *(int(f(counts)) if len(counts) else 0 for f in (np.median, np.min, np.max)))


def _match(pycolmap, database: Path, count: int, matcher: str, seed: int,
           threads: int) -> None:
    """Matches between the photos' features on ``threads`` threads, verified by two-view
    geometry (its RANSAC seeded by ``seed``: unseeded, which pairs pass could change from
    run to run)."""
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = threads
    verification = pycolmap.TwoViewGeometryOptions()
    verification.ransac.random_seed = seed
    if matcher not in MATCHERS:
        raise UserError(f"matcher {matcher!r}: give one of {', '.join(MATCHERS)}")
    sequential = matcher == "sequential" or (matcher == "auto" and count > EXHAUSTIVE_LIMIT)
    if sequential:
        log.info("poses: matching each of %d photos with its %d next ones in name order",
                 count, SEQUENTIAL_OVERLAP)
        pairing = pycolmap.SequentialPairingOptions()
        pairing.overlap = SEQUENTIAL_OVERLAP
        pycolmap.match_sequential(database, matching_options=matching,
                                  pairing_options=pairing, verification_options=verification)
    else:
        log.info("poses: matching all %d pairs of %d photos", count * (count - 1) // 2, count)
        pycolmap.match_exhaustive(database, matching_options=matching,
                                  verification_options=verification)
    with pycolmap.Database.open(str(database)) as db:
        pairs = db.num_verified_image_pairs()
    log.info("poses: %d pairs of photos share enough features", pairs)


def _map(pycolmap, database: Path, images: Path, scratch: Path, count: int, seed: int):
    """The largest reconstruction incremental mapping finds; ``UserError`` (one sentence
    with the counts) below ``MIN_REGISTERED_SHARE`` of ``count`` photos."""
    scratch.mkdir()
    options = pycolmap.IncrementalPipelineOptions()
    options.min_model_size = MIN_PHOTOS
    options.random_seed = options.mapper.random_seed = seed
    options.triangulation.random_seed = seed
    for name, value in REGISTRATION.items():
        setattr(options.mapper, name, value)
    registered, models = 0, 0

    def started() -> None:  # COLMAP starts another model where the last one stopped growing
        nonlocal registered, models
        registered, models = 2, models + 1
        if models == 1:
            log.info("poses: 2 of %d photos registered (the first pair)", count)
        else:
            log.info("poses: model %d, of photos the last one left out: 2 of %d photos "
                     "registered in it (its first pair)", models, count)

    def next_image() -> None:
        nonlocal registered
        registered += 1
        which = "" if models == 1 else f" in model {models}"
        log.info("poses: %d of %d photos registered%s", registered, count, which)

    log.info("poses: mapping %d photos", count)
    reconstructions = pycolmap.incremental_mapping(
        database, images, scratch, options, initial_image_pair_callback=started,
        next_image_callback=next_image)
    best = max(reconstructions.values(), key=lambda r: r.num_reg_images(), default=None)
    found = 0 if best is None else best.num_reg_images()
    if found < max(MIN_PHOTOS, MIN_REGISTERED_SHARE * count):
        raise UserError(f"COLMAP found poses for {found} of {count} photos in {images}, too few "
                        f"to go on: {_ADVICE}")
    return best


__all__ = ["EXHAUSTIVE_LIMIT", "MATCHERS", "FoundPoses", "find_poses"]
