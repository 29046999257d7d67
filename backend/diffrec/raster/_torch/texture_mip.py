"""Mip chains for the torch ``texture``: 2x2 box filtering and chain validation.

Level ``l + 1`` averages 2x2 texel blocks of level ``l``. A side of length 1 stays 1 (the
block is then 1x2 or 2x1), so a 8x2 texture has levels 4x1, 2x1, 1x1. Any other odd side
cannot be halved: building past it raises ``ValueError`` (as nvdiffrast does) unless
``max_mip_level`` stops the chain before it. The full chain ends at 1x1.
Cube maps filter each face on its own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _halve(size: int) -> int:
    return 1 if size == 1 else size // 2


def can_halve(height: int, width: int) -> bool:
    """Whether 2x2 blocks halve a ``height x width`` level: it is not 1x1 and has no odd side
    longer than 1."""
    return (height > 1 or width > 1) and not any(side > 1 and side % 2
                                                 for side in (height, width))


def halvable_levels(height: int, width: int) -> int:
    """Number of levels after the base one that 2x2 blocks build: down to 1x1, or to the first
    level with an odd side longer than 1 (a 100 x 100 texture: 50 and 25, so 2)."""
    levels = 0
    while can_halve(height, width):
        height, width = _halve(height), _halve(width)
        levels += 1
    return levels


def check_max_level(max_mip_level) -> None:
    if max_mip_level is not None and (isinstance(max_mip_level, bool)
                                      or not isinstance(max_mip_level, int)
                                      or max_mip_level < 0):
        raise ValueError(f"max_mip_level must be a non-negative int or None, got {max_mip_level!r}")


def level_count(height: int, width: int, max_mip_level: int | None) -> int:
    """Number of levels after the base one: down to 1x1, or ``max_mip_level`` if smaller."""
    check_max_level(max_mip_level)
    levels = 0
    while (height > 1 or width > 1) and (max_mip_level is None or levels < max_mip_level):
        if (height > 1 and height % 2) or (width > 1 and width % 2):
            raise ValueError(
                f"mip level {levels} is {height}x{width} and cannot be halved (sides must be "
                f"even or 1); pass max_mip_level={levels} or smaller to stop the chain there"
            )
        height, width = _halve(height), _halve(width)
        levels += 1
    return levels


def downsample(level: torch.Tensor) -> torch.Tensor:
    """Next mip level of ``[..., h, w, C]``: the mean of each 2x2 block (1x2 where a side is 1)."""
    *lead, height, width, channels = level.shape
    kernel = (1 if height == 1 else 2, 1 if width == 1 else 2)
    planes = level.reshape(-1, height, width, channels).permute(0, 3, 1, 2)  # channels-last NCHW
    pooled = F.avg_pool2d(planes, kernel).permute(0, 2, 3, 1)
    return pooled.reshape(*lead, height // kernel[0], width // kernel[1], channels)


def build_chain(tex: torch.Tensor, num_levels: int) -> list[torch.Tensor]:
    """Levels 1..num_levels of ``tex`` (``[B, h, w, C]`` or ``[B, 6, h, w, C]``), differentiable."""
    levels, current = [], tex
    for _ in range(num_levels):
        current = downsample(current)
        levels.append(current)
    return levels


def check_chain(tex: torch.Tensor, mip) -> list[torch.Tensor]:
    """Validate a user-given chain (levels 1..n, each half the previous) and return it as a list."""
    if torch.is_tensor(mip) or not isinstance(mip, (list, tuple)):
        raise TypeError("mip must be a list of tensors (levels 1..n), e.g. from "
                        "texture_construct_mip")
    expected = list(tex.shape)
    for index, level in enumerate(mip, start=1):
        expected[-3], expected[-2] = _halve(expected[-3]), _halve(expected[-2])
        if not torch.is_tensor(level):
            raise TypeError(f"mip level {index} is not a tensor")
        if list(level.shape) != expected:
            raise ValueError(f"mip level {index} has shape {tuple(level.shape)}, expected "
                             f"{tuple(expected)} (each level halves the previous one)")
        if level.dtype != tex.dtype or level.device != tex.device:
            raise TypeError(f"mip level {index} must match tex's dtype and device "
                            f"({tex.dtype}, {tex.device}), got ({level.dtype}, {level.device})")
    return list(mip)
