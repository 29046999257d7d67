"""The whole method: inputs -> passes -> baked asset, validation and metrics.

Modes:
- ``materials``: the given mesh stays fixed; textures (kd, ks, normal) and the light train.
- ``refine``: as materials, and the vertices move too (Laplacian-regularised).
- ``reconstruct``: pass 1 finds the surface with DMTet or FlexiCubes and a neural material;
  the mesh is cleaned, unwrapped and the material baked into textures; pass 2 refines mesh,
  textures and light together.

``optimize(settings, inputs, reporter)`` is what the command line and the job server call:
in-memory inputs (``pipeline.inputs``) in, a ``Result`` out (``pipeline.outputs`` writes
it); the reporter (``pipeline.reporter``) hears progress and keeps checkpoints, from which a
run started again with the same settings resumes.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from diffrec import raster
from diffrec.errors import Cancelled, UserError
from diffrec.geometry import clean_mesh, remove_small_pieces
from diffrec.geometry.simplify import simplify
from diffrec.io import Material
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh import Mesh
from diffrec.neural import HashGridConfig
from diffrec.neural.material import NeuralMaterial
from diffrec.pipeline import distributed
from diffrec.pipeline.bake import bake_textures
from diffrec.pipeline.frustum import check_views_see_box
from diffrec.pipeline.geometry_models import ExplicitGeometry, IsosurfaceGeometry
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.sampler import ViewSampler
from diffrec.pipeline.trainer import (
    Pass,
    PassTrainer,
    background_for,
    composite,
    light_rotation,
)
from diffrec.pipeline.unwrap import has_usable_uvs, with_uvs
from diffrec.pipeline.views import Views, at_longest_side
from diffrec.protocol.settings import Settings
from diffrec.render.material import NeuralSurface, TextureMaterial
from diffrec.render.metrics import psnr, ssim
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D

log = logging.getLogger(__name__)


@dataclass
class Validation:
    """The held-out views as judged: ``renders`` and composited ``targets`` ``[N, H, W, 3]``
    linear (CPU), in the order of the metrics' ``views``."""

    renders: torch.Tensor
    targets: torch.Tensor


@dataclass
class Result:
    """What a run made: the final mesh (with UVs), its textures, the light, the metrics
    (``metrics.json``) and the held-out renders (None without ``validation``)."""

    mesh: Mesh
    material: TextureMaterial
    light: EnvironmentLight
    metrics: dict
    validation: Validation | None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise UserError(f"unknown device {name!r}: {error}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} asked for, but torch sees no CUDA device here")
    return device


FLAT_NORMAL = torch.tensor([0.0, 0.0, 1.0])  # tangent space: the surface's own normal


def make_light(settings: Settings, envmap: torch.Tensor | None, device) -> EnvironmentLight:
    if settings.light == "learn" or envmap is None:
        if settings.light != "learn":
            raise UserError(f"light {settings.light!r} needs an envmap (the HDRI)")
        return EnvironmentLight(resolution=settings.light_res, init=0.5).to(device)
    return EnvironmentLight.from_equirect(envmap.to(device), resolution=settings.light_res)


def initial_textures(settings: Settings, device, base_material: Material | None = None
                     ) -> TextureMaterial:
    """The textures a materials / refine run starts from (``settings.init_textures``), square
    at ``texture_res``, within ``settings.material_ranges()``:

    - "constant": mid-range, grey kd (alpha 1), roughness 0.5, no metal, flat normals;
    - "random": kd uniform in its range, occlusion uniform in its range cut at 0.01,
      roughness and metallic uniform in theirs, flat normals (the reference system's random
      textures);
    - "base_mesh": the base mesh's own material resampled (constants where it has none).
    """
    size, ranges = settings.texture_res, settings.material_ranges()
    kd_low, kd_high = (torch.tensor(v) for v in ranges["kd"])
    ks_low, ks_high = (torch.tensor(v, dtype=torch.float32) for v in ranges["ks"])
    mid_kd = [0.5, 0.5, 0.5, 1.0][:len(kd_low)]
    values = {"kd": torch.tensor(mid_kd).clamp(kd_low, kd_high).expand(size, size, -1),
              "ks": torch.tensor([0.0, 0.5, 0.0]).clamp(ks_low, ks_high).expand(size, size, 3),
              "normal": FLAT_NORMAL.expand(size, size, 3)}
    if settings.init_textures == "random":
        generator = torch.Generator().manual_seed(settings.seed)

        def uniform(low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
            return low + (high - low) * torch.rand(size, size, len(low), generator=generator)

        values["kd"] = uniform(kd_low, kd_high)
        ks_high[0] = ks_high[0].clamp(max=0.01).clamp(min=ks_low[0])  # occlusion near none
        values["ks"] = uniform(ks_low, ks_high)
    elif settings.init_textures == "base_mesh" and base_material is not None:
        for name in ("kd", "ks", "normal"):
            channel = getattr(base_material, name)
            if channel is not None:
                values[name] = _resampled(channel, size, values[name])
    textures = [Texture2D(values[name], *ranges[name]) for name in ("kd", "ks", "normal")]
    for texture in textures:
        texture.clamp_()  # a base mesh's material may lie outside the ranges
    return TextureMaterial(*textures).to(device)


def _resampled(channel: torch.Tensor, size: int, like: torch.Tensor) -> torch.Tensor:
    """A material channel (constant ``[C]`` or texture ``[H, W, C]``) as a ``size``-square
    texture with ``like``'s channel count (alpha 1 added, or dropped)."""
    channel = torch.as_tensor(channel, dtype=torch.float32)
    if channel.ndim == 1:
        channel = channel[None, None]
    image = F.interpolate(channel.permute(2, 0, 1)[None], size=(size, size), mode="bilinear",
                          align_corners=False, antialias=True)[0].permute(1, 2, 0)
    channels = like.shape[-1]
    if image.shape[-1] < channels:
        image = torch.cat([image, torch.ones(size, size, channels - image.shape[-1])], -1)
    return image[..., :channels].contiguous()


def _run_pass(ctx, run: Pass, train: Views, settings: Settings, reporter: Reporter,
              world: distributed.World) -> PassTrainer:
    """Train ``run`` (from its checkpoint when there is one); returns the finished trainer."""
    sampler = ViewSampler(train, settings.batch, seed=settings.seed + run.index,
                          rank=world.rank, ranks=world.size)
    trainer = PassTrainer(ctx, run, sampler, settings, reporter, world)
    trainer.resume()
    trainer.train()
    return trainer


def _surface_pass(ctx, settings: Settings, train: Views, light, reporter: Reporter,
                  world: distributed.World
                  ) -> tuple[Mesh, TextureMaterial, PassTrainer, str, dict]:
    """Pass 1 of reconstruct; returns the mesh with UVs and its baked TextureMaterial for
    pass 2, the pass's trainer, the name of the surface model that ran
    (``DMTetGeometry`` or ``FlexiCubesGeometry``) and how the mesh was unwrapped
    (``_unwrapped``)."""
    half, nvdiffrec = settings.mesh_scale / 2, settings.schedule == "nvdiffrec"
    center = torch.tensor(settings.center)
    check_views_see_box(train.cameras, (center - half).tolist(), (center + half).tolist(),
                        train.names)
    device = ctx.device
    geometry = IsosurfaceGeometry(settings.geometry, settings.dmtet_grid, settings.mesh_scale,
                                  settings.center, device, settings.sdf_regularizer, settings.seed)
    start = "sphere"
    if settings.surface_init == "visual-hull":
        start = geometry.start_from_hull(train.cameras, train.images[..., 3])
        if start != "visual-hull":
            reporter.log("the masks outline no object (no background, or an empty hull): "
                         "pass 1 starts from a sphere", level="warning")
    ranges = settings.material_ranges()
    field = NeuralMaterial((center - half).tolist(), (center + half).tolist(),
                           kd_min=ranges["kd"][0][:3], kd_max=ranges["kd"][1][:3],
                           ks_min=ranges["ks"][0], ks_max=ranges["ks"][1],
                           normal_min=ranges["normal"][0], normal_max=ranges["normal"][1],
                           device=device,
                           grid=HashGridConfig(log2_hashmap_size=settings.hash_table_log2))
    first = Pass("pass1", 0, settings.iterations, settings.learning_rate[0], 0, geometry,
                 NeuralSurface(field), light, settings.light != "fixed",
                 settings.surface_learning_rate[0] if start == "visual-hull" and not
                 nvdiffrec else None, number=1, passes=2)
    trainer = _run_pass(ctx, first, train, settings, reporter, world)

    with torch.no_grad():
        mesh = geometry.mesh()
    vertices, triangles = remove_small_pieces(*clean_mesh(mesh.positions.detach(),
                                                         mesh.triangles))
    extracted = len(triangles)
    vertices, triangles = simplify(vertices, triangles, settings.max_triangles)
    mesh, unwrapping = _unwrapped(Mesh(vertices, triangles), settings, reporter, world)
    unwrapping.update(triangles=len(triangles), extracted_triangles=extracted)
    _stop_if_asked(reporter, world, "after unwrapping the surface")
    reporter.log("baking textures…", stage="baking")
    textures = bake_textures(ctx, mesh, field.evaluate, settings.texture_res)
    # pass 1's surface has no UVs, so no tangents: the field's normal channel was never used,
    # hence never trained; pass 2's normal map starts flat instead (docs/BENCHMARKS.md)
    textures["normal"] = FLAT_NORMAL.to(textures["normal"]).expand_as(textures["normal"]).clone()
    if len(ranges["kd"][0]) == 4:  # layers > 1: pass 2 learns alpha, starting opaque
        textures["kd"] = torch.cat([textures["kd"], torch.ones_like(textures["kd"][..., :1])], -1)
    baked = {name: Texture2D(textures[name], *ranges[name]) for name in ranges}
    material = TextureMaterial(baked["kd"], baked["ks"], baked["normal"]).to(device)
    return mesh, material, trainer, type(geometry.surface).__name__, unwrapping


def _unwrapped(mesh: Mesh, settings: Settings, reporter: Reporter, world: distributed.World
               ) -> tuple[Mesh, dict]:
    """``with_uvs(mesh)`` unwrapped by rank 0 and shared, so that every rank trains the same
    atlas (a stop asked during unwrapping ends rank 0 alone; its launcher ends the rest); a
    fallback layout is reported as a warning."""
    if not has_usable_uvs(mesh):
        reporter.log("unwrapping the surface…", stage="unwrapping")

    def on_main() -> tuple[Mesh, dict]:
        unwrapped, how = with_uvs(mesh, settings, reporter.should_stop)
        if how["warning"]:
            reporter.log(how["warning"], level="warning")
        return unwrapped.to("cpu"), how

    unwrapped, how = world.from_main(on_main)
    return unwrapped.to(mesh.positions.device), how


def _stop_if_asked(reporter: Reporter, world: distributed.World, where: str) -> None:
    """Between stages that do not poll ``should_stop`` themselves (each takes seconds at most);
    rank 0's reporter decides for every rank."""
    if world.main_says(reporter.should_stop()):
        raise Cancelled(f"stopped {where}")


VALIDATION_SPP = 2  # held-out views are judged antialiased, as targets and Blender show them


def validate(ctx, mesh, material, light, views: Views, settings: Settings
             ) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Render the held-out views (supersampled); PSNR and SSIM per view against the targets,
    both over ``settings.background`` (black for "random"). Returns the scores, the renders
    and the composited targets (``[N, H, W, 3]``, CPU)."""
    light.build_mips()
    renders, shown_targets, scores = [], [], []
    with torch.no_grad():
        for start in range(0, len(views), max(settings.batch, 1)):
            cameras, targets = views.batch(range(start, min(start + settings.batch, len(views))))
            cameras, targets = cameras.to(ctx.device), targets.to(ctx.device)
            background = background_for(settings.background, targets)
            out = render_mesh(ctx, mesh, material, cameras, light,
                              spp=max(settings.spp, VALIDATION_SPP), layers=settings.layers,
                              background=background,
                              light_rotation=light_rotation(cameras, settings))
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


def peak_memory_mb(device: torch.device) -> float | None:
    """Peak GPU memory allocated by torch, or the process's peak resident memory on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource  # Unix only
    except ImportError:
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, else KiB


def optimize(settings: Settings, inputs: Inputs, reporter: Reporter | None = None, *,
             device: str = "auto", world: distributed.World = distributed.SINGLE
             ) -> Result | None:
    """Run ``settings`` end to end on ``inputs`` (target views resized to ``train_res``) on
    the torch ``device`` ("auto": CUDA, else MPS, else CPU); ``reporter`` receives progress,
    previews and log lines and keeps the checkpoints (each pass resumes from its own when it
    was made with the same settings). The result's metrics hold the held-out PSNR/SSIM per
    view and their means, times, peak memory, the settings, and ``history``: loss and batch
    PSNR every ``log_every`` iterations.

    Raises ``diffrec.errors.Cancelled`` when ``reporter.should_stop()`` says so (checkpoints
    kept): every iteration and between the stages around the passes.

    ``world``: this process's rank among several training one job together
    (``pipeline.distributed``; ``device`` then this rank's own), each called with the same
    settings and inputs: ``settings.batch`` is the whole batch, split over the ranks. Only
    rank 0 uses ``reporter`` and validates; it returns the Result, the other ranks None.
    """
    reporter = distributed.main_only(world, reporter or Reporter())
    nvdiffrec = settings.schedule == "nvdiffrec"  # warm-up in every mesh pass, one rate
    torch_device = resolve_device(device)
    torch.manual_seed(settings.seed)
    ctx = raster.RasterContext(torch_device)
    train = at_longest_side(inputs.train, settings.train_res).to(torch_device)
    test = at_longest_side(inputs.test, settings.train_res) if inputs.test is not None else None
    if settings.validation and test is None:
        raise UserError("validation needs held-out views (inputs.test)")
    light = make_light(settings, inputs.envmap, torch_device)
    trainers: list[PassTrainer] = []

    surface_model = None
    if settings.mode == "reconstruct":
        mesh, material, first, surface_model, unwrapping = _surface_pass(
            ctx, settings, train, light, reporter, world)
        trainers.append(first)
        trainable, learning_rate = True, settings.learning_rate[1]
        warmup = settings.warmup_iterations
        surface_rate = None if nvdiffrec else settings.surface_learning_rate[1]
    else:
        if inputs.base_mesh is None:
            raise UserError(f"mode {settings.mode!r} needs a starting mesh (base_mesh)")
        mesh, unwrapping = _unwrapped(inputs.base_mesh.to(torch_device), settings, reporter,
                                      world)
        material = initial_textures(settings, torch_device, inputs.base_material)
        trainable, learning_rate = settings.mode == "refine", settings.learning_rate[1]
        warmup = settings.warmup_iterations if nvdiffrec else 0
        surface_rate = None
    geometry = ExplicitGeometry(mesh, trainable, settings.laplace, settings.laplace_scale,
                                settings.large_steps).to(torch_device)
    passes = 2 if settings.mode == "reconstruct" else 1
    second = Pass("pass2", 1, settings.iterations, learning_rate, warmup, geometry, material,
                  light, settings.light != "fixed" and not settings.lock_light, surface_rate,
                  number=passes, passes=passes)
    trainers.append(_run_pass(ctx, second, train, settings, reporter, world))

    with torch.no_grad():
        final_mesh = geometry.mesh()
    metrics: dict = {"views": [], "psnr_mean": None, "ssim_mean": None}
    validation = None
    if settings.validation:
        _stop_if_asked(reporter, world, "before validating")
        reporter.log("scoring the held-out views…", stage="validating")
        if world.is_main:
            metrics, renders, targets = validate(ctx, final_mesh, material, light, test,
                                                 settings)
            validation = Validation(renders, targets)
    _stop_if_asked(reporter, world, "before writing the outputs")
    if not world.is_main:
        return None
    metrics.update({"mode": settings.mode, "preset": settings.preset,
                    "device": str(torch_device), "engine": ctx.engine,
                    "surface_model": surface_model, "iterations": settings.iterations,
                    "unwrap": {k: v for k, v in unwrapping.items() if k != "warning"},
                    "warnings": [unwrapping["warning"]] if unwrapping["warning"] else [],
                    "time_s": {t.run.name: t.elapsed_s for t in trainers},
                    "stopped_early": {t.run.name: {"iteration": t.iteration,
                                                   "why": t.stopped_early}
                                      for t in trainers if t.stopped_early},
                    "peak_memory_mb": peak_memory_mb(torch_device),
                    "settings": settings.to_dict(),
                    "history": [entry for t in trainers for entry in t.history]})
    return Result(final_mesh, material, light, metrics, validation)
