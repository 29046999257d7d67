"""Foreground masks for photos that come without any (no alpha, no mask files), made from
the photos and their cameras alone by default (no learned model, nothing downloaded; a
learned model where the user installs one, below).

1. **The object's region** (``object_region``): a sphere around the point nearest to all the
   cameras' optical axes (``nearest_point_to_lines``), as large as the views' fields of view
   allow (the largest sphere there that the median view sees whole, times ``FILL``), shrunk
   to the capture's sparse 3D points inside it where it has them (a COLMAP model's). Cameras
   whose axes do not meet in front of them (a room seen from inside, a wall seen from along
   it) are refused with ``NOT_OBJECT_CENTRED``.
2. **The surface the object stands on** (``support_plane``: a table top, the floor), where
   the photos show one: its pixels are background in GrabCut's segmentations below, and
   nothing of the hull is below it. Without it, GrabCut takes the object's contact shadow (a patch
   of table every view sees alike, so the carving keeps it) for the object and the object's
   shaded underside, which looks like that shadow, for the table.
3. **A segmentation per view** (``segment``): OpenCV's GrabCut, seeded with the region's
   projection as probable foreground, the rest of the image as probable background and its
   border as background.
4. **Carving** (``carve``, ``hull_silhouettes``): the voxels of the region that the masks of
   all but ``TOLERANCE`` of the views that see them cover form a visual hull (one poor mask
   does not cut the object; a background patch one view took for the object is carved away
   by the others); its silhouette in each view seeds GrabCut again (``_hull_labels``: its
   inside deeper than ``BAND`` of the image's size is foreground, and the outline may move at
   most ``BAND`` from the silhouette, either way). ``CARVE_ROUNDS`` times.
5. **The masks given** are the silhouettes of a last, finer hull (``FINAL_GRID``) carved from
   the last cuts, so that every view's rim agrees with the others'. A reconstruction follows
   every view's mask: rims a few pixels apart from view to view made its surface ragged (on
   the photo benchmark 5.8 dB below the true masks with the cuts, 0.4 dB with the hull's
   silhouettes, whose IoU against the true masks is lower: 0.967 against 0.982).

With ``mask_maker`` "rembg", a learned matting model's masks (``diffrec.pipeline.matting``,
for users who install one) take the place of steps 3 and 4, and the last hull is carved from
them (above the surface of step 2). Masks are made at ``WORKING_SIZE`` pixels at most (the
longer side) and scaled to the views.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from diffrec.camera import Cameras
from diffrec.color import linear_to_srgb
from diffrec.errors import UserError
from diffrec.pipeline.matting import MASK_MAKERS, matte
from diffrec.pipeline.support_plane import Plane, PlanePixels, find_support_plane, plane_pixels
from diffrec.pipeline.views import Views, cameras_at_size, resize_rgba
from diffrec.pipeline.visual_hull import view_distances
from diffrec.protocol.captures import nearest_point_to_lines
from diffrec.protocol.images import longest_side_size

__all__ = ["EMPTY_HULL", "NOT_OBJECT_CENTRED", "Region", "make_masks", "masked_when_opaque",
           "object_region"]

log = logging.getLogger(__name__)

GIVE_MASKS = ("give masks (a masks/ folder beside the photos, one per photo; or "
              "a transforms.json's mask_path) or images with alpha")
"""What a capture whose masks cannot be made needs, in every layout."""
NOT_OBJECT_CENTRED = (
    "its cameras do not look at one object (their optical axes do not meet in front of them, "
    "as in a room seen from inside or a wall seen from along it), so masks cannot be made "
    f"from them: {GIVE_MASKS}")
EMPTY_HULL = f"no part of the object's region is inside the masks of most views: {GIVE_MASKS}"
WORKING_SIZE = 512  # longest side, pixels, masks are made at
FILL = 0.9  # the region's radius: this share of the largest sphere the median view sees whole
MIN_FACING = 0.8  # share of the cameras that must see the axes' meeting point
MIN_SPREAD_DEGREES = 30.0  # the widest angle between two cameras, seen from that point
MIN_POINTS = 20  # sparse points inside the region needed to size it by them
POINTS_QUANTILE, POINTS_MARGIN = 0.95, 1.2  # the points' extent, and the margin around it
GRID = 64  # voxels a side of the carving grid (the region's bounding cube)
FINAL_GRID = 128  # voxels a side of the last hull, whose silhouettes are the masks
PIXELS_PER_VOXEL = 2.0  # the most pixels a voxel spans where the hull's silhouettes are cast
TOLERANCE = 0.1  # share of the views seeing a voxel whose masks may leave it out
BORDER, BAND = 0.02, 0.04  # the background border and the refining band, shares of the size
GRABCUT_ITERATIONS = 5
CARVE_ROUNDS = 2
_SPHERE_SAMPLES = 256  # points on the region's sphere projected to outline it
_RAY_POINTS = 4_000_000  # ray samples per chunk of the hull's projection


@dataclass(frozen=True)
class Region:
    """Where the object is: a sphere, world units."""

    centre: np.ndarray
    radius: float


def make_masks(cameras: Cameras, colours: torch.Tensor, points: np.ndarray | None = None,
               maker: str = "grabcut") -> torch.Tensor:
    """Foreground masks ``[N, H, W]`` (0 or 1) of the views' linear RGB ``colours [N, H, W,
    3]`` seen by ``cameras``, at their size; ``points [P, 3]``: sparse 3D points of the
    capture where it has them; ``maker``: each photo's first segmentation, one of
    ``MASK_MAKERS``: "grabcut" (steps 3 and 4 of the module docstring) or "rembg" (a learned
    matting model, ``matting.matte``), made consistent by the last hull's silhouettes either
    way (step 5). Raises ``UserError`` (the caller prefixes the capture's name) for cameras
    that do not look at one object (``NOT_OBJECT_CENTRED``), for masks whose hull is empty
    (``EMPTY_HULL``) and for rembg missing or its model not loading."""
    if maker not in MASK_MAKERS:
        raise ValueError(f"maker: one of {MASK_MAKERS}, got {maker!r}")
    region = object_region(cameras, points)
    width, height = longest_side_size(cameras.width, cameras.height,
                                      min(WORKING_SIZE, max(cameras.width, cameras.height)))
    small = cameras_at_size(cameras, width, height)
    opaque = torch.cat([colours, torch.ones_like(colours[..., :1])], -1)
    pixels = resize_rgba(opaque, width, height)[..., :3].clamp(0, 1)
    images = (linear_to_srgb(pixels) * 255 + 0.5).to(torch.uint8).numpy()
    support = find_support_plane(small, pixels, region.centre, region.radius)
    if maker == "rembg":
        masks = matte(images)
    else:
        masks = _grabcut_masks(small, pixels, images, region, support)
    masks = hull_silhouettes(small, _carved(small, masks, region, support, FINAL_GRID), region)
    alpha = torch.from_numpy(masks.astype(np.float32))
    if (width, height) != (cameras.width, cameras.height):
        alpha = F.interpolate(alpha[:, None], size=(cameras.height, cameras.width),
                              mode="bilinear", align_corners=False)[:, 0].round()
    return alpha


def masked_when_opaque(views: Views, maker: str = "grabcut",
                       warn: Callable[[str], None] = log.warning) -> Views:
    """``views`` as they are, or, where none carries coverage (alpha 1 at every pixel of
    every view: photos sent without being cut out, e.g. a camera's background image), with
    alpha from masks made from them (``make_masks`` by ``maker``), as a capture without masks
    gets them; where none can be made (``UserError``: the cameras do not look at one object,
    or the masks' hull is empty) the views as they are, with a sentence to ``warn`` (a job's
    log) that the whole frame is then the object's."""
    if not bool((views.images[..., 3] >= 1).all()):
        return views
    log.info("no view carries coverage (alpha 1 everywhere): making masks from the images "
             "and their cameras (each segmented by %s)", maker)
    try:
        alpha = make_masks(views.cameras, views.images[..., :3], maker=maker)
    except UserError as error:
        warn(f"no masks made ({error}): the whole of every image is taken as the object; "
             "send images with alpha, cut out")
        return views
    images = torch.cat([views.images[..., :3], alpha[..., None].to(views.images)], -1)
    return Views(views.cameras, images.contiguous(), views.names)


def _grabcut_masks(cameras: Cameras, pixels: torch.Tensor, images: np.ndarray, region: Region,
                   support: Plane | None) -> np.ndarray:
    """GrabCut's masks ``[N, H, W]`` (bool) of the sRGB ``images [N, H, W, 3]`` (uint8;
    linear ``pixels``) seen by ``cameras``: seeded by the region's outline, then refined
    ``CARVE_ROUNDS`` times by the silhouettes of the hull carved from them, the surface the
    object stands on (``support``) background throughout."""
    if support is None:
        nothing = np.zeros(images.shape[:3], bool)
        ground = PlanePixels(nothing, nothing)
    else:
        ground = plane_pixels(cameras, pixels, support, region.centre, region.radius)
        log.info("masks: the object stands on a surface (a table or the floor) %.3g units "
                 "below the cameras' meeting point: the %.0f %% of the photos' pixels that "
                 "show it are background, the %.1f %% that hide it near the object are "
                 "object", support.height(region.centre), 100 * ground.plane.mean(),
                 100 * ground.standing.mean())
    seeds = _outlines(cameras, region)
    masks = np.stack([segment(image, _region_labels(seed, *on_plane))
                      for image, seed, *on_plane in zip(images, seeds, ground.plane,
                                                        ground.standing, strict=True)])
    for _ in range(CARVE_ROUNDS):
        silhouettes = hull_silhouettes(cameras, _carved(cameras, masks, region, support), region)
        masks = np.stack([segment(image, _hull_labels(silhouette, *on_plane))
                          for image, silhouette, *on_plane in zip(
                              images, silhouettes, ground.plane, ground.standing, strict=True)])
    return masks


def object_region(cameras: Cameras, points: np.ndarray | None = None) -> Region:
    """The sphere the object is in (see the module docstring); ``UserError``
    (``NOT_OBJECT_CENTRED``) where the cameras do not look at one point from around it."""
    matrices = cameras.camera_to_world.double().cpu().numpy()
    origins = matrices[:, :3, 3]
    axes = -matrices[:, :3, 2] / np.linalg.norm(matrices[:, :3, 2], axis=-1, keepdims=True)
    focus = nearest_point_to_lines(origins, axes)
    if focus is None:
        raise UserError(NOT_OBJECT_CENTRED)
    pixels, depth = _project(cameras, focus[None])
    x, y = pixels[:, 0, 0], pixels[:, 0, 1]
    facing = (depth[:, 0] > 0) & (x >= 0) & (x <= cameras.width) & (y >= 0) & (y <= cameras.height)
    if facing.mean() < MIN_FACING or _widest_angle(origins[facing] - focus) < MIN_SPREAD_DEGREES:
        raise UserError(NOT_OBJECT_CENTRED)
    fx, fy, cx, cy = (getattr(cameras, name).double().cpu().numpy()
                      for name in ("fx", "fy", "cx", "cy"))
    half_field = np.minimum(np.arctan(np.minimum(cx, cameras.width - cx) / fx),
                            np.arctan(np.minimum(cy, cameras.height - cy) / fy))
    to_focus = focus - origins
    distance = np.linalg.norm(to_focus, axis=-1)
    off_axis = np.arccos(np.clip((to_focus * axes).sum(-1) / distance, -1, 1))
    fits = distance * np.sin(np.clip(half_field - off_axis, 0, None))
    radius = FILL * float(np.median(fits[facing]))
    if points is not None and len(points):
        near = np.linalg.norm(np.asarray(points, np.float64) - focus, axis=-1)
        near = near[near < radius]
        if len(near) >= MIN_POINTS:
            radius = min(radius, POINTS_MARGIN * float(np.quantile(near, POINTS_QUANTILE)))
    return Region(focus, radius)


def _widest_angle(directions: np.ndarray) -> float:
    """The largest angle, degrees, between two of ``directions [N, 3]`` (0 for fewer than 2)."""
    if len(directions) < 2:
        return 0.0
    unit = directions / np.linalg.norm(directions, axis=-1, keepdims=True)
    return math.degrees(math.acos(float(np.clip((unit @ unit.T).min(), -1, 1))))


def _project(cameras: Cameras, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pixels [N, P, 2], depth [N, P])``: world ``points [P, 3]`` in each view's image
    (x right, y down, origin at the top-left corner) and their depth along its axis."""
    world_to_camera = cameras.world_to_camera().double().cpu().numpy()
    local = points @ world_to_camera[:, :3, :3].transpose(0, 2, 1) + world_to_camera[:, None, :3, 3]
    depth = -local[..., 2]
    safe = np.where(depth > 0, depth, 1.0)
    fx, fy, cx, cy = (getattr(cameras, name).double().cpu().numpy()[:, None]
                      for name in ("fx", "fy", "cx", "cy"))
    pixels = np.stack([cx + fx * local[..., 0] / safe, cy - fy * local[..., 1] / safe], -1)
    return pixels, depth


def _outlines(cameras: Cameras, region: Region) -> np.ndarray:
    """``[N, H, W]`` bool: the region's sphere as each view sees it (the whole image where a
    camera is inside it)."""
    index = np.arange(_SPHERE_SAMPLES) + 0.5
    polar, azimuth = np.arccos(1 - 2 * index / _SPHERE_SAMPLES), np.pi * (1 + 5 ** 0.5) * index
    sphere = region.centre + region.radius * np.stack(
        [np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth), np.cos(polar)], -1)
    pixels, depth = _project(cameras, sphere)
    outlines = np.zeros((len(cameras), cameras.height, cameras.width), np.uint8)
    for outline, view, ahead in zip(outlines, pixels, depth, strict=True):
        if (ahead <= 0).any():
            outline[:] = 1
            continue
        hull = cv2.convexHull(np.round((view - 0.5) * 16).astype(np.int32))
        cv2.fillConvexPoly(outline, hull, 1, lineType=cv2.LINE_8, shift=4)
    return outlines.astype(bool)


def _border(shape: tuple[int, int]) -> int:
    return max(2, round(BORDER * min(shape)))


def _region_labels(outline: np.ndarray, floor: np.ndarray, standing: np.ndarray
                   ) -> np.ndarray:
    """GrabCut's labels from the region's outline: probable foreground inside, probable
    background outside, background on the image's border and on the ``floor`` (the pixels
    of the surface the object stands on), foreground where something ``standing`` on it
    hides it."""
    labels = np.where(outline, cv2.GC_PR_FGD, cv2.GC_PR_BGD).astype(np.uint8)
    border = _border(outline.shape)
    labels[:border], labels[-border:], labels[:, :border], labels[:, -border:] = (cv2.GC_BGD,) * 4
    labels[floor] = cv2.GC_BGD
    labels[standing] = cv2.GC_FGD
    return labels


def _hull_labels(silhouette: np.ndarray, floor: np.ndarray, standing: np.ndarray
                 ) -> np.ndarray:
    """GrabCut's labels from the hull's silhouette: foreground deeper inside than ``BAND`` of
    the image's size and where something ``standing`` on the floor hides it, probable
    foreground nearer the outline, probable background in a band as wide outside it,
    background beyond and on the ``floor`` (colour alone then never cuts the object's middle
    away where it looks like the table: a wooden bowl on a wooden table)."""
    band = max(2, round(BAND * min(silhouette.shape)))
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * band + 1, 2 * band + 1))
    inside = silhouette.astype(np.uint8)
    deep, near = cv2.erode(inside, kernel).astype(bool), cv2.dilate(inside, kernel).astype(bool)
    return np.select([floor, deep | standing, silhouette, near],
                     [cv2.GC_BGD, cv2.GC_FGD, cv2.GC_PR_FGD, cv2.GC_PR_BGD],
                     cv2.GC_BGD).astype(np.uint8)


def segment(image: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[H, W]`` bool foreground of the 8-bit RGB ``image [H, W, 3]`` by GrabCut from the
    starting ``labels`` (``cv2.GC_*``); none where the labels hold no foreground."""
    if not np.isin(labels, (cv2.GC_FGD, cv2.GC_PR_FGD)).any():
        return np.zeros(labels.shape, bool)
    if not np.isin(labels, (cv2.GC_BGD, cv2.GC_PR_BGD)).any():
        return np.ones(labels.shape, bool)
    result = labels.copy()
    models = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    cv2.setRNGSeed(0)
    cv2.grabCut(np.ascontiguousarray(image[..., ::-1]), result, None, *models,
                GRABCUT_ITERATIONS, cv2.GC_INIT_WITH_MASK)
    return np.isin(result, (cv2.GC_FGD, cv2.GC_PR_FGD))


def _carved(cameras: Cameras, masks: np.ndarray, region: Region, support: Plane | None,
            grid: int = GRID) -> torch.Tensor:
    """``carve``'s hull of ``masks``; ``UserError`` (``EMPTY_HULL``) where it is empty."""
    occupied = carve(cameras, masks, region, support, grid=grid)
    if not occupied.any():
        raise UserError(EMPTY_HULL)
    return occupied


def _grid_points(region: Region, grid: int) -> torch.Tensor:
    """``[grid³, 3]`` float32 cell centres of the region's bounding cube, x slowest."""
    steps = torch.linspace(-1.0, 1.0, grid, dtype=torch.float64)
    cube = torch.stack(torch.meshgrid(steps, steps, steps, indexing="ij"), -1).reshape(-1, 3)
    return (torch.from_numpy(region.centre) + region.radius * cube).float()


def carve(cameras: Cameras, masks: np.ndarray, region: Region, support: Plane | None = None,
          grid: int = GRID) -> torch.Tensor:
    """``[grid, grid, grid]`` bool (x, y, z): the voxels of the region's sphere, above the
    ``support`` plane where there is one, that at least half the views see and that the
    ``masks [N, H, W]`` of all but ``TOLERANCE`` of them cover (``view_distances``, the
    visual hull's own test)."""
    points = _grid_points(region, grid)
    in_sphere = (points - torch.from_numpy(region.centre).float()).norm(dim=-1) <= region.radius
    if support is not None:
        in_sphere &= torch.from_numpy(support.height(points.double().numpy()) > 0)
    points = points[in_sphere]
    seen = torch.zeros(len(points), dtype=torch.int64)
    left_out = torch.zeros(len(points), dtype=torch.int64)
    alpha = torch.from_numpy(masks.astype(np.float32))
    for in_image, distance in view_distances(points, cameras.to("cpu"), alpha):
        seen += in_image.sum(0)
        left_out += (in_image & (distance > 0)).sum(0)
    allowed = torch.floor(TOLERANCE * seen.double()).long()
    occupied = torch.zeros(grid ** 3, dtype=torch.bool)
    occupied[in_sphere] = (2 * seen >= len(cameras)) & (left_out <= allowed)
    return occupied.reshape(grid, grid, grid)


def hull_silhouettes(cameras: Cameras, occupied: torch.Tensor, region: Region) -> np.ndarray:
    """``[N, H, W]`` bool: the pixels whose ray meets the carved voxels (``occupied``,
    trilinear occupancy >= 0.5, sampled every voxel along the rays through the occupied
    voxels' bounding box), the rays cast at ``PIXELS_PER_VOXEL`` pixels a voxel at most (the
    hull is no finer) and their occupancy scaled up bilinearly to the views' size."""
    cameras = cameras.to("cpu")
    voxel = 2 * region.radius / (len(occupied) - 1)
    distance = np.linalg.norm(cameras.centers().double().numpy() - region.centre, axis=-1)
    focal = ((cameras.fx + cameras.fy) / 2).double().numpy()
    scale = min(1.0, PIXELS_PER_VOXEL / float(np.median(focal * voxel / distance)))
    width, height = (max(1, round(side * scale)) for side in (cameras.width, cameras.height))
    occupancy = _ray_marched(cameras_at_size(cameras, width, height), occupied, region)
    if (width, height) != (cameras.width, cameras.height):
        occupancy = F.interpolate(occupancy[:, None], size=(cameras.height, cameras.width),
                                  mode="bilinear", align_corners=False)[:, 0]
    return (occupancy >= 0.5).numpy()


def _ray_marched(cameras: Cameras, occupied: torch.Tensor, region: Region) -> torch.Tensor:
    """``[N, H, W]`` the largest trilinear occupancy along each pixel's ray, sampled every
    voxel through the occupied voxels' bounding box (0 for rays that miss it)."""
    volume = occupied.float().permute(2, 1, 0)[None, None]  # grid_sample's (D, H, W) = (z, y, x)
    centre = torch.from_numpy(region.centre).float()
    grid = len(occupied)
    voxel = 2 * region.radius / (grid - 1)
    indices = occupied.nonzero()
    low = centre + (indices.amin(0) - (grid - 1) / 2 - 1) * voxel
    high = centre + (indices.amax(0) - (grid - 1) / 2 + 1) * voxel
    corners = torch.stack(torch.meshgrid(*torch.stack([low, high], -1), indexing="ij"),
                          -1).reshape(-1, 3)
    pixels, _ = _project(cameras, corners.double().numpy())
    occupancy = torch.zeros(len(cameras), cameras.height, cameras.width)
    for view in range(len(cameras)):
        origin = cameras.centers()[view]
        nearest = ((low - origin).clamp_min(0) + (origin - high).clamp_min(0)).norm()
        farthest = (corners - origin).norm(dim=-1).max()
        depths = torch.arange(float(nearest), float(farthest) + voxel, voxel)
        (left, top), (right, bottom) = pixels[view].min(0), pixels[view].max(0)
        cols = slice(max(0, math.floor(left)), min(cameras.width, math.ceil(right) + 1))
        rows = range(max(0, math.floor(top)), min(cameras.height, math.ceil(bottom) + 1))
        if cols.start >= cols.stop or not rows:
            continue
        directions = cameras[view].ray_directions()[0, rows.start:rows.stop, cols]
        chunk = max(1, _RAY_POINTS // (len(depths) * directions.shape[1]))
        for top_row in range(0, len(rows), chunk):
            rays = directions[top_row:top_row + chunk]
            samples = origin + rays[..., None, :] * depths[:, None]  # [h, w, steps, 3]
            grid = ((samples - centre) / region.radius)[None]
            inside = F.grid_sample(volume, grid, mode="bilinear", padding_mode="zeros",
                                   align_corners=True)[0, 0]
            occupancy[view, rows.start + top_row:rows.start + top_row + len(rays), cols] = (
                inside.amax(-1))
    return occupancy
