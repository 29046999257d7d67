"""The self-shadowing table a pass renders with (``settings.self_shadowing``), kept current.

``diffrec.render.shadowing.vertex_visibility`` casts rays from every vertex: seconds for a
scanned mesh, too slow for every iteration. A fixed mesh (materials mode) gets its table once.
While the geometry moves the table is recast every ``settings.self_shadowing_every`` iterations
and, in between, carried to the current vertices from the nearest vertex it was cast from
(the vertex count of an extracted surface changes every iteration).
"""

from __future__ import annotations

import torch

from diffrec.render.shadowing import vertex_visibility

_NEAREST_CHUNK = 4096  # current vertices per distance matrix


def nearest_rows(table: torch.Tensor, sources: torch.Tensor, targets: torch.Tensor
                 ) -> torch.Tensor:
    """Rows of ``table`` ``[S, K]`` (one per point of ``sources`` [S, 3]) for each point of
    ``targets`` [N, 3]: the row of its nearest source point, ``[N, K]``."""
    picks = [torch.cdist(part, sources).argmin(1) for part in targets.split(_NEAREST_CHUNK)]
    return table[torch.cat(picks)] if picks else table[:0]


class VisibilityCache:
    """Per-vertex visibility for the current mesh of a pass (see the module docstring)."""

    def __init__(self, refresh_every: int):
        if refresh_every < 1:
            raise ValueError(f"refresh_every must be at least 1, got {refresh_every}")
        self.refresh_every = refresh_every
        self._positions: torch.Tensor | None = None
        self._table: torch.Tensor | None = None
        self._cast_at: int | None = None

    @torch.no_grad()
    def table(self, positions: torch.Tensor, triangles: torch.Tensor, iteration: int,
              moving: bool) -> torch.Tensor:
        """``[V, K]`` for the mesh (``positions`` [V, 3], ``triangles``) at ``iteration``;
        ``moving``: whether the geometry is being optimised."""
        positions = positions.detach()
        stale = self._table is None or (moving and iteration - self._cast_at >= self.refresh_every)
        if stale:
            self._table = vertex_visibility(positions, triangles).to(positions.device)
            self._positions, self._cast_at = positions.clone(), iteration
        if len(positions) == len(self._positions) and torch.equal(positions, self._positions):
            return self._table
        return nearest_rows(self._table, self._positions, positions)
