"""The visual hull of the training views: where the object can be, given its masks.

``hull_distance`` gives every point a signed distance to the hull's boundary, in world units
(positive outside): each view's signed distance, in pixels, from the point's projection to
its mask's outline (``signed_pixel_distance``: a distance transform of the mask, refined to
a fraction of a pixel on antialiased edges by the coverage itself), scaled to world units at the
point's depth; the hull's is the largest over the views that see the point. Near the outline
this is the distance to the silhouette cone, which is what matters for where the surface
crosses zero: a surface extracted from it lies within a fraction of a pixel of the hull,
where one carved on the grid alone (inside or outside) sits up to half a cell off, and a
one-pixel dilation of the masks had made the hull half again as large as the object.

A point that fewer than half the views see is outside (too little evidence of the object
there: the box's corners, seen by a few views at most, are where floaters came from;
cameras around an object all see it). Pass 1 starts its SDF from this hull instead of a
sphere: silhouettes right from the first iteration, and holes that any view sees through (a
ring's) open from the start.
"""

from __future__ import annotations

from collections.abc import Iterator

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from diffrec.camera import Cameras

VIEWS_PER_CHUNK = 8
UNSEEN = float("inf")  # the distance given to points too few views see


def signed_pixel_distance(alpha: torch.Tensor) -> torch.Tensor:
    """``[N, H, W]`` signed distance, in pixels, from each pixel centre to the masks' outlines
    (alpha ``[N, H, W]`` in [0, 1]; negative on the object, alpha >= 0.5), read from the
    coverage: a pixel on an antialiased edge holds ``0.5 - alpha`` (the edge crosses it
    ``alpha`` of the way in); a fully covered or empty pixel takes the distance to the
    nearest pixel that is not (exact Euclidean between centres), plus that pixel's own value,
    so that the zero level follows the coverage to a fraction of a pixel. An empty mask is
    ``H + W`` pixels outside everywhere, a full one as far inside."""
    coverage = alpha.detach().cpu().numpy().astype(np.float32)
    far = float(alpha.shape[1] + alpha.shape[2])
    return torch.from_numpy(np.stack([
        np.where(view >= 0.5, _from_nearest(view < 1, view, -1.0, far),
                 _from_nearest(view > 0, view, 1.0, far)) for view in coverage
    ])).to(alpha.device)


def _from_nearest(boundary: np.ndarray, alpha: np.ndarray, sign: float, far: float
                  ) -> np.ndarray:
    """``0.5 - alpha`` of the nearest ``boundary`` pixel plus ``sign`` times the distance to
    it, per pixel; ``sign * far`` everywhere when there is no boundary pixel."""
    if not boundary.any():
        return np.full(alpha.shape, sign * far, np.float32)
    _, labels = cv2.distanceTransformWithLabels((~boundary).astype(np.uint8), cv2.DIST_L2,
                                                cv2.DIST_MASK_5, labelType=cv2.DIST_LABEL_PIXEL)
    nearest = np.flatnonzero(boundary)[labels - 1]  # labels count boundary pixels row-major
    rows, cols = np.divmod(nearest, alpha.shape[1])
    grid_rows, grid_cols = np.indices(alpha.shape)
    distance = np.hypot(grid_rows - rows, grid_cols - cols)
    return (0.5 - alpha.reshape(-1)[nearest] + sign * distance).astype(np.float32)


def hull_distance(points: torch.Tensor, cameras: Cameras, alpha: torch.Tensor) -> torch.Tensor:
    """``[P]`` signed distance (world units, positive outside) from world-space ``points
    [P, 3]`` to the visual hull of the views (``cameras``, ``alpha [N, H, W]`` in [0, 1],
    rows top-down as images are); ``UNSEEN`` (infinity) where fewer than half the views see
    the point (it projects in front of the camera and inside the image)."""
    seen = torch.zeros(len(points), dtype=torch.int64, device=points.device)
    distance = torch.full((len(points),), -UNSEEN, dtype=points.dtype, device=points.device)
    for in_image, in_world in view_distances(points, cameras, alpha):
        distance = torch.maximum(distance, torch.where(in_image, in_world, -UNSEEN).amax(0))
        seen += in_image.sum(0)
    return torch.where(2 * seen < len(cameras), UNSEEN, distance)


def view_distances(points: torch.Tensor, cameras: Cameras, alpha: torch.Tensor
                   ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Per chunk of up to ``VIEWS_PER_CHUNK`` views, in order: ``(in_image [n, P] bool,
    distance [n, P])``: whether each view sees each of ``points [P, 3]`` (in front of the
    camera, inside the image) and the signed distance (world units at the point's depth,
    positive outside) from it to that view's silhouette cone (``alpha [N, H, W]``)."""
    homogeneous = torch.cat([points, torch.ones_like(points[:, :1])], -1)
    pixels = signed_pixel_distance(alpha)[:, None].to(points)
    for start in range(0, len(cameras), VIEWS_PER_CHUNK):
        views = cameras[range(start, min(start + VIEWS_PER_CHUNK, len(cameras)))]
        clip = homogeneous @ views.world_to_clip().to(points).transpose(1, 2)
        w = clip[..., 3]
        ndc = clip[..., :2] / w.clamp_min(1e-8)[..., None]
        in_image = (w > 0) & (ndc.abs() <= 1).all(-1)  # [n, P]
        # grid_sample's y runs down the rows: image rows are top-down, NDC y points up
        grid = torch.stack([ndc[..., 0], -ndc[..., 1]], -1)[:, :, None]
        in_pixels = F.grid_sample(pixels[start:start + len(views)], grid, mode="bilinear",
                                  padding_mode="border", align_corners=False)[:, 0, :, 0]
        # a pixel spans depth / focal length (in pixels) world units at that depth
        focal = ((views.fx + views.fy) / 2).to(points)[:, None]
        yield in_image, in_pixels * w / focal
