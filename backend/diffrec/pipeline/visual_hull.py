"""The visual hull of the training views: where the object can be, given its masks.

A point is outside the hull when some view sees it (it projects in front of the camera and
inside the image) on the background (alpha below one half, after the mask is dilated by one
pixel so that antialiased edges do not carve the object), or when fewer than half the views
see it (too little evidence of the object there: the box's corners, seen by a few views at
most, are where floaters came from; cameras around an object all see it). Pass 1
starts its SDF from this hull instead of a sphere: the silhouettes are right from the first
iteration and holes that any view sees through (a ring's) are open from the start.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diffrec.camera import Cameras

VIEWS_PER_CHUNK = 8


def outside_hull(points: torch.Tensor, cameras: Cameras, alpha: torch.Tensor) -> torch.Tensor:
    """Bool ``[P]``: which world-space ``points [P, 3]`` lie outside the visual hull of the
    views (``cameras``, ``alpha [N, H, W]`` in [0, 1], rows top-down as images are)."""
    homogeneous = torch.cat([points, torch.ones_like(points[:, :1])], -1)
    # dilate by one pixel: a point on an antialiased edge stays inside
    masks = F.max_pool2d(alpha[:, None].float(), 3, stride=1, padding=1)
    seen = torch.zeros(len(points), dtype=torch.int64, device=points.device)
    carved = torch.zeros(len(points), dtype=torch.bool, device=points.device)
    for start in range(0, len(cameras), VIEWS_PER_CHUNK):
        views = range(start, min(start + VIEWS_PER_CHUNK, len(cameras)))
        clip = homogeneous @ cameras[views].world_to_clip().to(points).transpose(1, 2)
        w = clip[..., 3]
        ndc = clip[..., :2] / w.clamp_min(1e-8)[..., None]
        in_image = (w > 0) & (ndc.abs() <= 1).all(-1)  # [n, P]
        # grid_sample's y runs down the rows: image rows are top-down, NDC y points up
        grid = torch.stack([ndc[..., 0], -ndc[..., 1]], -1)[:, :, None]
        coverage = F.grid_sample(masks[start:start + len(views)].to(points), grid,
                                 mode="bilinear", align_corners=False)[:, 0, :, 0]
        seen += in_image.sum(0)
        carved |= (in_image & (coverage < 0.5)).any(0)
    return carved | (2 * seen < len(cameras))
