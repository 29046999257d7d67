"""Mip chains of a ``Material``'s textures for export: the fitted levels where it has them
(``Material.mips``), linear-space 2x2 box averages below them.

Level ``k + 1`` of a box chain is the mean of 2x2 texel blocks of level ``k`` (1x2 where a
side is 1), taken on the linear values the material holds (never on sRGB-encoded ones);
normal map levels are renormalised to unit length. A chain ends at 1x1, or earlier at the
first level with an odd side longer than 1, which 2x2 blocks cannot halve.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diffrec.io.material import Material
from diffrec.raster._torch.texture_mip import can_halve, downsample


def mip_chain(material: Material, name: str) -> list[torch.Tensor]:
    """Levels 0..n ``[h, w, C]`` of the texture channel ``name`` ("kd", "ks" or "normal"):
    the channel, its fitted levels, then box averages down to the chain's end."""
    chain = [getattr(material, name), *(material.mips or {}).get(name, [])]
    while (level := box_level(name, chain[-1])) is not None:
        chain.append(level)
    return chain


def box_level(name: str, level: torch.Tensor) -> torch.Tensor | None:
    """The linear 2x2 box average of ``level`` (renormalised for "normal"), or None at the
    chain's end (1x1, or an odd side longer than 1)."""
    smaller = halved(level)
    if smaller is None or name != "normal":
        return smaller
    return F.normalize(smaller, dim=-1)


def halved(level: torch.Tensor) -> torch.Tensor | None:
    """The 2x2 box average of ``level [h, w, C]`` as its values are, or None at the chain's
    end (1x1, or an odd side longer than 1)."""
    return downsample(level) if can_halve(*level.shape[:2]) else None
