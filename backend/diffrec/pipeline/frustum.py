"""Whether cameras see the object's box: refuse camera sets that miss it, warn about partial
views."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import torch

from diffrec.camera import Cameras
from diffrec.errors import UserError

log = logging.getLogger(__name__)

__all__ = ["check_views_see_box"]

_NAMED = 5  # how many offending cameras an error message names
_BOX_EDGES = [(a, b) for a, b in itertools.combinations(range(8), 2) if (a ^ b).bit_count() == 1]


def check_views_see_box(cameras: Cameras, box_min, box_max, names: Sequence[str] | None = None,
                        masks: torch.Tensor | None = None):
    """Raise ``UserError`` naming the cameras that do not see the box at all: its centre is
    behind the camera, or the part of the box between the near and far planes projects
    entirely outside the image (exact: the projected clipped box is a convex polygon, tested
    against the image rectangle by separating axes). Logs a warning naming the cameras that
    see the box only in part (some of it outside the image or the clipping range), leaving
    out those whose ``masks`` (``[N, H, W]`` coverage, None: unknown) show the object clear of
    the image's edges: the box is where the surface is looked for, the object within it."""
    box_min = torch.as_tensor(box_min, dtype=torch.float64).reshape(3)
    box_max = torch.as_tensor(box_max, dtype=torch.float64).reshape(3)
    if not (torch.isfinite(box_min).all() and torch.isfinite(box_max).all()):
        raise UserError("the object's box holds NaN or infinite values")
    if (box_max < box_min).any():
        raise UserError(f"the object's box is inverted: min {box_min.tolist()} > max "
                        f"{box_max.tolist()}")
    names = list(names) if names is not None else [str(i) for i in range(len(cameras))]
    corners = torch.stack([torch.where(torch.tensor([(i >> k) & 1 for k in range(3)]) == 1,
                                       box_max, box_min) for i in range(8)])
    points = torch.cat([corners, (box_min + box_max)[None] / 2], 0)
    homogeneous = torch.cat([points, torch.ones(9, 1, dtype=torch.float64)], -1)
    camera_space = homogeneous @ cameras.world_to_camera().double().cpu().transpose(1, 2)
    blind, partial = [], []
    for i in range(len(cameras)):
        label = f"{i} ({names[i]})" if names[i] != str(i) else str(i)
        verdict = _box_in_view(camera_space[i, :, :3], cameras, i)
        if verdict == "behind":
            blind.append(f"{label}: the box is behind it")
        elif verdict == "outside":
            blind.append(f"{label}: the box is outside its image")
        elif verdict == "partial" and (masks is None or _touches_edge(masks[i])):
            partial.append(label)
    box = " .. ".join(f"[{', '.join(f'{v:.3g}' for v in corner.tolist())}]"
                      for corner in (box_min, box_max))
    if blind:
        shown = "; ".join(blind[:_NAMED]) + ("; ..." if len(blind) > _NAMED else "")
        raise UserError(f"{len(blind)} of {len(cameras)} cameras do not see the object's box "
                        f"{box} ({shown}): aim them at the object or leave them out")
    if partial:
        log.warning("%d of %d cameras see only part of the object's box %s (%s%s): parts "
                    "outside their images get no supervision from them", len(partial),
                    len(cameras), box, ", ".join(partial[:_NAMED]),
                    ", ..." if len(partial) > _NAMED else "")


def _touches_edge(mask: torch.Tensor) -> bool:
    """Whether the object covers (over half) any pixel on the edge of ``mask [H, W]``."""
    edges = torch.cat([mask[0], mask[-1], mask[:, 0], mask[:, -1]])
    return bool((edges > 0.5).any())


def _box_in_view(camera_space: torch.Tensor, cameras: Cameras, i: int) -> str:
    """"behind", "outside", "partial" or "inside" for camera-space corners [8, 3] + centre."""
    depth = -camera_space[:, 2]
    if depth[8] <= 0:
        return "behind"
    near, far = float(cameras.near[i]), float(cameras.far[i])
    corners, depth = camera_space[:8], depth[:8]
    kept = [corners[(depth >= near) & (depth <= far)]]
    for a, b in _BOX_EDGES:  # where the box's edges cross the near and far planes
        for plane in (near, far):
            if (depth[a] - plane) * (depth[b] - plane) < 0:
                t = (plane - depth[a]) / (depth[b] - depth[a])
                kept.append((corners[a] + t * (corners[b] - corners[a]))[None])
    clipped = torch.cat(kept)
    if len(clipped) == 0:
        return "outside"
    fx, fy, cx, cy = (float(getattr(cameras, k)[i]) for k in ("fx", "fy", "cx", "cy"))
    px = cx + fx * clipped[:, 0] / -clipped[:, 2]
    py = cy - fy * clipped[:, 1] / -clipped[:, 2]
    projected = torch.stack([px, py], -1)
    rectangle = torch.tensor([[0.0, 0.0], [cameras.width, 0.0], [0.0, cameras.height],
                              [cameras.width, cameras.height]], dtype=torch.float64)
    if not _convex_hulls_overlap(projected, rectangle):
        return "outside"
    inside_image = ((px >= 0) & (px <= cameras.width) & (py >= 0) & (py <= cameras.height)).all()
    all_in_range = bool(((depth >= near) & (depth <= far)).all())
    return "inside" if inside_image and all_in_range else "partial"


def _convex_hulls_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the convex hulls of 2D point sets ``a`` [K, 2] and ``b`` [M, 2] share interior
    points. Separating axis test: a separating line, if any, is parallel to a hull edge, and
    every hull edge joins two of the points, so the normals of all point pairs are tried."""
    points = torch.cat([a, b])
    pairs = torch.combinations(torch.arange(len(points)), 2)
    edges = points[pairs[:, 1]] - points[pairs[:, 0]]
    axes = torch.stack([-edges[:, 1], edges[:, 0]], -1)
    axes = torch.cat([axes[axes.norm(dim=-1) > 1e-12], torch.eye(2, dtype=points.dtype)])
    on_a, on_b = a @ axes.T, b @ axes.T  # [K, axes], [M, axes]
    separated = (on_a.max(0).values <= on_b.min(0).values) | (
        on_b.max(0).values <= on_a.min(0).values
    )
    return not bool(separated.any())
