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


@contextlib.contextmanager
def kept(mesh: bpy.types.Mesh):
    """The block may change ``mesh`` (bmesh operations, shading); afterwards every corner has
    the normal its own corner, or the corner it was made from, had before, as a custom
    normal."""
    normals = np.empty(len(mesh.loops) * 3, np.float32)
    mesh.corner_normals.foreach_get("vector", normals)
    carried = mesh.attributes.new(_CARRIED, "FLOAT_VECTOR", "CORNER")
    carried.data.foreach_set("vector", normals)
    try:
        yield mesh
    finally:
        carried = mesh.attributes[_CARRIED]
        normals = np.empty(len(mesh.loops) * 3, np.float32)
        carried.data.foreach_get("vector", normals)
        mesh.attributes.remove(carried)
        mesh.normals_split_custom_set(normals.reshape(-1, 3))
