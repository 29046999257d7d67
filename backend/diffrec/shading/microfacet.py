"""Microfacet terms shared by the BSDF and the split-sum table: GGX normal distribution,
height-correlated Smith masking-shadowing, Schlick Fresnel, Lambert.

Roughness follows nvdiffrec and glTF: ``alpha = roughness^2``. Every function is elementwise,
broadcasts, and works in any floating dtype (float64 for references and the table).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "fresnel_schlick",
    "ggx_ndf",
    "lambert",
    "smith_g2",
    "smith_lambda",
    "specular_brdf",
]


def lambert(n_dot_l: torch.Tensor) -> torch.Tensor:
    """Lambertian BRDF times the cosine for unit albedo: ``max(n.l, 0) / pi``."""
    return n_dot_l.clamp_min(0) / math.pi


def ggx_ndf(n_dot_h: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """GGX (Trowbridge-Reitz) distribution ``D = a^2 / (pi ((n.h)^2 (a^2 - 1) + 1)^2)``,
    normalised so that ``integral D(h) (n.h) dh = 1`` over the hemisphere."""
    a2 = torch.as_tensor(alpha, dtype=n_dot_h.dtype, device=n_dot_h.device) ** 2
    denom = n_dot_h * n_dot_h * (a2 - 1) + 1
    return a2 / (math.pi * denom * denom)


def smith_lambda(n_dot_x: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """GGX Smith ``Lambda = (sqrt(1 + a^2 tan^2(theta)) - 1) / 2`` for ``cos(theta) = n.x``."""
    a2 = torch.as_tensor(alpha, dtype=n_dot_x.dtype, device=n_dot_x.device) ** 2
    cos2 = (n_dot_x * n_dot_x).clamp_min(1e-12)
    tan2 = (1 - cos2).clamp_min(0) / cos2
    return (torch.sqrt(1 + a2 * tan2) - 1) / 2


def smith_g2(
    n_dot_v: torch.Tensor, n_dot_l: torch.Tensor, alpha: torch.Tensor | float
) -> torch.Tensor:
    """Height-correlated Smith masking-shadowing ``G2 = 1 / (1 + Lambda(v) + Lambda(l))``,
    zero where either direction is below the surface."""
    g = 1 / (1 + smith_lambda(n_dot_v, alpha) + smith_lambda(n_dot_l, alpha))
    return torch.where((n_dot_v > 0) & (n_dot_l > 0), g, torch.zeros_like(g))


def fresnel_schlick(f0: torch.Tensor | float, v_dot_h: torch.Tensor) -> torch.Tensor:
    """Schlick's Fresnel ``F = f0 + (1 - f0) (1 - v.h)^5``."""
    return f0 + (1 - f0) * (1 - v_dot_h.clamp(0, 1)) ** 5


def specular_brdf(
    n: torch.Tensor,
    v: torch.Tensor,
    l: torch.Tensor,
    f0: torch.Tensor,
    roughness: torch.Tensor,
) -> torch.Tensor:
    """Cook-Torrance GGX specular BRDF ``D G2 F / (4 (n.l)(n.v))`` (without the cosine).

    ``n, v, l``: unit vectors ``[..., 3]`` (``v`` and ``l`` point away from the surface);
    ``f0``: ``[..., C]``; ``roughness``: ``[..., 1]``. Zero below the horizon.
    """
    h = torch.nn.functional.normalize(v + l, dim=-1)
    n_dot_v = (n * v).sum(-1, keepdim=True)
    n_dot_l = (n * l).sum(-1, keepdim=True)
    n_dot_h = (n * h).sum(-1, keepdim=True).clamp_min(0)
    v_dot_h = (v * h).sum(-1, keepdim=True)
    alpha = roughness * roughness
    g = smith_g2(n_dot_v, n_dot_l, alpha)
    denom = 4 * n_dot_l.clamp_min(1e-12) * n_dot_v.clamp_min(1e-12)
    return ggx_ndf(n_dot_h, alpha) * g * fresnel_schlick(f0, v_dot_h) / denom
