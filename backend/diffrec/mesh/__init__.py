"""Triangle meshes: the ``Mesh`` record and the geometry functions the renderer needs.

- ``Mesh`` (positions, triangles, optional uvs / normals / tangents with own index buffers)
- normals: ``face_normals``, ``vertex_normals`` (angle- or area-weighted),
  ``with_vertex_normals``, ``with_grouped_normals`` (a mesh's own hard edges kept),
  ``welded_normals``, ``corner_angles``, ``safe_normalize``
- tangents: ``with_tangents`` (per-vertex, orthogonalised, handedness in w)
- topology: ``unique_edges``, ``edge_triangles``, ``uv_seams``
- box: ``bounding_box``, ``fit_to_box`` and its ``BoxTransform``

Cleanup (welding, degenerate/duplicate triangles, unused vertices) works on plain tensors and
lives in ``diffrec.geometry.cleanup``.
"""

from diffrec.mesh.box import BoxTransform, bounding_box, fit_to_box
from diffrec.mesh.mesh import Mesh
from diffrec.mesh.normals import (
    corner_angles,
    face_normals,
    safe_normalize,
    vertex_normals,
    welded_normals,
    with_grouped_normals,
    with_vertex_normals,
)
from diffrec.mesh.tangents import with_tangents
from diffrec.mesh.topology import edge_triangles, unique_edges, uv_seams

__all__ = [
    "BoxTransform",
    "Mesh",
    "bounding_box",
    "corner_angles",
    "edge_triangles",
    "face_normals",
    "fit_to_box",
    "safe_normalize",
    "unique_edges",
    "uv_seams",
    "vertex_normals",
    "welded_normals",
    "with_grouped_normals",
    "with_tangents",
    "with_vertex_normals",
]
