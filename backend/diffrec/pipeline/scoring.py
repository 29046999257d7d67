"""How a run is judged: its held-out views rendered (supersampled) and scored against their
targets, PSNR and SSIM per view and their means (``metrics.json``'s ``views``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffrec.pipeline.trainer import light_rotation
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import Settings
from diffrec.render.backgrounds import background_for, composite
from diffrec.render.metrics import psnr, ssim
from diffrec.render.path_tracer import PathTracer
from diffrec.render.renderer import render_mesh

__all__ = ["VALIDATION_PATH_SAMPLES_FACTOR", "VALIDATION_SPP", "Validation", "score_views"]


@dataclass
class Validation:
    """The held-out views as judged: ``renders`` and composited ``targets`` ``[N, H, W, 3]``
    linear (CPU), in the order of the metrics' ``views``."""

    renders: torch.Tensor
    targets: torch.Tensor


VALIDATION_SPP = 2  # held-out views are judged antialiased, as targets and Blender show them
VALIDATION_PATH_SAMPLES_FACTOR = 4  # path-traced held-out views: less noise than training's


def score_views(ctx, mesh, material, light, views: Views, settings: Settings
                ) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Render the held-out views (supersampled); PSNR and SSIM per view against the targets,
    both over ``settings.rendering.background`` (black for "random"). Returns the scores, the
    renders and the composited targets (``[N, H, W, 3]``, CPU)."""
    light.build_mips()
    path_tracing, rendering = settings.path_tracing, settings.rendering
    tracer = (PathTracer(mesh, ctx.device, path_tracing.max_depth)
              if path_tracing.renderer == "path-traced" else None)
    renders, shown_targets, scores = [], [], []
    spp = max(rendering.spp, VALIDATION_SPP)
    # rasterized views: no more pixels at once than a training batch (supersampled spp^2)
    chunk = max(1, settings.size.batch if tracer is not None else settings.size.batch // spp**2)
    with torch.no_grad():
        for start in range(0, len(views), chunk):
            cameras, targets = views.batch(range(start, min(start + chunk, len(views))))
            cameras, targets = cameras.to(ctx.device), targets.to(ctx.device)
            background = background_for(rendering.background, targets)
            if tracer is not None:
                out = tracer.render(material, light, cameras, background=background,
                                    spp=VALIDATION_PATH_SAMPLES_FACTOR * path_tracing.samples,
                                    seed=start)
            else:
                out = render_mesh(ctx, mesh, material, cameras, light,
                                  spp=spp, layers=rendering.layers, background=background,
                                  light_rotation=light_rotation(cameras,
                                                                settings.light.camera_space),
                                  layered=settings.layered_bsdf())
            target = composite(targets, background)
            scores += list(zip(psnr(out.color, target).tolist(), ssim(out.color, target).tolist(),
                               strict=True))
            renders.append(out.color.cpu())
            shown_targets.append(target.cpu())
    per_view = [{"name": name, "psnr": p, "ssim": s}
                for name, (p, s) in zip(views.names, scores, strict=True)]
    summary = {"views": per_view,
               "psnr_mean": sum(p for p, _ in scores) / len(scores),
               "ssim_mean": sum(s for _, s in scores) / len(scores)}
    return summary, torch.cat(renders), torch.cat(shown_targets)
