"""What a run starts from: the light (``make_light``) and, for materials and refine, the
textures (``initial_textures``, from ``settings.material.init_textures``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diffrec.errors import UserError
from diffrec.io import Material
from diffrec.io.material import is_texture
from diffrec.light.envmap import EnvironmentLight
from diffrec.protocol.settings import Settings
from diffrec.render.material import FLAT_NORMAL, TextureMaterial, material_f0
from diffrec.render.texture2d import Texture2D
from diffrec.shading.bsdf import DIELECTRIC_F0

__all__ = ["CONSTANT_START", "averaged", "has_textures", "initial_textures", "make_light"]

CONSTANT_START = {"kd": (0.5, 0.5, 0.5), "ks": (0.0, 0.5, 0.0)}
"""The constant start (``init_textures`` "constant"), before clamping into the settings'
ranges: mid grey, roughness 0.5, no occlusion or metal."""


def make_light(settings: Settings, envmap: torch.Tensor | None, device) -> EnvironmentLight:
    """The light a run starts with on ``device``: grey 0.5 to learn (``light`` "learn"), else
    the HDRI ``envmap`` (equirect ``[H, W, 3]`` linear; UserError without one), with
    ``light_sources`` of its brightest parts shaded exactly where it stays fixed."""
    if settings.light.mode == "learn" or envmap is None:
        if settings.light.mode != "learn":
            raise UserError(f"light {settings.light.mode!r} needs an envmap (the HDRI)")
        return EnvironmentLight(resolution=settings.size.light_res, init=0.5).to(device)
    sources = settings.light.sources if settings.light.mode == "fixed" else 0
    return EnvironmentLight.from_equirect(envmap.to(device), resolution=settings.size.light_res,
                                          sources=sources)


def initial_textures(settings: Settings, device, base_material: Material | None = None
                     ) -> TextureMaterial:
    """The textures a materials / refine run starts from (``settings.material.init_textures``),
    square at ``texture_res``, within ``settings.material_ranges()``:

    - "constant": mid-range, grey kd (alpha 1), roughness 0.5, no metal, flat normals (a
      materials run then levels kd to its views where the light is known:
      ``pipeline.albedo_level``);
    - "random": kd uniform in its range, occlusion uniform in its range cut at 0.01,
      roughness and metallic uniform in theirs, flat normals (the reference system's random
      textures);
    - "base_mesh": the base mesh's own material resampled (constants where it has none), its
      clear coat, which the run keeps as it is, and its IOR.

    No normal map unless ``settings.trains_normal_map()``; the IOR (1.5 unless the base mesh
    gives one) trained where ``settings.trains_ior()``.
    """
    size, ranges = settings.size.texture_res, settings.material_ranges()
    kd_low, kd_high = (torch.tensor(v) for v in ranges["kd"])
    ks_low, ks_high = (torch.tensor(v, dtype=torch.float32) for v in ranges["ks"])
    mid_kd = [*CONSTANT_START["kd"], 1.0][:len(kd_low)]
    coat, f0 = None, DIELECTRIC_F0
    values = {"kd": torch.tensor(mid_kd).clamp(kd_low, kd_high).expand(size, size, -1),
              "ks": torch.tensor(CONSTANT_START["ks"]).clamp(ks_low, ks_high)
              .expand(size, size, 3),
              "normal": FLAT_NORMAL.expand(size, size, 3)}
    if settings.material.init_textures == "random":
        generator = torch.Generator().manual_seed(settings.run.seed)

        def uniform(low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
            return low + (high - low) * torch.rand(size, size, len(low), generator=generator)

        values["kd"] = uniform(kd_low, kd_high)
        ks_high[0] = ks_high[0].clamp(max=0.01).clamp(min=ks_low[0])  # occlusion near none
        values["ks"] = uniform(ks_low, ks_high)
    elif settings.material.init_textures == "base_mesh" and base_material is not None:
        coat, f0 = base_material.coat, material_f0(base_material)
        for name in ("kd", "ks", "normal"):
            channel = getattr(base_material, name)
            if channel is not None:
                values[name] = _resampled(channel, size, values[name])
    names = ("kd", "ks", "normal") if settings.trains_normal_map() else ("kd", "ks")
    textures = [Texture2D(values[name], *ranges[name]) for name in names]
    for texture in textures:
        texture.clamp_()  # a base mesh's material may lie outside the ranges
    return TextureMaterial(*textures, mip_bias=settings.material.texture_mip_bias,
                           coat=coat, f0=f0, learn_f0=settings.trains_ior()).to(device)


def has_textures(material: Material) -> bool:
    """Whether any of ``material``'s channels is a texture (not a constant)."""
    return any(channel is not None and is_texture(channel)
               for channel in (material.kd, material.ks, material.normal))


def averaged(material: Material) -> Material:
    """``material`` with each texture replaced by its mean value and no normal map (its clear
    coat and IOR kept): the start a material's textures leave when the mesh's UVs they follow were
    replaced."""
    def mean(channel: torch.Tensor) -> torch.Tensor:
        return channel.mean((0, 1)) if is_texture(channel) else channel

    return Material(material.name, mean(material.kd), mean(material.ks), None,
                    coat=material.coat, ior=material.ior)


def _resampled(channel: torch.Tensor, size: int, like: torch.Tensor) -> torch.Tensor:
    """A material channel (constant ``[C]`` or texture ``[H, W, C]``) as a ``size``-square
    texture with ``like``'s channel count (alpha 1 added, or dropped)."""
    channel = torch.as_tensor(channel, dtype=torch.float32)
    if channel.ndim == 1:
        channel = channel[None, None]
    image = F.interpolate(channel.permute(2, 0, 1)[None], size=(size, size), mode="bilinear",
                          align_corners=False, antialias=True)[0].permute(1, 2, 0)
    channels = like.shape[-1]
    if image.shape[-1] < channels:
        image = torch.cat([image, torch.ones(size, size, channels - image.shape[-1])], -1)
    return image[..., :channels].contiguous()
