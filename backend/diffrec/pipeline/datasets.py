"""Training and validation views: cameras plus target images, from every source diffrec takes.

Sources:
- ``load_dataset``: a capture folder, NeRF-style (``transforms_{split}.json`` + images) or
  LLFF (``poses_bounds.npy`` + images + masks), as ``diffrec.protocol.captures`` reads them,
  or COLMAP (``sparse/0/`` + images + masks, ``diffrec.pipeline.colmap_capture``);
- ``from_arrays``: the in-memory arrays a job carries (what the server passes in);
- ``render_reference_views``: a reference mesh rendered by diffrec under an HDRI (the
  reference system's mesh mode).

Every source yields ``Views``: images float32 ``[N, H, W, 4]``, scene-linear RGB and straight
(not premultiplied) alpha, rows top-down, at the cameras' size (DESIGN.md's wire convention).
``check_views_see_box`` rejects camera sets that miss the object; ``split_views`` holds views
out for validation; ``ViewSampler`` draws reproducible, resumable training batches.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from diffrec.camera import Cameras
from diffrec.color import srgb_to_linear
from diffrec.errors import UserError
from diffrec.io import Asset, read_image
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh.normals import with_vertex_normals
from diffrec.mesh.tangents import with_tangents
from diffrec.pipeline.colmap_capture import read_any_capture
from diffrec.protocol.captures import CaptureError
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh

log = logging.getLogger(__name__)

_NAMED = 5  # how many offending files / cameras an error message names


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


class ViewSampler:
    """Random training batches of ``batch_size`` view indices, reproducible from ``seed``.

    Views are drawn in shuffled epochs (every view once per epoch, a fresh permutation from
    a ``torch.Generator`` after each); a batch may straddle two epochs. ``state_dict()`` /
    ``load_state_dict()`` save and restore the position, so a resumed run draws the same
    batches as an uninterrupted one. Iterating yields ``views.batch(next_indices())``.
    """

    def __init__(self, views: Views, batch_size: int, seed: int = 0):
        if batch_size < 1:
            raise UserError(f"batch size must be at least 1, got {batch_size}")
        self.views, self.batch_size, self.seed = views, int(batch_size), int(seed)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._order = torch.randperm(len(views), generator=self._generator)
        self._position = 0

    def next_indices(self) -> torch.Tensor:
        """The next batch: int64 ``[batch_size]`` view indices (CPU)."""
        taken = []
        while sum(len(part) for part in taken) < self.batch_size:
            if self._position == len(self._order):
                self._order = torch.randperm(len(self.views), generator=self._generator)
                self._position = 0
            want = self.batch_size - sum(len(part) for part in taken)
            taken.append(self._order[self._position : self._position + want])
            self._position += len(taken[-1])
        return torch.cat(taken)

    def __iter__(self) -> ViewSampler:
        return self

    def __next__(self) -> tuple[Cameras, torch.Tensor]:
        return self.views.batch(self.next_indices())

    def state_dict(self) -> dict:
        return {
            "views": len(self.views),
            "batch_size": self.batch_size,
            "seed": self.seed,
            "generator": self._generator.get_state(),
            "order": self._order.clone(),
            "position": self._position,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["views"] != len(self.views):
            raise UserError(
                f"the checkpoint's sampler was made for {state['views']} views but this dataset "
                f"has {len(self.views)}: resume with the same dataset"
            )
        self.batch_size, self.seed = int(state["batch_size"]), int(state["seed"])
        self._generator.set_state(state["generator"])
        self._order = state["order"].clone()
        self._position = int(state["position"])


def premultiplied_to_straight(rgba: torch.Tensor) -> torch.Tensor:
    """Premultiplied ``[..., 4]`` RGBA -> straight alpha: colour / alpha where alpha > 0,
    colour unchanged where alpha = 0. (Blender's EXR renders load premultiplied.)"""
    alpha = rgba[..., 3:]
    covered = alpha > 0
    colour = torch.where(covered, rgba[..., :3] / torch.where(covered, alpha, 1.0), rgba[..., :3])
    return torch.cat([colour, alpha], -1)


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


def load_dataset(
    folder: str | Path,
    split: str = "train",
    resolution: int | tuple[int, int] | None = None,
    *,
    near_far: tuple[float, float] | None = None,
    exr_premultiplied: bool = True,
) -> Views:
    """The views of a capture folder in any layout ``diffrec.protocol.captures`` reads: a
    NeRF-style folder (``transforms_{split}.json`` + images) or an LLFF capture
    (``poses_bounds.npy`` + ``images[_N]/`` + ``masks/``; one split, "train") or a COLMAP
    model (``sparse/0/`` + ``images[_N]/`` + ``masks/``; one split; needs pycolmap).

    PNG / JPEG are sRGB and are decoded to linear; EXR is linear and, with
    ``exr_premultiplied`` (Blender's renders), divided by alpha. Coverage is the mask file
    where the capture has one (first channel, as data), else the image's alpha; images with
    neither get alpha 1 (with a warning).

    ``resolution``: None keeps the images' size; an int is the longer side (aspect kept,
    the other side rounded); ``(width, height)`` is exact. See ``resize_rgba`` for the
    method; the intrinsics are scaled by the same factors. ``near_far``: clipping depths for
    every camera (default: the capture's own, 0.1 / 1000 for NeRF folders).
    """
    longest = resolution if isinstance(resolution, int) else (
        None if resolution is None else max(resolution))
    try:
        capture = read_any_capture(folder, split, longest_side=longest)
    except CaptureError as error:
        raise UserError(str(error)) from None
    paths = [frame.image for frame in capture.frames]
    images, missing_alpha, file_size = [], [], None
    for frame in capture.frames:
        image, has_alpha = _read_rgba(frame.image, exr_premultiplied)
        if frame.mask is not None:
            image = _with_mask(image, frame.mask)
        size = (image.shape[1], image.shape[0])
        if file_size is None:
            file_size = size
            target = _target_size(file_size, resolution)
        if size != file_size:
            raise UserError(
                f"images of split '{split}' differ in size: {paths[0].name} is "
                f"{file_size[0]}x{file_size[1]} but {frame.image.name} is {size[0]}x{size[1]}; "
                "resize them all to one size"
            )
        if not has_alpha and frame.mask is None:
            missing_alpha.append(frame.image.name)
        images.append(resize_rgba(image[None], *target)[0])
    if missing_alpha:
        log.warning("%d images of %s have no alpha channel and no mask (e.g. %s): treating them "
                    "as fully covered (alpha = 1)", len(missing_alpha), folder,
                    ", ".join(missing_alpha[:3]))
    try:
        intrinsics = capture.intrinsics(*target, file_size)
    except CaptureError as error:
        raise UserError(f"{capture.source}: {error}") from None
    if near_far is None:
        near = [frame.near for frame in capture.frames]
        far = [frame.far for frame in capture.frames]
    else:
        near, far = near_far
    fx, fy, cx, cy = torch.from_numpy(intrinsics).T
    try:
        cameras = Cameras(torch.from_numpy(capture.camera_to_world()), fx, fy, cx, cy, *target,
                          near, far)
    except UserError as error:
        raise UserError(f"{capture.source}: {error}") from None
    return Views(cameras, torch.stack(images), capture.names())


def _with_mask(image: torch.Tensor, mask_path: Path) -> torch.Tensor:
    """``image`` [H, W, 4] with its alpha replaced by the mask file's first channel, resized
    to the image (full-size masks serve a downscaled ``images_N`` copy)."""
    mask = torch.from_numpy(read_image(mask_path, data=True))[..., :1]
    (height, width), (mask_height, mask_width) = image.shape[:2], mask.shape[:2]
    if abs(mask_width * height - mask_height * width) > max(mask_width, mask_height):
        raise UserError(f"mask {mask_path} is {mask_width}x{mask_height} but its image is "
                        f"{width}x{height}: masks must have their images' shape")
    if (mask_height, mask_width) != (height, width):
        mask = F.interpolate(mask.permute(2, 0, 1)[None], size=(height, width), mode="bilinear",
                             align_corners=False, antialias=True)[0].permute(1, 2, 0)
    return torch.cat([image[..., :3], mask.clamp(0.0, 1.0)], -1)


def _read_rgba(path: Path, exr_premultiplied: bool) -> tuple[torch.Tensor, bool]:
    """``([H, W, 4] straight linear RGBA, whether the file had alpha)``."""
    image = torch.from_numpy(read_image(path))
    channels = image.shape[-1]
    colour = image[..., :1].expand(*image.shape[:2], 3) if channels <= 2 else image[..., :3]
    has_alpha = channels in (2, 4)
    alpha = image[..., -1:] if has_alpha else torch.ones_like(image[..., :1])
    rgba = torch.cat([colour, alpha.clamp(0.0, 1.0)], -1)
    if path.suffix.lower() == ".exr" and exr_premultiplied and has_alpha:
        rgba = premultiplied_to_straight(rgba)
    return rgba, has_alpha


def _target_size(size: tuple[int, int], resolution) -> tuple[int, int]:
    """``(width, height)`` of the loaded views for file images of ``size`` (width, height)."""
    if resolution is None:
        return size
    if isinstance(resolution, int):
        if resolution < 1:
            raise UserError(f"resolution must be a positive number of pixels, got {resolution}")
        scale = resolution / max(size)
        return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))
    width, height = (int(v) for v in resolution)
    if width < 1 or height < 1:
        raise UserError(f"resolution must be positive (width, height), got {resolution}")
    return width, height


_IMAGE_DTYPES = ("float32", "float16", "uint8")
_CAMERA_DTYPES = ("float32", "float64")


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
    rows top-down: float32 / float16 scene-linear (alpha in [0, 1]) or uint8 (colour sRGB,
    decoded to linear; alpha / 255). ``near`` / ``far``: scalars or ``[N]``.
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
    if images.dtype == torch.uint8:
        scaled = images.float() / 255.0
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


_BOX_EDGES = [(a, b) for a, b in itertools.combinations(range(8), 2) if (a ^ b).bit_count() == 1]


def check_views_see_box(cameras: Cameras, box_min, box_max, names: Sequence[str] | None = None):
    """Raise ``UserError`` naming the cameras that do not see the box at all: its centre is
    behind the camera, or the part of the box between the near and far planes projects
    entirely outside the image (exact: the projected clipped box is a convex polygon, tested
    against the image rectangle by separating axes). Logs a warning naming the cameras that
    see the box only in part (some of it outside the image or the clipping range)."""
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
        elif verdict == "partial":
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


@torch.no_grad()
def render_reference_views(
    ctx,
    asset: Asset,
    hdri_image,
    cameras: Cameras,
    spp: int = 2,
    *,
    light_resolution: int = 256,
    chunk: int = 8,
) -> Views:
    """Render a reference mesh with diffrec's own renderer under an HDRI (the reference
    system's mesh mode): target views with straight alpha, on ``ctx.device``.

    ``asset``: from ``read_obj`` / ``read_gltf``; its first material is used for the whole
    mesh (a warning when there are more); vertex normals, and tangents for a normal map, are
    computed when missing. ``hdri_image``: equirect ``[H, W, 3]`` linear radiance (Blender's
    Environment Texture mapping), turned into a ``light_resolution``-sized cube map.
    ``spp``: supersampling per axis; ``chunk``: cameras rendered at once (bounds memory).
    """
    if len(asset.materials) > 1:
        log.warning("the reference mesh has %d materials; rendering it with the first (%s) only",
                    len(asset.materials), asset.materials[0].name)
    material = asset.materials[0]
    mesh = asset.mesh
    if mesh.normals is None:
        mesh = with_vertex_normals(mesh)
    if mesh.uvs is None:
        if any(channel.ndim == 3 for channel in (material.kd, material.ks)):
            raise UserError("the reference mesh has textures but no UVs: unwrap it first")
        zeros = torch.zeros(1, 2, dtype=mesh.positions.dtype)  # constant material: any UV
        mesh = mesh.replace(uvs=zeros, uv_triangles=torch.zeros_like(mesh.triangles))
    if material.normal is not None and mesh.tangents is None:
        mesh = with_tangents(mesh)
    hdri = (hdri_image if isinstance(hdri_image, torch.Tensor)
            else torch.from_numpy(np.asarray(hdri_image, dtype=np.float32))).float()
    if hdri.ndim != 3 or hdri.shape[-1] != 3 or not torch.isfinite(hdri).all():
        raise UserError(f"the HDRI must be a finite equirect RGB image [H, W, 3], got "
                        f"{list(hdri.shape)}")
    light = EnvironmentLight.from_equirect(hdri.to(ctx.device), resolution=light_resolution)
    light.build_mips()
    shader = TextureMaterial.from_material(material).to(ctx.device)
    mesh, cameras = mesh.to(ctx.device), cameras.to(ctx.device)
    images = []
    for start in range(0, len(cameras), chunk):
        out = render_mesh(ctx, mesh, shader, cameras[start : start + chunk], light, spp=spp)
        images.append(premultiplied_to_straight(torch.cat([out.color, out.alpha], -1)))
    return Views(cameras, torch.cat(images).float().contiguous())


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


__all__ = [
    "ViewSampler",
    "Views",
    "check_views_see_box",
    "from_arrays",
    "load_dataset",
    "premultiplied_to_straight",
    "render_reference_views",
    "resize_rgba",
    "split_views",
]
