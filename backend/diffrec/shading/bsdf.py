"""Metallic-roughness PBR shading under a split-sum environment light, shading normals, and the
display modes.

Materials (glTF layout): ``kd`` base colour ``[..., 3]`` (linear), ``ks = (occlusion,
roughness, metallic)`` ``[..., 3]``, and ``f0``, the non-metal's reflectance at normal
incidence (``DIELECTRIC_F0`` = 0.04 unless given: IOR 1.5; ``dielectric_f0`` of another IOR,
glTF's ``KHR_materials_ior``, Blender's IOR). With ``m`` metallic:

    spec_col = f0 (1 - m) + kd m            diff_col = kd (1 - m) (1 - (f0 A + B) M(f0))
    out = (light.diffuse(n) diff_col + (light.specular(r, roughness) (spec_col A + B)
           + light.source_specular(n, v, spec_col, roughness)) M(spec_col)) * (1 - occlusion)

where ``r = 2 (n.v) n - v``, ``(A, B)`` is the split-sum table at ``(n.v, roughness)``
(``diffrec.light.brdf_lut``) and ``M(f0) = 1 + f0 (1 - E) / E``, ``E = A + B``, gives back
the light that single-scattering GGX loses between the microfacets (Fdez-Aguera 2019, an
approximation of Cycles' Multiscatter GGX, Blender's default): a white metal of any roughness
under a uniform white sky reflects exactly what arrives; rough gold is 25 % brighter at
roughness 0.6. The factor ``1 - (f0 A + B) M(f0)`` is the *layered* model of Blender's
Principled BSDF: the diffuse base lies under the dielectric specular coat and gets the light
the coat does not reflect (``(f0 A + B) M(f0)``: the coat's directional albedo), so a white
dielectric of any IOR under a uniform white sky reflects exactly what arrives. nvdiffrec adds
the two lobes, without ``M`` (``layered=False``): 2 to 4 % too bright facing the eye, 6 to
35 % at grazing angles (``n.v`` 0.2), which a fit judged in Blender pays for in a darker base
colour and a roughness that wanders (docs/BENCHMARKS.md, "The diffuse under the coat").
A clear coat ``(w, r_c)`` (Blender's Coat Weight and Coat Roughness; glTF's
``KHR_materials_clearcoat``) lies over all of it as Cycles layers it: a single-scattering
dielectric lobe of roughness ``r_c`` (``0.04``, shaded as the specular above without ``M``)
added with weight ``w``, and everything beneath dimmed by the light the coat reflects,
``1 - w (0.04 A_c + B_c)``; the coat's normal is the shading normal (glTF's
``clearcoatNormalTexture`` is the normal map). Under a uniform white sky a white dielectric
still reflects what arrives.
``light`` is anything with ``diffuse(n)``, ``specular(r, roughness)`` and
``source_specular(n, v, spec_col, roughness)``, the exact specular reflection of light it
holds as directional sources (``diffrec.light.EnvironmentLight``; ``diffrec.light.sources``;
its ``diffuse`` includes theirs). Vectors are unit, world space, ``v`` points from the
surface to the eye.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from diffrec.raster import texture_points

__all__ = [
    "DIELECTRIC_F0",
    "DISPLAY_MODES",
    "GLASS_IOR",
    "bend_toward_viewer",
    "dielectric_f0",
    "ior_of",
    "lookup_brdf_lut",
    "pbr",
    "perturb_normal",
    "shade",
    "shading_normal",
]

DISPLAY_MODES = ("pbr", "kd", "ks", "normal", "shading-only")
GLASS_IOR = 1.5  # glTF's and Blender's IOR unless a material gives one
DIELECTRIC_F0 = 0.04  # normal-incidence reflectance of the non-metal coat (GLASS_IOR)


def distinct_ior(ior: float) -> float | None:
    """``ior`` where it is not glass's ``GLASS_IOR`` (to 1e-4), else None: what a file has to
    carry, and what the path-traced pass, which shades glass's, cannot."""
    return None if abs(ior - GLASS_IOR) < 1e-4 else ior

# Shading normals are bent until n.v reaches this value.
_MIN_N_DOT_V = 1e-2


def dielectric_f0(ior: float) -> float:
    """A dielectric's reflectance at normal incidence from its index of refraction (> 0):
    ``((ior - 1) / (ior + 1))^2``; 0.04 at 1.5."""
    return ((ior - 1.0) / (ior + 1.0)) ** 2


def ior_of(f0: float) -> float:
    """The index of refraction (at least 1) whose ``dielectric_f0`` is ``f0`` in [0, 1)."""
    root = math.sqrt(f0)
    return (1.0 + root) / (1.0 - root)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1, keepdim=True)


def perturb_normal(
    normal: torch.Tensor,
    tangent: torch.Tensor,
    normal_ts: torch.Tensor,
    bitangent_sign: torch.Tensor | float = 1.0,
) -> torch.Tensor:
    """World normal from a tangent-space normal-map value (OpenGL convention, +Y up).

    ``normal_ts`` in [-1, 1]^3 ``[..., 3]``; ``normal``, ``tangent`` ``[..., 3]`` (the tangent
    need not be orthogonal or unit); bitangent ``B = sign * cross(N, T)``. Returns
    ``normalize(T x + B y + N z)``; ``(0, 0, 1)`` leaves ``normal`` unchanged (normalised).
    """
    n = F.normalize(normal, dim=-1)
    t = F.normalize(tangent - _dot(tangent, n) * n, dim=-1)
    b = torch.linalg.cross(n, t, dim=-1) * bitangent_sign
    x, y, z = normal_ts[..., 0:1], normal_ts[..., 1:2], normal_ts[..., 2:3]
    return F.normalize(t * x + b * y + n * z, dim=-1)


def bend_toward_viewer(normal: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """Shading normals facing away from the eye (``n.v < 0.01``) are moved along ``v`` until
    ``n.v = 0.01`` (before renormalising); others are unchanged. Continuous in ``n``."""
    n_dot_v = _dot(normal, view)
    bent = F.normalize(normal + (_MIN_N_DOT_V - n_dot_v) * view, dim=-1)
    return torch.where(n_dot_v < _MIN_N_DOT_V, bent, normal)


def shading_normal(
    view: torch.Tensor,
    smooth_normal: torch.Tensor,
    geom_normal: torch.Tensor,
    tangent: torch.Tensor | None = None,
    normal_ts: torch.Tensor | None = None,
    bitangent_sign: torch.Tensor | float = 1.0,
    two_sided: bool = True,
) -> torch.Tensor:
    """The normal to shade with, ``[..., 3]``.

    1. Two-sided: where the face is seen from behind (``geom_normal . v < 0``) the smooth
       normal is flipped (and the bitangent sign with it, so the normal map keeps its sense).
    2. The normal map, if given, perturbs it (``perturb_normal``).
    3. Normals still facing away from the eye are bent toward it (``bend_toward_viewer``).
    """
    n = F.normalize(smooth_normal, dim=-1)
    if two_sided:
        back = _dot(geom_normal, view) < 0
        n = torch.where(back, -n, n)
        sign = torch.as_tensor(bitangent_sign, dtype=n.dtype, device=n.device)
        bitangent_sign = torch.where(back, -sign, sign)
    if normal_ts is not None:
        if tangent is None:
            raise ValueError("a normal map needs tangents")
        n = perturb_normal(n, tangent, normal_ts, bitangent_sign)
    return bend_toward_viewer(n, view)


def lookup_brdf_lut(lut: torch.Tensor, n_dot_v: torch.Tensor, roughness: torch.Tensor, *,
                    ctx):
    """Bilinear ``(A, B)`` from the table ``[N, N, 2]`` at ``n_dot_v``, ``roughness``
    ``[..., 1]``; returns ``(A, B)``, each ``[..., 1]``. Looked up with ``ctx``'s engine (a
    ``RasterContext``, required), as every lookup below."""
    uv = torch.cat([n_dot_v, roughness], -1).reshape(-1, 2).to(lut.dtype)
    ab = texture_points(lut[None], uv, filter_mode="linear", boundary_mode="clamp", ctx=ctx)
    ab = ab.reshape(*n_dot_v.shape[:-1], 2)
    return ab[..., 0:1], ab[..., 1:2]


def pbr(light, lut: torch.Tensor, kd, ks, normal, view, *, ctx, layered: bool = True,
        covered: torch.Tensor | None = None, coat: torch.Tensor | None = None,
        f0: torch.Tensor | None = None) -> torch.Tensor:
    """Metallic-roughness split-sum shading (see the module docstring) -> ``[..., 3]``;
    ``layered``: the diffuse under the specular coat and the light lost between microfacets
    given back (Blender's Principled BSDF), else the two added (nvdiffrec); ``covered``:
    where the light's sources need shading (a boolean mask of ``normal``'s leading shape;
    None: everywhere); ``coat``: a clear coat ``(weight, roughness)`` ``[2]`` over all of it,
    or None; ``f0``: the non-metal's reflectance at normal incidence (a scalar tensor; None:
    ``DIELECTRIC_F0``)."""
    occlusion, roughness, metallic = ks[..., 0:1], ks[..., 1:2], ks[..., 2:3]
    f0 = DIELECTRIC_F0 if f0 is None else f0.to(kd)
    spec_col = f0 * (1 - metallic) + kd * metallic
    diff_col = kd * (1 - metallic)
    n_dot_v = _dot(normal, view).clamp(1e-4, 1)
    reflect = F.normalize(2 * n_dot_v * normal - view, dim=-1)
    a, b = lookup_brdf_lut(lut, n_dot_v, roughness, ctx=ctx)
    specular = light.specular(reflect, roughness, ctx=ctx) * (spec_col * a + b)
    specular = specular + light.source_specular(normal, view, spec_col, roughness, covered)
    if layered:
        lost = (1 - (a + b)) / (a + b).clamp_min(1e-3)  # single scattering's loss over E
        diff_col = diff_col * (1 - (f0 * a + b) * (1 + f0 * lost))
        specular = specular * (1 + spec_col * lost)
    diffuse = light.diffuse(normal, ctx=ctx) * diff_col
    shaded = diffuse + specular
    if coat is not None:
        shaded = _under_coat(shaded, coat, light, lut, normal, view, reflect, n_dot_v, ctx=ctx,
                             covered=covered)
    return shaded * (1 - occlusion)


def _under_coat(beneath: torch.Tensor, coat: torch.Tensor, light, lut: torch.Tensor, normal,
                view, reflect, n_dot_v, *, ctx, covered) -> torch.Tensor:
    """``beneath`` (radiance ``[..., 3]``) under a clear coat ``(weight, roughness)``: dimmed
    by the coat's directional albedo times its weight, and the coat's own reflection added
    (the module docstring; Cycles' coat is single-scattering GGX, its Fresnel a dielectric's
    of IOR 1.5)."""
    weight = coat[0].to(beneath)
    roughness = coat[1].to(beneath).expand_as(n_dot_v)
    a, b = lookup_brdf_lut(lut, n_dot_v, roughness, ctx=ctx)
    albedo = DIELECTRIC_F0 * a + b
    f0 = torch.full_like(normal, DIELECTRIC_F0)
    reflected = (light.specular(reflect, roughness, ctx=ctx) * albedo
                 + light.source_specular(normal, view, f0, roughness, covered))
    return beneath * (1 - weight * albedo) + weight * reflected


def shade(mode: str, light, lut, kd, ks, normal, view, *, ctx, layered: bool = True,
          covered: torch.Tensor | None = None, coat: torch.Tensor | None = None,
          f0: torch.Tensor | None = None) -> torch.Tensor:
    """Colour for a display mode, ``[..., 3]``:

    - "pbr": the full shading (``pbr``; ``layered``, ``covered``, ``coat`` and ``f0`` as there),
      linear radiance;
    - "kd": the base colour; "ks": the (occlusion, roughness, metallic) texture as RGB;
    - "normal": the world shading normal mapped to [0, 1] as ``(n + 1)/2``;
    - "shading-only": the light alone on a white Lambertian surface, ``light.diffuse(n)``
      (kd = 1, not metallic, no occlusion): geometry, normals and light without textures.
    """
    if mode == "pbr":
        return pbr(light, lut, kd, ks, normal, view, ctx=ctx, layered=layered, covered=covered,
                   coat=coat, f0=f0)
    if mode == "kd":
        return kd
    if mode == "ks":
        return ks
    if mode == "normal":
        return (normal + 1) / 2
    if mode == "shading-only":
        return light.diffuse(normal, ctx=ctx)
    raise ValueError(f"unknown display mode {mode!r}; choose one of {', '.join(DISPLAY_MODES)}")
