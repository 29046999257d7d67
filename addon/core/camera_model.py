"""Blender's camera projection as pinhole intrinsics, without bpy.

The wire convention (docs/protocol.md, "Inputs"): fx, fy, cx, cy in pixels with the origin at
the top-left corner of the top-left pixel, rows top-down; the camera looks down its local −Z
with +Y up, and its pose is Blender's ``matrix_world`` (camera to world).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CameraSettings:
    """What Blender's projection depends on: lens and sensor in millimetres, sensor fit
    ('AUTO', 'HORIZONTAL', 'VERTICAL'), shift in units of the larger view side, the scaled
    render resolution in pixels and the pixel aspect."""

    lens: float
    sensor_width: float
    sensor_height: float
    sensor_fit: str
    width: int
    height: int
    shift_x: float = 0.0
    shift_y: float = 0.0
    pixel_aspect_x: float = 1.0
    pixel_aspect_y: float = 1.0


def intrinsics(camera: CameraSettings) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) in pixels for a perspective camera, as Blender projects it."""
    if camera.sensor_fit not in ("AUTO", "HORIZONTAL", "VERTICAL"):
        raise ValueError(f"unknown sensor fit {camera.sensor_fit!r}")
    if camera.width <= 0 or camera.height <= 0 or camera.lens <= 0:
        raise ValueError("the resolution and the focal length must be positive")
    w, h = float(camera.width), float(camera.height)
    aspect = camera.pixel_aspect_x / camera.pixel_aspect_y
    fit = camera.sensor_fit
    if fit == "AUTO":
        horizontal = w * camera.pixel_aspect_x >= h * camera.pixel_aspect_y
        fit = "HORIZONTAL" if horizontal else "VERTICAL"
        sensor = camera.sensor_width  # AUTO always measures the larger side with sensor_width
    else:
        sensor = camera.sensor_height if fit == "VERTICAL" else camera.sensor_width
    view = w if fit == "HORIZONTAL" else h / aspect
    fx = camera.lens / sensor * view
    fy = fx * aspect
    cx = w / 2 - camera.shift_x * view
    cy = h / 2 + camera.shift_y * view * aspect
    return fx, fy, cx, cy


def camera_for(fxfycxcy, width: int, height: int, sensor_width: float = 36.0) -> CameraSettings:
    """The Blender camera (horizontal sensor fit) that ``intrinsics`` maps to (fx, fx, cx,
    cy) at ``width`` x ``height``: the lens from fx, the shift from the principal point.
    Blender gives a camera one focal length (fy would be the scene's pixel aspect), so fy is
    not represented."""
    fx, _fy, cx, cy = (float(value) for value in fxfycxcy)
    return CameraSettings(lens=fx * sensor_width / width, sensor_width=sensor_width,
                          sensor_height=sensor_width * height / width, sensor_fit="HORIZONTAL",
                          width=width, height=height, shift_x=(width / 2 - cx) / width,
                          shift_y=(cy - height / 2) / width)


def project(points: np.ndarray, camera_to_world: np.ndarray, fxfycxcy) -> np.ndarray:
    """Pixel coordinates (x right, y down, origin top-left corner) and depth of world points.

    points: [N,3]; camera_to_world: [4,4]. Returns [N,3]: x, y in pixels, depth in metres
    (positive in front of the camera).
    """
    fx, fy, cx, cy = fxfycxcy
    world_to_camera = np.linalg.inv(np.asarray(camera_to_world, dtype=np.float64))
    homogeneous = np.concatenate([np.asarray(points, np.float64), np.ones((len(points), 1))], 1)
    local = homogeneous @ world_to_camera.T
    depth = -local[:, 2]
    x = cx + fx * local[:, 0] / depth
    y = cy - fy * local[:, 1] / depth
    return np.stack([x, y, depth], axis=1)


def sees_box(corners: np.ndarray, camera_to_world, fxfycxcy, size: tuple[int, int]) -> bool:
    """Whether any part of the box with ``corners`` [8,3] can be in the image of ``size``
    (width, height): some corner is in front of the camera and the projected corners' bounding
    rectangle overlaps the image. Conservative for boxes crossing the camera plane."""
    projected = project(corners, camera_to_world, fxfycxcy)
    in_front = projected[:, 2] > 0
    if not in_front.any():
        return False
    if not in_front.all():
        return True  # the box surrounds or straddles the camera plane
    x, y = projected[:, 0], projected[:, 1]
    return bool(x.max() > 0 and x.min() < size[0] and y.max() > 0 and y.min() < size[1])
