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
- ``fit_mips``: Adam on every level from 1 up, all channels together, under the fitted light
  and the mesh as it is; each step renders a batch of training views at one scale (round
  robin), the loss the mean squared error of the display-encoded (sRGB) colour over the pixels
  the object covers wholly, against references rendered once with level 0 only at twice the
  training size and box-reduced to each scale. Of the fitted levels, the start and the box
  levels, the one with the lowest loss over every scale of other training views, which the
  fit did not train on, is kept: never worse than what an engine builds, on views the levels
  were not fitted to (levels fitted to a few views learn their view-dependent highlights).

Levels follow ``TextureMaterial.mips``: ``[h, w, C]`` float32, halving until 1x1 (a side of 1
stays 1) or until a side is odd; kd and ks within their ranges, normals unit vectors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from diffrec.camera import Cameras
from diffrec.color import linear_to_srgb, srgb_to_linear
from diffrec.io.mips import halved
from diffrec.pipeline.reporter import Progress, Reporter
from diffrec.pipeline.trainer import light_rotation
from diffrec.pipeline.views import cameras_at_size
from diffrec.protocol.events import PassName
from diffrec.protocol.settings import Settings
from diffrec.render.material import TextureMaterial
from diffrec.render.metrics import display
from diffrec.render.renderer import render_mesh

CHANNELS = ("kd", "ks", "normal")
SMALLEST_SIDE = 8
"""Pixels: the fit's smallest renders (scales below it are left out)."""
REFERENCE_SUPERSAMPLING = 2
"""The references are rendered at this many times the training size, level 0 only."""
WHOLE = 0.999
"""Coverage above which a pixel counts as wholly the object's."""
ROUGHNESS = 1
"""ks's roughness channel (ks = occlusion, roughness, metallic)."""
LEARNING_RATE = 0.01
"""Adam's step at the start (decaying to a tenth). 0.03 fitted the views it trains on closer
but other views less well (a bumpy test sphere: 0.949 of the box levels' loss on other views
after 40 steps, against 0.922 at 0.01)."""
FIT_VIEWS = 8
"""The most training views the fit trains on, and the most that judge it (evenly spread
among the training views, alternately): each costs a reference render at twice its size."""
STEP_COST = 0.5
"""A fit step's time in training iterations of the pass before it, for the job's ETA."""


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


def fit_and_check_views(cameras: Cameras) -> tuple[Cameras, Cameras]:
    """(the views the fit trains on, the views that judge it): up to ``2 * FIT_VIEWS`` views
    evenly spread among ``cameras``, alternately; ``cameras`` as both when there is one."""
    if len(cameras) < 2:
        return cameras, cameras
    count = min(len(cameras), 2 * FIT_VIEWS)
    spread = torch.linspace(0, len(cameras) - 1, count).round().long().to(cameras.device)
    return cameras[spread[0::2]], cameras[spread[1::2]]


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


@dataclass
class _Render:
    """What the fit renders a batch with: everything but the material's levels."""

    ctx: object
    mesh: object
    material: TextureMaterial
    light: object
    settings: Settings

    def __call__(self, cameras, spp: int = 1):
        return render_mesh(self.ctx, self.mesh, self.material, cameras, self.light, spp=spp,
                           layers=self.settings.rendering.layers,
                           light_rotation=light_rotation(cameras, self.settings.light.camera_space),
                           layered=self.settings.layered_bsdf())


def _scaled(cameras: Cameras, scale: int) -> Cameras:
    """``cameras`` at ``1 / 2^scale`` of their size."""
    return cameras_at_size(cameras, cameras.width >> scale, cameras.height >> scale)


@torch.no_grad()
def references(render: _Render, cameras: Cameras, scales: list[int]
               ) -> dict[int, torch.Tensor]:
    """{scale: ``[N, h, w, 4]`` colour and coverage} of ``cameras`` rendered with level 0
    only, ``REFERENCE_SUPERSAMPLING`` times their size, box-reduced to each scale."""
    full = []
    with reading(render.material, None, mip_bias=-16.0):
        for index in range(len(cameras)):
            out = render(cameras[index:index + 1], spp=REFERENCE_SUPERSAMPLING)
            full.append(torch.cat([out.color, out.alpha], -1))
    full = torch.cat(full)
    return {scale: F.avg_pool2d(full.permute(0, 3, 1, 2), 2 ** scale).permute(0, 2, 3, 1)
            for scale in scales}


def _loss(out, reference: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the display-encoded colour over the pixels wholly covered in
    both (0 when there are none)."""
    whole = ((out.alpha > WHOLE) & (reference[..., 3:] > WHOLE)).to(out.color)
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
    pixels, over every scale of the views that judge the fit) of each; ``scales`` fitted;
    ``seconds``."""

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


def fit_mips(ctx, mesh, material: TextureMaterial, light, cameras: Cameras,
             settings: Settings, reporter: Reporter | None = None, *, iterations: int,
             learning_rate: float = LEARNING_RATE, passes: int = 1) -> MipFit:
    """Fit ``material``'s mip levels to ``cameras`` (the training views) under ``light`` for
    ``iterations`` steps (0: the start as it is), ``settings.size.batch`` views a step; progress to
    ``reporter`` as the pass ``PassName.MIPS``, counted as the last of the job's ``passes``.
    ``material`` is left reading what it read before."""
    with _frozen(material, light):
        with torch.no_grad():
            light.build_mips()  # without the graph of the light's own parameters
        return _fit(ctx, mesh, material, light, cameras, settings, reporter or Reporter(),
                    iterations, learning_rate, passes)


def _fit(ctx, mesh, material: TextureMaterial, light, cameras: Cameras, settings: Settings,
         reporter: Reporter, iterations: int, learning_rate: float, passes: int) -> MipFit:
    started = time.monotonic()
    render = _Render(ctx, mesh, material, light, settings)
    cameras, checks = fit_and_check_views(cameras)
    scales = fit_scales(cameras)
    targets = references(render, cameras, scales)
    check_targets = references(render, checks, scales) if checks is not cameras else targets
    fitted = _Levels(start_levels(material)).to(cameras.device)
    candidates = {"box": engine_levels(material, srgb_colour=False),
                  "start": {name: [level.detach().clone() for level in chain]
                            for name, chain in fitted.read().items()}}
    optimizer = torch.optim.Adam(fitted.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(settings.run.seed)
    batch = min(settings.size.batch, len(cameras))
    for step in range(iterations):
        scale = scales[step % len(scales)]
        pick = torch.randperm(len(cameras), generator=generator)[:batch]
        for group in optimizer.param_groups:  # down to a tenth, as the passes decay
            group["lr"] = learning_rate * 10.0 ** (-step / iterations)
        with reading(material, fitted.read()):
            out = render(_scaled(cameras[pick.to(cameras.device)], scale))
        loss = _loss(out, targets[scale][pick.to(targets[scale].device)])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
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
    losses = {name: _mean_loss(render, checks, check_targets, levels)
              for name, levels in candidates.items()}
    kept = min(losses, key=losses.get)  # where the fit learnt its own views, not the asset
    return MipFit(candidates[kept], kept, losses["box"], losses["start"], losses["fitted"],
                  scales, time.monotonic() - started)


@torch.no_grad()
def _mean_loss(render: _Render, cameras: Cameras, targets: dict[int, torch.Tensor],
               levels: dict[str, list[torch.Tensor]]) -> float:
    """``_loss`` of ``levels`` averaged over every view and scale."""
    losses = []
    with reading(render.material, levels):
        for scale, reference in targets.items():
            losses.append(float(_loss(render(_scaled(cameras, scale)), reference)))
    return sum(losses) / len(losses)
