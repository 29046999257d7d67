"""The plane an object stands on (a table top, the floor), found from photos and their
cameras alone, and the pixels of each photo that show it. Masks made without a model
(``auto_masks``) need it: the object's contact shadow is a real patch of table that every
view sees alike, so colour and carving keep it, and the object's shaded underside looks like
that shadow.

**Finding it** (``find_support_plane``): a plane sweep. A candidate plane sends each pixel
of a view to its ``NEIGHBOURS`` nearest views (the pixel's ray meets the plane at a point
they see too); where the plane is what the pixel shows, the views agree on its colour, up to
each pair's exposure (the median log ratio over the pair's pixels, taken out). The candidate
with the most agreeing pixels wins: planes across the cameras' mean up direction at heights
through the object's region, then the best one turned and moved by steps halved
``REFINE_ROUNDS`` times. There is none where the best is not ``PEAK`` times the sweep's
median (no table, or one without texture to agree on).

**Its pixels** (``plane_pixels``): those that show the plane agree with at least
``MIN_AGREEING`` of their neighbours and with half of those that see their point (opened by
a 3x3 square: a stray pixel of the object agreeing by chance is dropped). Those that show
something standing on it near the object agree with none of the two or more that see the
plane's point behind them, which is within the object's sphere's radius of the point below
its centre (opened by a 3x3 square, then eroded by ``STANDING_MARGIN`` pixels: the smoothing
spreads the object's colour a little onto the plane around it, and the plane's darkest
pixels, near the object, agree with none by noise). These tell the object's shaded underside
from its shadow, which colour alone cannot where the two look alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from diffrec.camera import Cameras
from diffrec.pipeline.views import cameras_at_size, resize_rgba
from diffrec.protocol.images import longest_side_size

__all__ = ["Plane", "find_support_plane", "plane_pixels"]

SEARCH_SIZE = 64  # longest side, pixels, of the views the plane is searched in
NEIGHBOURS = 4  # views each view is compared with: the nearest camera centres
BLUR = 1.0  # standard deviation, pixels, of the Gaussian the views are smoothed by (noise)
DARK = 0.05  # added to linear colour before taking logs (noise in the dark)
AGREEMENT = 0.12  # most summed |log ratio| over RGB of two views' colours that agree
SWEEP_HEIGHTS = (-1.5, 0.5, 21)  # heights swept, region radii from its centre: low, high, count
TILT_DEGREES = 4.0  # the refinement's first turn; its first move is half the sweep's spacing
REFINE_ROUNDS = 4
PEAK = 2.0  # the best plane's agreeing pixels over the sweep's median, for there to be a plane
MIN_AGREEING = 2  # neighbours a pixel of the plane agrees with, at least
CHUNK_VIEWS = 8  # views compared at a time where their pixels are labelled (memory)
STANDING_MARGIN = 2  # pixels eroded off the pixels of what stands on the plane
MIN_UPRIGHT = 0.5  # length of the cameras' mean up vector: shorter, and no "up" to sweep along


@dataclass(frozen=True)
class Plane:
    """``normal · x = offset``, world units; ``normal`` unit, on the cameras' side."""

    normal: np.ndarray
    offset: float

    def height(self, points: np.ndarray) -> np.ndarray:
        """Signed distance of ``points [..., 3]`` above the plane (negative below)."""
        return points @ self.normal - self.offset


@dataclass(frozen=True)
class PlanePixels:
    """``[N, H, W]`` bool maps of the views (see the module docstring)."""

    plane: np.ndarray  # the pixels that show the plane
    standing: np.ndarray  # those that show something standing on it, near the object


@dataclass(frozen=True)
class _Views:
    """What comparing views through a plane needs, computed once."""

    cameras: Cameras
    logs: torch.Tensor  # [N, 3, H, W] log(linear colour + DARK)
    neighbours: torch.Tensor  # [N, K] indices of each view's nearest views
    origins: torch.Tensor  # [N, 3] camera centres
    rays: torch.Tensor  # [N, H, W, 3] unit ray directions

    @classmethod
    def of(cls, cameras: Cameras, colours: torch.Tensor) -> _Views:
        origins = cameras.centers().double().cpu()
        count = min(NEIGHBOURS, len(cameras) - 1)
        neighbours = torch.cdist(origins, origins).argsort(-1)[:, 1:count + 1]
        smooth = np.stack([cv2.GaussianBlur(image, (0, 0), BLUR)
                           for image in colours.float().clamp(0, 1).numpy()])
        logs = torch.log(torch.from_numpy(smooth) + DARK).permute(0, 3, 1, 2)
        return cls(cameras, logs, neighbours, origins.float(), cameras.ray_directions().cpu())


def find_support_plane(cameras: Cameras, colours: torch.Tensor, centre: np.ndarray,
                       radius: float) -> Plane | None:
    """The plane the object in the sphere (``centre``, ``radius``; world units) stands on,
    seen in the views' linear RGB ``colours [N, H, W, 3]``; None where the views show none
    (see the module docstring)."""
    up = cameras.camera_to_world[:, :3, 1].double().mean(0).cpu().numpy()
    if len(cameras) < 2 or np.linalg.norm(up) < MIN_UPRIGHT:
        return None
    up /= np.linalg.norm(up)
    width, height = longest_side_size(cameras.width, cameras.height,
                                      min(SEARCH_SIZE, max(cameras.width, cameras.height)))
    opaque = torch.cat([colours, torch.ones_like(colours[..., :1])], -1)
    views = _Views.of(cameras_at_size(cameras.to("cpu"), width, height),
                      resize_rgba(opaque.cpu(), width, height)[..., :3])
    low, high, count = SWEEP_HEIGHTS
    heights = np.linspace(low, high, count) * radius
    swept = [_agreeing_pixels(views, _plane(up, centre + h * up)) for h in heights]
    best = int(np.argmax(swept))
    if swept[best] < PEAK * max(float(np.median(swept)), 1.0):
        return None
    return _refined(views, up, centre + heights[best] * up, heights[1] - heights[0])


def _refined(views: _Views, normal: np.ndarray, point: np.ndarray, spacing: float) -> Plane:
    """The plane through ``point`` across ``normal`` turned about two axes and moved along
    its normal, one at a time, a step either way where more pixels agree there
    (``REFINE_ROUNDS`` rounds of halved steps; the first move half the sweep's ``spacing``)."""
    side = np.cross(normal, np.eye(3)[np.argmin(np.abs(normal))])
    side /= np.linalg.norm(side)
    axes = (side, np.cross(normal, side))
    best = _plane(normal, point)
    score = _agreeing_pixels(views, best)
    turn, move = math.radians(TILT_DEGREES), spacing / 2
    for _ in range(REFINE_ROUNDS):
        for change in range(3):
            for sign in (-1.0, 1.0):
                if change < 2:
                    turned = best.normal + sign * turn * axes[change]
                    candidate = _plane(turned / np.linalg.norm(turned), point)
                else:
                    candidate = _plane(best.normal, point + sign * move * best.normal)
                candidate_score = _agreeing_pixels(views, candidate)
                if candidate_score > score:
                    best, score = candidate, candidate_score
                    point = point + (best.offset - best.normal @ point) * best.normal
                    break
        turn, move = turn / 2, move / 2
    return best


def _plane(normal: np.ndarray, point: np.ndarray) -> Plane:
    return Plane(normal, float(normal @ point))


def _agreeing_pixels(views: _Views, plane: Plane) -> float:
    agree, _ = _agreement(views, plane)
    return float(agree.sum())


def _agreement(views: _Views, plane: Plane, chosen: slice = slice(None)
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(agree, seen)``, ``[N, K, H, W]`` bool for the ``chosen`` views: whether the point
    of the plane each pixel's ray meets is seen by the view's k-th neighbour, and whether
    the two agree on its colour there (``AGREEMENT``, after the pair's exposure ratio is
    taken out)."""
    cameras, others = views.cameras, views.neighbours[chosen]
    points, ahead = _plane_points(views, plane, chosen)
    world_to_camera = cameras.world_to_camera().float().cpu()[others]  # [N, K, 4, 4]
    local = (torch.einsum("nkij,nhwj->nkhwi", world_to_camera[..., :3, :3], points)
             + world_to_camera[..., None, None, :3, 3])
    distance = -local[..., 2]
    safe = torch.where(distance > 0, distance, torch.ones_like(distance))
    fx, fy, cx, cy = (getattr(cameras, name).float().cpu()[others][..., None, None]
                      for name in ("fx", "fy", "cx", "cy"))
    grid = torch.stack([(cx + fx * local[..., 0] / safe) / cameras.width * 2 - 1,
                        (cy - fy * local[..., 1] / safe) / cameras.height * 2 - 1], -1)
    seen = ahead[:, None] & (distance > 0) & (grid.abs() < 1).all(-1)
    count, k, height, width = seen.shape
    sampled = F.grid_sample(views.logs[others.reshape(-1)], grid.reshape(-1, height, width, 2),
                            align_corners=False).reshape(count, k, 3, height, width)
    ratio = (views.logs[chosen, None] - sampled).permute(0, 1, 3, 4, 2)  # [N, K, H, W, 3]
    exposure = torch.where(seen[..., None], ratio, torch.nan).flatten(2, 3).nanmedian(2).values
    exposure = torch.nan_to_num(exposure)[:, :, None, None]
    agree = seen & ((ratio - exposure).abs().sum(-1) < AGREEMENT)
    return agree, seen


def _plane_points(views: _Views, plane: Plane, chosen: slice
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(points [N, H, W, 3], ahead [N, H, W] bool)``: where the ``chosen`` views' pixels'
    rays meet ``plane``, and whether they do in front of the camera (the camera's centre
    where not)."""
    normal = torch.from_numpy(plane.normal).float()
    origins, rays = views.origins[chosen], views.rays[chosen]
    depth = (float(plane.offset) - origins @ normal)[:, None, None] / (rays @ normal)
    ahead = depth.isfinite() & (depth > 0)
    depth = torch.where(ahead, depth, 0.0)
    return origins[:, None, None] + rays * depth[..., None], ahead


def plane_pixels(cameras: Cameras, colours: torch.Tensor, plane: Plane, centre: np.ndarray,
                 radius: float) -> PlanePixels:
    """The pixels of the views' linear RGB ``colours [N, H, W, 3]`` that show ``plane``, and
    those that show something standing on it within ``radius`` of the point below
    ``centre`` (world units; see the module docstring)."""
    views = _Views.of(cameras.to("cpu"), colours.cpu())
    foot = torch.from_numpy(centre - plane.height(centre) * plane.normal).float()
    square = np.ones((3, 3), np.uint8)
    shown, standing = [], []
    for start in range(0, len(cameras), CHUNK_VIEWS):
        chosen = slice(start, start + CHUNK_VIEWS)
        agree, seen = _agreement(views, plane, chosen)
        agreeing, seeing = agree.sum(1), seen.sum(1)
        points, ahead = _plane_points(views, plane, chosen)
        behind = ahead & ((points - foot).norm(dim=-1) < radius)
        for view, hidden in zip(((agreeing >= MIN_AGREEING) & (2 * agreeing >= seeing)).numpy(),
                                ((agreeing == 0) & (seeing >= MIN_AGREEING) & behind).numpy(),
                                strict=True):
            shown.append(cv2.morphologyEx(view.astype(np.uint8), cv2.MORPH_OPEN, square))
            opened = cv2.morphologyEx(hidden.astype(np.uint8), cv2.MORPH_OPEN, square)
            standing.append(cv2.erode(opened, square, iterations=STANDING_MARGIN))
    return PlanePixels(np.stack(shown).astype(bool), np.stack(standing).astype(bool))
