"""The base colour a materials run starts from, levelled to what its views show.

Started at mid grey (0.5), a dark object is first darkened the fastest way the fit has: the
metallic and occlusion channels rise with the base colour falling, and a black rough bowl
ends glossy, part metal, with a bright base colour under dark patches (docs/BENCHMARKS.md,
"The base colour's start"). Under a known light the start can be where the views are
instead: with a non-metallic material a render is affine in the base colour ``kd``,
``R(kd) = R(0) + kd (R(1) - R(0))``, so the one constant per channel that best explains the
views is a least-squares fit from two renders.
"""

from __future__ import annotations

import torch

from diffrec.pipeline.trainer import light_rotation
from diffrec.pipeline.views import Views, evenly_spread
from diffrec.protocol.settings import Settings
from diffrec.render.material import TextureMaterial
from diffrec.render.renderer import render_mesh

__all__ = ["LEVEL_VIEWS", "level_albedo_", "starts_levelled"]

LEVEL_VIEWS = 8  # views spread over the training set: the level is one number per channel
INTERIOR = 0.99  # alpha above which a pixel counts, in the target and in the render


def starts_levelled(settings: Settings) -> bool:
    """Whether a run levels its starting base colour: materials mode (in refine mode the
    vertices move too, and a pass that starts levelled levels off, and stops, before its
    surface has: docs/BENCHMARKS.md), constant starting textures (``init_textures``), a light
    that starts as the HDRI (not ``light`` "learn", where the light's level is unknown) and no
    metal at the start."""
    metallic_floor = settings.material_ranges()["ks"][0][2]
    return (settings.run.mode == "materials" and settings.material.init_textures == "constant"
            and settings.light.mode != "learn" and metallic_floor == 0)


@torch.no_grad()
def level_albedo_(ctx, mesh, material: TextureMaterial, light, views: Views,
                  settings: Settings) -> torch.Tensor:
    """Fill ``material``'s base colour with the constant, per channel, that best explains
    ``views`` (scene-linear, least squares over the pixels inside the object in both the target
    and the render) under ``light`` with the material's own ``ks``, clamped into the base
    colour's range; its alpha channel, if any, is kept. Returns the level ``[3]``.

    Contract: the material's metallic is 0 where it is rendered (the render is then affine in
    the base colour); ``light`` fixed, its mips built here. Renders 2 x ``LEVEL_VIEWS`` views
    at most, ``settings.size.batch`` at a time.
    """
    light.build_mips()
    kd = material.kd.data
    chosen = evenly_spread(LEVEL_VIEWS, len(views))
    cross = torch.zeros(3, dtype=torch.float64)
    square = torch.zeros(3, dtype=torch.float64)
    original = kd[..., :3].clone()
    try:
        for batch in chosen.split(max(1, settings.size.batch)):
            cameras, targets = views.batch(batch)
            cameras, targets = cameras.to(ctx.device), targets.to(ctx.device)
            black, white = (_render(ctx, mesh, material, light, cameras, settings, value)
                            for value in (0.0, 1.0))
            inside = ((targets[..., 3:] > INTERIOR) & (white.alpha > INTERIOR)).double()
            response = (white.color - black.color).double() * inside
            residual = (targets[..., :3] - black.color).double() * inside
            cross += (response * residual).sum((0, 1, 2)).cpu()
            square += response.square().sum((0, 1, 2)).cpu()
    finally:
        kd[..., :3] = original
    unseen = original.mean((0, 1)).double().cpu()  # no counted pixel: the start as it was
    kd[..., :3] = torch.where(square > 0, cross / square.clamp(min=1e-30), unseen).to(kd)
    material.kd.clamp_()
    return kd[0, 0, :3].cpu().clone()  # a copy: the texture trains on


def _render(ctx, mesh, material, light, cameras, settings: Settings, value: float):
    """``cameras``' views with every base-colour texel set to ``value`` (over black)."""
    material.kd.data[..., :3] = value
    return render_mesh(ctx, mesh, material, cameras, light, spp=settings.rendering.spp,
                       layers=settings.rendering.layers,
                       light_rotation=light_rotation(cameras, settings.light.camera_space),
                       layered=settings.layered_bsdf())
