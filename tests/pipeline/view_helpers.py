"""Cameras and views shared by the view tests (loading, views, frustum, references, sampler),
and rotations as COLMAP writes them (the COLMAP and malformed-input tests)."""

import math

import numpy as np
import torch

from diffrec.camera import Cameras, look_at, orbit_cameras
from diffrec.color import srgb_to_linear
from diffrec.pipeline.views import Views

WIDTH, HEIGHT = 24, 16  # not square, so a swapped width and height shows


def camera_matrices(count):
    eyes = torch.tensor([[4 * math.cos(a), 4 * math.sin(a), 1.0] for a in range(count)])
    return look_at(eyes, (0.0, 0.0, 0.0))


def front_camera(eye, target, size=32, fov=40.0, far=1000.0):
    focal = 0.5 * size / math.tan(math.radians(fov) / 2)
    return Cameras(look_at([eye], target).float(), fx=focal, fy=focal, cx=size / 2,
                   cy=size / 2, width=size, height=size, far=far)


def join(cameras):
    """One ``Cameras`` batch of several single cameras of one size."""
    fields = {key: torch.cat([getattr(c, key) for c in cameras])
              for key in ("camera_to_world", "fx", "fy", "cx", "cy", "near", "far")}
    return Cameras(**fields, width=cameras[0].width, height=cameras[0].height)


def toy_views(count):
    images = torch.arange(float(count))[:, None, None, None].expand(count, 4, 4, 4)
    return Views(orbit_cameras(count, 4.0, 4), images.contiguous())


def random_codes(count, channels=4, seed=0):
    """8-bit codes; their sRGB decode is what a PNG of them must load as."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, HEIGHT, WIDTH, channels), generator=generator)


def linear_of_codes(codes):
    encoded = codes.double() / 255
    return torch.cat([srgb_to_linear(encoded[..., :3]), encoded[..., 3:]], -1).float()


def quaternion(rotation: np.ndarray) -> np.ndarray:
    """Hamilton ``(w, x, y, z)`` of a rotation matrix, w >= 0."""
    m = rotation
    w = math.sqrt(max(0.0, 1 + m[0, 0] + m[1, 1] + m[2, 2])) / 2
    x = math.copysign(math.sqrt(max(0.0, 1 + m[0, 0] - m[1, 1] - m[2, 2])) / 2, m[2, 1] - m[1, 2])
    y = math.copysign(math.sqrt(max(0.0, 1 - m[0, 0] + m[1, 1] - m[2, 2])) / 2, m[0, 2] - m[2, 0])
    z = math.copysign(math.sqrt(max(0.0, 1 - m[0, 0] - m[1, 1] + m[2, 2])) / 2, m[1, 0] - m[0, 1])
    return np.array([w, x, y, z])
