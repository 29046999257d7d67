"""The split-sum environment-BRDF table ``(A, B)``, computed by diffrec and cached on disk.

For a GGX specular lobe with height-correlated Smith ``G2`` and Schlick Fresnel (the terms of
``diffrec.shading.microfacet``), the directional albedo splits as

    integral f(l, v) (n.l) dl = f0 * A(n.v, r) + B(n.v, r)
    A = E[(1 - Fc) w],  B = E[Fc w],  Fc = (1 - v.h)^5,  w = G2 (v.h) / ((n.v)(n.h))

with ``h`` distributed as ``D(h)(n.h)`` and ``alpha = r^2``. The expectation is a product
quadrature in float64: Gauss-Legendre in the GGX sampling variable ``xi`` (``cos^2 theta_h =
(1 - xi) / (1 + (alpha^2 - 1) xi)``) times the midpoint rule in the azimuth.

Table layout: ``[N, N, 2]`` float32, row ``i`` = roughness ``(i + 0.5)/N``, column ``j`` =
``n.v = (j + 0.5)/N``, channels (A, B); i.e. a 2D texture looked up at ``uv = (n.v,
roughness)`` with texel coordinate ``u*N - 0.5`` and clamped edges.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np
import torch

from diffrec.files import atomic_writer, cache_dir
from diffrec.shading.microfacet import smith_g2

__all__ = ["brdf_lut", "compute_brdf_lut", "default_cache_dir", "split_sum_terms"]

log = logging.getLogger(__name__)

_VERSION = 1
_QUADRATURE = 48


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/diffrec`` if set, else ``~/.cache/diffrec``."""
    return cache_dir()


def split_sum_terms(n_dot_v: torch.Tensor, roughness: torch.Tensor, order: int = _QUADRATURE):
    """``(A, B)`` at broadcastable float64 ``n_dot_v`` in (0, 1] and ``roughness`` in (0, 1]."""
    nodes, weights = np.polynomial.legendre.leggauss(order)
    xi = torch.as_tensor((nodes + 1) / 2, dtype=torch.float64)
    w_xi = torch.as_tensor(weights / 2, dtype=torch.float64)
    # Symmetric in the azimuth about the plane of v and n: integrate over [0, pi).
    phi = (torch.arange(order, dtype=torch.float64) + 0.5) * math.pi / order
    n_dot_v, roughness = torch.broadcast_tensors(
        n_dot_v.to(torch.float64), roughness.to(torch.float64)
    )
    mu, alpha = n_dot_v[..., None, None], (roughness**2)[..., None, None]
    xi, cos_phi = xi[:, None], torch.cos(phi)
    cos_h = torch.sqrt((1 - xi) / (1 + (alpha**2 - 1) * xi))
    sin_h = torch.sqrt((1 - cos_h**2).clamp_min(0))
    # v = (sqrt(1 - mu^2), 0, mu); h = (sin_h cos phi, sin_h sin phi, cos_h).
    v_dot_h = (torch.sqrt(1 - mu**2) * sin_h * cos_phi + mu * cos_h).clamp_min(0)
    n_dot_l = 2 * v_dot_h * cos_h - mu
    g = smith_g2(mu, n_dot_l, alpha)
    w = g * v_dot_h / (mu * cos_h)
    fc = (1 - v_dot_h) ** 5
    quad = w_xi[:, None] / order
    a = ((1 - fc) * w * quad).sum((-2, -1))
    b = (fc * w * quad).sum((-2, -1))
    return a, b


def compute_brdf_lut(size: int = 128) -> np.ndarray:
    """Compute the ``[size, size, 2]`` float32 table (see the module docstring)."""
    centres = (torch.arange(size, dtype=torch.float64) + 0.5) / size
    threads = torch.get_num_threads()
    # One row at a time on one thread: on a busy CPU, multi-threaded small elementwise ops were
    # measured 25x slower than single-threaded ones (about 10 s instead of minutes at 128).
    torch.set_num_threads(1)
    try:
        rows = [torch.stack(split_sum_terms(centres, r), -1) for r in centres]
    finally:
        torch.set_num_threads(threads)
    return torch.stack(rows).numpy().astype(np.float32)


def _valid(table: object, size: int) -> bool:
    return (
        isinstance(table, np.ndarray)
        and table.shape == (size, size, 2)
        and table.dtype == np.float32
        and bool(np.isfinite(table).all())
        and bool((table >= 0).all())
        and bool((table.sum(-1) <= 1 + 1e-4).all())
    )


def _atomic_save(path: Path, table: np.ndarray) -> None:
    with atomic_writer(path) as f:
        np.save(f, table, allow_pickle=False)


def brdf_lut(
    size: int = 128, cache_dir: str | os.PathLike | None = None, device=None
) -> torch.Tensor:
    """The ``(A, B)`` table as a float32 tensor ``[size, size, 2]`` on ``device``.

    Loaded from ``cache_dir`` (default ``default_cache_dir()``) when a valid copy is there;
    otherwise computed (about a second at 128) and written atomically. A missing, truncated or
    implausible file is recomputed; an unwritable cache only costs the recomputation.
    """
    if size < 2:
        raise ValueError(f"table size must be at least 2, got {size}")
    path = Path(cache_dir or default_cache_dir()) / f"brdf_lut_ggx_smithhc_v{_VERSION}_{size}.npy"
    table = None
    try:
        table = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        pass
    if not _valid(table, size):
        table = compute_brdf_lut(size)
        try:
            _atomic_save(path, table)
        except OSError as exc:
            log.warning("could not cache the BRDF table at %s: %s", path, exc)
    return torch.from_numpy(np.ascontiguousarray(table)).to(device)
