"""An object's bounding box in world space, without bpy (any object with Blender's
``matrix_world`` and ``bound_box`` will do)."""

from __future__ import annotations

import numpy as np


def world_box(obj) -> np.ndarray:
    """The 8 corners of the object's bounding box in world coordinates, [8, 3] metres."""
    matrix = np.array([list(row) for row in obj.matrix_world])
    corners = np.array([list(corner) for corner in obj.bound_box], dtype=np.float64)
    return corners @ matrix[:3, :3].T + matrix[:3, 3]


def cube_corners(center, side: float) -> np.ndarray:
    """The 8 corners of the axis-aligned cube of ``side`` about ``center`` [3] (scene units),
    [8, 3]."""
    signs = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)
    return np.asarray(center, dtype=np.float64) + signs * side / 2
