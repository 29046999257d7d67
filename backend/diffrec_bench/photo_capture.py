"""A photo-like capture made by ray casting in numpy: a textured ball on a wooden table in a
room (floor, four walls, ceiling), lit by a sun that casts the ball's shadow on the table,
supersampled 3x3, with sensor noise and no alpha; the true masks (the ball's coverage >= 0.5)
are kept aside for scoring automatic ones.

What else makes the photos like a camera's, each optional (``photos``, ``write_capture``):
lens distortion (OpenCV's ``k1, k2, p1, p2``: the rays bent as the lens bends them, and the
coefficients written to ``transforms.json`` with ``camera_model`` OPENCV, so that the reader
undistorts the photos), an exposure that changes a little from view to view, JPEG files
(OpenCV's encoder at its default quality, 95), and fine detail on every surface (solid value
noise that varies the albedo), without which SIFT finds too little to match for COLMAP.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import torch

from diffrec.camera import Cameras, look_at, orbit_cameras
from diffrec.io import write_image
from diffrec.protocol.lens import Lens

BALL_CENTRE, BALL_RADIUS = np.array([0.0, 0.0, 0.5]), 0.5
TABLE_HALF = 1.6  # the table top: |x|, |y| below this at z = 0
ROOM = np.array([[-4.0, -4.0, -0.75], [4.0, 4.0, 3.0]])  # floor at the lowest z
SUN = np.array([0.45, 0.3, 0.84]) / np.linalg.norm([0.45, 0.3, 0.84])
SUPERSAMPLING = 3
DETAIL_PERIODS = (0.4, 0.2, 0.1, 0.05)  # the detail's lattice cells, scene units, coarse to fine
_DETAIL_VALUES = np.random.default_rng(52).random(1 << 16)  # the lattice's values, hashed
_UNDISTORT_STEPS = 60  # fixed-point steps inverting a lens's distortion (converges for k1 ~ -0.3)
# the ball's stripes: unlike anything else in the room, or of the table's browns
PALETTES = {"warm": ((0.75, 0.12, 0.08), (0.85, 0.45, 0.05), (0.9, 0.8, 0.2)),
            "wood": ((0.45, 0.28, 0.12), (0.55, 0.38, 0.2), (0.3, 0.19, 0.09))}
# the room's faces' albedo (-x, +x, -y, +y walls, floor, ceiling), tiles of half a unit
# brighter and darker by TILE_CONTRAST / 2
WALLS = ((0.35, 0.45, 0.55), (0.4, 0.55, 0.45), (0.5, 0.5, 0.6), (0.3, 0.4, 0.5),
         (0.45, 0.45, 0.42), (0.85, 0.85, 0.82))
TILE_CONTRAST = 0.3
# the table's wood: albedo GRAIN_DARK + grain * GRAIN_RISE, with the grain
# 0.5 + 0.5 sin(a x + b sin(c y)) for GRAIN_WAVES (a, b, c)
GRAIN_DARK, GRAIN_RISE, GRAIN_WAVES = (0.32, 0.2, 0.1), (0.12, 0.08, 0.04), (23.0, 2.0, 5.0)
# the ball's stripes: palette colour (floor(azimuth * a / pi) + floor(normal z * b)) % 3 for
# STRIPES (a, b)
STRIPES = (6, 4)


def object_cameras(count: int = 14, size: int = 112, seed: int | None = None) -> Cameras:
    """Cameras around the ball, above the table, looking at it: a ring, or with ``seed`` at
    random azimuths and elevations in the ring's range (``orbit_cameras``)."""
    return orbit_cameras(count, 2.6, size, fov_degrees=40.0, elevations_degrees=(12.0, 40.0),
                         target=tuple(BALL_CENTRE), seed=seed)


def photos(cameras: Cameras, seed: int = 0, palette: str = "warm", *,
           distortion: tuple[float, float, float, float] | None = None,
           exposure_stops: float = 0.0, noise: float = 0.01, detail: float = 0.0
           ) -> tuple[np.ndarray, np.ndarray]:
    """``(linear RGB [N, H, W, 3] float32 in [0, 1], true masks [N, H, W] bool)``; the
    ball striped in ``PALETTES[palette]``. ``distortion``: OpenCV's ``(k1, k2, p1, p2)`` of
    the lens the photos are taken through (the masks are the distorted photos' too);
    ``exposure_stops``: each view's exposure drawn uniformly within this many stops either
    side of the scene's; ``noise``: the sensor noise's standard deviation; ``detail``: every
    surface's albedo scaled by a solid noise within ``1 ± detail``."""
    fine = Cameras(cameras.camera_to_world, cameras.fx * SUPERSAMPLING,
                   cameras.fy * SUPERSAMPLING, cameras.cx * SUPERSAMPLING,
                   cameras.cy * SUPERSAMPLING, cameras.width * SUPERSAMPLING,
                   cameras.height * SUPERSAMPLING)
    directions = _ray_directions(fine, distortion)
    origins = np.broadcast_to(fine.centers().double().numpy()[:, None, None], directions.shape)
    colour, ball = _shade(origins.reshape(-1, 3), directions.reshape(-1, 3),
                          np.array(PALETTES[palette]), detail)
    n, h, w = len(cameras), cameras.height, cameras.width
    block = (n, h, SUPERSAMPLING, w, SUPERSAMPLING)
    colour = colour.reshape(*block, 3).mean((2, 4))
    coverage = ball.reshape(block).mean((2, 4))
    return developed(colour, seed, exposure_stops, noise), coverage >= 0.5


def developed(colour: np.ndarray, seed: int, exposure_stops: float, noise: float
              ) -> np.ndarray:
    """The scene's linear ``colour`` ``[N, H, W, 3]`` as the camera records it (``photos``'
    ``seed``, ``exposure_stops`` and ``noise``): each view scaled by its own exposure, the
    sensor noise added, clipped to [0, 1]; float32."""
    n = len(colour)
    exposure = 2.0 ** np.random.default_rng([seed, 1]).uniform(-exposure_stops, exposure_stops, n)
    noise = np.random.default_rng(seed).normal(0.0, noise, colour.shape)
    return np.clip(colour * exposure[:, None, None, None] + noise, 0, 1).astype(np.float32)


def _ray_directions(cameras: Cameras, distortion) -> np.ndarray:
    """Unit world directions ``[N, H, W, 3]`` (float64) of the rays that land on each pixel's
    centre through a lens of OpenCV ``distortion`` (``Cameras.ray_directions`` without one)."""
    if distortion is None:
        return cameras.ray_directions().double().numpy()
    x, y = pinhole_coordinates(cameras, distortion)
    local = np.stack([x, -y, -np.ones_like(x)], -1)  # OpenCV's y points down, the camera's up
    world = np.einsum("nij,nhwj->nhwi", cameras.camera_to_world[:, :3, :3].double().numpy(),
                      local)
    return world / np.linalg.norm(world, axis=-1, keepdims=True)


def pinhole_coordinates(cameras: Cameras, distortion: tuple[float, float, float, float]
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` ``[N, H, W]`` (float64): the normalised pinhole coordinates (OpenCV's, y
    down) of the points that a lens of OpenCV ``distortion`` puts on each pixel's centre of
    ``cameras``: the lens's distortion (``Lens.distort``) inverted by fixed-point iteration."""
    lens = Lens("opencv", (*distortion, 0.0), (1.0, 1.0, 0.0, 0.0), (1.0, 1.0))
    rows = np.arange(cameras.height) + 0.5
    columns = np.arange(cameras.width) + 0.5
    fx, fy, cx, cy = (value.double().numpy()[:, None, None]
                      for value in (cameras.fx, cameras.fy, cameras.cx, cameras.cy))
    seen_x = np.broadcast_to((columns[None, None, :] - cx) / fx,
                             (len(cameras), cameras.height, cameras.width))
    seen_y = np.broadcast_to((rows[None, :, None] - cy) / fy, seen_x.shape)
    x, y = seen_x.copy(), seen_y.copy()
    for _ in range(_UNDISTORT_STEPS):
        bent_x, bent_y = lens.distort(x, y)
        x, y = x + seen_x - bent_x, y + seen_y - bent_y
    bent_x, bent_y = lens.distort(x, y)
    if max(np.abs(bent_x - seen_x).max(), np.abs(bent_y - seen_y).max()) > 1e-9:
        raise ValueError(f"the lens {distortion} is too strong to invert by iteration")
    return x, y


def write_capture(folder: Path, cameras: Cameras, images: np.ndarray, *,
                  distortion: tuple[float, float, float, float] | None = None,
                  suffix: str = ".png", masks: np.ndarray | None = None) -> None:
    """A nerfstudio ``transforms.json`` folder of the views, as RGB ``suffix`` files (".png"
    or ".jpg"; no alpha); ``distortion`` (as for ``photos``) written as an OPENCV camera;
    ``masks`` ``[N, H, W]`` bool, where given, as ``masks/`` PNGs named by ``mask_path``."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for index, (image, matrix) in enumerate(zip(images, cameras.camera_to_world, strict=True)):
        name = f"frame_{index:03d}"
        write_image(folder / "images" / f"{name}{suffix}", image)
        frames.append({"file_path": f"images/{name}{suffix}",
                       "transform_matrix": matrix.double().tolist()})
        if masks is not None:
            write_image(folder / "masks" / f"{name}.png", masks[index].astype(np.float32),
                        data=True)
            frames[-1]["mask_path"] = f"masks/{name}.png"
    lens = {} if distortion is None else {
        "camera_model": "OPENCV", **dict(zip(("k1", "k2", "p1", "p2"), distortion, strict=True))}
    (folder / "transforms.json").write_text(json.dumps({
        "fl_x": float(cameras.fx[0]), "fl_y": float(cameras.fy[0]), "cx": float(cameras.cx[0]),
        "cy": float(cameras.cy[0]), "w": cameras.width, "h": cameras.height, **lens,
        "frames": frames}))


def mask_iou(masks: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Intersection over union per view ``[N]`` of two ``[N, H, W]`` bool mask stacks (made
    masks against the true ones ``photos`` returns)."""
    return (masks & truth).sum((1, 2)) / (masks | truth).sum((1, 2))


def outward_cameras(count: int = 12, size: int = 64) -> Cameras:
    """Cameras in the middle of a room, each looking away from the others (a room scan)."""
    azimuth = np.arange(count) * 2 * math.pi / count
    eye = np.stack([0.3 * np.cos(azimuth), 0.3 * np.sin(azimuth), np.full(count, 1.5)], -1)
    return _looking(eye, eye + np.stack([np.cos(azimuth), np.sin(azimuth), np.zeros(count)], -1),
                    size)


def parallel_cameras(count: int = 12, size: int = 64) -> Cameras:
    """Cameras along a wall, all looking straight at it."""
    eye = np.stack([np.linspace(-3, 3, count), np.full(count, -2.0), np.full(count, 1.5)], -1)
    return _looking(eye, eye + np.array([0.0, 1.0, 0.0]), size)


def _looking(eye: np.ndarray, target: np.ndarray, size: int) -> Cameras:
    focal = 0.5 * size / math.tan(math.radians(20))
    return Cameras(look_at(torch.from_numpy(eye), torch.from_numpy(target)).float(), focal, focal,
                   size / 2, size / 2, size, size)


def _shade(origins: np.ndarray, directions: np.ndarray, palette: np.ndarray, detail: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """``(linear RGB [R, 3], whether the ball is what each ray meets [R])``; ``detail`` as
    for ``photos``."""
    t_ball = _ball_hit(origins, directions)
    t_table = np.where(directions[:, 2] < 0, -origins[:, 2] / np.minimum(directions[:, 2], -1e-9),
                       np.inf)
    on_table = origins + t_table[:, None] * directions
    t_table = np.where((np.abs(on_table[:, :2]) < TABLE_HALF).all(-1), t_table, np.inf)
    t_room, face = _room_exit(origins, directions)
    nearest = np.argmin(np.stack([t_ball, t_table, t_room]), 0)
    colour = np.zeros_like(origins)
    for kind, t in enumerate((t_ball, t_table, t_room)):
        hit = nearest == kind
        point = origins[hit] + t[hit, None] * directions[hit]
        colour[hit] = (_ball_colour, _table_colour, _room_colour)[kind](point, face[hit],
                                                                        palette)
        if detail:
            colour[hit] *= 1 + detail * (2 * _solid_noise(point) - 1)[:, None]
    return colour, nearest == 0


def _ball_hit(origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
    offset = origins - BALL_CENTRE
    b = (offset * directions).sum(-1)
    disc = b ** 2 - (offset ** 2).sum(-1) + BALL_RADIUS ** 2
    t = -b - np.sqrt(np.maximum(disc, 0))
    return np.where((disc > 0) & (t > 0), t, np.inf)


def _room_exit(origins: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distance to the room's inside and which face (0-5: -x, +x, -y, +y, floor, ceiling)."""
    safe = np.where(np.abs(directions) < 1e-12, 1e-12, directions)
    exits = np.where(safe > 0, (ROOM[1] - origins) / safe, (ROOM[0] - origins) / safe)
    axis = np.argmin(exits, -1)
    return exits.min(-1), 2 * axis + (np.take_along_axis(safe, axis[:, None], 1)[:, 0] > 0)


def _solid_noise(point: np.ndarray) -> np.ndarray:
    """``[R]`` in [0, 1] at the points ``[R, 3]``: value noise on lattices of
    ``DETAIL_PERIODS`` (trilinear between hashed lattice values), averaged over the lattices
    and its contrast stretched about 0.5."""
    total = np.zeros(len(point))
    for period in DETAIL_PERIODS:
        cell = point / period
        base = np.floor(cell).astype(np.int64)
        fraction = cell - base
        for corner in itertools.product((0, 1), repeat=3):
            index = base + np.array(corner)
            key = (index[:, 0] * 73856093) ^ (index[:, 1] * 19349663) ^ (index[:, 2] * 83492791)
            weight = np.where(np.array(corner) == 1, fraction, 1 - fraction).prod(-1)
            total += weight * _DETAIL_VALUES[key & 0xFFFF]
    return np.clip(0.5 + 2.5 * (total / len(DETAIL_PERIODS) - 0.5), 0, 1)


def _lit(albedo: np.ndarray, normal: np.ndarray, shadow=None) -> np.ndarray:
    sun = np.clip(normal @ SUN, 0, None) * (1.0 if shadow is None else np.where(shadow, 0.15, 1))
    return albedo * (0.35 + 0.75 * sun)[:, None]


def _ball_colour(point: np.ndarray, _face, palette: np.ndarray) -> np.ndarray:
    normal = (point - BALL_CENTRE) / BALL_RADIUS
    azimuth, height = np.arctan2(normal[:, 1], normal[:, 0]), normal[:, 2]
    stripe = (np.floor(azimuth * STRIPES[0] / math.pi) + np.floor(height * STRIPES[1])) % 3
    albedo = palette[stripe.astype(int)]
    return _lit(albedo, normal)


def _table_colour(point: np.ndarray, _face, _palette) -> np.ndarray:
    a, b, c = GRAIN_WAVES
    grain = 0.5 + 0.5 * np.sin(point[:, 0] * a + b * np.sin(point[:, 1] * c))
    albedo = np.array(GRAIN_DARK) + grain[:, None] * np.array(GRAIN_RISE)
    shadow = np.isfinite(_ball_hit(point + 1e-6 * SUN, np.broadcast_to(SUN, point.shape)))
    return _lit(albedo, np.broadcast_to([0.0, 0.0, 1.0], point.shape), shadow)


def _room_colour(point: np.ndarray, face: np.ndarray, _palette) -> np.ndarray:
    tiles = (np.floor(point * 2).sum(-1) % 2)[:, None]
    albedo = np.array(WALLS)[face] * (1 - TILE_CONTRAST / 2 + TILE_CONTRAST * tiles)
    normals = np.array([[1.0, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]])
    return _lit(albedo, normals[face])
