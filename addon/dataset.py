"""NeRF-style datasets (``transforms_train.json``), without bpy.

The file holds ``camera_angle_x`` (horizontal field of view, radians) and ``frames``, each with
``file_path`` (relative, extension optional) and ``transform_matrix`` (camera to world,
OpenGL camera: the same matrix as Blender's ``matrix_world``). Optional ``fl_x``, ``fl_y``,
``cx``, ``cy``, ``w``, ``h`` (pixels) give exact intrinsics, as instant-ngp writes them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".exr")


@dataclass
class Frame:
    image: Path
    camera_to_world: np.ndarray  # [4,4] float64


@dataclass
class Dataset:
    frames: list[Frame]
    camera_angle_x: float
    pixel_intrinsics: dict[str, float] | None = None  # the file's fl_x, fl_y, cx, cy, w, h

    def intrinsics(self, width: int, height: int) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy) in pixels for images of ``width`` x ``height``: the file's
        ``fl_x``... when it has them (scaled from its ``w`` x ``h`` when the images were
        resized), else from ``camera_angle_x`` with the principal point at the centre."""
        known = self.pixel_intrinsics or {}
        if "fl_x" not in known:
            fx = width / (2 * math.tan(self.camera_angle_x / 2))
            return fx, fx, width / 2, height / 2
        sx = width / known.get("w", width)
        sy = height / known.get("h", height)
        return (known["fl_x"] * sx, known.get("fl_y", known["fl_x"]) * sy,
                known.get("cx", known.get("w", width) / 2) * sx,
                known.get("cy", known.get("h", height) / 2) * sy)


def _image_path(root: Path, file_path: str) -> Path:
    path = (root / file_path).resolve()
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return path
    for suffix in IMAGE_SUFFIXES:
        if path.with_suffix(path.suffix + suffix).exists():
            return path.with_suffix(path.suffix + suffix)
    return path.with_suffix(path.suffix + ".png")


def read(path: Path) -> Dataset:
    """A dataset from its transforms file; raises ValueError with the reason when malformed."""
    path = Path(path)
    data = json.loads(path.read_text())
    try:
        angle = float(data["camera_angle_x"])
        frames = [
            Frame(_image_path(path.parent, frame["file_path"]),
                  np.array(frame["transform_matrix"], dtype=np.float64))
            for frame in data["frames"]
        ]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a NeRF transforms file: missing {exc}") from None
    if not frames:
        raise ValueError(f"{path} lists no frames")
    for frame in frames:
        if frame.camera_to_world.shape != (4, 4) or not np.isfinite(frame.camera_to_world).all():
            raise ValueError(f"{path}: a transform_matrix is not a finite 4x4 matrix")
    if not 0 < angle < math.pi:
        raise ValueError(f"{path}: camera_angle_x {angle} is not a field of view in radians")
    pixel = {key: data[key] for key in ("fl_x", "fl_y", "cx", "cy", "w", "h") if key in data}
    if not all(isinstance(value, int | float) and math.isfinite(value) and value > 0
               for value in pixel.values()):
        raise ValueError(f"{path}: fl_x, fl_y, cx, cy, w and h must be positive numbers")
    return Dataset(frames, angle, pixel or None)


def write(path: Path, frames: list[Frame], width: int, height: int, fxfycxcy) -> None:
    """Write a transforms file; image paths are stored relative to its folder, no extension
    dropped."""
    fx, fy, cx, cy = (float(value) for value in fxfycxcy)
    content = {
        "camera_angle_x": 2 * math.atan(width / (2 * fx)),
        "fl_x": fx, "fl_y": fy, "cx": cx, "cy": cy, "w": width, "h": height,
        "frames": [
            {
                "file_path": "./" + frame.image.relative_to(path.parent).as_posix(),
                "transform_matrix": np.asarray(frame.camera_to_world).tolist(),
            }
            for frame in frames
        ],
    }
    path.write_text(json.dumps(content, indent=2))

