"""Self-shadowing of the environment light: the object hides part of the sky from itself.

The split-sum light assumes every direction above a surface point sees the environment. Where
the object occludes its own light (the inside of a bowl, under a creature's chin) that bright
estimate forces a fit to paint the shadow into the base colour. Here the light is seen through a
*visibility* term instead:

- **Directions.** The ``K = 6 r^2`` texel centres ``w_k`` of a cube map of side ``r``
  (``shadow_directions``), each standing for its exact solid angle ``O_k``.
- **Visibility per vertex** (``vertex_visibility``, no gradient, cached by the caller): the
  fraction of each direction's texel left unoccluded, from ``(2 r)^2 * 6`` shadow rays per
  vertex (``diffrec.mesh.rays``, Embree) averaged 2 x 2 by solid angle. A ray leaves the
  vertex on the side of the surface it points to, so one table serves both sides of a thin
  shell. Values in [0, 1], ``[V, K]``.
- **Per pixel** the table is interpolated with the rasterizer's barycentrics
  (``pixel_visibility``) and ``ShadowedLight`` wraps the light:

      diffuse(n)     = sum_k V_k c_k L(w_k) / sum_k c_k,   c_k = max(n.w_k, 0) O_k
      specular(r, a) = light.specular(r, a) * sum_k V_k s_k / sum_k s_k,
                       s_k = max(r.w_k, 0)^e(a) O_k

  with ``L(w_k)`` the light box-filtered to side ``r`` (``EnvironmentLight.radiance``). With
  ``V = 1`` the diffuse term is the light's own irradiance (the same normalised cosine
  quadrature, at side ``r``); the specular factor is a visibility average over a Phong lobe
  matched to the GGX roughness (``e = 2/a^4 - 2`` with ``a`` the roughness, capped at
  ``MAX_LOBE_EXPONENT`` because ``r`` resolves no narrower lobe), 1 when nothing occludes.
  Both are differentiable with respect to the light, the normals and (through the shading) the
  material; only ``V`` is constant. Interreflection is not modelled: occluded directions give
  no light.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from diffrec.light.cube import texel_directions, texel_solid_angles
from diffrec.mesh.normals import vertex_normals
from diffrec.mesh.rays import occluded

__all__ = [
    "DIRECTION_RESOLUTION",
    "MAX_LOBE_EXPONENT",
    "ShadowedLight",
    "pixel_visibility",
    "shadow_directions",
    "vertex_visibility",
]

DIRECTION_RESOLUTION = 8  # cube side of the light's directions: K = 384
MAX_LOBE_EXPONENT = 64.0
_RAY_OFFSET = 1e-3  # ray origins leave the surface by this fraction of the mesh's diagonal
_VERTEX_CHUNK = 2048


@functools.cache
def _directions(resolution: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (texel_directions(resolution).reshape(-1, 3).float(),
            texel_solid_angles(resolution).reshape(-1).float())


def shadow_directions(resolution: int = DIRECTION_RESOLUTION
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(unit directions ``[6 r^2, 3]``, solid angles ``[6 r^2]`` in steradians summing to 4 pi):
    the texel centres of a cube map of side ``r``, faces and rows in ``diffrec.light.cube``'s
    order."""
    directions, solid_angles = _directions(resolution)
    return directions.clone(), solid_angles.clone()


def _resolution_of(directions: int) -> int:
    resolution = round((directions / 6) ** 0.5)
    if 6 * resolution * resolution != directions:
        raise ValueError(f"a visibility table needs 6 r^2 directions per vertex, got {directions}")
    return resolution


@torch.no_grad()
def vertex_visibility(positions: torch.Tensor, triangles: torch.Tensor,
                      resolution: int = DIRECTION_RESOLUTION, engine: str = "auto"
                      ) -> torch.Tensor:
    """Unoccluded fraction of each of ``shadow_directions(resolution)``'s texels seen from each
    vertex of the mesh, ``[V, 6 r^2]`` float32 on ``positions``' device (see the module
    docstring). ``engine`` as ``diffrec.mesh.rays.occluded``."""
    positions, triangles = positions.detach().float().cpu(), triangles.detach().long().cpu()
    fine = 2 * resolution
    rays = texel_directions(fine).reshape(-1, 3).float()  # [6 (2r)^2, 3]
    weights = texel_solid_angles(fine).float()  # [6, 2r, 2r]
    block = F.avg_pool2d(weights[:, None], 2)[:, 0]  # [6, r, r], mean weight per 2 x 2 block
    normals = vertex_normals(positions, triangles)
    diagonal = float((positions.amax(0) - positions.amin(0)).norm()) if len(positions) else 0.0
    offset = _RAY_OFFSET * max(diagonal, 1e-12)
    out = []
    for start in range(0, len(positions), _VERTEX_CHUNK):
        p, n = positions[start:start + _VERTEX_CHUNK], normals[start:start + _VERTEX_CHUNK]
        side = torch.where(n @ rays.T >= 0, 1.0, -1.0)  # [Vc, D]
        origins = p[:, None, :] + offset * side[..., None] * n[:, None, :]
        hit = occluded(positions, triangles, origins.reshape(-1, 3),
                       rays.expand(len(p), -1, -1).reshape(-1, 3), engine=engine)
        seen = (~hit).float().reshape(len(p), 6, fine, fine) * weights
        pooled = F.avg_pool2d(seen, 2) / block  # [Vc, 6, r, r]
        out.append(pooled.reshape(len(p), -1))
    if not out:
        return torch.zeros(0, 6 * resolution * resolution, device=positions.device)
    return torch.cat(out).clamp(0, 1)


def pixel_visibility(visibility: torch.Tensor, rast: torch.Tensor, triangles: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-vertex table ``[V, K]`` interpolated at the covered pixels of a rasterized layer
    ``rast`` ``[B, H, W, 4]`` (``(u, v, z/w, triangle id + 1)``, as ``diffrec.raster``):
    ``(covered [B, H, W] bool, values [P, K])`` for the ``P`` covered pixels in row-major order
    (image by image)."""
    covered = rast[..., 3] > 0
    hit = rast[covered]
    corners = triangles.long()[hit[:, 3].long() - 1]  # [P, 3]
    u, v = hit[:, 0:1], hit[:, 1:2]
    values = (u * visibility[corners[:, 0]] + v * visibility[corners[:, 1]]
              + (1 - u - v) * visibility[corners[:, 2]])
    return covered, values


def lobe_exponent(roughness: torch.Tensor) -> torch.Tensor:
    """Phong exponent of the lobe matched to GGX ``roughness`` (``alpha = roughness^2``),
    ``2 / alpha^2 - 2`` capped at ``MAX_LOBE_EXPONENT``."""
    alpha2 = roughness.clamp_min(1e-3) ** 4
    return (2.0 / alpha2 - 2.0).clamp(0.0, MAX_LOBE_EXPONENT)


class ShadowedLight:
    """``light`` (anything with ``diffuse``, ``specular`` and ``radiance``) seen through the
    visibility of the covered pixels of one layer, ``covered`` [B, H, W] and ``visibility``
    [P, K] from ``pixel_visibility`` (see the module docstring). Lookups take ``[B, H, W, 3]``
    directions of that layer and return ``[B, H, W, 3]``; uncovered pixels get 0."""

    def __init__(self, light, covered: torch.Tensor, visibility: torch.Tensor):
        self.light, self.covered = light, covered
        self.resolution = _resolution_of(visibility.shape[-1])
        directions, solid_angles = _directions(self.resolution)
        self.directions = directions.to(visibility)
        self.solid_angles = solid_angles.to(visibility)
        self.seen = visibility * self.solid_angles  # V_k O_k, [P, K]
        self.per_image = covered.flatten(1).sum(1).tolist()

    def _scatter(self, values: torch.Tensor) -> torch.Tensor:
        out = values.new_zeros(*self.covered.shape, values.shape[-1])
        out[self.covered] = values
        return out

    def diffuse(self, normal: torch.Tensor, *, ctx) -> torch.Tensor:
        """Irradiance / pi through the visibility, ``[B, H, W, 3]``."""
        cosine = (normal[self.covered] @ self.directions.T).clamp_min(0)  # [P, K]
        radiance = self.light.radiance(self.directions, self.resolution, ctx=ctx)
        if radiance.ndim == 2:
            radiance = radiance.expand(len(self.per_image), -1, -1)
        weighted = (cosine * self.seen).split(self.per_image)
        lit = torch.cat([w @ radiance[b] for b, w in enumerate(weighted)])
        total = (cosine @ self.solid_angles)[:, None]
        return self._scatter(lit / total.clamp_min(1e-12))

    def specular(self, reflect: torch.Tensor, roughness: torch.Tensor, *, ctx
                 ) -> torch.Tensor:
        """The light's prefiltered specular times the visible fraction of the reflection
        lobe, ``[B, H, W, 3]``."""
        with torch.no_grad():
            exponent = lobe_exponent(roughness[self.covered]).clamp_min(1e-2)  # [P, 1]
            lobe = (reflect[self.covered] @ self.directions.T).clamp_min(0).pow(exponent)
            visible = (lobe * self.seen).sum(-1, keepdim=True)
            fraction = visible / (lobe @ self.solid_angles)[:, None].clamp_min(1e-12)
        return self.light.specular(reflect, roughness, ctx=ctx) * self._scatter(fraction)
