"""Quadric edge-collapse simplification to a triangle budget (the ``fast-simplification``
package: Fast-Quadric-Mesh-Simplification, MIT, wheels for Linux, macOS and Windows).

Pass 1's surface comes out of marching tetrahedra with many more triangles than the images
resolve, many of them slivers; xatlas's time grows quickly with both (docs/BENCHMARKS.md,
"Unwrap"), so ``reconstruct`` simplifies the surface before unwrapping it.
"""

from __future__ import annotations

import numpy as np
import torch

from diffrec.geometry.cleanup import clean_mesh


def simplify(vertices: torch.Tensor, triangles: torch.Tensor, max_triangles: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(vertices [V', 3], triangles int64 [T', 3])`` with ``T' <= max_triangles`` (about
    that many), by quadric edge collapse, on the input's device and dtype; the input itself
    when it already fits or ``max_triangles`` is 0 (no budget)."""
    if max_triangles <= 0 or len(triangles) <= max_triangles:
        return vertices, triangles
    import fast_simplification

    points = vertices.detach().cpu().numpy().astype(np.float64)
    faces = triangles.detach().cpu().numpy().astype(np.int64)
    points, faces = fast_simplification.simplify(points, faces, target_count=max_triangles)
    simplified = torch.from_numpy(np.ascontiguousarray(points)).to(vertices)
    # the collapse can leave slivers of zero area and vertices nothing uses
    return clean_mesh(simplified, torch.from_numpy(faces.astype(np.int64)).to(triangles.device))
