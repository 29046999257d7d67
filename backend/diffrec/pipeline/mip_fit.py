"""The textures' mip levels, fitted after the last pass, for an asset seen from afar.

An engine reads every texture through a mip chain it builds by averaging 2x2 texels. That is
wrong for the maps diffrec makes: a normal map's bumps average to a flat normal, so a rough,
bumpy surface turns smooth and shiny at a distance; roughness stays as it was although the
surface it stands for got rougher; base colour averaged in its sRGB encoding darkens
high-contrast detail. This stage makes levels 1..n of kd, ks and the normal map so that our
rasterizer at one sample per pixel, reading them at 1/2, 1/4, 1/8... of the training views'
size, looks like the asset rendered with its full-resolution textures, supersampled and
reduced to that size.

- ``engine_levels``: what an engine builds (2x2 box averages; base colour in linear or sRGB
  space), the baselines the benchmark judges against.
- ``start_levels``: the fit's start: linear-space box averages, the normals' mean length
  turned into roughness (a von Mises-Fisher lobe of concentration
  ``kappa = (3 r - r^3) / (1 - r^2)`` for mean length ``r`` widens GGX's ``alpha^2`` by
  ``2 / kappa``; Han et al. 2007, Toksvig's idea), normals renormalised.
- ``fit_mips``: Adam on every level from 1 up, all channels together, under the fitted light as an
  engine's image-based lighting shades it (its directional sources folded back into the map,
  prefiltered: ``EnvironmentLight.sources_folded``) and the mesh as it is; each step shades a batch
  of views at one scale (round robin), the loss the mean squared error of the display-encoded (sRGB)
  colour over the pixels the object covers wholly (only those are shaded), against references
  rendered once with level 0 only at twice the views' size (not antialiased: the loss reads no pixel
  an edge crosses) and box-reduced to each scale. The views are not the training views but new ones
  made from them (``novel_views``: each turned about the object's centre by up to ``TURN``): the
  references are the asset's own renders, so any view serves, and levels fitted to many views learn
  the asset rather than a few views' highlights. The G-buffers of every view and scale are
  rasterized once (``render.renderer.surface_layers``); a step only shades. Of the fitted levels,
  the start and the box levels, the one whose renders of the training views (``JUDGE_VIEWS`` at
  most) come closest at every scale from half their size down (where the levels are read) to their
  images, box-reduced (what the cameras saw, from further away), is kept: never further from the
  object than what an engine builds, on those views. (Judged instead against the asset rendered by
  Cycles on held-out views, the quality suite's glossy mug is still a little below box levels at
  1/2: docs/BENCHMARKS.md.)

Levels follow ``TextureMaterial.mips``: ``[h, w, C]`` float32, halving until 1x1 (a side of 1
stays 1) or until a side is odd; kd and ks within their ranges, normals unit vectors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from diffrec.camera import Cameras
from diffrec.color import linear_to_srgb, srgb_to_linear, straight_to_premultiplied
from diffrec.io.mips import halved
from diffrec.pipeline.optimizers import Adam, Schedule
from diffrec.pipeline.pose_refinement import rotation_matrices
from diffrec.pipeline.reporter import Progress, Reporter
from diffrec.pipeline.trainer import light_rotation
from diffrec.pipeline.views import Views, cameras_at_size, evenly_spread
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import Settings
from diffrec.render.gbuffer import kept_first, pixels_of
from diffrec.render.material import TextureMaterial
from diffrec.render.metrics import display
from diffrec.render.renderer import SurfaceLayers, shade_surface, surface_layers

CHANNELS = ("kd", "ks", "normal")
SMALLEST_SIDE = 8
"""Pixels: the fit's smallest renders (scales below it are left out)."""
REFERENCE_SUPERSAMPLING = 2
"""The references are rendered at this many times their views' size, level 0 only."""
WHOLE = 0.999
"""Coverage above which a pixel counts as wholly the object's."""
ROUGHNESS = 1
"""ks's roughness channel (ks = occlusion, roughness, metallic)."""
LEARNING_RATE = 0.01
"""Adam's step at the start (decaying to a tenth). On the quality suite's critter, 100 steps
left 0.65 of the box levels' loss on views the fit did not train on at 0.01, 0.73 at 0.003 and
0.78 at 0.03."""
FIT_VIEWS = 64
"""The views the fit trains on at half the training size and below; each costs a reference
render at the training size. Levels fitted to few views learn their footprints: on the
quality suite's glossy mug, judged by Cycles on held-out views, 32 views left the fitted
levels 0.1-0.3 dB below box levels at 1/2 and 1/4, 64 views -0.1 to +0.2 (two seeds;
docs/BENCHMARKS.md)."""
REFERENCE_CHUNK = 8
"""Views rendered together for the references (32 views at 64 px, supersampled: 0.8 s in
chunks of 8 against 1.9 s one by one)."""
FULL_SIZE_VIEWS = 8
"""Of those, the views the fit shades at the training size (their references, at twice
that, cost as much as four views' at half of it; box-reduced, they are also these views'
references at half the size and below)."""
JUDGE_VIEWS = 16
"""The most training views whose images pick the levels kept (evenly spread)."""
BATCH = 1
"""Views a step at full size; at ``1 / 2^s`` of it, ``4^s`` times as many (``FIT_VIEWS`` at
most): about the same pixels each step, the smaller scales seen from many views at once for
the price of one at full size (a step only shades: no rasterizing). On the suite's critter,
mug and dots, 100 steps left the same loss at 1 as at 2 (0.61 / 0.85 / 0.65 of the box
levels') in 7.8-11.9 s against 10.5-12.4."""
TURN = math.radians(25.0)
"""Radians: the largest turn of a new view about the object's centre from the training view
it is made from."""
STEP_COST = 0.3
"""A fit step's time in training iterations of the pass before it, for the job's ETA, the
references and G-buffers included: 0.26-0.29 on the quality suite's six mip scenes at 128 px
(120 steps in 1.5-1.8 s after 200 iterations in 9.2-11.5 s), 0.55 where the pass is as short
as a baked start's (50 steps, the references' cost shared by fewer); docs/BENCHMARKS.md,
"Assets seen from afar, round nine"."""


def box_levels(texels: torch.Tensor) -> list[torch.Tensor]:
    """Levels 1..n of ``texels [H, W, C]``, each the 2x2 means of the previous, as far as
    ``io.mips`` halves a chain (to 1x1, or to an odd side)."""
    levels = []
    while (smaller := halved(levels[-1] if levels else texels)) is not None:
        levels.append(smaller)
    return levels


def _colour_levels(kd: torch.Tensor, srgb: bool) -> list[torch.Tensor]:
    """Box levels of base colour, averaged in sRGB encoding when ``srgb`` (alpha linear)."""
    if not srgb:
        return box_levels(kd)
    encoded = torch.cat([linear_to_srgb(kd[..., :3].clamp(min=0.0)), kd[..., 3:]], -1)
    return [torch.cat([srgb_to_linear(level[..., :3]), level[..., 3:]], -1)
            for level in box_levels(encoded)]


def _textures(material: TextureMaterial) -> dict[str, torch.Tensor]:
    """The channels that are textures (more than one texel), ``[H, W, C]`` detached."""
    textures = {name: getattr(material, name) for name in CHANNELS}
    return {name: texture.data.detach() for name, texture in textures.items()
            if texture is not None and texture.data.shape[0] * texture.data.shape[1] > 1}


def engine_levels(material: TextureMaterial, srgb_colour: bool) -> dict[str, list[torch.Tensor]]:
    """What an engine builds from the exported level 0: every texture box-averaged as stored,
    base colour in its sRGB encoding when ``srgb_colour`` (else linear), normals as averaged
    (the renderer normalises what it reads)."""
    return {name: _colour_levels(texels, srgb_colour) if name == "kd" else box_levels(texels)
            for name, texels in _textures(material).items()}


def start_levels(material: TextureMaterial) -> dict[str, list[torch.Tensor]]:
    """The fit's start: linear box averages; where a normal map of ks's size averages to
    shorter normals, roughness raised by the spread (module docstring); normals renormalised;
    ks kept in its range."""
    textures = _textures(material)
    levels = {name: box_levels(texels) for name, texels in textures.items()}
    normal = levels.get("normal")
    if normal is not None and "ks" in levels and textures["ks"].shape[:2] == \
            textures["normal"].shape[:2]:
        alpha2 = box_levels(textures["ks"][..., ROUGHNESS:ROUGHNESS + 1].pow(4))
        for ks, mean_normal, base in zip(levels["ks"], normal, alpha2, strict=True):
            length = mean_normal.norm(dim=-1, keepdim=True).clamp(1e-4, 1.0)
            spread = 2.0 * (1.0 - length.square()) / (3.0 * length - length.pow(3))  # 2/kappa
            ks[..., ROUGHNESS:ROUGHNESS + 1] = (base + spread).pow(0.25)
    if normal is not None:
        levels["normal"] = [F.normalize(level, dim=-1) for level in normal]
    if "ks" in levels:
        levels["ks"] = [_in_range(level, material.ks) for level in levels["ks"]]
    return levels


def _in_range(values: torch.Tensor, texture) -> torch.Tensor:
    """``values`` clamped to ``texture``'s per-channel range."""
    return values.clamp(min=texture.min_value, max=texture.max_value)


@contextlib.contextmanager
def reading(material: TextureMaterial, mips: dict[str, list[torch.Tensor]] | None,
            mip_bias: float | None = None):
    """``material`` reads ``mips`` (and ``mip_bias`` when given) inside the block; restored
    after."""
    kept = material.mips, material.mip_bias
    material.mips = mips
    if mip_bias is not None:
        material.mip_bias = mip_bias
    try:
        yield material
    finally:
        material.mips, material.mip_bias = kept


def novel_views(cameras: Cameras, centre: torch.Tensor, count: int,
                generator: torch.Generator) -> Cameras:
    """``count`` views, each one of ``cameras`` drawn at random (with its intrinsics) and
    turned about ``centre`` ``[3]`` (world units) by a random rotation of up to ``TURN`` about
    a random axis: it sees the object from as far, from a direction the capture did not."""
    chosen = cameras[torch.randint(len(cameras), (count,), generator=generator)
                     .to(cameras.device)]
    axis = F.normalize(torch.randn(count, 3, generator=generator, dtype=torch.float64), dim=-1)
    angle = torch.rand(count, 1, generator=generator, dtype=torch.float64) * TURN
    turn = rotation_matrices(axis * angle).to(chosen.camera_to_world)
    offset = chosen.centers() - centre
    shift = centre + (turn @ offset[..., None])[..., 0] - chosen.centers()
    return chosen.moved(turn, shift)


def fit_scales(cameras: Cameras) -> list[int]:
    """The scales ``s`` (views at ``1 / 2^s`` of their size) the fit renders: 0 up, while both
    sides divide by ``2^s`` and stay at least ``SMALLEST_SIDE`` pixels."""
    width, height, scales = cameras.width, cameras.height, [0]
    while True:
        factor = 2 ** (scales[-1] + 1)
        if width % factor or height % factor or min(width, height) // factor < SMALLEST_SIDE:
            return scales
        scales.append(scales[-1] + 1)


@contextlib.contextmanager
def _frozen(*modules: torch.nn.Module):
    """Inside the block no parameter of ``modules`` asks for gradients; restored after."""
    parameters = [p for module in modules for p in module.parameters() if p.requires_grad]
    for parameter in parameters:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter in parameters:
            parameter.requires_grad_(True)


@dataclass(frozen=True)
class _Views:
    """A set of views at one scale, made ready for the fit: the G-buffers of the pixels the
    loss reads (those the rasterizer and the reference both cover wholly), each view's in one
    row ``[N, 1, P, C]`` padded to the longest (``SurfaceLayers.pixels``), their references
    ``[N, 1, P, 4]`` (colour and coverage) laid out alike, ``weight`` ``[N, 1, P, 1]`` (1 on
    those pixels, 0 on the padding) and their light rotations (None: the light fixed to the
    world). A step shades nothing the loss does not read."""

    surface: SurfaceLayers
    rotation: torch.Tensor | None
    reference: torch.Tensor
    weight: torch.Tensor

    def __len__(self) -> int:
        return len(self.reference)


def _read_pixels(surface: SurfaceLayers, reference: torch.Tensor
                 ) -> tuple[SurfaceLayers, torch.Tensor, torch.Tensor]:
    """``surface`` (one sample a pixel), ``reference`` ``[N, h, w, 4]`` (rows top-down) and
    their weights cut down to the pixels both cover wholly (``_Views``)."""
    upright = reference.flip(1)  # the G-buffers' raster layout: row 0 at the bottom
    order, weight = kept_first(((surface.layers[0].mask[..., 0] > 0)
                                & (upright[..., 3] > WHOLE)).flatten(1))
    return (surface.pixels(order), pixels_of(upright, order),
            weight.to(reference)[:, None, :, None])


@dataclass
class _Render:
    """What the fit renders with: everything but the material's levels."""

    ctx: object
    mesh: object
    material: TextureMaterial
    light: object
    settings: Settings

    def _rotation(self, cameras: Cameras) -> torch.Tensor | None:
        return light_rotation(cameras, self.settings.light.camera_space)

    def __call__(self, cameras: Cameras, spp: int = 1) -> torch.Tensor:
        """``cameras`` rendered in full at ``spp`` x ``spp`` samples a pixel: premultiplied
        RGBA ``[N, h, w, 4]`` over black, rows top-down, not antialiased (the loss reads no
        pixel an edge crosses)."""
        surface = surface_layers(self.ctx, self.mesh, cameras, spp=spp,
                                 layers=self.settings.rendering.layers)
        out = shade_surface(surface, self.material, self.light,
                            light_rotation=self._rotation(cameras),
                            layered=self.settings.layered_bsdf())
        return torch.cat([out.color, out.alpha], -1)  # over black: premultiplied

    def views(self, cameras: Cameras, targets: dict[int, torch.Tensor]) -> dict[int, _Views]:
        """{scale: ``cameras`` at that scale with ``targets[scale]``, ready}."""
        views = {}
        for scale, target in targets.items():
            surface = surface_layers(self.ctx, self.mesh, _scaled(cameras, scale),
                                     layers=self.settings.rendering.layers)
            surface, reference, weight = _read_pixels(surface, target)
            views[scale] = _Views(surface, self._rotation(cameras), reference, weight)
        return views

    def shade(self, views: _Views, index: torch.Tensor | None = None):
        """``views`` (those at ``index``, else all) shaded with the material as it reads now."""
        surface, rotation = views.surface, views.rotation
        if index is not None:
            surface = surface.selected(index)
            rotation = None if rotation is None else rotation[index]
        return shade_surface(surface, self.material, self.light, light_rotation=rotation,
                             layered=self.settings.layered_bsdf())


def _scaled(cameras: Cameras, scale: int) -> Cameras:
    """``cameras`` at ``1 / 2^scale`` of their size."""
    return cameras_at_size(cameras, cameras.width >> scale, cameras.height >> scale)


@torch.no_grad()
def references(render: _Render, cameras: Cameras, scales: list[int]
               ) -> dict[int, torch.Tensor]:
    """{scale: ``[N, h, w, 4]`` colour and coverage} of ``cameras`` rendered with level 0
    only at ``REFERENCE_SUPERSAMPLING`` times the size of the first of ``scales`` (ascending),
    box-reduced to each."""
    first, full = scales[0], []
    with reading(render.material, None, mip_bias=-16.0):
        for start in range(0, len(cameras), REFERENCE_CHUNK):
            full.append(render(_scaled(cameras[start:start + REFERENCE_CHUNK], first),
                               spp=REFERENCE_SUPERSAMPLING))
    reduced = _box_reduced(torch.cat(full), [scale - first for scale in scales])
    return {scale + first: images for scale, images in reduced.items()}


def _box_reduced(premultiplied: torch.Tensor, scales: list[int]) -> dict[int, torch.Tensor]:
    """{scale: ``premultiplied`` ``[N, H, W, 4]`` RGBA box-reduced by ``2^scale``} (on the
    pixels wholly covered after reducing, the colour is the straight colour)."""
    channels_first = premultiplied.permute(0, 3, 1, 2)
    return {scale: F.avg_pool2d(channels_first, 2 ** scale).permute(0, 2, 3, 1)
            for scale in scales}


def _seen(views: Views, scales: list[int]) -> dict[int, torch.Tensor]:
    """{scale: ``views``' own images box-reduced by ``2^scale``}: what the cameras saw, from
    that much further."""
    return _box_reduced(straight_to_premultiplied(views.images), scales)


def _loss(out, views: _Views, index: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error of the display-encoded colour of ``out`` (``views``, those at
    ``index`` else all, shaded) over the pixels wholly covered in both (0 when there are
    none)."""
    reference, weight = views.reference, views.weight
    if index is not None:
        reference, weight = reference[index], weight[index]
    whole = (out.alpha > WHOLE).to(out.color) * weight
    error = (display(out.color) - display(reference[..., :3])).square() * whole
    return error.sum() / (whole.sum() * 3).clamp(min=1.0)


class _Levels(torch.nn.Module):
    """The levels being fitted: free tensors; normals read normalised, kd and ks clamped to
    their textures' ranges after each step."""

    def __init__(self, levels: dict[str, list[torch.Tensor]]):
        super().__init__()
        self.levels = torch.nn.ModuleDict({
            name: torch.nn.ParameterList([torch.nn.Parameter(level.clone())
                                          for level in chain])
            for name, chain in levels.items()})

    def read(self) -> dict[str, list[torch.Tensor]]:
        return {name: [F.normalize(level, dim=-1) if name == "normal" else level
                       for level in chain] for name, chain in self.levels.items()}

    @torch.no_grad()
    def clamp_(self, material: TextureMaterial) -> None:
        for name, chain in self.levels.items():
            if name != "normal":
                for level in chain:
                    level.copy_(_in_range(level, getattr(material, name)))


@dataclass(frozen=True)
class MipFit:
    """What ``fit_mips`` made: ``levels`` for ``TextureMaterial.mips``, the lowest in loss of
    the fitted levels, the start and the engine's linear box levels (``kept`` says which:
    "fitted", "start" or "box"); that loss (mean squared display error on wholly covered
    pixels against the training images box-reduced, over every scale of ``scales`` from the
    second, or the only one) of each; ``scales``; ``seconds``."""

    levels: dict[str, list[torch.Tensor]]
    kept: str
    box_loss: float
    start_loss: float
    fitted_loss: float
    scales: list[int]
    seconds: float

    @property
    def loss(self) -> float:
        """The loss of the levels kept."""
        return min(self.box_loss, self.start_loss, self.fitted_loss)

    def summary(self) -> dict:
        """For metrics.json: everything but the levels."""
        return {key: value for key, value in dataclasses.asdict(self).items()
                if key != "levels"} | {"loss": self.loss}


def fit_mips(ctx, mesh, material: TextureMaterial, light, seen: Views,
             settings: Settings, reporter: Reporter | None = None, *, iterations: int,
             learning_rate: float = LEARNING_RATE, passes: int = 1) -> MipFit:
    """Fit ``material``'s mip levels on views made from ``seen`` (the training views, their
    images the truth that picks the levels kept) under ``light`` for ``iterations`` steps
    (0: the start as it is), each shading about as many pixels as ``BATCH`` views at the
    training size; progress to ``reporter`` as the pass ``PassName.MIPS``, counted as the
    last of the job's ``passes``.
    ``material`` is left reading what it read before, ``light`` shading as before."""
    with _frozen(material, light), light.sources_folded():
        with torch.no_grad():
            light.build_mips()  # without the graph of the light's own parameters
        return _fit(ctx, mesh, material, light, seen, settings, reporter or Reporter(),
                    iterations, learning_rate, passes)


def _fit(ctx, mesh, material: TextureMaterial, light, seen: Views, settings: Settings,
         reporter: Reporter, iterations: int, learning_rate: float, passes: int) -> MipFit:
    started = time.monotonic()
    render = _Render(ctx, mesh, material, light, settings)
    cameras = seen.cameras
    centre = (mesh.positions.min(0).values + mesh.positions.max(0).values) / 2
    generator = torch.Generator().manual_seed(settings.run.seed)
    fit_cameras = novel_views(cameras, centre, FIT_VIEWS, generator)
    scales = fit_scales(cameras)
    full_size = fit_cameras[:FULL_SIZE_VIEWS]  # the costliest references: a few views
    full_references = references(render, full_size, scales)
    views = render.views(full_size, {scales[0]: full_references[scales[0]]})
    if len(scales) > 1:  # the rest from half the size, the first views' reduced from theirs
        rest = references(render, fit_cameras[FULL_SIZE_VIEWS:], scales[1:])
        views |= render.views(fit_cameras, {scale: torch.cat([full_references[scale],
                                                                rest[scale]])
                                            for scale in scales[1:]})
    judged = seen.subset(evenly_spread(JUDGE_VIEWS, len(seen)))
    judges = render.views(judged.cameras, _seen(judged, scales[1:] or scales))
    fitted = _Levels(start_levels(material)).to(cameras.device)
    candidates = {"box": engine_levels(material, srgb_colour=False),
                  "start": {name: [level.detach().clone() for level in chain]
                            for name, chain in fitted.read().items()}}
    optimizer = Adam(fitted.parameters(), lr=learning_rate)
    # the rate down to a tenth over the fit, as the passes decay
    schedule = Schedule(optimizer, lambda step: 10.0 ** (-step / max(iterations, 1)))
    for step in range(iterations):
        scale = scales[step % len(scales)]
        scaled = views[scale]
        count = BATCH * 4 ** scale
        pick = torch.randperm(len(scaled), generator=generator)[:count].to(cameras.device)
        with reading(material, fitted.read()):
            loss = _loss(render.shade(scaled, pick), scaled, pick)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        fitted.clamp_(material)
        if (step + 1) % settings.reporting.log_every == 0 or step + 1 == iterations:
            elapsed = time.monotonic() - started
            left = (iterations - step - 1) * elapsed / (step + 1)
            reporter.progress(Progress(pass_name=PassName.MIPS, iteration=step + 1,
                                       iterations=iterations, losses={"total": loss.item()},
                                       elapsed_s=elapsed, eta_s=left, job_eta_s=left,
                                       pass_number=passes, passes=passes))
    candidates["fitted"] = {name: [level.detach() for level in chain]
                            for name, chain in fitted.read().items()}
    losses = {name: _mean_loss(render, judges, levels) for name, levels in candidates.items()}
    kept = min(losses, key=losses.get)
    return MipFit(candidates[kept], kept, losses["box"], losses["start"], losses["fitted"],
                  scales, time.monotonic() - started)


@torch.no_grad()
def _mean_loss(render: _Render, views: dict[int, _Views],
               levels: dict[str, list[torch.Tensor]]) -> float:
    """``_loss`` of ``levels`` averaged over every scale of ``views``."""
    with reading(render.material, levels):
        losses = [float(_loss(render.shade(scaled), scaled))
                  for scaled in views.values()]
    return sum(losses) / len(losses)
