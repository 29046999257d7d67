"""Quadric edge-collapse simplification to a triangle budget (the ``fast-simplification``
package: Fast-Quadric-Mesh-Simplification, MIT, wheels for Linux, macOS and Windows).

Pass 1's surface comes out of marching tetrahedra with many more triangles than the images
resolve, many of them slivers; xatlas's time grows quickly with both (docs/BENCHMARKS.md,
"Unwrap"), so ``reconstruct`` simplifies the surface before unwrapping it. A triangle budget
(``target_triangles``) decimates a given mesh the same way.

The package's ``target_count`` is a target, not a bound: it can stop a few triangles above it
(a noisy 1,472-triangle grid asked for 20 keeps 21) or far above (separate pieces each keep
a few). ``simplify`` makes it a bound: it collapses again, aiming as far below the budget as
the last try ended above it, and refuses a budget it cannot reach.
"""

from __future__ import annotations

import numpy as np
import torch

from diffrec.errors import UserError
from diffrec.geometry.cleanup import clean_mesh

SIMPLIFY_TRIES = 4
"""Collapses tried before a budget is found unreachable (each from the last one's result)."""


def simplify(vertices: torch.Tensor, triangles: torch.Tensor, max_triangles: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(vertices [V', 3], triangles int64 [T', 3])`` with ``T' <= max_triangles`` (about
    that many), by quadric edge collapse, cleaned (``clean_mesh``), on the input's device and
    dtype; the input itself when it already fits or ``max_triangles`` is 0 (no budget).
    Raises ``UserError`` when collapsing cannot reach the budget (a mesh of many separate
    pieces, or one whose every collapse would fold a triangle over) or leaves nothing."""
    if max_triangles <= 0 or len(triangles) <= max_triangles:
        return vertices, triangles
    import fast_simplification

    points = vertices.detach().cpu().numpy().astype(np.float64)
    faces = triangles.detach().cpu().numpy().astype(np.int64)
    target = max_triangles
    for _ in range(SIMPLIFY_TRIES):
        points, collapsed = fast_simplification.simplify(points, faces, target_count=target)
        # the collapse can leave slivers of zero area and vertices nothing uses
        simplified = torch.from_numpy(np.ascontiguousarray(points)).to(vertices)
        kept_vertices, kept = clean_mesh(
            simplified, torch.from_numpy(collapsed.astype(np.int64)).to(triangles.device))
        reached = len(kept)
        if reached == 0:
            raise UserError(f"the mesh's {len(triangles):,} triangles collapse to none at a "
                            f"budget of {max_triangles:,} (every triangle left was degenerate); "
                            "allow more triangles")
        if reached <= max_triangles:
            return kept_vertices, kept
        if reached >= len(faces):
            break  # no collapse left that the package takes
        points = kept_vertices.detach().cpu().numpy().astype(np.float64)
        faces = kept.cpu().numpy()
        target = max(0, max_triangles - (reached - max_triangles))
    raise UserError(f"the mesh's {len(triangles):,} triangles cannot be simplified to "
                    f"{max_triangles:,}: edge collapse stops at {reached:,} (separate pieces "
                    "each keep a few, and a collapse that would fold a triangle over is not "
                    f"made); allow at least {reached:,} triangles")
