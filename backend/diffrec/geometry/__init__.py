"""Isosurface geometry for reconstruction pass 1, on plain tensors (CPU or GPU).

- ``tetgrid``: diffrec's own BCC tet grid over ``[-0.5, 0.5]^3``, cached on disk.
- ``marching_tets``: differentiable marching tetrahedra -> welded, outward-wound mesh.
- ``dmtet``: ``DMTetGeometry`` (trainable SDF + bounded deformation), the SDF sign-change
  regulariser and its weight schedule.
- ``cleanup``: weld vertices, drop degenerate/duplicate triangles and unused vertices.

Meshes are ``(vertices float [V, 3], triangles int64 [T, 3])``; triangles are wound
counter-clockwise seen from outside, where the SDF is ``>= 0``.
"""

from diffrec.geometry.cleanup import clean_mesh
from diffrec.geometry.dmtet import DMTetGeometry, sdf_regularizer_weight, sdf_sign_change_loss
from diffrec.geometry.marching_tets import marching_tets
from diffrec.geometry.tetgrid import TetGrid, tet_grid

__all__ = [
    "DMTetGeometry",
    "TetGrid",
    "clean_mesh",
    "marching_tets",
    "sdf_regularizer_weight",
    "sdf_sign_change_loss",
    "tet_grid",
]
