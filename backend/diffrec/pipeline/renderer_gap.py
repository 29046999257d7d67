"""Taking the targets' renderer out of a fit that starts from a given mesh and material.

When the targets come from another renderer (Cycles) and the start is already close (a bake
of the reference), most of what the fit sees between its own render and a target is how the
two renderers differ: shadows and occlusion our rasterizer does not trace, light bounced
between parts, the split-sum's approximations. Fitted against the targets as they are, the
textures absorb that difference (cavities painted dark, highlights painted into the base
colour) and the asset looks worse in the targets' renderer than its start did.

Given the start rendered by the targets' renderer from the training cameras (the start
renders), each training target is corrected once, before the pass, by the ratio of our
render of the start to the other renderer's: ``target x (ours + eps) / (theirs + eps)``,
clamped to ``RATIO_RANGE``, on the pixels all three cover wholly. Where the renderers differ
by a factor (occlusion, shadow: the largest differences), the corrected target is what our
renderer would show of the reference, and the fit learns only how the reference differs from
the start; where the start is the reference, nothing moves.

The silhouettes (pixels some of the three images cover, but not all wholly) are corrected by
the difference instead, in premultiplied colour and in alpha: ``target + ours - theirs``.
There the renderers differ by how they filter an edge (Cycles' 1.5-pixel Blackman-Harris
against our coverage at one sample: Cycles' silhouettes are wider, thin parts by a few per
cent), a difference that adds, and that the fit would otherwise learn by moving the
vertices outwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffrec.errors import UserError
from diffrec.pipeline.trainer import light_rotation
from diffrec.pipeline.views import Views
from diffrec.render.renderer import render_mesh

__all__ = ["COVERED", "EPSILON", "RATIO_RANGE", "WITHOUT_THEIR_MATERIAL", "GapCorrection",
           "gap_corrected", "matching_start_renders", "own_renders"]

EPSILON = 0.005
"""Linear radiance added to both renders before their ratio: dark pixels, where a ratio is
mostly noise, are corrected little."""
RATIO_RANGE = (0.25, 4.0)
"""The most a target is scaled down or up."""
COVERED = 0.999
"""Alpha from which a pixel counts as wholly covered."""
WITHOUT_THEIR_MATERIAL = (
    "start renders need the material they show sent with them (start textures, or a base "
    "mesh with its material, and init_textures not 'random'): without it the job starts from "
    "a grey levelled to the targets, which no render of the start shows, and the correction "
    "would paint that grey into the targets; send the start's material, or leave the start "
    "renders out")
"""Why start renders are refused for a job that does not start from a given material."""
CAMERA_TOLERANCE = 1e-3
"""Largest difference allowed between a target's camera and its start render's (pose
entries in scene units, intrinsics relative)."""


@dataclass(frozen=True)
class GapCorrection:
    """What ``gap_corrected`` did: ``pixels`` the share of the targets' covered pixels it
    scaled; ``mean_ratio`` the mean of the ratio there; ``mean_abs_log_ratio`` the mean
    |log ratio| there (0: the renderers agree); ``coverage_change`` the targets' alpha summed
    after the silhouettes' correction over before, minus 1 (negative: theirs the wider)."""

    pixels: float
    mean_ratio: float
    mean_abs_log_ratio: float
    coverage_change: float

    def sentence(self) -> str:
        return (f"start renders: the targets' renderer and ours differ by a factor "
                f"exp({self.mean_abs_log_ratio:.3f}) on average (mean ratio "
                f"{self.mean_ratio:.3f}) over {100 * self.pixels:.0f} % of the object's "
                f"pixels, and their silhouettes by {100 * self.coverage_change:+.1f} % of its "
                "coverage; the fit learns what is left")


def matching_start_renders(start: Views, train: Views) -> Views:
    """``start``'s views in the order of ``train``'s, matched by name; refuses (UserError)
    a training view without a start render, or one whose camera or size differs."""
    index = {name: i for i, name in enumerate(start.names)}
    missing = [name for name in train.names if name not in index]
    if missing:
        raise UserError(f"the start renders have no view named {missing[0]!r} (of "
                        f"{len(missing)} training views without one): render the start from "
                        "every training camera, with the same file names")
    matched = start.subset([index[name] for name in train.names])
    ours, theirs = train.cameras, matched.cameras
    if (ours.width, ours.height) != (theirs.width, theirs.height):
        raise UserError(f"the start renders are {theirs.width}x{theirs.height} but the targets "
                        f"{ours.width}x{ours.height}: render them at the targets' size")
    pose = (ours.camera_to_world.cpu() - theirs.camera_to_world.cpu()).abs().amax(dim=(1, 2))
    focal = ((ours.fx.cpu() - theirs.fx.cpu()).abs() / ours.fx.cpu().abs())
    wrong = torch.nonzero((pose > CAMERA_TOLERANCE) | (focal > CAMERA_TOLERANCE))[:, 0]
    if len(wrong):
        raise UserError(f"the start render {train.names[int(wrong[0])]!r} was made from "
                        "another camera than its target: render the start from the training "
                        "cameras")
    return matched


def own_renders(ctx, run, cameras, chunk: int = 4) -> torch.Tensor:
    """What pass ``run`` (a ``pipeline.trainer.Pass``) renders of its start from ``cameras``:
    ``[N, H, W, 4]`` scene-linear RGB and straight alpha, as the training renders are made
    (its spp, layers, BSDF and light), without gradients."""
    images = []
    with torch.no_grad():  # a fixed light built here is built once (``build_mips``)
        run.light.build_mips()
        mesh = run.geometry.mesh()
        for first in range(0, len(cameras), chunk):
            batch = cameras[torch.arange(first, min(first + chunk, len(cameras)),
                                         device=cameras.device)]
            out = render_mesh(ctx, mesh, run.material, batch, run.light, spp=run.spp,
                              layers=run.layers,
                              light_rotation=light_rotation(batch, run.camera_space_light),
                              layered=run.layered_bsdf)
            straight = out.color / out.alpha.clamp_min(1e-6)
            images.append(torch.cat([straight * (out.alpha > 0), out.alpha], -1))
    return torch.cat(images)


def gap_corrected(train: Views, start_renders: Views, own: torch.Tensor,
                  clips_white: bool = False) -> tuple[Views, GapCorrection]:
    """``train`` with each target corrected by how ``own`` (our render of the start,
    ``own_renders``) differs from ``start_renders`` (the targets' renderer's, matched to
    ``train``, ``matching_start_renders``): its RGB multiplied by their ratio on the pixels
    all three cover wholly, its premultiplied RGB and alpha shifted by their difference on
    the silhouettes (module docstring); ``clips_white``: our render is clipped at 1 first, as
    the targets are."""
    targets = train.images
    own = own.to(targets.device)
    theirs = start_renders.images.to(targets.device)
    ours = own[..., :3].clamp(max=1.0) if clips_white else own[..., :3]
    ratio = ((ours + EPSILON) / (theirs[..., :3] + EPSILON)).clamp(*RATIO_RANGE)
    target_alpha, their_alpha, our_alpha = targets[..., 3:], theirs[..., 3:], own[..., 3:]
    covered = target_alpha.ge(COVERED) & their_alpha.ge(COVERED) & our_alpha.ge(COVERED)
    silhouette = ~covered & (target_alpha.gt(0) | their_alpha.gt(0) | our_alpha.gt(0))
    scaled = targets[..., :3] * torch.where(covered, ratio, torch.ones_like(ratio))
    alpha = torch.where(silhouette, target_alpha + our_alpha - their_alpha,
                        target_alpha).clamp(0, 1)
    shifted = (targets[..., :3] * target_alpha + ours * our_alpha
               - theirs[..., :3] * their_alpha).clamp_min(0) / alpha.clamp_min(1e-6)
    colour = torch.where(silhouette, shifted * (alpha > 0), scaled)
    images = torch.cat([colour, alpha], -1)
    object_pixels = (targets[..., 3] > 0).sum().clamp_min(1)
    corrected = covered[..., 0]
    inside = ratio[corrected] if corrected.any() else torch.ones(1, 3)
    report = GapCorrection(pixels=float(corrected.sum() / object_pixels),
                           mean_ratio=float(inside.mean()),
                           mean_abs_log_ratio=float(inside.log().abs().mean()),
                           coverage_change=float(alpha.sum() / target_alpha.sum().clamp_min(1e-6))
                           - 1.0)
    return Views(train.cameras, images.contiguous(), list(train.names)), report
