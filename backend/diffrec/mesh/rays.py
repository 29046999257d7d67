"""Shadow rays against a triangle mesh: does a ray hit any triangle?

Two engines answer the same question: "embree" (Intel Embree's BVH through the optional
``embreex`` package, ``pip install 'diffrec[visibility]'``), fast enough for every vertex of a
scanned mesh times hundreds of directions; and "brute-force", every ray against every triangle
in torch (Möller–Trumbore), for small meshes and as an independent reference in tests. Rays are
half-lines from their origin (hits at distance <= 0 do not count); triangles are two-sided.
Nothing here is differentiable: visibility is a cached, piecewise-constant quantity.
"""

from __future__ import annotations

import numpy as np
import torch

from diffrec.errors import UserError
from diffrec.optional import optional_module

__all__ = ["ENGINES", "occluded"]

ENGINES = ("auto", "embree", "brute-force")

_EMBREE_CHUNK = 1 << 21  # rays per call into Embree (bounds the float32 copies)
_BRUTE_FORCE_BUDGET = 1 << 22  # ray-triangle pairs per chunk of the torch engine
_EPSILON = 1e-9


def _embree_occluded(positions: np.ndarray, triangles: np.ndarray, origins: np.ndarray,
                     directions: np.ndarray) -> np.ndarray:
    rtcore_scene = optional_module("embreex.rtcore_scene")
    construction = optional_module("embreex.mesh_construction")
    if rtcore_scene is None or construction is None:
        raise UserError("self-shadowing casts rays with Embree: install it with "
                        "pip install 'diffrec[visibility]' (the embreex package)")
    scene = rtcore_scene.EmbreeScene()
    construction.TriangleMesh(scene, positions[triangles].astype(np.float32))
    hits = np.empty(len(origins), dtype=bool)
    for start in range(0, len(origins), _EMBREE_CHUNK):
        part = slice(start, start + _EMBREE_CHUNK)
        first = scene.run(np.ascontiguousarray(origins[part], dtype=np.float32),
                          np.ascontiguousarray(directions[part], dtype=np.float32))
        hits[part] = np.asarray(first) >= 0
    return hits


def _brute_force_occluded(positions: torch.Tensor, triangles: torch.Tensor,
                          origins: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Möller–Trumbore, every ray against every triangle, in chunks of rays."""
    p0, p1, p2 = positions[triangles].unbind(1)  # [T, 3] each
    edge1, edge2 = p1 - p0, p2 - p0
    hits = torch.zeros(len(origins), dtype=torch.bool)
    chunk = max(1, _BRUTE_FORCE_BUDGET // max(len(triangles), 1))
    for start in range(0, len(origins), chunk):
        o = origins[start:start + chunk, None, :]
        d = directions[start:start + chunk, None, :]
        p = torch.linalg.cross(d.expand(-1, len(triangles), -1),
                               edge2[None].expand(len(o), -1, -1), dim=-1)
        det = (edge1[None] * p).sum(-1)
        inv = 1.0 / torch.where(det.abs() > _EPSILON, det, torch.ones_like(det))
        s = o - p0[None]
        u = (s * p).sum(-1) * inv
        q = torch.linalg.cross(s, edge1[None].expand_as(s), dim=-1)
        v = (d * q).sum(-1) * inv
        t = (edge2[None] * q).sum(-1) * inv
        hit = (det.abs() > _EPSILON) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > _EPSILON)
        hits[start:start + chunk] = hit.any(-1)
    return hits


def occluded(positions: torch.Tensor, triangles: torch.Tensor, origins: torch.Tensor,
             directions: torch.Tensor, engine: str = "auto") -> torch.Tensor:
    """Whether each ray ``origins[i] + t directions[i]``, ``t > 0``, hits a triangle of the mesh
    (``positions`` [V, 3], ``triangles`` [T, 3]); ``origins``, ``directions`` [N, 3] (directions
    need not be unit). Returns a bool tensor [N] on the CPU. ``engine``: "embree" (needs the
    ``visibility`` extra), "brute-force", or "auto" (Embree; a clear error if it is missing)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if origins.shape != directions.shape or origins.ndim != 2 or origins.shape[-1] != 3:
        raise ValueError(f"origins {tuple(origins.shape)} and directions "
                         f"{tuple(directions.shape)} must both be [N, 3]")
    positions = positions.detach().cpu().double()
    triangles = triangles.detach().cpu().long()
    origins, directions = origins.detach().cpu().double(), directions.detach().cpu().double()
    if len(triangles) == 0 or len(origins) == 0:
        return torch.zeros(len(origins), dtype=torch.bool)
    if engine == "brute-force":
        return _brute_force_occluded(positions, triangles, origins, directions)
    return torch.from_numpy(_embree_occluded(positions.numpy(), triangles.numpy(),
                                             origins.numpy(), directions.numpy()))
