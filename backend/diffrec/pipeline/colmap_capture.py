"""COLMAP reconstructions as captures, read through the optional ``pycolmap`` package.

A COLMAP capture is a folder with the images and a sparse model (``detect_colmap``)::

    FOLDER/images/          the images, named as the model names them (subfolders allowed)
    FOLDER/images_N/        optional copies N times smaller (as for LLFF captures)
    FOLDER/masks/           optional, one per image (white = object): same stem, or COLMAP's
                            image.jpg.png, or the same sorted order
    FOLDER/sparse/0/        the model: cameras.bin|txt, images.bin|txt, optionally
                            points3D.bin|txt (and COLMAP 3.12's rigs / frames);
                            or FOLDER/sparse/, or FOLDER itself

``colmap image_undistorter`` writes exactly this (``images/`` + ``sparse/``).

Conventions, from COLMAP's documentation (doc/format.rst, "images.txt"; doc/tutorial.rst,
"Feature Detection and Extraction"; the header of src/colmap/sensor/models.h):

- An image's pose is ``cam_from_world``, the projection from world to camera coordinates:
  a Hamilton quaternion ``QW QX QY QZ`` and a translation ``TX TY TZ``; the camera centre is
  ``-R^T t``. The camera's axes are OpenCV's: x right, y down, z forward (the viewing
  direction). Blender's / OpenGL's camera has x right, y up and looks down -z, so the
  camera-to-world matrix here is ``[R^T | -R^T t]`` with its y and z columns negated.
- Image coordinates have their origin at the top-left corner of the image, and the centre
  of the top-left pixel is (0.5, 0.5): a centred principal point is (width / 2, height / 2).
  That is the wire's convention (docs/protocol.md, "Inputs"), so ``cx`` / ``cy`` are
  taken as they are (OpenCV's own calibrations, with pixel centres at integers, would need
  +0.5; COLMAP's need none).
- Camera parameters are pixels at the camera's ``WIDTH`` x ``HEIGHT``; images read from a
  downscaled ``images_N`` scale them (``Pinhole.at``).

Only pinhole cameras are read: ``PINHOLE``, ``SIMPLE_PINHOLE``, and ``SIMPLE_RADIAL`` /
``RADIAL`` / ``OPENCV`` whose distortion parameters are all zero. Anything else must be
undistorted first (``colmap image_undistorter``). The cameras are moved so that the point
nearest to all optical axes is the origin (``Capture.offset``), as for LLFF captures; near /
far depths come from the model's 3D points seen by each camera (their 0.1 and 99.9
percentiles, widened by ``LLFF_DEPTH_MARGIN``), else from the distance to that point.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np

from diffrec.errors import UserError, one_line
from diffrec.protocol.captures import (
    IMAGE_SUFFIXES,
    LLFF_DEPTH_MARGIN,
    Capture,
    CaptureError,
    Frame,
    Pinhole,
    choose_image_folder,
    find_masks,
    inside,
    nearest_point_to_lines,
    recentring_notes,
)

log = logging.getLogger(__name__)

INSTALL = "pip install 'diffrec[colmap]'"
MODEL_FOLDERS = ("sparse/0", "sparse", ".")  # where detect_colmap looks, in this order
PINHOLE_MODELS = ("PINHOLE", "SIMPLE_PINHOLE")
ZERO_DISTORTION_MODELS = ("SIMPLE_RADIAL", "RADIAL", "OPENCV")  # read when undistorted
_OPENCV_TO_OPENGL = np.diag([1.0, -1.0, -1.0])  # camera axes: flip y and z
_MODEL_FILES = ("rigs", "cameras", "frames", "images", "points3D")
_NAMED = 5  # how many offending images / cameras a message names
_DEPTH_PERCENTILES = (0.1, 99.9)
_NO_POINTS_RANGE = 10.0  # without 3D points: near / far = distance to the focus / x this


def detect_colmap(folder: str | Path) -> Path | None:
    """The COLMAP model folder of ``folder`` (``sparse/0``, ``sparse`` or the folder itself,
    holding ``cameras`` and ``images`` as .bin or .txt), or None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for name in MODEL_FOLDERS:
        model = folder / name
        if _model_suffix(model):
            return model
    return None


def _model_suffix(model: Path) -> str | None:
    """".bin" or ".txt" (binary first, as COLMAP prefers it), or None."""
    for suffix in (".bin", ".txt"):
        if all((model / f"{name}{suffix}").is_file() for name in ("cameras", "images")):
            return suffix
    return None


def read_colmap(folder: str | Path, *, longest_side: int | None = None,
                images: str | None = None) -> Capture:
    """The frames of a COLMAP capture (see the module docstring), sorted by image name.
    ``longest_side``: the size the images will be used at; the smallest ``images_N`` copy
    still at least that large is read (None: ``images``). ``images``: the image folder to
    read instead (relative to ``folder``). Raises ``UserError`` without pycolmap."""
    folder = Path(folder)
    model = detect_colmap(folder)
    if model is None:
        raise CaptureError(f"{folder} holds no COLMAP model: cameras and images (.bin or .txt) "
                           "in sparse/0/, sparse/ or the folder itself")
    reconstruction = read_model(model)
    posed = sorted((image for image in reconstruction.images.values() if image.has_pose),
                   key=lambda image: image.name)
    unposed = len(reconstruction.images) - len(posed)
    if not posed:
        raise CaptureError(f"the COLMAP model in {model} has no registered images (its "
                           f"images{_model_suffix(model)} lists none with a pose)")
    if unposed:
        log.warning("%d of %d images of the COLMAP model in %s have no pose; leaving them out",
                    unposed, len(reconstruction.images), model)
    cameras = {image.camera_id: reconstruction.cameras[image.camera_id] for image in posed}
    pinholes = _pinholes(cameras, posed, model)
    width, height = next(iter(pinholes.values())).w, next(iter(pinholes.values())).h
    root = _image_root(folder, model)
    image_folder = root / (images or choose_image_folder(
        root, longest_side, max(width, height), f"a COLMAP model in {model}"))
    files = _image_paths(image_folder, [image.name for image in posed], model)
    masks = find_masks(root / "masks", files)

    world_to_camera = np.stack([image.cam_from_world().matrix() for image in posed])
    rotation = world_to_camera[:, :, :3].transpose(0, 2, 1)  # camera-to-world, OpenCV axes
    centres = -np.einsum("nij,nj->ni", rotation, world_to_camera[:, :, 3])
    focus = nearest_point_to_lines(centres, rotation[:, :, 2])
    offset = np.zeros(3) if focus is None else -focus
    points = _points(reconstruction)
    depths = _depth_ranges(points, world_to_camera, posed, pinholes, centres, focus)
    frames = []
    for i, image in enumerate(posed):
        matrix = np.eye(4)
        matrix[:3, :3], matrix[:3, 3] = rotation[i] @ _OPENCV_TO_OPENGL, centres[i] + offset
        frames.append(Frame(files[i], matrix, pinholes[image.camera_id], *depths[i],
                            masks[i] if masks else None))
    return Capture("colmap", model / f"images{_model_suffix(model)}", frames, offset, root,
                   notes=recentring_notes(focus), points=points + offset)


def _pycolmap():
    try:
        import pycolmap
    except ImportError:
        raise UserError(f"reading a COLMAP model needs the pycolmap package: {INSTALL}, or "
                        "convert the model to a NeRF-style transforms_train.json") from None
    return pycolmap


def read_model(model: Path):
    """The ``pycolmap.Reconstruction`` in ``model`` (a missing points3D file reads as no
    points: pycolmap itself requires one)."""
    pycolmap = _pycolmap()
    suffix = _model_suffix(model)
    reconstruction = pycolmap.Reconstruction()
    read = reconstruction.read_binary if suffix == ".bin" else reconstruction.read_text
    try:
        if (model / f"points3D{suffix}").is_file():
            read(str(model))
            return reconstruction
        with tempfile.TemporaryDirectory(prefix="diffrec-colmap-") as scratch:
            for name in _MODEL_FILES[:-1]:
                if (model / f"{name}{suffix}").is_file():
                    shutil.copyfile(model / f"{name}{suffix}", Path(scratch) / f"{name}{suffix}")
            # no points: an empty text file, or a binary one holding the count 0 (uint64)
            (Path(scratch) / f"points3D{suffix}").write_bytes(bytes(8 if suffix == ".bin" else 0))
            read(scratch)
    except (ValueError, RuntimeError, LookupError) as error:
        files = ", ".join(p.name for p in sorted(model.glob(f"*{suffix}")))
        raise CaptureError(f"cannot read the COLMAP model in {model} ({files}): "
                           f"{one_line(error)}; export it from COLMAP again") from None
    return reconstruction


def _pinholes(cameras: dict, posed: list, model: Path) -> dict[int, Pinhole]:
    """One ``Pinhole`` per camera id; refuses distorted cameras and mixed image sizes."""
    pinholes, distorted = {}, []
    for camera_id, camera in sorted(cameras.items()):
        name = camera.model.name
        extra = np.asarray(camera.params)[list(camera.extra_params_idxs())]
        if name not in PINHOLE_MODELS + ZERO_DISTORTION_MODELS or np.any(extra != 0):
            users = [image.name for image in posed if image.camera_id == camera_id]
            shown = ", ".join(users[:_NAMED]) + (", ..." if len(users) > _NAMED else "")
            distorted.append(f"camera {camera_id} is {name} "
                             f"({camera.params_to_string()}; images {shown})")
            continue
        pinholes[camera_id] = Pinhole(
            fl_x=camera.focal_length_x, fl_y=camera.focal_length_y,
            cx=camera.principal_point_x, cy=camera.principal_point_y,
            w=float(camera.width), h=float(camera.height))
    if distorted:
        raise CaptureError(
            f"the COLMAP model in {model} has distorted or non-pinhole cameras: "
            f"{'; '.join(distorted[:_NAMED])}. diffrec reads pinhole cameras only: undistort "
            "the images first (colmap image_undistorter --image_path IMAGES --input_path "
            f"{model} --output_path OUT) and give OUT, whose sparse/ holds PINHOLE cameras")
    sizes = {}
    for camera_id, pinhole in pinholes.items():
        sizes.setdefault((int(pinhole.w), int(pinhole.h)), []).append(camera_id)
    if len(sizes) > 1:
        listed = "; ".join(f"{w}x{h}: camera {', '.join(map(str, ids))}"
                           for (w, h), ids in sorted(sizes.items()))
        raise CaptureError(f"the cameras of the COLMAP model in {model} give images of "
                           f"different sizes ({listed}): diffrec needs images of one size")
    return pinholes


def _image_root(folder: Path, model: Path) -> Path:
    """The folder that holds ``images/`` (or ``images_N/``): ``folder``, or, where
    ``folder`` is the model folder itself, the first of its parents that does."""
    candidates = [folder]
    if model == folder:
        candidates += list(folder.resolve().parents)[:2]
    for candidate in candidates:
        if any(p.is_dir() and (p.name == "images" or p.name.startswith("images_"))
               for p in candidate.iterdir()):
            return candidate
    return folder


def _image_paths(image_folder: Path, names: list[str], model: Path) -> list[Path]:
    """Each image named in the model, in ``image_folder``; a downscaled copy may have
    another suffix (LLFF's ``images_N`` are PNG)."""
    if not image_folder.is_dir():
        raise CaptureError(f"image folder not found: {image_folder} (the images of the COLMAP "
                           f"model in {model})")
    paths, missing = [], []
    for name in names:
        where = f"image {name!r} of the COLMAP model in {model}"
        path = inside(image_folder, name, where)
        if not path.is_file():
            path = next((path.with_suffix(suffix) for suffix in IMAGE_SUFFIXES
                         if path.with_suffix(suffix).is_file()), path)
        if not path.is_file():
            missing.append(name)
        paths.append(inside(image_folder, path.relative_to(image_folder), where))
    if missing:
        shown = ", ".join(missing[:_NAMED]) + (", ..." if len(missing) > _NAMED else "")
        raise CaptureError(f"{len(missing)} of {len(names)} images of the COLMAP model in "
                           f"{model} are not in {image_folder} ({shown}): give the folder "
                           "whose images/ holds the images the model was made from")
    return paths


def _points(reconstruction) -> np.ndarray:
    """``[P, 3]`` float64: the model's 3D points, in its world."""
    return np.array([point.xyz for point in reconstruction.points3D.values()],
                    dtype=np.float64).reshape(-1, 3)


def _depth_ranges(points: np.ndarray, world_to_camera: np.ndarray, posed: list,
                  pinholes: dict[int, Pinhole], centres: np.ndarray,
                  focus: np.ndarray | None) -> list[tuple[float, float]]:
    """``(near, far)`` per image: the depth percentiles of the 3D ``points`` inside its view,
    widened by ``LLFF_DEPTH_MARGIN``; without such points, the distance to ``focus``
    divided / multiplied by ``_NO_POINTS_RANGE`` (0.1 / 1000 without a focus either)."""
    ranges = []
    for i, image in enumerate(posed):
        local = points @ world_to_camera[i, :, :3].T + world_to_camera[i, :, 3]
        pinhole = pinholes[image.camera_id]
        depth = local[:, 2]
        ahead = depth > 0
        u = pinhole.fl_x * local[ahead, 0] / depth[ahead] + pinhole.cx
        v = pinhole.fl_y * local[ahead, 1] / depth[ahead] + pinhole.cy
        seen = depth[ahead][(u >= 0) & (u <= pinhole.w) & (v >= 0) & (v <= pinhole.h)]
        if len(seen):
            low, high = np.percentile(seen, _DEPTH_PERCENTILES)
            ranges.append((float(low) / LLFF_DEPTH_MARGIN, float(high) * LLFF_DEPTH_MARGIN))
        elif focus is not None and np.linalg.norm(centres[i] - focus) > 0:
            distance = float(np.linalg.norm(centres[i] - focus))
            ranges.append((distance / _NO_POINTS_RANGE, distance * _NO_POINTS_RANGE))
        else:
            ranges.append((0.1, 1000.0))
    return ranges


__all__ = ["detect_colmap", "read_colmap", "read_model"]
