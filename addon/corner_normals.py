"""Shading normals kept through changes to a mesh (main thread only).

A mesh's custom normals are stored relative to its faces and sharp edges, so a bmesh
operation that splits or merges faces, or shading it smooth, garbles or drops them. ``kept``
carries each corner's normal through as a corner attribute (which bmesh operations copy to
the corners they make) and sets them again as custom normals after.
"""

from __future__ import annotations

import contextlib

import bpy
import numpy as np

_CARRIED = "diffrec corner normals"


def read(mesh: bpy.types.Mesh) -> np.ndarray:
    """``mesh``'s corner normals [corners, 3] float32 (its shading, custom or not)."""
    normals = np.empty(len(mesh.loops) * 3, np.float32)
    mesh.corner_normals.foreach_get("vector", normals)
    return normals.reshape(-1, 3)


def turned(normals: np.ndarray, linear: np.ndarray) -> np.ndarray:
    """``normals`` [N, 3] as the linear part ``linear`` [3, 3] of a transform turns them:
    by its inverse transpose (a scaled surface keeps them perpendicular), unit length."""
    moved = np.asarray(normals, np.float64) @ np.linalg.inv(linear)
    return moved / np.linalg.norm(moved, axis=1, keepdims=True).clip(1e-12)


@contextlib.contextmanager
def kept(mesh: bpy.types.Mesh, normals: np.ndarray | None = None):
    """The block may change ``mesh`` (bmesh operations, shading, a transform); afterwards
    every corner has the normal its own corner, or the corner it was made from, had before
    (or was given in ``normals`` [corners, 3]), as a custom normal."""
    normals = read(mesh) if normals is None else np.asarray(normals, np.float32)
    carried = mesh.attributes.new(_CARRIED, "FLOAT_VECTOR", "CORNER")
    carried.data.foreach_set("vector", normals.reshape(-1))
    try:
        yield mesh
    finally:
        carried = mesh.attributes[_CARRIED]
        normals = np.empty(len(mesh.loops) * 3, np.float32)
        carried.data.foreach_get("vector", normals)
        mesh.attributes.remove(carried)
        mesh.normals_split_custom_set(normals.reshape(-1, 3))
