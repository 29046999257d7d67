"""The PBR material record the file formats read and write, and the file-space axes.

Each channel is either a constant or a texture, never both (a file's factor times its
texture is folded into the texture on reading):

- ``kd``: base colour, linear RGB or RGBA (straight alpha), ``[3|4]`` or ``[H, W, 3|4]``.
- ``ks``: ``(occlusion, roughness, metallic)``, linear, ``[3]`` or ``[H, W, 3]``; occlusion
  is the *amount* of occlusion (0 = none), as the renderer uses ``(1 - occlusion)``.
- ``normal``: tangent-space normal map ``[H, W, 3]`` of unit vectors (OpenGL convention,
  +Y = increasing v), or None.
- ``coat``: a clear coat over the whole surface, or None: ``(weight, roughness)`` ``[2]`` in
  [0, 1], a dielectric layer of IOR 1.5 (glTF's ``KHR_materials_clearcoat`` factors; Blender's
  Principled BSDF's Coat Weight and Coat Roughness), shaded with the normal map.
- ``ior``: the index of refraction of the non-metal parts, one over the surface (glTF's
  ``KHR_materials_ior``, Blender's Principled IOR; it sets their reflectance at normal
  incidence, ``diffrec.shading.bsdf``), or None for glTF's and Blender's 1.5.
- ``mips``: fitted mip levels for some texture channels, or None: ``{"kd" | "ks" | "normal":
  [level 1, ..., level n]}``, level ``k`` of shape ``[max(1, H >> k), max(1, W >> k), C]`` with
  the channel's own ``C`` and value conventions (level 0 is the channel itself). Channels
  without fitted levels are exported with linear-space 2x2 box averages (``io.mips``).

Textures are float32 tensors with rows top-down; UV (0, 0) is the bottom-left corner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from diffrec.errors import UserError
from diffrec.mesh import Mesh


@dataclass(eq=False)
class Material:
    name: str = "material"
    kd: torch.Tensor = field(default_factory=lambda: torch.tensor([0.8, 0.8, 0.8]))
    ks: torch.Tensor = field(default_factory=lambda: torch.tensor([0.0, 0.5, 0.0]))
    normal: torch.Tensor | None = None
    mips: dict[str, list[torch.Tensor]] | None = None
    coat: torch.Tensor | None = None
    ior: float | None = None

    def __post_init__(self):
        self.kd = _check_channel("kd", self.kd, (3, 4))
        self.ks = _check_channel("ks", self.ks, (3,))
        if self.normal is not None:
            self.normal = _check_channel("normal", self.normal, (3,))
            if self.normal.ndim != 3:
                raise UserError("a normal map must be a texture [H, W, 3]")
        if self.mips is not None:
            self.mips = _check_mips(self, self.mips)
        if self.coat is not None:
            self.coat = check_coat(self.coat)
        if self.ior is not None:
            self.ior = float(self.ior)
            if not math.isfinite(self.ior) or self.ior < 1.0:
                raise UserError(f"a material's IOR must be a number of at least 1, got "
                                f"{self.ior}")


@dataclass(eq=False)
class Asset:
    """What a mesh file holds: the mesh, its materials and each triangle's material index."""

    mesh: Mesh
    materials: list[Material]
    material_ids: torch.Tensor  # [T] int64 into materials


def is_texture(channel: torch.Tensor) -> bool:
    return channel.ndim == 3


def blender_to_yup(vectors: torch.Tensor) -> torch.Tensor:
    """World (Blender, Z up) -> file (Y up): ``(x, y, z) -> (x, z, -y)``, [..., 3]."""
    x, y, z = vectors.unbind(-1)
    return torch.stack([x, z, -y], dim=-1)


def yup_to_blender(vectors: torch.Tensor) -> torch.Tensor:
    """File (Y up) -> world (Blender, Z up): ``(x, y, z) -> (x, -z, y)``, [..., 3]."""
    x, y, z = vectors.unbind(-1)
    return torch.stack([x, -z, y], dim=-1)


def encode_normal_map(normal: torch.Tensor) -> np.ndarray:
    """Unit tangent-space normals [H, W, 3] -> image values ``(n + 1) / 2`` in [0, 1]."""
    return ((normal.detach().cpu().numpy() + 1.0) / 2.0).astype(np.float32)


def decode_normal_map(encoded: np.ndarray, scale: float = 1.0) -> torch.Tensor:
    """Image values [H, W, >=3] in [0, 1] -> unit normals [H, W, 3]; ``scale`` multiplies x
    and y first (glTF's normalTexture.scale)."""
    n = torch.tensor(encoded[..., :3]) * 2 - 1  # a copy: a decoded image may be read-only
    n = n * torch.tensor([scale, scale, 1.0])
    return n / torch.clamp(n.norm(dim=-1, keepdim=True), min=1e-8)


MIP_CHANNELS = ("kd", "ks", "normal")
"""The channels that may carry fitted mip levels (``Material.mips``)."""
UNIT_TOLERANCE = 1e-3
"""How far a normal in a mip level may be from unit length."""


def _check_mips(material: Material, mips) -> dict[str, list[torch.Tensor]]:
    if not isinstance(mips, dict):
        raise UserError(f"material mips must be a dict of channel -> list of levels, got "
                        f"{type(mips).__name__}")
    checked = {}
    for name, levels in mips.items():
        if name not in MIP_CHANNELS:
            raise UserError(f"material mips has a channel {name!r}; mip levels exist only for "
                            f"{', '.join(MIP_CHANNELS)}")
        base = getattr(material, name)
        if base is None or not is_texture(base):
            raise UserError(f"material mips has levels for {name}, which is not a texture")
        if not isinstance(levels, (list, tuple)):
            raise UserError(f"material mips[{name!r}] must be a list of levels 1..n, got "
                            f"{type(levels).__name__}")
        checked[name] = [_check_level(name, base, index, level)
                         for index, level in enumerate(levels, start=1)]
    return checked


def _check_level(name: str, base: torch.Tensor, index: int, level) -> torch.Tensor:
    height, width, channels = base.shape
    if max(height, width) >> (index - 1) <= 1:
        raise UserError(f"material mips[{name!r}] has a level {index}, past the 1x1 level of "
                        f"its {height}x{width} texture")
    level = torch.as_tensor(level, dtype=torch.float32)
    expected = (max(1, height >> index), max(1, width >> index), channels)
    if tuple(level.shape) != expected:
        raise UserError(f"material mips[{name!r}] level {index} has shape "
                        f"{tuple(level.shape)}; a {height}x{width} texture's level {index} is "
                        f"{expected}")
    if not torch.isfinite(level).all():
        raise UserError(f"material mips[{name!r}] level {index} holds NaN or infinite values")
    if name == "normal" and ((level.norm(dim=-1) - 1).abs() > UNIT_TOLERANCE).any():
        raise UserError(f"material mips['normal'] level {index} holds normals that are not "
                        f"unit length (renormalise each level)")
    return level


def check_coat(coat, name: str = "material coat") -> torch.Tensor:
    """A clear coat as ``Material.coat`` holds it: ``(weight, roughness)``, float32 ``[2]``, each
    in [0, 1]; raises ``UserError`` naming ``name`` otherwise."""
    coat = torch.as_tensor(coat, dtype=torch.float32)
    if coat.shape != (2,):
        raise UserError(f"{name} must be (weight, roughness), got shape {tuple(coat.shape)}")
    if not torch.isfinite(coat).all() or bool(((coat < 0) | (coat > 1)).any()):
        raise UserError(f"{name} must lie in [0, 1], got {coat.tolist()}")
    return coat


def _check_channel(name: str, value, channels: tuple[int, ...]) -> torch.Tensor:
    value = torch.as_tensor(value, dtype=torch.float32)
    if value.ndim not in (1, 3) or value.shape[-1] not in channels or value.numel() == 0:
        raise UserError(
            f"material {name} must be [C] or [H, W, C] with C in {channels}, "
            f"got {tuple(value.shape)}"
        )
    if not torch.isfinite(value).all():
        raise UserError(f"material {name} holds NaN or infinite values")
    return value
