"""The whole method: inputs -> passes -> baked asset, validation and metrics.

Modes:
- ``materials``: the given mesh stays fixed; textures (kd, ks, normal) and the light train.
- ``refine``: as materials, and the vertices move too (Laplacian-regularised).
- ``reconstruct``: pass 1 finds the surface with DMTet or FlexiCubes and a neural material;
  the mesh is cleaned, unwrapped and the material baked into textures; pass 2 refines mesh,
  textures and light together.

``optimize`` is what the command line and the job server call. A run writes checkpoints under
``out_dir/checkpoints`` and resumes from them when started again with the same settings.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.errors import Cancelled, UserError
from diffrec.geometry import clean_mesh
from diffrec.io import Material, read_gltf, read_image, read_mtl, read_obj
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh import Mesh
from diffrec.mesh.box import fit_to_box
from diffrec.neural import HashGridConfig
from diffrec.neural.material import NeuralMaterial
from diffrec.pipeline import outputs
from diffrec.pipeline.bake import bake_textures
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.config import OptimizeConfig
from diffrec.pipeline.datasets import (
    Views,
    ViewSampler,
    check_views_see_box,
    load_dataset,
    render_reference_views,
    split_views,
)
from diffrec.pipeline.geometry_models import ExplicitGeometry, IsosurfaceGeometry
from diffrec.pipeline.trainer import (
    Pass,
    PassTrainer,
    background_for,
    composite,
    light_rotation,
)
from diffrec.pipeline.unwrap import has_usable_uvs, unwrap
from diffrec.render.material import NeuralSurface, TextureMaterial
from diffrec.render.metrics import psnr, ssim
from diffrec.render.renderer import render_mesh
from diffrec.render.texture2d import Texture2D

log = logging.getLogger(__name__)

REFERENCE_CAMERA_RADIUS = 3.0  # nvdiffrec's mesh mode: unit-box mesh, cameras at radius 3
REFERENCE_FOV_DEGREES = 45.0


@dataclass
class Inputs:
    """What a run optimises against. ``envmap``: equirect [H, W, 3] linear (None: learn).
    ``test`` is None only for inputs loaded to be sent to a server, which holds out its own.
    ``base_material``: the base mesh's own material (``init_textures`` "base_mesh")."""

    train: Views
    test: Views | None
    base_mesh: Mesh | None = None
    envmap: torch.Tensor | None = None
    base_material: Material | None = None


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


def read_mesh(path: str | Path):
    """An Asset from an OBJ, GLB or glTF file."""
    path = Path(path)
    if path.suffix.lower() == ".obj":
        return read_obj(path)
    if path.suffix.lower() in (".glb", ".gltf"):
        return read_gltf(path)
    raise UserError(f"cannot read mesh {path}: use .obj, .glb or .gltf")


def load_inputs(config: OptimizeConfig, ctx: raster.RasterContext, hold_out: bool = True
                ) -> Inputs:
    """Targets and starting mesh from the config's files: a capture folder (``dataset``, or a
    ``ref_mesh`` that names a folder: NeRF-style or LLFF) or a reference mesh rendered under
    ``envmap`` (scaled by ``env_scale``; its material replaced by ``ref_material``'s first).

    ``hold_out=False`` (what ``diffrec submit`` sends; the server holds out views itself):
    ``train`` has all the target views (a dataset's ``transforms_train.json`` whole, or
    ``views`` renders of a reference mesh), ``test`` is None, and a dataset's
    ``transforms_test.json`` is not read.
    """
    envmap = None
    if config.envmap:
        envmap = torch.from_numpy(read_image(config.envmap)[..., :3].copy()) * config.env_scale
    base_asset = read_mesh(config.base_mesh) if config.base_mesh else None
    base = base_asset.mesh if base_asset else None
    base_material = base_asset.materials[0] if base_asset and base_asset.materials else None
    dataset = config.dataset or (config.ref_mesh if config.ref_mesh and
                                 Path(config.ref_mesh).is_dir() else None)
    if dataset:
        train = load_dataset(dataset, "train", config.train_res, near_far=config.near_far)
        if not hold_out:
            return Inputs(train, None, base, envmap, base_material)
        try:
            test = load_dataset(dataset, "test", config.train_res, near_far=config.near_far)
        except UserError:
            train, test = split_views(train, min(config.test_views, len(train) - 1), config.seed)
        return Inputs(train, test, base, envmap, base_material)
    if config.ref_mesh:
        if envmap is None:
            raise UserError("rendering a reference mesh needs an envmap (an HDRI) to light it")
        asset = read_mesh(config.ref_mesh)
        if config.ref_material:
            asset.materials = read_mtl(config.ref_material)[:1]
        fitted, transform = fit_to_box(asset.mesh, size=2.0)
        asset.mesh = fitted
        if base is not None:
            base = base.replace(positions=transform.apply(base.positions))
        near, far = config.near_far or (0.1, 1000.0)

        def views(count, seed):
            cameras = orbit_cameras(count, REFERENCE_CAMERA_RADIUS, config.train_res,
                                    fov_degrees=REFERENCE_FOV_DEGREES, seed=seed,
                                    elevations_degrees=(-30.0, 60.0), near=near, far=far)
            return render_reference_views(ctx, asset, envmap, cameras.to(ctx.device), spp=2)

        test = views(config.test_views, config.seed + 1) if hold_out else None
        return Inputs(views(config.views, config.seed), test, base, envmap, base_material)
    raise UserError("no targets: give a dataset folder (dataset) or a reference mesh (ref_mesh)")


def make_light(config: OptimizeConfig, envmap: torch.Tensor | None, device) -> EnvironmentLight:
    if config.light == "learn" or envmap is None:
        if config.light != "learn":
            raise UserError(f"light {config.light!r} needs an envmap (the HDRI)")
        return EnvironmentLight(resolution=config.light_res, init=0.5).to(device)
    return EnvironmentLight.from_equirect(envmap.to(device), resolution=config.light_res)


def initial_textures(config: OptimizeConfig, device, base_material: Material | None = None
                     ) -> TextureMaterial:
    """The textures a materials / refine run starts from (``config.init_textures``), square
    at ``texture_res``, within ``config.material_ranges()``:

    - "constant": mid-range, grey kd (alpha 1), roughness 0.5, no metal, flat normals;
    - "random": kd uniform in its range, occlusion uniform in its range cut at 0.01,
      roughness and metallic uniform in theirs, flat normals (the reference system's random
      textures);
    - "base_mesh": the base mesh's own material resampled (constants where it has none).
    """
    size, ranges = config.texture_res, config.material_ranges()
    kd_low, kd_high = (torch.tensor(v) for v in ranges["kd"])
    ks_low, ks_high = (torch.tensor(v, dtype=torch.float32) for v in ranges["ks"])
    mid_kd = [0.5, 0.5, 0.5, 1.0][:len(kd_low)]
    values = {"kd": torch.tensor(mid_kd).clamp(kd_low, kd_high).expand(size, size, -1),
              "ks": torch.tensor([0.0, 0.5, 0.0]).clamp(ks_low, ks_high).expand(size, size, 3),
              "normal": torch.tensor([0.0, 0.0, 1.0]).expand(size, size, 3)}
    if config.init_textures == "random":
        generator = torch.Generator().manual_seed(config.seed)

        def uniform(low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
            return low + (high - low) * torch.rand(size, size, len(low), generator=generator)

        values["kd"] = uniform(kd_low, kd_high)
        ks_high[0] = ks_high[0].clamp(max=0.01).clamp(min=ks_low[0])  # occlusion near none
        values["ks"] = uniform(ks_low, ks_high)
    elif config.init_textures == "base_mesh" and base_material is not None:
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


def with_uvs(mesh: Mesh, config: OptimizeConfig,
             should_stop: Callable[[], bool] = lambda: False) -> Mesh:
    """Keep the mesh's UVs when they are usable, else unwrap (xatlas or the fallback)."""
    if has_usable_uvs(mesh):
        return mesh
    positions = mesh.positions.detach().cpu()
    uvs, uv_triangles = unwrap(positions, mesh.triangles.cpu(), timeout_s=config.unwrap_timeout_s,
                               resolution_hint=config.texture_res, should_stop=should_stop)
    return mesh.replace(uvs=uvs.to(mesh.positions.device),
                        uv_triangles=uv_triangles.to(mesh.positions.device))


BOOKKEEPING_SETTINGS = ("out_dir", "device", "checkpoint_every", "preview_every", "log_every")


def settings_fingerprint(config: OptimizeConfig) -> str:
    """The settings that shape the optimisation (a checkpoint only resumes the same run)."""
    values = {k: v for k, v in config.to_dict().items() if k not in BOOKKEEPING_SETTINGS}
    return json.dumps(values, sort_keys=True, default=str)


def _run_pass(ctx, run: Pass, train: Views, config, store, progress, should_stop) -> float:
    sampler = ViewSampler(train, config.batch, seed=config.seed + run.index)
    fingerprint = settings_fingerprint(config)

    def save(state: dict) -> None:
        store.save(run.name, {**state, "settings": fingerprint})

    trainer = PassTrainer(ctx, run, sampler, config, progress=progress, checkpoint=save,
                          should_stop=should_stop)
    state = store.load(run.name)
    if state is not None and state.get("settings") != fingerprint:
        log.warning("ignoring the checkpoint of %s in %s: it was made with other settings",
                    run.name, store.directory)
    elif state is not None:
        trainer.load_state_dict(state)
        message = f"resumed {run.name} from its checkpoint at iteration {trainer.iteration}"
        log.info(message)
        progress({"type": "log", "level": "info", "message": message,
                  "resumed_from": trainer.iteration})
    started = time.monotonic()
    trainer.train()
    save(trainer.state_dict())
    return time.monotonic() - started


def _surface_pass(ctx, config, inputs, light, store, progress, should_stop, times) -> tuple:
    """Pass 1 of reconstruct; returns (mesh with UVs, TextureMaterial) for pass 2 and the
    name of the surface model that ran (``DMTetGeometry`` or ``FlexiCubesGeometry``)."""
    half = config.mesh_scale / 2
    center = torch.tensor(config.center)
    check_views_see_box(inputs.train.cameras, (center - half).tolist(), (center + half).tolist(),
                        inputs.train.names)
    device = ctx.device
    geometry = IsosurfaceGeometry(config.geometry, config.dmtet_grid, config.mesh_scale,
                                  config.center, device, config.sdf_regularizer, config.seed)
    ranges = config.material_ranges()
    field = NeuralMaterial((center - half).tolist(), (center + half).tolist(),
                           kd_min=ranges["kd"][0][:3], kd_max=ranges["kd"][1][:3],
                           ks_min=ranges["ks"][0], ks_max=ranges["ks"][1],
                           normal_min=ranges["normal"][0], normal_max=ranges["normal"][1],
                           device=device,
                           grid=HashGridConfig(log2_hashmap_size=config.hash_table_log2))
    first = Pass("pass1", 0, config.iterations, config.learning_rate[0], 0, geometry,
                 NeuralSurface(field), light, config.light != "fixed")
    times["pass1"] = _run_pass(ctx, first, inputs.train, config, store, progress, should_stop)

    with torch.no_grad():
        mesh = geometry.mesh()
    vertices, triangles = clean_mesh(mesh.positions.detach(), mesh.triangles)
    mesh = with_uvs(Mesh(vertices, triangles), config, should_stop)
    _stop_if_asked(should_stop, "after unwrapping the surface")
    textures = bake_textures(ctx, mesh, field.evaluate,
                             config.texture_res)
    if len(ranges["kd"][0]) == 4:  # layers > 1: pass 2 learns alpha, starting opaque
        textures["kd"] = torch.cat([textures["kd"], torch.ones_like(textures["kd"][..., :1])], -1)
    baked = {name: Texture2D(textures[name], *ranges[name]) for name in ranges}
    material = TextureMaterial(baked["kd"], baked["ks"], baked["normal"]).to(device)
    return mesh, material, type(geometry.surface).__name__


def _stop_if_asked(should_stop: Callable[[], bool] | None, where: str) -> None:
    """Between stages that do not poll ``should_stop`` themselves (each takes seconds at most)."""
    if should_stop is not None and should_stop():
        raise Cancelled(f"stopped {where}")


VALIDATION_SPP = 2  # held-out views are judged antialiased, as targets and Blender show them


def validate(ctx, mesh, material, light, views: Views, config
             ) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Render the held-out views (supersampled); PSNR and SSIM per view against the targets,
    both over ``config.background`` (black for "random"). Returns the scores, the renders
    and the composited targets (``[N, H, W, 3]``, CPU)."""
    light.build_mips()
    renders, shown_targets, scores = [], [], []
    with torch.no_grad():
        for start in range(0, len(views), max(config.batch, 1)):
            cameras, targets = views.batch(range(start, min(start + config.batch, len(views))))
            cameras, targets = cameras.to(ctx.device), targets.to(ctx.device)
            background = background_for(config.background, targets)
            out = render_mesh(ctx, mesh, material, cameras, light,
                              spp=max(config.spp, VALIDATION_SPP), layers=config.layers,
                              background=background,
                              light_rotation=light_rotation(cameras, config))
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


def optimize(
    config: OptimizeConfig,
    inputs: Inputs | None = None,
    progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Run ``config`` end to end; write the outputs to ``config.out_dir``; return the metrics
    (also in ``metrics.json``: held-out PSNR/SSIM per view and mean, times, peak memory, the
    settings, and ``history``: loss and batch PSNR every ``log_every`` iterations).

    ``inputs`` overrides the config's files (the job server passes in-memory arrays).
    ``progress`` receives the trainer's "progress" and "preview" events (see ``PassTrainer``)
    and a "log" event (``level``, ``message``, ``resumed_from``) when a pass resumes from a
    checkpoint.
    Raises ``diffrec.errors.Cancelled`` when ``should_stop`` asks (the checkpoints are kept):
    every iteration and between the stages around the passes.
    """
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    history: list[dict] = []

    def report(event: dict) -> None:
        if event["type"] == "progress":
            history.append({"pass": event["pass"], "iteration": event["iteration"],
                            "loss": event["losses"]["total"], "psnr": event["psnr"]})
        if progress is not None:
            progress(event)

    ctx = raster.RasterContext(device)
    out_dir = Path(config.out_dir)
    store = CheckpointStore(out_dir / "checkpoints")
    inputs = inputs or load_inputs(config, ctx)
    train = inputs.train.to(device)
    light = make_light(config, inputs.envmap, device)
    times: dict[str, float] = {}

    surface_model = None
    if config.mode == "reconstruct":
        mesh, material, surface_model = _surface_pass(ctx, config, inputs, light, store, report,
                                                      should_stop, times)
        trainable, learning_rate, warmup = True, config.learning_rate[1], config.warmup_iterations
    else:
        if inputs.base_mesh is None:
            raise UserError(f"mode {config.mode!r} needs a starting mesh (base_mesh)")
        mesh = with_uvs(inputs.base_mesh.to(device), config, should_stop)
        material = initial_textures(config, device, inputs.base_material)
        trainable, learning_rate, warmup = config.mode == "refine", config.learning_rate[1], 0
    geometry = ExplicitGeometry(mesh, trainable, config.laplace, config.laplace_scale).to(device)
    second = Pass("pass2", 1, config.iterations, learning_rate, warmup, geometry, material, light,
                  config.light != "fixed" and not config.lock_light)
    times["pass2"] = _run_pass(ctx, second, train, config, store, report, should_stop)

    with torch.no_grad():
        final_mesh = geometry.mesh()
    metrics: dict = {"views": [], "psnr_mean": None, "ssim_mean": None}
    validation = None
    if config.validation:
        _stop_if_asked(should_stop, "before validating")
        metrics, renders, targets = validate(ctx, final_mesh, material, light, inputs.test,
                                             config)
        validation = (renders, targets)
    _stop_if_asked(should_stop, "before writing the outputs")
    metrics.update({"mode": config.mode, "preset": config.preset, "device": str(device),
                    "engine": ctx.engine, "surface_model": surface_model,
                    "iterations": config.iterations, "time_s": times,
                    "peak_memory_mb": peak_memory_mb(device), "config": config.to_dict(),
                    "history": history})
    outputs.write_result(out_dir, final_mesh, material, light, metrics, validation)
    return metrics
