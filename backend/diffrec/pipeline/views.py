"""Training and validation views: the ``Views`` container and what every source shares.

``Views`` holds cameras and their target images: float32 ``[N, H, W, 4]``, scene-linear RGB
and straight (not premultiplied) alpha, rows top-down, at the cameras' size (the wire's
convention, ``docs/protocol.md``). Every source yields them: ``from_arrays`` (the in-memory
arrays a job carries), ``diffrec.pipeline.loading.load_dataset`` (capture folders) and
``diffrec.pipeline.reference_views.render_reference_views`` (a reference mesh rendered).
``hold_out_views`` holds views out for validation (one rule for the command line and the job
server); ``at_longest_side`` and ``resize_rgba`` are the image operations the sources share
(the colour and alpha conventions live in ``diffrec.color``, sizes in
``diffrec.protocol.images``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from diffrec.camera import Cameras
from diffrec.color import premultiplied_to_straight, srgb_to_linear
from diffrec.errors import UserError
from diffrec.protocol.images import longest_side_size

__all__ = [
    "HELD_OUT_SHARE",
    "Views",
    "at_longest_side",
    "cameras_at_size",
    "from_arrays",
    "held_out_count",
    "hold_out_views",
    "resize_rgba",
    "split_views",
]


@dataclass(eq=False)
class Views:
    """Cameras and their target images.

    ``images`` float32 ``[N, H, W, 4]``: scene-linear RGB + straight alpha, rows top-down,
    ``H, W`` = ``cameras.height, cameras.width``; ``names`` one label per view (default
    ``view_000`` ...), used in messages and validation file names.
    """

    cameras: Cameras
    images: torch.Tensor
    names: list[str] | None = None

    def __post_init__(self):
        count, size = len(self.cameras), (self.cameras.height, self.cameras.width)
        expected = (count, *size, 4)
        if self.images.dtype != torch.float32 or tuple(self.images.shape) != expected:
            raise UserError(
                f"view images must be float32 {list(expected)} (N, H, W, RGBA) to match the "
                f"cameras, got {self.images.dtype} {list(self.images.shape)}"
            )
        if self.names is None:
            self.names = [f"view_{i:03d}" for i in range(count)]
        if len(self.names) != count:
            raise UserError(f"{len(self.names)} view names given for {count} views")
        self.names = [str(name) for name in self.names]

    def __len__(self) -> int:
        return len(self.cameras)

    def batch(self, indices) -> tuple[Cameras, torch.Tensor]:
        """``(cameras, images [B, H, W, 4])`` of the views at ``indices`` (int, list or tensor)."""
        indices = _index_tensor(indices, len(self))
        return self.cameras[indices.to(self.cameras.device)], self.images[indices]

    def subset(self, indices) -> Views:
        """The views at ``indices`` as ``Views`` (names kept)."""
        indices = _index_tensor(indices, len(self))
        cameras, images = self.batch(indices)
        return Views(cameras, images, [self.names[i] for i in indices.tolist()])

    def to(self, device: torch.device | str) -> Views:
        return Views(self.cameras.to(device), self.images.to(device), list(self.names))


def _index_tensor(indices, count: int) -> torch.Tensor:
    indices = torch.as_tensor([indices] if isinstance(indices, int) else indices).reshape(-1)
    indices = indices.to(device="cpu", dtype=torch.long)
    if indices.numel() and (indices.min() < -count or indices.max() >= count):
        raise IndexError(f"view index out of range for {count} views: {indices.tolist()}")
    return indices % count


HELD_OUT_SHARE = 8  # at most one view in 8 is held out (NeRF's and nvdiffrec's LLFF rule)


def evenly_spread(count: int, total: int) -> torch.Tensor:
    """Indices (int64) of up to ``count`` of ``total`` views, evenly spread, first and last
    included; all of them when there are no more."""
    return torch.linspace(0, total - 1, min(count, total)).round().long()


def held_out_count(count: int, test_views: int) -> int:
    """How many of a capture's ``count`` views (one split) validation holds out:
    ``test_views``, but at most one in ``HELD_OUT_SHARE`` (at least one), so that a small
    capture keeps nearly all its views for training (10 views: 9 train, 1 held out)."""
    return max(1, min(test_views, count // HELD_OUT_SHARE))


def hold_out_views(views: Views, test_views: int, seed: int) -> tuple[Views, Views]:
    """``(train, test)``: validation's rule for a capture without a test split of its own (the
    command line's datasets and every job the server runs): ``held_out_count`` views chosen
    at random from ``seed`` (``split_views``)."""
    return split_views(views, held_out_count(len(views), test_views), seed)


def split_views(views: Views, holdout: int | float, seed: int = 0) -> tuple[Views, Views]:
    """``(train, test)``: ``holdout`` views (an int count, or a fraction in (0, 1) of them,
    rounded, at least one) chosen at random from ``seed`` go to test; both keep dataset
    order. At least one view must stay for training."""
    count = len(views)
    if isinstance(holdout, float):
        if not 0 < holdout < 1:
            raise UserError(f"a held-out fraction must lie in (0, 1), got {holdout}")
        holdout = max(1, round(holdout * count))
    if not 1 <= holdout < count:
        raise UserError(f"cannot hold out {holdout} of {count} views: keep at least one view "
                        "for training and hold out at least one")
    generator = torch.Generator().manual_seed(seed)
    test = torch.zeros(count, dtype=torch.bool)
    test[torch.randperm(count, generator=generator)[:holdout]] = True
    return views.subset(torch.nonzero(~test)[:, 0]), views.subset(torch.nonzero(test)[:, 0])


def resize_rgba(images: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Resize straight-alpha ``[N, H, W, 4]`` images to ``height x width``.

    Method: premultiply, then a separable antialiased bilinear filter (torch's
    ``interpolate(mode="bilinear", antialias=True, align_corners=False)``: a triangle filter
    widened by the reduction factor when shrinking, plain bilinear when enlarging; image
    corners map to image corners, so intrinsics scale by ``width / W`` and ``height / H``),
    then divide by the resized alpha again. Premultiplying keeps background colour out of
    the object's edge pixels; a constant image stays constant.
    """
    if (images.shape[1], images.shape[2]) == (height, width):
        return images
    straight = images.permute(0, 3, 1, 2)
    premultiplied = torch.cat([straight[:, :3] * straight[:, 3:], straight[:, 3:]], 1)
    resized = F.interpolate(premultiplied, size=(height, width), mode="bilinear",
                            align_corners=False, antialias=True)
    resized = resized.permute(0, 2, 3, 1)
    resized = torch.cat([resized[..., :3], resized[..., 3:].clamp(0.0, 1.0)], -1)
    return premultiplied_to_straight(resized).contiguous()


_IMAGE_DTYPES = ("float32", "float16", "float64", "uint8", "uint16")
_CAMERA_DTYPES = ("float32", "float64")


def at_longest_side(views: Views, longest_side: int) -> Views:
    """``views`` resized so that their longer side is ``longest_side`` pixels
    (``longest_side_size``, ``resize_rgba``'s filter), intrinsics scaled to match; the same
    views when they already are that size."""
    cameras = views.cameras
    width, height = longest_side_size(cameras.width, cameras.height, longest_side)
    if (width, height) == (cameras.width, cameras.height):
        return views
    return Views(cameras_at_size(cameras, width, height),
                 resize_rgba(views.images, width, height), list(views.names))


def cameras_at_size(cameras: Cameras, width: int, height: int) -> Cameras:
    """``cameras`` making ``width x height`` images of what they see: intrinsics scaled."""
    sx, sy = width / cameras.width, height / cameras.height
    return dataclasses.replace(cameras, fx=cameras.fx * sx, cx=cameras.cx * sx,
                               fy=cameras.fy * sy, cy=cameras.cy * sy, width=width,
                               height=height)


def from_arrays(
    camera_to_world,
    intrinsics,
    images,
    near: float = 0.1,
    far: float = 1000.0,
    names: Sequence[str] | None = None,
) -> Views:
    """``Views`` from in-memory arrays (numpy or torch), as a job carries them.

    ``camera_to_world`` ``[N, 4, 4]`` and ``intrinsics`` ``[N, 4]`` (fx, fy, cx, cy in pixels,
    wire convention): float32 or float64. ``images`` ``[N, H, W, 4]`` RGBA, straight alpha,
    rows top-down: float16 / 32 / 64 scene-linear (alpha in [0, 1]) or uint8 / uint16 (colour
    sRGB, decoded to linear; alpha / 255 or / 65535). ``near`` / ``far``: scalars or ``[N]``.
    """
    c2w = _checked_tensor("camera_to_world", camera_to_world, _CAMERA_DTYPES, (None, 4, 4))
    intrinsics = _checked_tensor("intrinsics", intrinsics, _CAMERA_DTYPES, (None, 4))
    images = _checked_tensor("images", images, _IMAGE_DTYPES, (None, None, None, 4))
    if images.shape[0] == 0:
        raise UserError("the job has no images: send at least one view")
    counts = {"camera_to_world": len(c2w), "intrinsics": len(intrinsics), "images": len(images)}
    if names is not None:
        counts["names"] = len(names)
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{count} {name}" for name, count in counts.items())
        raise UserError(f"view counts do not match ({listed}): send one of each per view")
    if images.dtype in (torch.uint8, torch.uint16):
        scaled = images.float() / (255.0 if images.dtype == torch.uint8 else 65535.0)
        images = torch.cat([srgb_to_linear(scaled[..., :3]), scaled[..., 3:]], -1)
    images = images.float()
    if not torch.isfinite(images).all():
        raise UserError("images hold NaN or infinite values")
    alpha = images[..., 3]
    if alpha.min() < 0 or alpha.max() > 1:
        raise UserError(f"image alpha must lie in [0, 1], found {alpha.min():.4g} .. "
                        f"{alpha.max():.4g}; send straight alpha as coverage")
    for name, value in (("camera_to_world", c2w), ("intrinsics", intrinsics)):
        if not torch.isfinite(value).all():
            raise UserError(f"{name} holds NaN or infinite values")
    fx, fy, cx, cy = intrinsics.T
    cameras = Cameras(c2w, fx, fy, cx, cy, images.shape[2], images.shape[1], near, far)
    return Views(cameras, images.contiguous(), None if names is None else list(names))


def _checked_tensor(name: str, value, dtypes: tuple[str, ...], shape: tuple) -> torch.Tensor:
    """``value`` as a CPU/device tensor after checking its dtype name and shape (None = any)."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
    else:
        value = np.asarray(value)
        dtype = value.dtype.name if value.dtype.isnative else value.dtype.str
    if dtype not in dtypes:
        raise UserError(f"{name} must be {' or '.join(dtypes)}, got {dtype}")
    if value.ndim != len(shape) or any(
        want is not None and got != want for got, want in zip(value.shape, shape, strict=True)
    ):
        wanted = ", ".join("N" if i == 0 else "*" if s is None else str(s)
                           for i, s in enumerate(shape))
        raise UserError(f"{name} must be [{wanted}], got {list(value.shape)}")
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(value.copy())
