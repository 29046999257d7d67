"""Views from a capture folder: images decoded to straight linear RGBA, cameras from the
capture's poses and intrinsics.

``load_dataset`` reads every layout ``diffrec.protocol.captures`` reads (NeRF-style
``transforms_{split}.json`` + images, capture tools' ``transforms.json`` + images + masks,
LLFF ``poses_bounds.npy`` + images + masks), and COLMAP models (``sparse/0/`` + images +
masks, ``diffrec.pipeline.colmap_capture``). The capture formats themselves are parsed in
``diffrec.protocol.captures`` alone (numpy only, shared with the add-on and ``diffrec
submit``); this module decodes (and undistorts) the images and builds ``Views``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from diffrec.camera import capture_cameras
from diffrec.color import premultiplied_to_straight, straight_to_premultiplied
from diffrec.errors import UserError, one_line
from diffrec.io import read_image, write_image
from diffrec.pipeline.auto_masks import make_masks
from diffrec.pipeline.captures import read_any_capture
from diffrec.pipeline.views import Views, resize_rgba
from diffrec.protocol.captures import AUTO_MASKS, Capture, CaptureError
from diffrec.protocol.images import longest_side_size

log = logging.getLogger(__name__)

__all__ = ["image_problems", "load_dataset"]


def load_dataset(
    folder: str | Path,
    split: str = "train",
    resolution: int | tuple[int, int] | None = None,
    *,
    near_far: tuple[float, float] | None = None,
    exr_premultiplied: bool = True,
    auto_masks: bool = True,
    mask_maker: str = "grabcut",
) -> Views:
    """The views of a capture folder in any layout ``diffrec.protocol.captures`` reads: a
    NeRF-style folder (``transforms_{split}.json`` + images), a capture tool's
    ``transforms.json`` (+ images and masks, ``mask_path`` or ``masks/``; one split unless it
    lists them; distorted photos undistorted, ``Frame.undistort``), an LLFF capture
    (``poses_bounds.npy`` + ``images[_N]/`` + ``masks/``; one split, "train") or a COLMAP
    model (``sparse/0/`` + ``images[_N]/`` + ``masks/``; one split; needs pycolmap).

    PNG / JPEG are sRGB and are decoded to linear; EXR is linear and, with
    ``exr_premultiplied`` (Blender's renders), divided by alpha. Coverage is the mask file
    where the capture has one (first channel, as data), else the image's alpha. Where no
    image has either and ``auto_masks``: the masks kept in ``Capture.auto_masks`` where every
    frame has one, else masks made from the photos (``diffrec.pipeline.auto_masks``, each
    photo first segmented by ``mask_maker``: "grabcut" or "rembg") and written there; the
    log says which. Otherwise images with neither get alpha 1 (with a warning). Masks for
    some photos only, the others without alpha, are refused (``_check_masks_for_all``).

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
    for note in capture.notes:
        log.info("%s: %s", capture.source, note)
    paths = [frame.image for frame in capture.frames]
    images, missing_alpha, file_size = [], [], None
    for frame in capture.frames:
        image, has_alpha = _read_rgba(frame.image, exr_premultiplied)
        if frame.mask is not None:
            image = _with_mask(image, frame.mask)
        if frame.lens is not None:
            image = _undistorted(frame, image)
        size = (image.shape[1], image.shape[0])
        if file_size is None:
            file_size = size
            target = _target_size(file_size, resolution)
        if size != file_size:
            raise UserError(_sizes_differ(split, paths[0], file_size, frame.image, size))
        if not has_alpha and frame.mask is None:
            missing_alpha.append(frame.image.name)
        images.append(resize_rgba(image[None], *target)[0])
    _check_masks_for_all(capture, missing_alpha)
    cameras = capture_cameras(capture, *target, file_size, near_far)
    if auto_masks and len(missing_alpha) == len(images):
        masked = _auto_masked(capture, cameras, torch.stack(images), file_size, mask_maker)
        return Views(cameras, masked, capture.names())
    if missing_alpha:
        log.warning("%d images of %s have no alpha channel and no mask (e.g. %s): treating them "
                    "as fully covered (alpha = 1)", len(missing_alpha), folder,
                    ", ".join(missing_alpha[:3]))
    return Views(cameras, torch.stack(images), capture.names())


def _check_masks_for_all(capture, missing_alpha: list[str]) -> None:
    """UserError where some frames of ``capture`` have a mask but the images
    ``missing_alpha`` (file names) have neither mask nor alpha: they would be taken as all
    object."""
    if not missing_alpha or all(frame.mask is None for frame in capture.frames):
        return
    shown = ", ".join(missing_alpha[:3]) + (", ..." if len(missing_alpha) > 3 else "")
    raise UserError(f"{capture.source}: {len(missing_alpha)} of {len(capture.frames)} photos "
                    f"have no mask (and no alpha) though the others have one ({shown}): give "
                    "a mask for every photo, or for none (masks are then made)")


def _auto_masked(capture, cameras, images: torch.Tensor, file_size: tuple[int, int],
                 mask_maker: str) -> torch.Tensor:
    """``images [N, H, W, 4]`` (of a capture without masks or alpha) with the alpha of the
    masks kept for the capture (``Capture.auto_masks``) where all are there, else of masks
    made from the images (``make_masks`` by ``mask_maker``) and written there, at the
    photos' ``file_size`` (width, height), for the artist to inspect."""
    files = capture.auto_masks()
    folder = files[0].parent
    if all(path.is_file() for path in files):
        log.info("%s: masks read from %s (made by an earlier run: correct them there, or "
                 "delete them to have them made again)", capture.source, folder)
        if mask_maker != "grabcut":
            log.info("%s: the masks read back are used whichever way they were made "
                     "(mask_maker %s makes masks only where there are none)", capture.source,
                     mask_maker)
        return torch.stack([_with_mask(image, path, made=capture.folder / AUTO_MASKS)
                            for image, path in zip(images, files, strict=True)])
    log.info("%s: no masks and no alpha: making masks from the photos and their cameras "
             "(each photo segmented by %s)", capture.source, mask_maker)
    try:
        alpha = make_masks(cameras, images[..., :3], capture.points, mask_maker)
    except UserError as error:
        raise UserError(f"{capture.source}: {error}") from None
    try:
        full = F.interpolate(alpha[:, None], size=file_size[::-1], mode="bilinear",
                             align_corners=False)[:, 0].round()
        for path, mask in zip(files, full, strict=True):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_image(path, mask.numpy(), data=True)
        log.info("%s: masks made and written to %s (white = object): inspect them, correct "
                 "them there if need be; the next run reads them", capture.source, folder)
    except OSError as error:
        log.warning("%s: masks made but not written to %s (%s)", capture.source, folder,
                    one_line(error))
    return torch.cat([images[..., :3], alpha[..., None]], -1)


def _with_mask(image: torch.Tensor, mask_path: Path, made: Path | None = None
               ) -> torch.Tensor:
    """``image`` [H, W, 4] with its alpha replaced by the mask file's first channel, resized
    to the image (full-size masks serve a downscaled ``images_N`` copy); ``made``: the
    folder of masks made by an earlier run the mask comes from, named where it no longer
    fits its image."""
    mask = torch.from_numpy(read_image(mask_path, data=True))[..., :1]
    _check_not_binary(mask, mask_path)
    (height, width), (mask_height, mask_width) = image.shape[:2], mask.shape[:2]
    if abs(mask_width * height - mask_height * width) > max(mask_width, mask_height):
        fix = "masks must have their images' shape"
        if made is not None:
            fix = (f"it was made by an earlier run, for the photos as they were then: delete "
                   f"{made} to have masks made again")
        raise UserError(f"mask {mask_path} is {mask_width}x{mask_height} but its image is "
                        f"{width}x{height}: {fix}")
    if (mask_height, mask_width) != (height, width):
        mask = F.interpolate(mask.permute(2, 0, 1)[None], size=(height, width), mode="bilinear",
                             align_corners=False, antialias=True)[0].permute(1, 2, 0)
    return torch.cat([image[..., :3], mask.clamp(0.0, 1.0)], -1)


def _check_not_binary(mask: torch.Tensor, mask_path: Path) -> None:
    """UserError for a ``mask`` (values 0 to 1) holding only 0 and 1/255: a mask saved as 0
    and 1 where 0 and 255 were meant, which would make the object nearly transparent."""
    step = torch.tensor(1.0) / 255
    if mask.max() == step and ((mask == 0) | (mask == step)).all():
        raise UserError(f"mask {mask_path} holds only the values 0 and 1: masks are 0 for "
                        "background to 255 for the object (white), so save it with 255 where "
                        "it holds 1")


def _undistorted(frame, image: torch.Tensor) -> torch.Tensor:
    """``image`` [H, W, 4] straight RGBA as ``frame.pinhole`` sees it (``Frame.undistort``,
    resampled with premultiplied alpha)."""
    premultiplied = straight_to_premultiplied(image)
    return premultiplied_to_straight(torch.from_numpy(frame.undistort(premultiplied.numpy())))


def image_problems(capture: Capture, split: str = "train") -> list[str]:
    """One sentence per image or mask of ``capture`` (its ``split``, for the sentences) that
    ``load_dataset`` would refuse as a file, found by decoding each, one at a time: one that
    cannot be decoded (damaged, cut short, not an image), an image of another size than the
    first. What a mask holds (its aspect, its values) is checked by the run only."""
    problems, first = [], None
    for frame in capture.frames:
        for path in (frame.image, frame.mask):
            if path is None:
                continue
            try:
                image = read_image(path)
            except UserError as error:
                problems.append(str(error))
                continue
            size = (image.shape[1], image.shape[0])
            if path is frame.image:
                first = first or (path, size)
                if size != first[1]:
                    problems.append(_sizes_differ(split, first[0], first[1], path, size))
    return problems


def _sizes_differ(split: str, first: Path, first_size: tuple[int, int], path: Path,
                  size: tuple[int, int]) -> str:
    """The sentence for ``path`` of ``size`` (width, height) in a split whose first image,
    ``first``, is ``first_size``."""
    return (f"images of split '{split}' differ in size: {first.name} is "
            f"{first_size[0]}x{first_size[1]} but {path.name} is {size[0]}x{size[1]}; resize "
            "them all to one size")


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
        return longest_side_size(*size, resolution)
    width, height = (int(v) for v in resolution)
    if width < 1 or height < 1:
        raise UserError(f"resolution must be positive (width, height), got {resolution}")
    return width, height
