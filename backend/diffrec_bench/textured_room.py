"""Photos without poses for the pose finder, ray cast in numpy: a box covered in multi-scale
value noise standing in a room whose walls, floor and ceiling carry other noise, seen by a
ring of cameras around the box. Everything is textured, so SIFT finds features everywhere and
COLMAP can register every view; the true cameras are kept for scoring the recovered ones.

Shared by ``tests/pipeline/test_find_poses.py`` and, run as a module, the pose finder's
benchmark, which times it on such photos and scores it (docs/BENCHMARKS.md)::

    .venv/bin/python -m diffrec_bench.textured_room VIEWS SIZE FEATURES SCRATCH_FOLDER
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import numpy as np

from diffrec.camera import Cameras, orbit_cameras
from diffrec.io import write_image

BOX_HALF = 0.5  # the box: |x|, |y|, |z| below this
ROOM_HALF = 3.0  # the room: |x|, |y|, |z| below this
ORBIT_RADIUS = 2.2
BOX_OCTAVES = (4, 8, 16, 32)  # value-noise grid sizes per face, coarse to fine
ROOM_OCTAVES = (6, 12, 24, 48, 96)


def ring_cameras(count: int = 14, size: int = 256) -> Cameras:
    """``count`` cameras at ``ORBIT_RADIUS`` around the box, looking at it, with elevations
    sweeping 5 to 35 degrees."""
    return orbit_cameras(count, ORBIT_RADIUS, size, fov_degrees=50.0,
                         elevations_degrees=(5.0, 35.0))


def photos(cameras: Cameras, seed: int = 0) -> np.ndarray:
    """Linear RGB ``[N, H, W, 3]`` float32 in [0, 1] of the scene from ``cameras``."""
    rng = np.random.default_rng(seed)
    box_noise = [rng.random((6, 3, n + 1, n + 1)) for n in BOX_OCTAVES]
    room_noise = [rng.random((6, 3, n + 1, n + 1)) for n in ROOM_OCTAVES]
    directions = cameras.ray_directions().double().numpy()
    origins = np.broadcast_to(cameras.centers().double().numpy()[:, None, None],
                              directions.shape)
    directions, origins = directions.reshape(-1, 3), origins.reshape(-1, 3)
    safe = np.where(np.abs(directions) < 1e-12, 1e-12, directions)
    near = np.max(np.minimum((-BOX_HALF - origins) / safe, (BOX_HALF - origins) / safe), -1)
    far = np.min(np.maximum((-BOX_HALF - origins) / safe, (BOX_HALF - origins) / safe), -1)
    in_box = (near < far) & (near > 0)
    room_exit = np.min(np.where(safe > 0, ROOM_HALF - origins, -ROOM_HALF - origins) / safe, -1)
    t = np.where(in_box, near, room_exit)
    point = origins + t[:, None] * directions
    colour = np.where(in_box[:, None], _face_colour(point / BOX_HALF, box_noise),
                      0.1 + 0.8 * _face_colour(point / ROOM_HALF, room_noise))
    n, h, w = len(cameras), cameras.height, cameras.width
    return np.clip(colour, 0, 1).reshape(n, h, w, 3).astype(np.float32)


def alignment_errors(found: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How far cameras ``found`` (camera-to-world ``[N, 4, 4]``, in any world) are from
    ``true`` once moved by the similarity that best maps their centres onto the true ones:
    ``(centre distances [N] in true units, angles between the camera axes [N] in degrees)``."""
    scale, rotation, translation = similarity(found[:, :3, 3], true[:, :3, 3])
    aligned = scale * found[:, :3, 3] @ rotation.T + translation
    turned = rotation @ found[:, :3, :3]
    cosine = (np.trace(turned.transpose(0, 2, 1) @ true[:, :3, :3], axis1=1, axis2=2) - 1) / 2
    return (np.linalg.norm(aligned - true[:, :3, 3], axis=1),
            np.degrees(np.arccos(np.clip(cosine, -1, 1))))


def similarity(source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Umeyama's least-squares ``(scale, rotation, translation)`` with
    ``target ≈ scale * rotation @ source + translation`` (points ``[N, 3]``)."""
    source_mean, target_mean = source.mean(0), target.mean(0)
    a, b = source - source_mean, target - target_mean
    u, singular, vt = np.linalg.svd(b.T @ a / len(a))
    sign = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])
    rotation = u @ sign @ vt
    scale = float(np.trace(np.diag(singular) @ sign) / (a ** 2).sum(1).mean())
    return scale, rotation, target_mean - scale * rotation @ source_mean


def write_photos(folder: Path, images: np.ndarray, suffix: str = ".jpg") -> list[Path]:
    """``folder/images/view_NN{suffix}`` for each image, nothing else (no poses)."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    paths = [folder / "images" / f"view_{i:02d}{suffix}" for i in range(len(images))]
    for path, image in zip(paths, images, strict=True):
        write_image(path, image)
    return paths


def _face_colour(unit: np.ndarray, noise: list[np.ndarray]) -> np.ndarray:
    """``[R, 3]`` colour of points on the faces of the cube [-1, 1]^3 (``unit``): each face's
    own value noise (``noise``: per octave ``[6, 3, n + 1, n + 1]``) read bilinearly at the
    two coordinates along the face, its contrast stretched about mid-grey."""
    axis = np.argmax(np.abs(unit), -1)
    face = 2 * axis + (np.take_along_axis(unit, axis[:, None], 1)[:, 0] > 0)
    rows = np.arange(len(unit))
    uv = np.clip((np.stack([unit[rows, (axis + 1) % 3], unit[rows, (axis + 2) % 3]], -1) + 1)
                 / 2, 0, 1)
    colour, total = np.zeros((len(unit), 3)), 0.0
    for grid in noise:
        size = grid.shape[-1] - 1
        x, y = uv[:, 0] * size, uv[:, 1] * size
        x0, y0 = (np.minimum(np.floor(c).astype(int), size - 1) for c in (x, y))
        fx, fy = (x - x0)[:, None], (y - y0)[:, None]
        texel = grid.transpose(0, 2, 3, 1)
        value = ((1 - fx) * (1 - fy) * texel[face, y0, x0]
                 + fx * (1 - fy) * texel[face, y0, x0 + 1]
                 + (1 - fx) * fy * texel[face, y0 + 1, x0]
                 + fx * fy * texel[face, y0 + 1, x0 + 1])
        colour, total = colour + value, total + 1.0
    return 0.5 + 2.5 * (colour / total - 0.5)


def benchmark(views: int, size: int, features: int, folder: Path) -> str:
    """One line: how many photos ``find_poses`` registered, in how long, and how far the
    cameras the COLMAP reader then reads are from the true ones (``folder`` is replaced)."""
    from diffrec.pipeline.colmap_capture import read_colmap
    from diffrec.pipeline.find_poses import find_poses

    shutil.rmtree(folder, ignore_errors=True)
    cameras = ring_cameras(views, size)
    write_photos(folder, photos(cameras))
    start = time.perf_counter()
    found = find_poses(folder, max_image_size=size, max_features=features)
    seconds = time.perf_counter() - start
    frames = read_colmap(folder).frames
    order = [int(frame.image.stem.split("_")[1]) for frame in frames]
    distances, angles = alignment_errors(np.stack([frame.camera_to_world for frame in frames]),
                                         cameras.camera_to_world.double().numpy()[order])
    return (f"{views} views, {size} px, {features} features: {found.registered} of "
            f"{found.photos} registered, {found.points} points, reprojection "
            f"{found.reprojection_px:.2f} px, {seconds:.1f} s; centres within "
            f"{100 * distances.max() / ORBIT_RADIUS:.2f}% of the orbit radius, axes within "
            f"{angles.max():.2f} degrees; focal {frames[0].pinhole.fl_x:.1f} px (true "
            f"{float(cameras.fx[0]):.1f})")


if __name__ == "__main__":
    print(benchmark(*(int(value) for value in sys.argv[1:4]), Path(sys.argv[4])))
