"""Isosurface geometry for reconstruction pass 1, on plain tensors (CPU or GPU).

- ``tetgrid``: diffrec's own BCC tet grid over ``[-0.5, 0.5]^3``, cached on disk.
- ``marching_tets``: differentiable marching tetrahedra -> welded, outward-wound mesh.
- ``dmtet``: ``DMTetGeometry`` (trainable SDF + bounded deformation), the SDF sign-change
  regulariser and its weight schedule.
- ``flexicubes``: FlexiCubes extraction on a cube grid and ``FlexiCubesGeometry``.
- ``large_steps``: ``LargeSteps``, vertex positions as ``u = (I + lambda L) x`` (Nicolet et
  al. 2021) solved by preconditioned conjugate gradients, for pass 2 and refine.
- ``cleanup``: weld vertices, drop degenerate/duplicate triangles, unused vertices and small
  disconnected pieces.

The extraction functions live in their modules (``diffrec.geometry.marching_tets.marching_tets``,
``diffrec.geometry.flexicubes.flexicubes``); re-exporting them here would shadow the modules.

Meshes are ``(vertices float [V, 3], triangles int64 [T, 3])``; triangles are wound
counter-clockwise seen from outside, where the SDF is ``>= 0``.
"""

from diffrec.geometry.cleanup import clean_mesh, piece_count, remove_small_pieces
from diffrec.geometry.dmtet import DMTetGeometry, sdf_regularizer_weight, sdf_sign_change_loss
from diffrec.geometry.flexicubes import FlexiCubesGeometry
from diffrec.geometry.large_steps import LargeSteps, SolveNotConverged
from diffrec.geometry.tetgrid import TetGrid, tet_grid

__all__ = [
    "DMTetGeometry",
    "FlexiCubesGeometry",
    "LargeSteps",
    "SolveNotConverged",
    "TetGrid",
    "clean_mesh",
    "piece_count",
    "remove_small_pieces",
    "sdf_regularizer_weight",
    "sdf_sign_change_loss",
    "tet_grid",
]
