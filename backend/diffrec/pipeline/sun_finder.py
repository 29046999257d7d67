"""Where the sun is, read from the targets' highlights before a learned light is fitted.

A learned light starts as a grey sphere, and a fit from there explains a sun's highlights
with the material: brighter base colour, lower roughness (docs/BENCHMARKS.md, "Learning a
sun"). What the images hold about a sun is in what changes with the view. On the start mesh
(reconstruct: the masks' visual hull, pass 1's start), with the views at most
``LONGEST_SIDE`` pixels across:

- every covered pixel of a training view that faces its camera (``n.v > FACING``: Fresnel
  brightens every grazing pixel whatever the light) is a surface point seen along ``v``;
  its mirror direction is ``r = 2 (n.v) n - v``;
- points are grouped by a voxel grid over the mesh's box (``CELLS`` along its longest side);
  a group's level is the median, over the views that see it (at least ``MIN_VIEWS``), of its
  mean luminance in each: what stays with the view (the diffuse light, a sun's included);
- a pixel's excess over its group's level is light that moves with the view, mostly a
  specular reflection of the light around ``r``;
- the excess is averaged over directions by a kernel regression: both the excess and the
  count of pixels are splatted into a cube map by ``r`` and blurred by a GGX lobe of
  ``BLUR_ROUGHNESS`` (about ten degrees), then divided, the count padded by ``PRIOR`` times
  its mean so that directions seen by a few pixels do not win on noise;
- the sun is the peak, refined to the excess-weighted mean of the ``r`` within
  ``REFINE_DEGREES`` of it. It stands out when it does twice: its score at least
  ``MIN_CONTRAST`` times the mean positive score, and the mean excess of the pixels near it
  at least ``MIN_SIGNIFICANCE`` standard errors above zero. A grey sky, or a sun that carries
  too little of the light to show in the highlights (a 5-degree disc 50 times the sky's mean,
  2 % of the light), does not stand out: the contrast falls as the pixels add up, the
  significance grows;
- the share of the light's power in a sun that stands out is read from the levels: how much
  brighter the pixels that face the sun are than those that do not (``_power_share``: it
  takes the rest of the sky as uniform and the base colour as unrelated to the sun's side).
  On the suite's HDRIs with a sun and the test sky's sun at 35 degrees it reads within 0.05
  of the share within 10 degrees of the sun; a sun 10 degrees above the horizon reads
  0.10-0.20 low (the sky, brighter overhead, lights the side away from it);
- a peak that does not stand out is a ``faint`` sun, given ``FAINT_SHARE`` of the light: too
  little to mislead the material where there is no sun (the bumps of a normal map the start
  mesh lacks make peaks too), enough for the fit to steer and grow where there is one (the
  quality suite's ring: its city sun's peak stands out too little, and the fit takes the
  faint seed from 29 degrees off to 7; docs/BENCHMARKS.md, "Learning a sun", round seven).

``seed_sun_`` then points the light's sun (``diffrec.light.sun``: a lobe of a few degrees
with a direction and a power the fit steps) at that direction, carrying that share of the
light's power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from diffrec import raster
from diffrec.color import luminance
from diffrec.light.cube import bilinear_taps, texel_directions, texel_solid_angles
from diffrec.light.envmap import EnvironmentLight
from diffrec.light.prefilter import box_pyramid, ggx_prefilter
from diffrec.mesh import Mesh
from diffrec.pipeline.views import Views, at_longest_side
from diffrec.render.renderer import surface_layers

__all__ = ["FAINT_SHARE", "NO_SUN", "FoundSun", "find_sun", "seed_sun_"]

LONGEST_SIDE = 128
"""Larger views are looked at this size (their longest side, px): a highlight spans pixels
enough there, and the pixels held stay below a million for 60 views."""
CHUNK = 8
"""Views rasterized at a time."""
FACING = 0.5
"""Pixels with ``n.v`` at or below this are not used (grazing: Fresnel, silhouettes)."""
CELLS = 48
"""Voxel cells along the longest side of the mesh's box: the surface points of one group."""
MIN_VIEWS = 3
"""Views a group must be seen in for its level (a median over them) to be taken."""
SPLAT_RESOLUTION = 32
"""Cube side of the maps the excess and the count are splatted into."""
BLUR_ROUGHNESS = 0.4
"""GGX roughness of the kernel that averages the excess over directions."""
PRIOR = 0.5
"""Pixels of zero excess added to every direction, as a multiple of the mean count."""
REFINE_DEGREES = 10.0
"""Half-angle around the peak whose mirror directions refine it."""
MIN_CONTRAST = 6.0
"""The peak's score over the mean positive score at or above which a sun may be found."""
MIN_SIGNIFICANCE = 12.0
"""The mean excess near the peak, in standard errors (the excess's standard deviation over
the square root of the pixels there), at or above which a sun may be found."""
SHARE_CALIBRATION = 1.5
"""What ``_power_share``'s sun-to-sky power ratio is divided by: on the suite's HDRIs with a
sun and the test skies it read 1.2-1.8 times the power within 10 degrees of the sun (the
sky around a sun, and a sky brighter on its side, shade as the sun does)."""
MIN_SHARE, MAX_SHARE = 0.02, 0.9
"""The bounds of the estimated share of the light's power in the sun."""


FAINT_SHARE = 0.01
"""The share of the light's power a ``faint`` sun starts with."""

NO_SUN = "no highlights to look for a sun in: the learned light starts grey"


@dataclass(frozen=True)
class FoundSun:
    """A sun found in the highlights: ``direction`` a world unit vector ``[3]`` (float64,
    towards the sun), ``contrast`` the peak's score over the mean positive score,
    ``significance`` the mean excess near the peak in standard errors, the number of
    ``pixels`` near the peak, and the ``share`` of the light's power the sun carries (0-1);
    ``faint`` when the peak does not stand out (its share then ``FAINT_SHARE``)."""

    direction: torch.Tensor
    contrast: float
    significance: float
    pixels: int
    share: float
    faint: bool = False

    def sentence(self) -> str:
        x, y, z = self.direction.tolist()
        elevation = math.degrees(math.asin(max(-1.0, min(1.0, z))))
        where = (f"at elevation {elevation:.0f} degrees, azimuth "
                 f"{math.degrees(math.atan2(y, x)):.0f} (from +X towards +Y)")
        if self.faint:
            return (f"no sun stands out in the highlights: the learned light starts with a "
                    f"faint one where they peak, {where}, carrying {self.share:.0%} of the "
                    f"light, for the fit to grow or fade")
        return (f"a sun found in the highlights {where}, carrying about {self.share:.0%} of "
                f"the light: the learned light starts with it")


@torch.no_grad()
def find_sun(ctx: raster.RasterContext, mesh: Mesh, views: Views) -> FoundSun | None:
    """The sun that ``views`` (scene-linear targets) show on ``mesh`` (as the module docstring
    says), ``faint`` where none stands out; None when no pixel can be read (none covered
    and facing its camera, or no group seen in ``MIN_VIEWS`` views)."""
    longest = max(views.cameras.width, views.cameras.height)
    views = at_longest_side(views, min(LONGEST_SIDE, longest))
    chunks = [_facing_pixels(ctx, mesh, views, range(start, min(start + CHUNK, len(views))))
              for start in range(0, len(views), CHUNK)]
    normal, mirror, position, brightness, view_index = (torch.cat(parts)
                                                        for parts in zip(*chunks, strict=True))
    if len(brightness) == 0:
        return None
    excess, kept = _view_dependent(position, view_index, brightness, len(views))
    if int(kept.sum()) == 0:
        return None
    level = brightness[kept] - excess[kept]
    normals = normal[kept]
    excess, mirror = excess[kept], mirror[kept]
    score = _kernel_regression(mirror, excess)
    peak = texel_directions(SPLAT_RESOLUTION).reshape(-1, 3)[int(score.argmax())]
    contrast = float(score.max() / score.clamp_min(0).mean().clamp_min(1e-12))
    near = mirror @ peak > math.cos(math.radians(REFINE_DEGREES))
    significance = (float(excess[near].mean() * math.sqrt(int(near.sum()))
                          / excess.std().clamp_min(1e-12)) if near.any() else 0.0)
    pull = (mirror[near] * excess[near].clamp_min(0)[:, None]).sum(0)
    direction = (torch.nn.functional.normalize(pull, dim=0) if float(pull.norm()) > 0
                 else peak.to(pull))  # no pixel near the peak brighter than its level
    if contrast < MIN_CONTRAST or significance < MIN_SIGNIFICANCE:
        return FoundSun(direction, contrast, significance, int(near.sum()), FAINT_SHARE,
                        faint=True)
    return FoundSun(direction, contrast, significance, int(near.sum()),
                    _power_share(level, normals @ direction))


def _facing_pixels(ctx: raster.RasterContext, mesh: Mesh, views: Views, indices: range
                   ) -> tuple[torch.Tensor, ...]:
    """The covered pixels of the views at ``indices`` that face their camera (``FACING``),
    on the CPU in float64 (MPS has none): their normals and mirror directions ``[P, 3]``,
    world positions ``[P, 3]``, luminance ``[P]`` and view index ``[P]`` (int64)."""
    cameras, images = views.batch(indices)
    surface = surface_layers(ctx, mesh, cameras.to(ctx.device)).layers[0]
    normal, view, position = (x.flip(1) for x in (surface.normal, surface.view,
                                                   surface.position))  # rows top-down
    facing = (normal * view).sum(-1, keepdim=True)
    used = ((surface.mask.flip(1)[..., 0] > 0) & (images[..., 3].to(facing.device) > 0.99)
            & (facing[..., 0] > FACING))
    view_index = torch.tensor(list(indices), device=used.device)[:, None, None].expand_as(used)
    mirror = 2 * facing * normal - view
    return tuple(x[used].cpu().double() if x.is_floating_point() else x[used].cpu()
                 for x in (normal, mirror, position, luminance(images[..., :3].to(used.device)),
                           view_index))


def _view_dependent(points: torch.Tensor, view_index: torch.Tensor, brightness: torch.Tensor,
                    view_count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each pixel's ``brightness`` over its group's level (``points`` in voxel groups, the
    median over views of a group's mean in each), and which pixels have a level (their group
    seen in ``MIN_VIEWS`` views or more)."""
    low, high = points.min(0).values, points.max(0).values
    cell = ((points - low) / (high - low).max().clamp_min(1e-12) * (CELLS - 1e-6)).long()
    key = (cell[:, 0] * CELLS + cell[:, 1]) * CELLS + cell[:, 2]
    groups, group = key.unique(return_inverse=True)
    pair = group * view_count + view_index
    sums = torch.zeros(len(groups) * view_count, dtype=brightness.dtype,
                       device=brightness.device).index_add_(0, pair, brightness)
    counts = torch.zeros_like(sums).index_add_(0, pair, torch.ones_like(brightness))
    means = (sums / counts.clamp_min(1)).reshape(len(groups), view_count)
    seen = counts.reshape(len(groups), view_count) > 0
    level = torch.where(seen, means, torch.full_like(means, math.nan)).nanmedian(1).values
    kept = seen.sum(1)[group] >= MIN_VIEWS
    return brightness - level[group], kept


def _power_share(level: torch.Tensor, cosine: torch.Tensor) -> float:
    """The share of the light's power in a sun, from the view-independent ``level`` of
    pixels whose normals make ``cosine`` with it: least squares ``level = a + b max(0, cos)``
    over the pixels; under a uniform sky of radiance ``L`` and a sun of power ``P`` (both
    times the albedo, on average), ``a = pi L`` and ``b = P``, so ``P / (4 pi L) = b / 4a``."""
    design = torch.stack([torch.ones_like(cosine), cosine.clamp_min(0)], -1)
    a, b = torch.linalg.lstsq(design, level[:, None]).solution[:, 0].tolist()
    ratio = max(b, 0.0) / (4 * a) / SHARE_CALIBRATION if a > 0 else math.inf
    return min(max(ratio / (1 + ratio), MIN_SHARE), MAX_SHARE)


def _kernel_regression(mirror: torch.Tensor, excess: torch.Tensor) -> torch.Tensor:
    """The excess averaged around each texel direction of a ``SPLAT_RESOLUTION`` cube
    (flattened), as the module docstring says."""
    index, weight = bilinear_taps(mirror, SPLAT_RESOLUTION)
    texels = 6 * SPLAT_RESOLUTION * SPLAT_RESOLUTION
    splat = torch.zeros(texels, 2, dtype=excess.dtype, device=excess.device)
    splat[:, 0].index_add_(0, index.reshape(-1), (weight * excess[:, None]).reshape(-1))
    splat[:, 1].index_add_(0, index.reshape(-1), weight.reshape(-1))
    cube = splat.float().reshape(6, SPLAT_RESOLUTION, SPLAT_RESOLUTION, 2)
    blurred = ggx_prefilter(box_pyramid(cube), SPLAT_RESOLUTION, BLUR_ROUGHNESS).reshape(-1, 2)
    total, count = blurred[:, 0].double(), blurred[:, 1].double()
    return total / (count + PRIOR * count.mean())


@torch.no_grad()
def seed_sun_(light: EnvironmentLight, sun: FoundSun) -> None:
    """Point ``light``'s sun (``diffrec.light.sun``) along ``sun.direction``, grey, with the
    power at which it carries ``sun.share`` of the light's (the map as it was beside it);
    the fit then steers it."""
    resolution = light.base.shape[1]
    grey = light.base.detach().cpu().double().mean(-1)
    rest = float((grey * texel_solid_angles(resolution)).sum())
    power = sun.share / (1 - sun.share) * rest
    light.sun.set_(sun.direction, torch.full((3,), power))
