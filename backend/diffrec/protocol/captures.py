"""Capture folders on disk: where the images are and how each camera saw them (numpy only).

One reader for every user of these layouts: the pipeline (``diffrec optimize``), ``diffrec
submit`` and the Blender add-on (Dataset targets, File > Import). Images are not decoded here:
each caller reads them with its own image library.

Layouts (``detect_layout``):

- **NeRF-style** (the NeRF synthetic scenes, instant-ngp): ``transforms_{split}.json`` with
  ``frames`` (``file_path`` relative to the folder, extension optional; ``transform_matrix``,
  camera-to-world in the OpenGL camera convention, the same matrix as Blender's
  ``matrix_world``) and the intrinsics ``camera_angle_x`` / ``camera_angle_y`` (field of view,
  radians) or ``fl_x`` / ``fl_y`` / ``cx`` / ``cy`` (pixels at the file's ``w`` x ``h``), at
  the top level or per frame (a frame's value wins). Alpha comes with the images.
- **Capture tools'** (nerfstudio's ``ns-process-data``, instant-ngp's ``colmap2nerf``,
  Polycam, Record3D, KIRI): one ``transforms.json``, keys as above (``capture_tools`` lists
  what else is read, refused or noted), read by ``read_nerf``. A frame's mask is its
  ``mask_path``, else its image's in a ``masks/`` folder beside the file (``find_masks``).
  Its frames are one split, "train", unless the file lists ``train_filenames`` /
  ``test_filenames`` (or ``val_filenames``) as nerfstudio's may; the cameras are moved so
  that the point nearest to all optical axes is the origin (``Capture.offset``), as for LLFF.
- **LLFF** (real captures, as LLFF's ``imgs2poses`` writes them): ``poses_bounds.npy``, one
  row of 17 numbers per image: a 3x5 matrix (row-major) whose first four columns are the
  camera-to-world matrix with LLFF's camera axes (columns: down, right, backwards) and whose
  last column is (height, width, focal) in pixels of the full-size images, then the near and
  far scene depths. Images are the files of ``images/`` in sorted name order, or of a
  downscaled copy ``images_N/`` (N times smaller; the focal length is scaled to the size
  actually read). Coverage comes from ``masks/`` (one image per view, matched by file stem,
  else in sorted order; white = object), else from the images' alpha. The cameras are
  converted to the OpenGL convention and moved so that the point nearest to all optical axes
  is the origin (``Capture.offset``), as the reference system does (not moved where no one
  point is nearest: a single camera, or parallel axes).

COLMAP models (``sparse/0/`` next to ``images/``) need the optional pycolmap package, so they
are read in the pipeline (``diffrec.pipeline.colmap_capture``), with the helpers shared here
(``choose_image_folder``, ``find_masks``, ``nearest_point_to_lines``).

Lens distortion (``camera_model`` OPENCV or OPENCV_FISHEYE, in any transforms file) is
undone on reading: a frame's ``pinhole`` is the camera of its undistorted image, and callers
pass the decoded image (and mask) through ``Frame.undistort`` (numpy, ``diffrec.protocol.lens``)
and say so with ``undistorts=True`` (``read_capture``, ``read_nerf``); without it such a
capture is refused (the add-on's Dataset targets and File > Import, which do not resample).

Everything here raises ``CaptureError`` (a ``ValueError``) with a sentence that names the
file and says what to fix.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from .capture_tools import LENS_KEYS, check_spelling, file_key, file_notes, frame_lens, split_paths
from .file_checks import FileCheckError, load_npy, read_json
from .lens import Lens

IMAGE_SUFFIXES = (".png", ".exr", ".jpg", ".jpeg")  # tried in this order after a bare path
LAYOUTS = ("nerf", "nerfstudio", "llff")
FOUND_POSE_LAYOUTS = ("nerfstudio", "llff", "colmap")
"""The layouts whose poses were found from the photos (by COLMAP or a capture tool), so are
off by a pixel or so, unlike a NeRF-style folder's renders: what ``refine_poses`` "auto"
corrects ("colmap": a COLMAP model, read by the backend's ``pipeline.captures``)."""
CAPTURE_TOOLS_FILE = "transforms.json"  # the layout "nerfstudio": one file, every frame
AUTO_MASKS = "masks_auto"  # the folder of masks made for a capture that has none
_NAMED = 5  # how many offending files an error message names
_DOWNSCALED = re.compile(r"images_(\d+)$")
# LLFF camera axes (down, right, backwards) -> OpenGL (right, up, backwards)
_LLFF_TO_OPENGL = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
LLFF_DEPTH_MARGIN = 2.0  # near / far are the LLFF bounds divided / multiplied by this
ROTATION_TOLERANCE = 1e-2  # largest |R Rᵀ - I| entry of a camera's rotation as read
MAX_NAME_BYTES = 255  # one file or folder name, as ext4, APFS and NTFS take it
MAX_PATH_BYTES = 4096  # a whole path (Linux's PATH_MAX)
_SHOWN_NAME = 80  # characters of a refused name a message quotes


class CaptureError(ValueError):
    """A capture folder or file that cannot be read; the message says why and what to do."""


def inside(folder: Path, name: str | Path, where: str) -> Path:
    """``folder / name``, which must stay inside ``folder`` once resolved: no absolute path,
    no ``..`` and no symbolic link leading out of it, no NUL character and no name longer
    than the file system takes (the one rule for every file an input names: a dataset's
    images, a job file's arrays, a glTF's buffers and images, an OBJ's material libraries and
    textures); CaptureError naming ``where`` and the entry otherwise."""
    text = str(name)
    shown = repr(clipped(text))
    if "\0" in text:
        raise CaptureError(f"{where}: {shown} holds a NUL character, which no file name can "
                           "hold: fix the name")
    path = Path(folder) / name
    if (len(os.fsencode(path)) > MAX_PATH_BYTES or
            any(len(os.fsencode(part)) > MAX_NAME_BYTES for part in Path(name).parts)):
        raise CaptureError(f"{where}: the name {shown} ({len(text)} characters) is longer than "
                           f"a file system takes ({MAX_NAME_BYTES} bytes a name, "
                           f"{MAX_PATH_BYTES} a path): fix the name")
    if PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute():
        raise CaptureError(f"{where}: {shown} is an absolute path (written where the capture "
                           "was made, most likely): a file may only name files of its own "
                           "folder by a path relative to that folder")
    try:
        leaves = not path.resolve().is_relative_to(Path(folder).resolve())
    except (OSError, RuntimeError) as error:  # a loop of links, a folder not readable
        raise CaptureError(f"{where}: cannot follow {shown} in {folder}: "
                           f"{' '.join(str(error).split())}") from None
    if leaves:
        raise CaptureError(f"{where}: {shown} leads outside {folder}: a file may only name "
                           "files inside its own folder (a relative path, without '..' or "
                           "links out of it)")
    return path


def clipped(text: str) -> str:
    """``text`` as a message quotes a name from a file: at most ``_SHOWN_NAME`` characters."""
    return text if len(text) <= _SHOWN_NAME else text[:_SHOWN_NAME] + "..."


@dataclass(frozen=True)
class Pinhole:
    """A frame's intrinsics as its file states them: focal lengths in pixels (``fl_x``,
    ``fl_y``) or fields of view in radians (``angle_x``, ``angle_y``), principal point
    (``cx``, ``cy``) in pixels, all at the file's image size ``w`` x ``h`` (None: the size of
    the images themselves). Missing values follow NeRF's rules: square pixels, centred."""

    fl_x: float | None = None
    fl_y: float | None = None
    angle_x: float | None = None
    angle_y: float | None = None
    cx: float | None = None
    cy: float | None = None
    w: float | None = None
    h: float | None = None

    def at(self, width: int, height: int, stored: tuple[int, int] | None = None
           ) -> tuple[float, float, float, float]:
        """``(fx, fy, cx, cy)`` in pixels (wire convention: origin at the top-left corner)
        for the images used at ``width`` x ``height``; ``stored``: the (width, height) of
        the image files, where the file states no ``w`` x ``h`` (default: the size used);
        given, CaptureError where it is not of ``w`` x ``h``'s shape (``check_shape``)."""
        if stored is not None:
            self.check_shape(*stored)
        stored_width, stored_height = stored or (width, height)
        file_width = self.w if self.w is not None else stored_width
        file_height = self.h if self.h is not None else stored_height
        if self.fl_x is not None:
            fx = self.fl_x
        elif self.angle_x is not None:
            fx = 0.5 * file_width / math.tan(0.5 * self.angle_x)
        else:
            raise CaptureError("neither a focal length (fl_x) nor a field of view "
                               "(camera_angle_x) is given")
        if self.fl_y is not None:
            fy = self.fl_y
        elif self.angle_y is not None:
            fy = 0.5 * file_height / math.tan(0.5 * self.angle_y)
        else:
            fy = fx
        cx = self.cx if self.cx is not None else file_width / 2
        cy = self.cy if self.cy is not None else file_height / 2
        sx, sy = width / file_width, height / file_height
        return fx * sx, fy * sy, cx * sx, cy * sy

    def check_shape(self, width: int, height: int) -> None:
        """CaptureError where image files of ``width`` x ``height`` pixels are not the stated
        ``w`` x ``h`` scaled alike in both directions (a pixel of a downscale's rounding
        allowed): their intrinsics would be stretched."""
        if self.w is None or self.h is None:
            return
        if abs(width * self.h - height * self.w) > max(self.w, self.h):
            raise CaptureError(
                f"the image is {width}x{height} pixels but its camera is stated for "
                f"{self.w:g}x{self.h:g} (w x h), another shape: most likely the photo is "
                "stored rotated with an EXIF orientation tag, which diffrec does not apply: "
                "save the photos upright (without an orientation tag)")


@dataclass
class Frame:
    """One view: its image file, camera-to-world ``[4, 4]`` float64 (OpenGL camera, Blender's
    ``matrix_world``), intrinsics, clipping depths, its mask file (white = object) where it
    has one, and the lens of its photo where that is not a pinhole: ``pinhole`` is then the
    camera of the undistorted image (``undistort``)."""

    image: Path
    camera_to_world: np.ndarray
    pinhole: Pinhole
    near: float = 0.1
    far: float = 1000.0
    mask: Path | None = None
    lens: Lens | None = None

    def undistort(self, pixels: np.ndarray) -> np.ndarray:
        """The decoded image or mask ``pixels`` ``[H, W, C]`` (float, any size) as ``pinhole``
        sees it: resampled by ``lens`` (``Lens.undistort``), or as it is without one."""
        return pixels if self.lens is None else self.lens.undistort(pixels)


@dataclass
class Capture:
    """The frames of one split of a capture folder. ``source``: the file that holds the
    cameras; ``offset``: what was added to the file's world positions (recentring; zeros
    for NeRF folders); ``root``: the capture folder where it is not ``source``'s (a COLMAP
    model in ``sparse/0/``); ``notes``: one sentence per key of the file read in a way a user
    may want to know (``capture_tools.file_notes``, the recentring), for the log;
    ``points``: ``[P, 3]`` world positions (offset added) of the sparse 3D points the capture
    holds (a COLMAP model's), else None."""

    layout: str
    source: Path
    frames: list[Frame]
    offset: np.ndarray = field(default_factory=lambda: np.zeros(3))
    root: Path | None = None
    notes: list[str] = field(default_factory=list)
    points: np.ndarray | None = None

    @property
    def folder(self) -> Path:
        return self.root if self.root is not None else self.source.parent

    def intrinsics(self, width: int, height: int, stored: tuple[int, int] | None = None
                   ) -> np.ndarray:
        """``[N, 4]`` float64 ``(fx, fy, cx, cy)`` for images used at ``width`` x ``height``
        (``stored``: see ``Pinhole.at``); CaptureError naming the first image whose camera
        cannot be built."""
        rows = []
        for frame in self.frames:
            try:
                rows.append(frame.pinhole.at(width, height, stored))
            except CaptureError as error:
                raise CaptureError(f"{frame.image.relative_to(self.folder).as_posix()}: "
                                   f"{error}") from None
        return np.array(rows)

    def camera_to_world(self) -> np.ndarray:
        return np.stack([frame.camera_to_world for frame in self.frames])

    def names(self) -> list[str]:
        """One label per frame: the image path relative to the folder, without suffix."""
        return [frame.image.relative_to(self.folder).with_suffix("").as_posix()
                for frame in self.frames]

    def auto_masks(self) -> list[Path]:
        """Where the masks made for the frames of a capture that has none are kept, whether
        they exist or not: ``AUTO_MASKS/<name>.png`` in the folder, one per frame (``names``),
        drawn on the image as the pipeline uses it (undistorted, where the frame has a lens;
        any size of the image's aspect); white = object."""
        return [self.folder / AUTO_MASKS / f"{name}.png" for name in self.names()]


def detect_layout(folder: str | Path) -> str | None:
    """``"nerf"`` (``transforms_train.json``), ``"nerfstudio"`` (a capture tool's
    ``transforms.json``), ``"llff"`` (``poses_bounds.npy``) or None."""
    folder = Path(folder)
    if (folder / "transforms_train.json").is_file():
        return "nerf"
    if (folder / CAPTURE_TOOLS_FILE).is_file():
        return "nerfstudio"
    if (folder / "poses_bounds.npy").is_file():
        return "llff"
    return None


def read_capture(folder: str | Path, split: str = "train", *,
                 longest_side: int | None = None, undistorts: bool = False) -> Capture:
    """The frames of ``folder``, whatever its layout. NeRF folders give ``split``'s frames;
    LLFF captures have one split, every image, as a capture tool's ``transforms.json`` has
    unless it lists its splits. ``longest_side``: LLFF only, the size the images will be used
    at; the smallest ``images_N`` copy that is still at least that large is chosen (None: the
    full-size ``images``). ``undistorts``: the caller passes each frame's decoded image and
    mask through ``Frame.undistort``; without it, a capture with lens distortion is refused."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CaptureError(f"dataset folder not found: {folder}: give the folder that holds "
                           "transforms_train.json (NeRF-style), transforms.json (nerfstudio, "
                           "instant-ngp), poses_bounds.npy (LLFF) or a COLMAP model "
                           "(sparse/0/ and images/)")
    layout = detect_layout(folder)
    if layout == "llff":
        if split != "train":
            raise CaptureError(f"{folder} is an LLFF capture: it has one split of views "
                               f"('train'), not '{split}'")
        return read_llff(folder, longest_side=longest_side)
    if layout == "nerfstudio":
        return read_nerf(folder / CAPTURE_TOOLS_FILE, split=split, undistorts=undistorts)
    if layout == "nerf" or any(folder.glob("transforms*.json")):
        return read_nerf(folder / f"transforms_{split}.json", undistorts=undistorts)
    present = sorted(p.name for p in folder.iterdir())[:8]
    raise CaptureError(f"{folder} holds neither transforms_train.json (a NeRF-style folder) nor "
                       "transforms.json (nerfstudio, instant-ngp) nor poses_bounds.npy (an "
                       f"LLFF capture); found {', '.join(present) or 'nothing'}")


# -- NeRF-style ------------------------------------------------------------------------------

_NERF_KEYS = {"fl_x": "fl_x", "fl_y": "fl_y", "camera_angle_x": "angle_x",
              "camera_angle_y": "angle_y", "cx": "cx", "cy": "cy", "w": "w", "h": "h"}


def read_nerf(path: str | Path, *, near: float = 0.1, far: float = 1000.0,
              split: str = "train", undistorts: bool = False) -> Capture:
    """The frames of one ``transforms_*.json``, or ``split``'s frames of a capture tool's
    ``transforms.json`` (see the module docstring); ``undistorts`` as for ``read_capture``."""
    path = Path(path)
    if not path.is_file():
        present = sorted(p.name for p in path.parent.glob("transforms*.json"))
        found = f"found {', '.join(present)}" if present else "found no transforms*.json"
        raise CaptureError(f"{path.parent} has no {path.name} ({found}): a NeRF-style folder "
                           f"needs {path.name} next to its images")
    try:
        transforms = read_json(path)
    except FileCheckError as error:
        raise CaptureError(str(error)) from None
    if not isinstance(transforms, dict):
        raise CaptureError(f"{path} must hold a JSON object with 'camera_angle_x' and 'frames'")
    entries = transforms.get("frames")
    if not isinstance(entries, list) or not entries:
        raise CaptureError(f"{path} has no frames: its 'frames' list must name at least one "
                           "image with its transform_matrix")
    _spelling(transforms, str(path))
    frames, missing, missing_masks = [], [], []
    for index, entry in enumerate(entries):
        where = f"{path}, frame {index}"
        if not isinstance(entry, dict) or not isinstance(entry.get("file_path"), str):
            raise CaptureError(f"{where}: each frame needs a 'file_path' string")
        where += f" ({clipped(entry['file_path'])})"
        _spelling(entry, where)
        matrix = _matrix(entry.get("transform_matrix"), where)
        image = _find_image(path.parent, entry["file_path"], where)
        if image is None:
            missing.append(entry["file_path"])
        pinhole = nerf_pinhole({**transforms, **entry}, where)
        frames.append(_capture_tool_frame(Frame(image, matrix, pinhole, near, far), transforms,
                                          entry, path.parent, where))
        if frames[-1].mask is not None and not frames[-1].mask.is_file():
            missing_masks.append(entry["mask_path"])
    if missing:
        shown = ", ".join(missing[:_NAMED]) + (", ..." if len(missing) > _NAMED else "")
        raise CaptureError(
            f"{len(missing)} of {len(entries)} images named in {path.name} are missing "
            f"({shown}); tried {'/'.join(IMAGE_SUFFIXES)} after each file_path, relative to "
            f"{path.parent}")
    if missing_masks:
        shown = ", ".join(map(clipped, missing_masks[:_NAMED]))
        more = ", ..." if len(missing_masks) > _NAMED else ""
        raise CaptureError(f"{len(missing_masks)} of {len(entries)} masks named in {path.name} "
                           f"(mask_path) are missing ({shown}{more}), relative to {path.parent}")
    if path.name == CAPTURE_TOOLS_FILE:
        _folder_masks(path.parent / "masks", frames)
    capture = _nerf_capture(path, transforms, entries, frames, split)
    distorted = [frame for frame in capture.frames if frame.lens is not None]
    if distorted and not undistorts:
        lens = distorted[0].lens
        raise CaptureError(
            f"{path}: {len(distorted)} of {len(capture.frames)} cameras have lens distortion "
            f"({lens.model} {lens.coefficients}); only pinhole captures are read here: "
            "`diffrec optimize --dataset` and `diffrec submit` undistort the images on reading, "
            "or undistort them first")
    return capture


def _spelling(keys: dict, where: str) -> None:
    """CaptureError naming ``where`` for an intrinsic or lens key of ``keys`` in the wrong
    letter case (``check_spelling``)."""
    try:
        check_spelling(keys, (*_NERF_KEYS, *LENS_KEYS))
    except ValueError as error:
        raise CaptureError(f"{where}: {error}") from None


def _capture_tool_frame(frame: Frame, transforms: dict, entry: dict, folder: Path,
                        where: str) -> Frame:
    """``frame`` with the capture tools' keys of its file (``transforms``) and its ``entry``
    read (``capture_tools``): its mask file, and its lens, ``pinhole`` becoming the camera of
    the undistorted image."""
    mask = entry.get("mask_path")
    if mask is not None:
        if not isinstance(mask, str):
            raise CaptureError(f"{where}: mask_path must be a file path, got {mask!r}")
        frame.mask = inside(folder, mask, where)
    pinhole = frame.pinhole
    size = None if pinhole.w is None or pinhole.h is None else (pinhole.w, pinhole.h)
    try:
        intrinsics = pinhole.at(*size) if size else None
        frame.lens = frame_lens({**transforms, **entry}, intrinsics, size)
        if frame.lens is not None:
            fx, fy, cx, cy = frame.lens.pinhole()
            frame.pinhole = dataclasses.replace(pinhole, fl_x=fx, fl_y=fy, angle_x=None,
                                                angle_y=None, cx=cx, cy=cy)
    except ValueError as error:
        raise CaptureError(f"{where}: {error}") from None
    return frame


def _folder_masks(folder: Path, frames: list[Frame]) -> None:
    """Give the ``frames`` without a ``mask_path`` their mask from ``folder`` (a capture
    tool's ``masks/``), matched to the images as ``find_masks`` matches them, where there is
    such a folder."""
    if all(frame.mask is not None for frame in frames) or not folder.is_dir():
        return
    masks = find_masks(folder, [frame.image for frame in frames])
    for frame, mask in zip(frames, masks, strict=True):
        frame.mask = frame.mask or mask


def _nerf_capture(path: Path, transforms: dict, entries: list, frames: list[Frame],
                  split: str) -> Capture:
    """The capture of a transforms file's ``frames`` (one per ``entries`` item): refuses
    frames stating different image sizes; a capture tool's ``transforms.json`` is recentred
    on its cameras' focus and gives ``split``'s frames."""
    sizes = {}
    for index, frame in enumerate(frames):
        if frame.pinhole.w is not None and frame.pinhole.h is not None:
            sizes.setdefault((frame.pinhole.w, frame.pinhole.h), index)
    if len(sizes) > 1:
        listed = "; ".join(f"{w:g}x{h:g} (frame {index}, {clipped(entries[index]['file_path'])})"
                           for (w, h), index in list(sizes.items())[:_NAMED])
        raise CaptureError(f"{path}: the frames state images of different sizes ({listed}): "
                           "diffrec needs images of one size")
    try:
        notes = file_notes(transforms, entries)
        listed = split_paths(transforms, split) if path.name == CAPTURE_TOOLS_FILE else None
    except ValueError as error:
        raise CaptureError(f"{path}: {error}") from None
    if path.name != CAPTURE_TOOLS_FILE:
        return Capture("nerf", path, frames, notes=notes)
    matrices = np.stack([frame.camera_to_world for frame in frames])
    focus = nearest_point_to_lines(matrices[:, :3, 3], -matrices[:, :3, 2])
    offset = np.zeros(3) if focus is None else -focus
    for frame in frames:
        frame.camera_to_world = frame.camera_to_world.copy()
        frame.camera_to_world[:3, 3] += offset
    notes += recentring_notes(focus)
    if listed is None:
        if split != "train":
            raise CaptureError(f"{path} lists no splits (train_filenames, test_filenames): its "
                               f"frames are one split, 'train', not '{split}'")
        return Capture("nerfstudio", path, frames, offset, notes=notes)
    keys = [file_key(entry["file_path"]) for entry in entries]
    unmatched = sorted(listed - set(keys))
    if unmatched:
        raise CaptureError(f"{path}: {split}_filenames names {len(unmatched)} files that no "
                           f"frame has ({', '.join(map(clipped, unmatched[:_NAMED]))})")
    chosen = [frame for frame, key in zip(frames, keys, strict=True) if key in listed]
    return Capture("nerfstudio", path, chosen, offset, notes=notes)


def _matrix(value, where: str) -> np.ndarray:
    try:
        matrix = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        matrix = np.zeros(0)
    if matrix.shape != (4, 4):
        raise CaptureError(f"{where}: transform_matrix must be a 4x4 list of numbers (rows), "
                           f"got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise CaptureError(f"{where}: transform_matrix holds NaN or infinite values; fix or "
                           "drop this frame")
    return matrix


def nerf_pinhole(keys, where: str) -> Pinhole:
    """The intrinsics keys of a transforms file (a frame's merged over the top level)."""
    values = {}
    for key, name in _NERF_KEYS.items():
        if key in keys:
            value = keys[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and value > 0):
                raise CaptureError(f"{where}: {key} must be a positive number, got {value!r}")
            values[name] = float(value)
    for name in ("angle_x", "angle_y"):
        if name in values and not values[name] < math.pi:
            raise CaptureError(f"{where}: camera_{name} {values[name]} is not a field of view "
                               "in radians")
    if "fl_x" not in values and "angle_x" not in values:
        raise CaptureError(f"{where}: neither fl_x nor camera_angle_x is given")
    return Pinhole(**values)


def _find_image(folder: Path, file_path: str, where: str) -> Path | None:
    bare = inside(folder, file_path, where)
    candidates = [bare] if bare.suffix.lower() in IMAGE_SUFFIXES else []
    candidates += [bare.with_name(bare.name + suffix) for suffix in IMAGE_SUFFIXES]
    found = next((c for c in candidates if c.is_file()), None)
    return found and inside(folder, found.relative_to(folder), where)


def write_nerf(path: str | Path, images: list[Path], camera_to_world: np.ndarray,
               width: int, height: int, fxfycxcy) -> None:
    """Write a ``transforms_*.json`` for ``images`` (stored relative to its folder) seen by
    ``camera_to_world`` ``[N, 4, 4]`` with one set of intrinsics (pixels at width x height)."""
    path = Path(path)
    fx, fy, cx, cy = (float(value) for value in fxfycxcy)
    content = {
        "camera_angle_x": 2 * math.atan(width / (2 * fx)),
        "fl_x": fx, "fl_y": fy, "cx": cx, "cy": cy, "w": width, "h": height,
        "frames": [{"file_path": "./" + Path(image).relative_to(path.parent).as_posix(),
                    "transform_matrix": np.asarray(matrix).tolist()}
                   for image, matrix in zip(images, camera_to_world, strict=True)],
    }
    path.write_text(json.dumps(content, indent=2))


# -- LLFF --------------------------------------------------------------------------------------


def read_llff(folder: str | Path, *, longest_side: int | None = None,
              images: str | None = None) -> Capture:
    """The frames of an LLFF capture (see the module docstring). ``images``: the image folder
    to read (default: chosen from ``longest_side``)."""
    folder = Path(folder)
    table = _poses_bounds(folder / "poses_bounds.npy")
    poses, bounds = table[:, :15].reshape(-1, 3, 5), table[:, 15:]
    height, width, focal = poses[:, :, 4].T
    image_folder = folder / (images or choose_image_folder(folder, longest_side,
                                                           float(max(width[0], height[0]))))
    files = image_files(image_folder)
    if len(files) != len(table):
        raise CaptureError(f"{image_folder} holds {len(files)} images but poses_bounds.npy has "
                           f"{len(table)} cameras: keep one image per camera, in the same "
                           "(sorted) order")
    masks = find_masks(folder / "masks", files)
    rotation = poses[:, :, :3] @ _LLFF_TO_OPENGL
    centres = poses[:, :, 3]
    focus = nearest_point_to_lines(centres, -rotation[:, :, 2])
    offset = np.zeros(3) if focus is None else -focus
    frames = []
    for i, image in enumerate(files):
        matrix = np.eye(4)
        matrix[:3, :3], matrix[:3, 3] = rotation[i], centres[i] + offset
        pinhole = Pinhole(fl_x=focal[i], fl_y=focal[i], w=width[i], h=height[i])
        frames.append(Frame(image, matrix, pinhole, bounds[i, 0] / LLFF_DEPTH_MARGIN,
                            bounds[i, 1] * LLFF_DEPTH_MARGIN, masks[i] if masks else None))
    return Capture("llff", folder / "poses_bounds.npy", frames, offset,
                   notes=recentring_notes(focus))


def recentring_notes(focus: np.ndarray | None) -> list[str]:
    """The log's note on cameras moved so that ``focus`` (the point nearest to all their
    optical axes, None: none found, nothing moved) is the origin."""
    if focus is None:
        return []
    return [f"the cameras are moved by {np.round(-focus, 6).tolist()} so that the point "
            "nearest to all their optical axes is the origin"]


def _poses_bounds(path: Path) -> np.ndarray:
    try:
        table = load_npy(path)
    except FileCheckError as error:
        raise CaptureError(str(error)) from None
    if table.ndim != 2 or table.shape[1] != 17 or len(table) == 0 or table.dtype.kind != "f":
        raise CaptureError(f"{path} must hold a float array [N, 17] (a 3x5 pose with height, "
                           f"width, focal, then near and far per image), got {table.dtype} "
                           f"{list(table.shape)}")
    table = table.astype(np.float64)
    if not np.isfinite(table).all():
        raise CaptureError(f"{path} holds NaN or infinite values")
    hwf, bounds = table[:, 4:15:5], table[:, 15:]
    if (hwf <= 0).any() or (bounds[:, 0] <= 0).any() or (bounds[:, 1] <= bounds[:, 0]).any():
        raise CaptureError(f"{path}: heights, widths and focal lengths must be positive and "
                           "each near depth positive and below its far depth")
    rotations = table[:, :15].reshape(-1, 3, 5)[:, :, :3]
    skew = np.abs(rotations @ rotations.transpose(0, 2, 1) - np.eye(3)).max(axis=(1, 2))
    if (skew > ROTATION_TOLERANCE).any():
        raise CaptureError(f"{path}: row {int(np.argmax(skew))}'s pose has no rotation in its "
                           "first three columns (they must be orthonormal): fix or drop that "
                           "row and its image")
    return table


def choose_image_folder(folder: Path, longest_side: int | None, full_size: float,
                        cameras: str = "poses_bounds.npy") -> str:
    """``images`` or the most downscaled ``images_N`` (N times smaller than ``full_size``,
    the longest side of the full-size images) whose images still have a longest side of at
    least ``longest_side`` (None: the least downscaled there is). ``cameras``: the file
    that needs the images, for the message when there are none."""
    choices = {1: "images"} if (folder / "images").is_dir() else {}
    for candidate in folder.iterdir():
        match = _DOWNSCALED.match(candidate.name)
        if match and candidate.is_dir() and int(match.group(1)) > 0:
            choices[int(match.group(1))] = candidate.name
    if not choices:
        raise CaptureError(f"{folder} has {cameras} but no images/ (or images_N/) folder")
    if longest_side is None:
        return choices[min(choices)]
    large_enough = [n for n in choices if full_size / n >= longest_side]
    return choices[max(large_enough) if large_enough else min(choices)]


def image_files(folder: Path) -> list[Path]:
    """The image files of ``folder`` (not its subfolders), sorted by name; none may be a link
    leading out of the folder's parent (the capture)."""
    if not folder.is_dir():
        raise CaptureError(f"image folder not found: {folder}")
    return sorted(inside(folder.parent, p.relative_to(folder.parent), f"image folder {folder}")
                  for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def find_masks(folder: Path, images: list[Path]) -> list[Path] | None:
    """One mask per image, or None without a ``masks/`` folder: matched by stem, or by the
    image's whole name plus a suffix (COLMAP's ``image.jpg.png``), else the masks in sorted
    name order paired with the images in sorted path order."""
    if not folder.is_dir():
        return None
    masks = image_files(folder)
    by_stem = {mask.stem: mask for mask in masks}
    for key in (lambda image: image.stem, lambda image: image.name):
        if all(key(image) in by_stem for image in images):
            return [by_stem[key(image)] for image in images]
    if len(masks) == len(images):
        paired = dict(zip(sorted(images, key=Path.as_posix), masks, strict=True))
        return [paired[image] for image in images]
    raise CaptureError(f"{folder} holds {len(masks)} masks for {len(images)} images: give one "
                       "mask per image, named like its image or in the same sorted order")


def nearest_point_to_lines(origins: np.ndarray, directions: np.ndarray) -> np.ndarray | None:
    """The point ``[3]`` with the least summed squared distance to the lines
    ``origins + t directions`` (``[N, 3]`` each); None when no single point is nearest (one
    line, or parallel lines)."""
    d = directions / np.linalg.norm(directions, axis=-1, keepdims=True)
    projectors = np.eye(3) - d[:, :, None] * d[:, None, :]
    system, right = projectors.sum(0), (projectors @ origins[:, :, None]).sum(0)[:, 0]
    if not np.isfinite(system).all() or np.linalg.cond(system) > 1e8:
        return None
    return np.linalg.solve(system, right)


def write_llff(folder: str | Path, camera_to_world: np.ndarray, height: int, width: int,
               focal: float, near: np.ndarray, far: np.ndarray) -> None:
    """Write ``poses_bounds.npy`` for OpenGL cameras ``[N, 4, 4]`` (the inverse of the axis
    change ``read_llff`` makes); images and masks are the caller's to write."""
    camera_to_world = np.asarray(camera_to_world, dtype=np.float64)
    rotation = camera_to_world[:, :3, :3] @ _LLFF_TO_OPENGL.T
    hwf = np.broadcast_to(np.array([height, width, focal], np.float64), (len(rotation), 3))
    pose = np.concatenate([rotation, camera_to_world[:, :3, 3:4], hwf[:, :, None]], -1)
    table = np.concatenate([pose.reshape(-1, 15), np.stack([near, far], -1)], -1)
    np.save(Path(folder) / "poses_bounds.npy", table)
