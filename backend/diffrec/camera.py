"""Pinhole cameras: the wire convention in, clip-space matrices and rays out.

Wire convention (Blender's; docs/protocol.md, "Inputs"): ``camera_to_world`` is the camera
object's ``matrix_world`` [N, 4, 4] (any object scale is ignored, as Blender's
``world_to_camera_view`` does); the camera looks down its local -Z with +Y up. Intrinsics
``fx, fy, cx, cy`` are in pixels with the origin at the top-left pixel *corner* and rows
growing downwards, so a camera-space point (X, Y, Z) lands at ``px = cx + fx X / -Z``,
``py = cy - fy Y / -Z``
(``px, py`` continuous: pixel ``(c, r)`` covers ``[c, c+1] x [r, r+1]``).

Clip space is what ``diffrec.raster`` consumes: NDC x = -1..1 from the left image edge to the
right, NDC y = -1 at the *bottom* image edge (raster row 0 is image row H-1), OpenGL depth
(z/w = -1 at ``near``, +1 at ``far``), w = -Z. Hence ``x_ndc = 2 px / W - 1`` and
``y_ndc = 1 - 2 py / H``, which puts pixel centres at ``2 (px + 0.5) / W - 1`` in both.
Matrices are computed in float64 and returned as float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from diffrec.errors import UserError
from diffrec.protocol.captures import Capture, CaptureError

_PER_CAMERA = ("fx", "fy", "cx", "cy", "near", "far")


@dataclass(eq=False)
class Cameras:
    """A batch of N pinhole cameras sharing one image size.

    ``camera_to_world`` [N, 4, 4]; ``fx, fy, cx, cy, near, far`` [N] (scalars broadcast);
    ``width, height`` in pixels. Stored as float32 tensors on one device.
    """

    camera_to_world: torch.Tensor
    fx: torch.Tensor
    fy: torch.Tensor
    cx: torch.Tensor
    cy: torch.Tensor
    width: int
    height: int
    near: torch.Tensor | float = 0.1
    far: torch.Tensor | float = 1000.0

    def __post_init__(self):
        c2w = torch.as_tensor(self.camera_to_world, dtype=torch.float32)
        if c2w.ndim != 3 or c2w.shape[1:] != (4, 4) or c2w.shape[0] == 0:
            raise UserError(f"camera_to_world must be [N>0, 4, 4], got {tuple(c2w.shape)}")
        if not torch.isfinite(c2w).all():
            raise UserError("camera_to_world holds NaN or infinite values")
        bottom = torch.tensor([0.0, 0.0, 0.0, 1.0], device=c2w.device)
        if not torch.allclose(c2w[:, 3], bottom.expand(c2w.shape[0], 4), atol=1e-6):
            raise UserError("camera_to_world must be affine (last row 0, 0, 0, 1)")
        if torch.linalg.det(c2w[:, :3, :3].double()).abs().min() < 1e-12:
            raise UserError("camera_to_world has a singular rotation part")
        self.camera_to_world = c2w
        for name in _PER_CAMERA:
            value = torch.as_tensor(getattr(self, name), dtype=torch.float32, device=c2w.device)
            if value.ndim > 1 or (value.ndim == 1 and value.shape[0] != c2w.shape[0]):
                raise UserError(f"camera {name} must be a scalar or [{c2w.shape[0]}]")
            if not torch.isfinite(value).all():
                raise UserError(f"camera {name} holds NaN or infinite values")
            setattr(self, name, value.expand(c2w.shape[0]).clone())
        if not (int(self.width) == self.width > 0 and int(self.height) == self.height > 0):
            raise UserError(f"image size must be positive integers, got {self.width}x{self.height}")
        self.width, self.height = int(self.width), int(self.height)
        if (self.fx <= 0).any() or (self.fy <= 0).any():
            raise UserError("focal lengths fx, fy must be positive (pixels)")
        if (self.near <= 0).any() or (self.far <= self.near).any():
            raise UserError("clipping planes must satisfy 0 < near < far")

    def __len__(self) -> int:
        return self.camera_to_world.shape[0]

    def __getitem__(self, index) -> Cameras:
        """A sub-batch: ``index`` is an int, slice, index tensor or boolean mask."""
        index = [index] if isinstance(index, int) else index
        return self._checked(lambda field: field[index])

    @property
    def device(self) -> torch.device:
        return self.camera_to_world.device

    def to(self, device: torch.device | str) -> Cameras:
        return self._checked(lambda field: field.to(device))

    def _checked(self, per_camera) -> Cameras:
        """Cameras with ``per_camera`` applied to each per-camera tensor (a sub-batch, a copy
        on another device): checked already, so built without ``__post_init__``, whose checks
        each wait for the GPU."""
        cameras = object.__new__(Cameras)
        cameras.__dict__.update(camera_to_world=per_camera(self.camera_to_world),
                                width=self.width, height=self.height,
                                **{name: per_camera(getattr(self, name)) for name in _PER_CAMERA})
        return cameras

    def moved(self, turn: torch.Tensor, shift: torch.Tensor) -> Cameras:
        """These cameras turned by ``turn`` ``[N, 3, 3]`` (rotations about each camera's own
        centre, world axes) with their centres moved by ``shift`` ``[N, 3]`` (world units):
        differentiable in both (``pipeline.pose_refinement``)."""
        c2w = self.camera_to_world
        top = torch.cat([turn @ c2w[:, :3, :3], (c2w[:, :3, 3] + shift)[..., None]], -1)
        cameras = self._checked(lambda field: field)
        cameras.camera_to_world = torch.cat([top, c2w[:, 3:]], 1)
        return cameras

    def detached(self) -> Cameras:
        """The same cameras, cut from the autograd graph (of ``moved``)."""
        return self._checked(lambda field: field.detach())

    def centers(self) -> torch.Tensor:
        """Camera positions in world space, [N, 3]."""
        return self.camera_to_world[:, :3, 3]

    def _rotation64(self) -> torch.Tensor:
        """The camera axes in world space, scale removed (unit columns), [N, 3, 3] float64."""
        axes = self.camera_to_world[:, :3, :3].double()
        return axes / axes.norm(dim=1, keepdim=True)

    def world_to_camera(self) -> torch.Tensor:
        """World -> camera matrices [N, 4, 4] float32 (camera looks down -Z, +Y up)."""
        return self._world_to_camera64().float()

    def _world_to_camera64(self) -> torch.Tensor:
        c2w = torch.eye(4, dtype=torch.float64, device=self.device).repeat(len(self), 1, 1)
        c2w[:, :3, :3] = self._rotation64()
        c2w[:, :3, 3] = self.centers().double()
        return torch.linalg.inv(c2w)

    def projection(self) -> torch.Tensor:
        """Camera -> clip matrices [N, 4, 4] float32 (see the module docstring)."""
        return self._projection64().float()

    def _projection64(self) -> torch.Tensor:
        fx, fy, cx, cy, near, far = (getattr(self, name).double() for name in _PER_CAMERA)
        w, h = float(self.width), float(self.height)
        p = torch.zeros(len(self), 4, 4, dtype=torch.float64, device=self.device)
        p[:, 0, 0] = 2 * fx / w
        p[:, 0, 2] = 1 - 2 * cx / w
        p[:, 1, 1] = 2 * fy / h
        p[:, 1, 2] = 2 * cy / h - 1
        p[:, 2, 2] = -(far + near) / (far - near)
        p[:, 2, 3] = -2 * far * near / (far - near)
        p[:, 3, 2] = -1
        return p

    def world_to_clip(self) -> torch.Tensor:
        """World -> clip matrices [N, 4, 4] float32, for ``pos_clip = M @ [p, 1]``."""
        return (self._projection64() @ self._world_to_camera64()).float()

    def ray_directions(self) -> torch.Tensor:
        """Unit world-space directions through every pixel centre, [N, H, W, 3] float32,
        rows top-down (image order: flip raster output, whose row 0 is the bottom, to match).
        """
        rows = torch.arange(self.height, dtype=torch.float64, device=self.device) + 0.5
        cols = torch.arange(self.width, dtype=torch.float64, device=self.device) + 0.5
        py, px = torch.meshgrid(rows, cols, indexing="ij")
        x = (px - self.cx.double()[:, None, None]) / self.fx.double()[:, None, None]
        y = -(py - self.cy.double()[:, None, None]) / self.fy.double()[:, None, None]
        local = torch.stack([x, y, -torch.ones_like(x)], dim=-1)  # [N, H, W, 3]
        world = torch.einsum("nij,nhwj->nhwi", self._rotation64(), local)
        return (world / world.norm(dim=-1, keepdim=True)).float()


def capture_cameras(capture: Capture, width: int, height: int,
                    stored: tuple[int, int] | None = None,
                    near_far: tuple[float, float] | None = None) -> Cameras:
    """The cameras of a capture read by ``diffrec.protocol.captures`` (the one reader of
    NeRF-style and LLFF folders), for its images used at ``width`` x ``height``: matrices as
    the capture states them (the wire's OpenGL convention), intrinsics scaled from the files'
    size ``stored`` (see ``Pinhole.at``), clipping depths ``near_far`` or the capture's own.
    A capture whose cameras cannot be built raises ``UserError`` naming its file."""
    try:
        intrinsics = capture.intrinsics(width, height, stored)
    except CaptureError as error:
        raise UserError(f"{capture.source}: {error}") from None
    if near_far is None:
        near = [frame.near for frame in capture.frames]
        far = [frame.far for frame in capture.frames]
    else:
        near, far = near_far
    fx, fy, cx, cy = torch.from_numpy(intrinsics).T
    try:
        return Cameras(torch.from_numpy(capture.camera_to_world()), fx, fy, cx, cy, width,
                       height, near, far)
    except UserError as error:
        raise UserError(f"{capture.source}: {error}") from None


def look_at(eye, target, up=(0.0, 0.0, 1.0)) -> torch.Tensor:
    """Camera-to-world matrices [N, 4, 4] (float64) for cameras at ``eye`` [N, 3] looking at
    ``target`` ([3] or [N, 3]); ``up`` is world +Z by default (Blender), and must not be
    parallel to the view direction."""
    eye = torch.as_tensor(eye, dtype=torch.float64).reshape(-1, 3)
    target = torch.as_tensor(target, dtype=torch.float64).expand_as(eye)
    up = torch.as_tensor(up, dtype=torch.float64).expand_as(eye)
    back = eye - target  # the camera looks down its local -Z
    back = back / back.norm(dim=-1, keepdim=True)
    right = torch.linalg.cross(up, back, dim=-1)
    if bool((right.norm(dim=-1) < 1e-9).any()):
        raise ValueError("look_at: the up vector is parallel to a view direction")
    right = right / right.norm(dim=-1, keepdim=True)
    true_up = torch.linalg.cross(back, right, dim=-1)
    c2w = torch.eye(4, dtype=torch.float64).repeat(len(eye), 1, 1)
    c2w[:, :3, 0], c2w[:, :3, 1], c2w[:, :3, 2], c2w[:, :3, 3] = right, true_up, back, eye
    return c2w


def orbit_cameras(
    count: int,
    radius: float,
    size: int,
    fov_degrees: float = 40.0,
    elevations_degrees: tuple[float, float] = (-30.0, 50.0),
    target=(0.0, 0.0, 0.0),
    seed: int | None = None,
    near: float = 0.1,
    far: float = 1000.0,
) -> Cameras:
    """``count`` square cameras on a sphere of ``radius`` around ``target``, looking at it.

    Without ``seed`` the azimuths are evenly spaced and the elevations sweep the range (a
    deterministic ring); with ``seed`` both are random (uniform azimuth, elevation uniform in
    the range), as for training views.
    """
    if count < 1:
        raise ValueError("orbit_cameras needs at least one camera")
    low, high = (math.radians(e) for e in elevations_degrees)
    if seed is None:
        azimuth = torch.arange(count, dtype=torch.float64) * (2 * math.pi / count)
        elevation = torch.linspace(low, high, count, dtype=torch.float64)
    else:
        gen = torch.Generator().manual_seed(seed)
        azimuth = torch.rand(count, generator=gen, dtype=torch.float64) * 2 * math.pi
        elevation = low + (high - low) * torch.rand(count, generator=gen, dtype=torch.float64)
    offset = torch.stack(
        [elevation.cos() * azimuth.cos(), elevation.cos() * azimuth.sin(), elevation.sin()], -1
    )
    target = torch.as_tensor(target, dtype=torch.float64)
    focal = 0.5 * size / math.tan(math.radians(fov_degrees) / 2)
    return Cameras(
        camera_to_world=look_at(target + radius * offset, target).float(),
        fx=focal, fy=focal, cx=size / 2, cy=size / 2, width=size, height=size,
        near=near, far=far,
    )
