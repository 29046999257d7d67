"""Baking a volumetric material into the textures of a UV-mapped mesh.

``bake_textures`` evaluates a field (e.g. ``NeuralMaterial.evaluate``) at the world position of
every texel that the mesh's UV layout covers, pads the charts by ``dilate`` so that bilinear
and mipmapped sampling near chart edges read chart colours, and fills every texel still empty
with ``fill_empty`` (push-pull) so coarse mips do not average in black.

Textures are ``[R, R, C]`` float32, rows top-down as stored (row 0 is v = 1), as
``diffrec.render.texture2d.Texture2D`` expects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

from diffrec import raster
from diffrec.mesh import Mesh
from diffrec.render.renderer import render_uv

DEFAULT_CHUNK = 1 << 18


def _channels_first(texture: torch.Tensor, mask: torch.Tensor):
    """Validate ``[H, W, C]`` texture and ``[H, W, 1]`` 0/1 mask; return ``[1, C, H, W]``
    (zero where empty) and ``[1, 1, H, W]`` float copies."""
    if texture.ndim != 3 or mask.shape != (*texture.shape[:2], 1):
        raise ValueError(f"need texture [H, W, C] and mask [H, W, 1], got "
                         f"{tuple(texture.shape)} and {tuple(mask.shape)}")
    weight = (mask > 0).to(texture.dtype).permute(2, 0, 1)[None]
    return texture.permute(2, 0, 1)[None] * weight, weight


def _channels_last(image: torch.Tensor) -> torch.Tensor:
    return image[0].permute(1, 2, 0).contiguous()


@torch.no_grad()
def dilate(texture: torch.Tensor, mask: torch.Tensor, texels: int):
    """Grow the filled region of ``texture [H, W, C]`` (``mask [H, W, 1]``, nonzero = filled)
    by ``texels`` rings: each pass fills every empty texel with a filled 8-neighbour with the
    mean of its filled 8-neighbours. Filled texels never change; texels off the image count as
    empty. Returns ``(texture, mask)``, the mask as 0/1 in the texture's dtype; after ``k``
    passes it holds exactly the texels within Chebyshev distance ``k`` of the input mask."""
    if texels < 0:
        raise ValueError(f"texels must be >= 0, got {texels}")
    image, weight = _channels_first(texture, mask)
    channels = image.shape[1]
    ones = torch.ones(1, 1, 3, 3, dtype=image.dtype, device=image.device)
    for _ in range(texels):
        count = F.conv2d(weight, ones, padding=1)
        grow = (weight == 0) & (count > 0)
        if not grow.any():
            break
        total = F.conv2d(image, ones.expand(channels, 1, 3, 3), padding=1, groups=channels)
        image = torch.where(grow, total / count.clamp(min=1), image)
        weight = torch.where(grow, torch.ones_like(weight), weight)
    return _channels_last(image), _channels_last(weight)


@torch.no_grad()
def fill_empty(texture: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Fill the empty texels of ``texture [H, W, C]`` (``mask [H, W, 1]``, nonzero = filled)
    by push-pull: a pyramid of mask-weighted 2x2 means down to one texel, then, from coarse to
    fine, every texel empty at its level takes the bilinearly upsampled coarser value.
    Filled texels are returned unchanged; no texel is left empty."""
    image, weight = _channels_first(texture, mask)
    if not weight.any():
        raise ValueError("cannot fill a texture that has no filled texel")
    levels = [(image, weight)]
    while max(image.shape[-2:]) > 1:
        image = F.avg_pool2d(image, 2, ceil_mode=True)
        weight = F.avg_pool2d(weight, 2, ceil_mode=True)
        levels.append((image, weight))
    filled = levels[-1][0] / levels[-1][1]
    for image, weight in reversed(levels[:-1]):
        coarse = F.interpolate(filled, size=image.shape[-2:], mode="bilinear",
                               align_corners=False)
        filled = torch.where(weight > 0, image / weight.clamp(min=1e-12), coarse)
    out = _channels_last(filled)
    return torch.where(mask > 0, texture, out)


def _as_dict(values) -> dict[str, torch.Tensor]:
    """A field's output as a dict: a mapping, or a NamedTuple such as ``NeuralMaterialSample``."""
    if isinstance(values, Mapping):
        return dict(values)
    if hasattr(values, "_asdict"):
        return values._asdict()
    raise TypeError(f"the field must return a dict of tensors, got {type(values).__name__}")


def evaluate_field(field: Callable, points: torch.Tensor, chunk: int) -> dict[str, torch.Tensor]:
    """``field`` at ``points [N, 3]``, ``chunk`` points per call, concatenated per channel
    group; each group checked to be ``[N, C]`` and finite, returned as float32."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    parts: dict[str, list[torch.Tensor]] = {}
    for start in range(0, points.shape[0], chunk):
        batch = points[start:start + chunk]
        values = _as_dict(field(batch))
        if not values or (parts and values.keys() != parts.keys()):
            raise ValueError(f"the field returned the keys {sorted(values)}, expected "
                             f"{sorted(parts) or 'some channel groups'}")
        for name, value in values.items():
            if not torch.is_tensor(value) or value.ndim != 2 or value.shape[0] != len(batch):
                raise ValueError(f"field output {name!r} must be a tensor [{len(batch)}, C], "
                                 f"got {getattr(value, 'shape', type(value).__name__)}")
            parts.setdefault(name, []).append(value.float())
    out = {name: torch.cat(chunks) for name, chunks in parts.items()}
    for name, value in out.items():
        if not torch.isfinite(value).all():
            raise ValueError(f"field output {name!r} holds NaN or infinite values")
    return out


@torch.no_grad()
def bake_textures(ctx: raster.RasterContext, mesh: Mesh, field: Callable, resolution: int, *,
                  dilation_texels: int = 8, chunk: int = DEFAULT_CHUNK) -> dict[str, torch.Tensor]:
    """Bake ``field`` into ``resolution``² textures over ``mesh``'s UV layout.

    ``field(points [N, 3]) -> {name: [N, C]}`` (a dict or a NamedTuple; e.g. "kd" [N, 3|4],
    "ks" [N, 3], "normal" [N, 3]) is called with the world positions of the covered texel
    centres, ``chunk`` points at a time. Returns ``{name: [R, R, C]}`` float32 textures on the
    mesh's device, rows top-down (row 0 is v = 1): covered texels hold the field's value, the
    charts are dilated by ``dilation_texels`` and every other texel is filled by push-pull.
    """
    if mesh.uvs is None:
        raise ValueError("baking needs a mesh with UVs; unwrap it first")
    if resolution < 1:
        raise ValueError(f"resolution must be >= 1, got {resolution}")
    position, mask = render_uv(ctx, mesh, resolution)
    position, mask = position[0], mask[0]
    covered = mask[..., 0] > 0
    if not covered.any():
        raise ValueError(f"the mesh's UV layout covers no texel centre at {resolution}²")
    values = evaluate_field(field, position[covered].float(), chunk)
    stacked = torch.cat(list(values.values()), -1).to(mesh.device)
    texture = torch.zeros(resolution, resolution, stacked.shape[-1], device=mesh.device)
    texture[covered] = stacked
    texture, grown = dilate(texture, mask.to(texture), dilation_texels)
    texture = fill_empty(texture, grown)
    sizes = [value.shape[-1] for value in values.values()]
    return {name: part.contiguous()
            for name, part in zip(values, texture.split(sizes, -1), strict=True)}
