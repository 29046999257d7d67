"""Unique rows of a 2D tensor, for welding vertices and finding shared edges and triangles.

``torch.unique(x, dim=0)`` compares rows one by one on the CPU (a Python-speed loop of
``select`` and ``equal`` calls inside ATen), which made it a tenth of a DMTet step. Sorting
column by column with stable sorts gives the same answer with a handful of vectorised calls.
"""

from __future__ import annotations

import torch


def unique_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(unique [U, K], inverse int64 [N])`` for ``rows [N, K]``, as
    ``torch.unique(rows, dim=0, return_inverse=True)``: the distinct rows in lexicographic
    order, and for each input row the index of its row in ``unique``. Rows compare by ``==``
    (so -0.0 equals 0.0; NaN never equals anything, so each row holding one stays apart)."""
    if rows.ndim != 2:
        raise ValueError(f"rows must be a 2D tensor [N, K], got {tuple(rows.shape)}")
    count = rows.shape[0]
    order = torch.arange(count, device=rows.device)
    for column in range(rows.shape[1] - 1, -1, -1):  # least significant key first
        order = order[torch.argsort(rows[order, column], stable=True)]
    ordered = rows[order]
    starts = torch.ones(count, dtype=torch.bool, device=rows.device)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(dim=1)
    group = torch.cumsum(starts, 0) - 1
    inverse = torch.empty_like(group)
    inverse[order] = group
    return ordered[starts], inverse
