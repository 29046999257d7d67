"""What capture tools add to a transforms file (numpy only), for ``diffrec.protocol.captures``.

nerfstudio (``ns-process-data``, its dataparser ``nerfstudio_dataparser.py``), instant-ngp
(``colmap2nerf.py``, its loader ``src/nerf_loader.cu``) and the apps that write their layout
(Polycam, Record3D, KIRI) put these keys beside NeRF's, at the top level or per frame (a
frame's value wins), each read or refused here:

- ``camera_model``: ``PINHOLE``, ``OPENCV`` (``k1, k2, p1, p2``, optionally ``k3``) or
  ``OPENCV_FISHEYE`` (``k1`` to ``k4``); without it, instant-ngp's rule: ``is_fisheye`` true
  means OPENCV_FISHEYE, else OPENCV where any coefficient is given. Other models (nerfstudio's
  ``EQUIRECTANGULAR``, ``FISHEYE624``, instant-ngp's ``ftheta_p0`` / ``latlong`` /
  ``equirectangular`` lenses) are refused. Distorted photos are undistorted on reading
  (``diffrec.protocol.lens``); ``w`` and ``h`` must then be given.
- ``mask_path`` (per frame): the object's coverage, white = object, becomes the image's alpha
  (without it, the image's mask in a ``masks/`` folder beside the file, where there is one).
- A key that is one of these or of NeRF's intrinsics in other letter case (``K1``) is refused
  (``check_spelling``): it would be left unread.
- ``train_filenames`` / ``val_filenames`` / ``test_filenames`` (nerfstudio): the splits.
- Noted and left as they are (``file_notes``): nerfstudio's ``applied_transform`` (the
  rotation it applied to COLMAP's world to make the file's: the cameras are kept in the file's
  frame, the one every other output of nerfstudio uses; undoing it would give COLMAP's
  y-down world); instant-ngp's ``scale`` and ``offset`` (its loader maps a camera position p
  of the file to ``p * scale + offset`` in its unit cube, then cycles the axes x, y, z to
  y, z, x and flips the camera's y and z axes to OpenCV's: all of that is instant-ngp's
  inside, so the file's matrices are already the world in the file's units, kept as they
  are); ``aabb_scale`` (instant-ngp's scene box in that cube: the object's box here is
  ``mesh_scale``); ``depth_file_path`` and ``ply_file_path`` (depth maps and points, not
  used).

Every function raises ``ValueError`` with a sentence; the caller names the file and frame.
"""

from __future__ import annotations

import math
from pathlib import PurePosixPath

import numpy as np

from .lens import MODELS, Lens

CAMERA_MODELS = {"PINHOLE": None, "OPENCV": "opencv", "OPENCV_FISHEYE": "fisheye"}
"""camera_model values read, and the lens model each one is (None: no distortion)."""
DISTORTION_KEYS = ("k1", "k2", "k3", "k4", "p1", "p2")
LENS_KEYS = ("camera_model", "is_fisheye", *DISTORTION_KEYS)
UNREAD_LENSES = ("ftheta_p0", "latlong", "equirectangular")  # instant-ngp's other lenses
SPLIT_KEYS = {"train": ("train_filenames",), "test": ("test_filenames", "val_filenames")}


def check_spelling(keys: dict, names) -> None:
    """ValueError for a key of ``keys`` that is one of ``names`` in other letter case (``K1``
    for ``k1``): it would be left unread. Other unknown keys pass (capture tools add many)."""
    spelt = {name.lower(): name for name in names}
    for key in keys:
        right = spelt.get(key.lower())
        if right is not None and key != right:
            raise ValueError(f"the key {key!r} is not read: it is spelt {right!r} (keys are "
                             "case-sensitive)")


def frame_lens(keys: dict, intrinsics: tuple[float, float, float, float] | None,
               size: tuple[float, float] | None) -> Lens | None:
    """The lens of a frame whose merged keys are ``keys`` (its own over the file's), None for
    a pinhole camera; ``intrinsics`` ``(fx, fy, cx, cy)`` at ``size`` ``(w, h)``, the frame's
    stated image size (None where the file states none)."""
    for key in UNREAD_LENSES:
        if key in keys:
            raise ValueError(f"'{key}' states a lens diffrec does not read: give pinhole, "
                             "OPENCV or OPENCV_FISHEYE cameras")
    name = keys.get("camera_model")
    if name is None:
        fisheye = keys.get("is_fisheye", False)
        if not isinstance(fisheye, bool):
            raise ValueError(f"is_fisheye must be true or false, got {fisheye!r}")
        model = "fisheye" if fisheye else "opencv"
    elif name in CAMERA_MODELS:
        model = CAMERA_MODELS[name]
    else:
        raise ValueError(f"camera_model {name!r} is not read: diffrec reads "
                         f"{', '.join(CAMERA_MODELS)} cameras (undistort the images to "
                         "pinhole ones first)")
    values = {key: _number(keys[key], key) for key in DISTORTION_KEYS if key in keys}
    given = {key: value for key, value in values.items() if value != 0}
    if model is None:
        if given:
            raise ValueError(f"camera_model PINHOLE has no lens distortion, but "
                             f"{', '.join(f'{k} = {v:g}' for k, v in given.items())} is given: "
                             "say OPENCV or OPENCV_FISHEYE, or drop the coefficients")
        return None
    unused = sorted(set(given) - set(MODELS[model]))
    if unused:
        label = name or ("OPENCV_FISHEYE (is_fisheye)" if model == "fisheye" else "OPENCV")
        raise ValueError(f"{label} takes {', '.join(MODELS[model])}, not {', '.join(unused)}")
    if not given:
        return None
    if size is None:
        raise ValueError("w and h (the image size the intrinsics are given at) are needed with "
                         "lens distortion")
    return Lens(model, tuple(values.get(key, 0.0) for key in MODELS[model]), intrinsics, size)


def _number(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number, got {value!r}")
    return float(value)


def split_paths(transforms: dict, split: str) -> set[str] | None:
    """The ``file_path`` values (as ``file_key`` gives them) of ``split`` where the file lists
    its splits, else None (its frames are one split)."""
    if not any(key in transforms for keys in SPLIT_KEYS.values() for key in keys):
        return None
    names = next((transforms[key] for key in SPLIT_KEYS.get(split, ()) if key in transforms),
                 None)
    if names is None:
        listed = [key for keys in SPLIT_KEYS.values() for key in keys if key in transforms]
        raise ValueError(f"it lists {', '.join(listed)} but no split '{split}' "
                         f"({' or '.join(SPLIT_KEYS.get(split, (f'{split}_filenames',)))})")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{split}_filenames must be a list of file paths")
    return {file_key(name) for name in names}


def file_key(path: str) -> str:
    """A ``file_path`` as split lists and frames are matched: relative, ``/``-separated, no
    leading ``./``, no suffix."""
    return PurePosixPath(path.replace("\\", "/")).with_suffix("").as_posix()


def file_notes(transforms: dict, frames: list[dict]) -> list[str]:
    """One sentence per noted key present (module docstring: the file's keys, and the
    ``frames``' ``depth_file_path``) saying what is done with it; ValueError for an
    ``applied_transform`` that is no finite 3x4 matrix."""
    notes = []
    if "applied_transform" in transforms:
        applied = _finite(transforms["applied_transform"])
        if applied is None or applied.shape != (3, 4):
            raise ValueError("applied_transform must be a 3x4 list of finite numbers (rows)")
        notes.append("applied_transform (how nerfstudio turned COLMAP's world into this file's) "
                     "is kept: the cameras stay in the file's frame")
    placed = [f"{key} {transforms[key]}" for key in ("scale", "offset") if key in transforms]
    if placed:
        notes.append(f"instant-ngp's {' and '.join(placed)} are not applied: they only place "
                     "the file's world in instant-ngp's unit cube, so the cameras stay in the "
                     "file's units")
    if "aabb_scale" in transforms:
        notes.append(f"aabb_scale {transforms['aabb_scale']} (instant-ngp's scene box) is not "
                     "used: the object's box is mesh_scale around the origin")
    if "ply_file_path" in transforms:
        notes.append("ply_file_path (a point cloud) is not used")
    depths = sum(1 for frame in frames if "depth_file_path" in frame)
    if depths:
        notes.append(f"depth_file_path ({depths} frames) is not used: diffrec fits images, not "
                     "depth maps")
    return notes


def _finite(value) -> np.ndarray | None:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array if np.isfinite(array).all() else None
