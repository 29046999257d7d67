"""Image losses between a render and its target, both scene-linear HDR ``[..., 3]``.

As in nvdiffrec: ``logl1`` / ``logl2`` compare after the tonemap ``srgb(log(clamp(x, 0, 65535)
+ 1))``, which keeps bright highlights from dominating; ``mse``; ``smape`` =
``|x - y| / (|x| + |y| + 0.01)``; ``relmse`` = ``(x - y)^2 / (x^2 + y^2 + 0.1)``. Each returns
the mean over all elements (a scalar tensor), or over the pixels selected by ``mask``.

``logl2_linearized`` is ``logl2`` linearised at the target, ``(T'(y) (x - y))^2`` with ``T``
the log tonemap: the same weighting of bright and dark pixels, but quadratic in the render,
so a noisy Monte Carlo render (path tracing) whose mean is right has the right expected
gradient. The others turn noise into bias: L1 and ``logl1`` fit the samples' median, which
for a render's skewed noise lies below its mean; the tonemapped losses fit the mean of the
tonemap.
"""

from __future__ import annotations

import torch

from diffrec.color import linear_to_srgb

HDR_CLAMP = 65535.0
CLIPPED_WHITE = (0.999, 1.001)
"""A target channel within these (linear) is white as an 8-bit or 16-bit image stores it:
sRGB 255 decodes to 1.0, 254 to 0.991; an HDR target's brighter values are exact."""


def clipped_like(render: torch.Tensor, target: torch.Tensor,
                 straight_target: torch.Tensor | None = None) -> torch.Tensor:
    """``render`` as a target clipped at white records it: no brighter than ``target`` in the
    channels where the target's own colour (``straight_target``, before compositing over a
    background; ``target`` itself if None) is white (the scene was at least that bright
    there, so brighter costs nothing), unchanged elsewhere. All scene-linear ``[..., 3]``."""
    low, high = CLIPPED_WHITE
    colour = target if straight_target is None else straight_target
    white = (colour >= low) & (colour <= high)
    return torch.where(white, torch.minimum(render, target), render)


def tonemap_log_srgb(x: torch.Tensor) -> torch.Tensor:
    """``srgb(log(clamp(x, 0, 65535) + 1))``: the tonemap of the log losses."""
    return linear_to_srgb(torch.log(x.clamp(0.0, HDR_CLAMP) + 1.0))


def _logl1(x, y):
    return (tonemap_log_srgb(x) - tonemap_log_srgb(y)).abs()


def _logl2(x, y):
    return (tonemap_log_srgb(x) - tonemap_log_srgb(y)).square()


def _mse(x, y):
    return (x - y).square()


def _l1(x, y):
    return (x - y).abs()


def _smape(x, y):
    return (x - y).abs() / (x.abs() + y.abs() + 0.01)


def _relmse(x, y):
    return (x - y).square() / (x.square() + y.square() + 0.1)


def _logl2_linearized(x, y):
    with torch.enable_grad():  # the tonemap's slope at the target; no gradient flows through it
        probe = y.detach().clone().requires_grad_(True)
        (slope,) = torch.autograd.grad(tonemap_log_srgb(probe).sum(), probe)
    return (slope * (x - y)).square()


LOSSES = {
    "logl1": _logl1,
    "logl2": _logl2,
    "mse": _mse,
    "l1": _l1,
    "smape": _smape,
    "relmse": _relmse,
    "logl2_linearized": _logl2_linearized,
}


def image_loss(
    render: torch.Tensor,
    target: torch.Tensor,
    kind: str = "logl1",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean per-element loss ``kind`` between ``render`` and ``target`` (same shape).

    ``mask`` (broadcastable to ``render[..., :1]``, values 0/1) restricts the mean to the
    selected pixels; an all-zero mask gives 0.
    """
    if kind not in LOSSES:
        raise ValueError(f"unknown loss {kind!r}; choose one of {', '.join(LOSSES)}")
    if render.shape != target.shape:
        raise ValueError(f"render {tuple(render.shape)} and target {tuple(target.shape)} differ")
    per_element = LOSSES[kind](render, target)
    if mask is None:
        return per_element.mean()
    weight = mask.to(per_element.dtype).expand_as(per_element)
    return (per_element * weight).sum() / weight.sum().clamp(min=1.0)
