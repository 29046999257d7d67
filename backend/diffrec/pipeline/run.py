"""The whole method: inputs -> passes -> baked asset, validation and metrics.

Modes:
- ``materials``: the given mesh stays fixed; textures (kd, ks, normal) and the light train;
  with ``renderer`` "path-traced", a second pass then refines them path-traced (the
  rasterized pass's occlusion folded into the base colour first, ``fold_occlusion_``).
- ``refine``: as materials, and the vertices move too (Laplacian-regularised).
- ``reconstruct``: pass 1 finds the surface with DMTet or FlexiCubes and a neural material;
  the mesh is cleaned, unwrapped and the material baked into textures; pass 2 refines mesh,
  textures and light together.

``optimize(settings, inputs, reporter)`` is what the command line and the job server call:
in-memory inputs (``pipeline.inputs``) in, a ``Result`` out (``pipeline.outputs`` writes
it); the reporter (``pipeline.reporter``) hears progress; checkpoints go to a
``CheckpointStore`` (``pipeline.checkpoints``), from which a run started again with the same
settings resumes. What a run starts from is
``pipeline.initial_state``, how it is judged ``pipeline.scoring``, the device it runs on
``diffrec.devices``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import torch

from diffrec import raster
from diffrec.devices import peak_memory_mb, resolve_device
from diffrec.errors import Cancelled, UserError
from diffrec.geometry import clean_mesh, piece_count, remove_small_pieces
from diffrec.geometry.simplify import simplify
from diffrec.light.envmap import EnvironmentLight
from diffrec.mesh import Mesh
from diffrec.neural import HashGridConfig
from diffrec.neural.material import NeuralMaterial
from diffrec.pipeline import distributed
from diffrec.pipeline.albedo_level import level_albedo_, starts_levelled
from diffrec.pipeline.bake import bake_textures
from diffrec.pipeline.checkpoints import CheckpointStore
from diffrec.pipeline.frustum import check_views_see_box
from diffrec.pipeline.geometry_models import ExplicitGeometry, IsosurfaceGeometry
from diffrec.pipeline.initial_state import averaged, has_textures, initial_textures, make_light
from diffrec.pipeline.input_digest import inputs_digest
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.job_arrays import path_traced_refusal
from diffrec.pipeline.mip_fit import STEP_COST, fit_mips
from diffrec.pipeline.pass_config import (
    moves_along_normals,
    offset_unit,
    path_traced_pass,
    surface_pass,
    textured_pass,
    vertex_pull,
)
from diffrec.pipeline.pose_refinement import PoseCorrections
from diffrec.pipeline.renderer_gap import WITHOUT_THEIR_MATERIAL, gap_corrected, own_renders
from diffrec.pipeline.reporter import Reporter
from diffrec.pipeline.sampler import ViewSampler
from diffrec.pipeline.scoring import Validation, score_views
from diffrec.pipeline.sun_finder import NO_SUN, find_sun, seed_sun_
from diffrec.pipeline.trainer import Pass, PassTrainer
from diffrec.pipeline.unwrap import with_uvs
from diffrec.pipeline.views import Views, at_longest_side
from diffrec.protocol.settings import PATH_TRACED_COST, Settings, textured_pass_iterations
from diffrec.render.material import FLAT_NORMAL, NeuralSurface, TextureMaterial
from diffrec.render.mitsuba_bridge import load_mitsuba
from diffrec.render.texture2d import Texture2D

log = logging.getLogger(__name__)


@dataclass
class Result:
    """What a run made: the final mesh (with UVs), its textures, the light, the metrics
    (``metrics.json``) and the held-out renders (None without ``validation``)."""

    mesh: Mesh
    material: TextureMaterial
    light: EnvironmentLight
    metrics: dict
    validation: Validation | None


def _run_pass(ctx, run: Pass, train: Views, batch: int, reporter: Reporter,
              checkpoints: CheckpointStore | None, world: distributed.World) -> PassTrainer:
    """Train ``run`` on ``batch`` views an iteration (from its checkpoint when there is one);
    returns the finished trainer."""
    sampler = ViewSampler(train, batch, seed=run.seed + run.seed_offset, rank=world.rank,
                          ranks=world.size)
    trainer = PassTrainer(ctx, run, sampler, reporter, world, checkpoints=checkpoints)
    trainer.resume()
    trainer.train()
    return trainer


def _path_traced_views(train: Views, path_res: int) -> Views:
    """The views the path-traced pass trains on: ``train`` resized down to ``path_res``
    pixels on their longer side (``at_longest_side``); ``train`` itself when ``path_res`` is
    0 or not smaller than that side."""
    longest = max(train.cameras.width, train.cameras.height)
    return at_longest_side(train, path_res) if 0 < path_res < longest else train


def _surface_pass(ctx, settings: Settings, train: Views, light, reporter: Reporter,
                  checkpoints: CheckpointStore | None, world: distributed.World,
                  clips_white: bool = False, poses: PoseCorrections | None = None
                  ) -> tuple[Mesh, TextureMaterial, PassTrainer, str, dict]:
    """Pass 1 of reconstruct (``clips_white``: ``Pass.clips_white``; ``poses``:
    ``Pass.poses``); returns the mesh with UVs and its baked TextureMaterial for pass 2, the
    pass's trainer, the name of the surface model that ran (``DMTetGeometry`` or
    ``FlexiCubesGeometry``) and how the mesh was unwrapped (``_unwrapped``)."""
    surface = settings.surface
    half, nvdiffrec = surface.mesh_scale / 2, settings.schedule.kind == "nvdiffrec"
    center = torch.tensor(surface.center)
    check_views_see_box(train.cameras, (center - half).tolist(), (center + half).tolist(),
                        train.names, train.images[..., 3])
    device = ctx.device
    geometry = IsosurfaceGeometry(surface.geometry, settings.size.grid, surface.mesh_scale,
                                  surface.center, device, surface.sdf_regularizer,
                                  settings.run.seed)
    start = "sphere"
    if surface.surface_init == "random":
        geometry.start_random(settings.run.seed)
        start = "random"
    elif surface.surface_init == "visual-hull":
        start = geometry.start_from_hull(train.cameras, train.images[..., 3])
        if start == "visual-hull":
            if settings.looks_for_sun():
                with torch.no_grad():
                    _start_light_at_sun(ctx, geometry.mesh(), train, light, reporter)
        else:
            reporter.log("the masks outline no object (no background, or an empty hull): "
                         "pass 1 starts from a sphere", level="warning")
            if settings.looks_for_sun():
                reporter.log("no sun looked for: pass 1 starts from a sphere, not the visual "
                             "hull, so there are no surface normals to read highlights on; "
                             "the learned light starts grey")
    ranges, material_settings = settings.material_ranges(), settings.material
    field = NeuralMaterial((center - half).tolist(), (center + half).tolist(),
                           kd_min=ranges["kd"][0][:3], kd_max=ranges["kd"][1][:3],
                           ks_min=ranges["ks"][0], ks_max=ranges["ks"][1],
                           normal_min=ranges["normal"][0], normal_max=ranges["normal"][1],
                           device=device, grid_precision=material_settings.hash_grid_precision,
                           grid=HashGridConfig(log2_hashmap_size=material_settings.hash_table_log2))
    config = surface_pass(settings, hull_start=start == "visual-hull" and not nvdiffrec,
                          clips_white=clips_white)
    first = Pass.of(config, geometry, NeuralSurface(field), light, poses)
    trainer = _run_pass(ctx, first, train, settings.size.batch, reporter, checkpoints, world)

    with torch.no_grad():
        mesh = geometry.mesh()
    vertices, triangles = remove_small_pieces(*clean_mesh(mesh.positions.detach(),
                                                         mesh.triangles))
    extracted = len(triangles)
    vertices, triangles = simplify(vertices, triangles, settings.surface_triangles())
    if len(triangles) < extracted:
        reporter.log(f"simplified pass 1's surface {extracted:,} -> {len(triangles):,} "
                     "triangles")
    mesh, unwrapping = _unwrapped(Mesh(vertices, triangles), settings, reporter, world)
    unwrapping.update(triangles=len(triangles), extracted_triangles=extracted)
    _stop_if_asked(reporter, world, "after unwrapping the surface")
    reporter.log("baking textures…", stage="baking")
    textures = bake_textures(ctx, mesh, field.evaluate, settings.size.texture_res)
    # pass 1's surface has no UVs, so no tangents: the field's normal channel was never used,
    # hence never trained; pass 2's normal map starts flat instead (docs/BENCHMARKS.md)
    textures["normal"] = FLAT_NORMAL.to(textures["normal"]).expand_as(textures["normal"]).clone()
    if len(ranges["kd"][0]) == 4:  # layers > 1: pass 2 learns alpha, starting opaque
        textures["kd"] = torch.cat([textures["kd"], torch.ones_like(textures["kd"][..., :1])], -1)
    baked = {name: Texture2D(textures[name], *ranges[name]) for name in ranges
             if name != "normal" or settings.trains_normal_map()}
    material = TextureMaterial(baked["kd"], baked["ks"], baked.get("normal"),
                               mip_bias=material_settings.texture_mip_bias,
                               learn_f0=settings.trains_ior()).to(device)
    return mesh, material, trainer, type(geometry.surface).__name__, unwrapping


def _start_light_at_sun(ctx, mesh: Mesh, train: Views, light, reporter: Reporter) -> None:
    """Seeds ``light`` with the sun ``train``'s highlights show on ``mesh`` (``find_sun``,
    ``seed_sun_``; a faint one where none stands out); logs what was found."""
    sun = find_sun(ctx, mesh, train)
    if sun is not None:
        seed_sun_(light, sun)
    reporter.log(NO_SUN if sun is None else sun.sentence())


def _say_start_material(settings: Settings, material: TextureMaterial,
                        reporter: Reporter) -> None:
    """Says that the start's clear coat is kept as it is, and whether the IOR is trained
    (``trains_ior``); refuses to the path-traced pass what it does not shade
    (``job_arrays.path_traced_refusal``, which the server checks at submit too)."""
    refusal = path_traced_refusal(material.coat is not None, material.ior)
    if settings.path_tracing.renderer == "path-traced" and refusal:
        raise UserError(refusal)
    if material.coat is not None:
        weight, roughness = material.coat.tolist()
        reporter.log(f"the start's clear coat (weight {weight:.2f}, roughness {roughness:.2f}) "
                     "is kept over the fitted material")
    if material.f0.requires_grad:
        reporter.log(f"the surface's IOR is trained, from {material.ior:.2f} (learn_ior)")


def _decimated(mesh: Mesh, budget: int, reporter: Reporter, warnings: list[str]) -> Mesh:
    """``mesh`` itself when it has at most ``budget`` triangles (or ``budget`` is 0), else its
    surface decimated to the budget (``simplify``) without its UVs, normals and tangents,
    which followed the triangles it had (unwrapping gives it new UVs; its normals are then
    the surface's own, smooth). Separate pieces the collapse took away entirely are said in
    a sentence appended to ``warnings``."""
    if not budget or mesh.num_triangles <= budget:
        return mesh
    vertices, triangles = simplify(mesh.positions.detach(), mesh.triangles, budget)
    reporter.log(f"decimated {mesh.num_triangles:,} -> {len(triangles):,} triangles "
                 f"(target_triangles {budget:,})")
    pieces = piece_count(mesh.positions.detach(), mesh.triangles)
    if lost := pieces - piece_count(vertices, triangles):
        warnings.append(f"{lost:,} of the base mesh's {pieces:,} separate pieces collapsed to "
                        f"nothing at target_triangles {budget:,}: allow more triangles to "
                        "keep them, or join the pieces")
        reporter.log(warnings[-1], level="warning")
    return Mesh(vertices, triangles)


def _unwrapped(mesh: Mesh, settings: Settings, reporter: Reporter,
               world: distributed.World) -> tuple[Mesh, dict]:
    """``with_uvs(mesh)`` unwrapped by rank 0 and shared, so that every rank trains the same
    atlas (a stop asked during unwrapping ends rank 0 alone; its launcher ends the rest); a
    fallback layout is reported as a warning."""
    def on_main() -> tuple[Mesh, dict]:
        unwrapped, how = with_uvs(
            mesh, settings, reporter.should_stop,
            before_unwrap=lambda: reporter.log("unwrapping the surface…", stage="unwrapping"))
        if how["warning"]:
            reporter.log(how["warning"], level="warning")
        return unwrapped.to("cpu"), how

    unwrapped, how = world.from_main(on_main)
    return unwrapped.to(mesh.positions.device), how


def _corrections_sentence(summary: dict) -> str:
    """What the pose corrections came to (``PoseCorrections.summary``), in a sentence."""
    turn, shift = summary["turn_degrees"], summary["shift"]
    return (f"the {summary['views']} training views' poses were corrected by "
            f"{turn['mean']:.2f} degrees and {shift['mean']:.3g} units on average (at most "
            f"{turn['max']:.2f} degrees, {shift['max']:.3g} units)")


def _stop_if_asked(reporter: Reporter, world: distributed.World, where: str) -> None:
    """Between stages that do not poll ``should_stop`` themselves (each takes seconds at most);
    rank 0's reporter decides for every rank."""
    if world.main_says(reporter.should_stop()):
        raise Cancelled(f"stopped {where}")


def optimize(settings: Settings, inputs: Inputs, reporter: Reporter | None = None, *,
             checkpoints: CheckpointStore | None = None, device: str = "auto",
             world: distributed.World = distributed.SINGLE) -> Result | None:
    """Run ``settings`` end to end on ``inputs`` (target views resized to ``train_res``) on
    the torch ``device`` ("auto": CUDA, else MPS, else CPU); ``reporter`` receives progress,
    previews and log lines; ``checkpoints`` keeps each pass's state (None: none kept; each
    pass resumes from its own when it was made with the same settings from the same
    inputs). The result's metrics hold the held-out PSNR/SSIM per view and their means,
    times, peak memory, the settings, and ``history``: loss and batch PSNR every
    ``log_every`` iterations.

    Raises ``diffrec.errors.Cancelled`` when ``reporter.should_stop()`` says so (checkpoints
    kept): every iteration and between the stages around the passes.

    ``world``: this process's rank among several training one job together
    (``pipeline.distributed``; ``device`` then this rank's own), each called with the same
    settings and inputs: ``settings.size.batch`` is the whole batch, split over the ranks. Only
    rank 0 uses ``reporter`` and ``checkpoints`` and validates; it returns the Result, the
    other ranks None.
    """
    reporter = distributed.main_only(world, reporter or Reporter())
    checkpoints = checkpoints if world.is_main else None
    if checkpoints is not None:  # a run on other inputs starts afresh
        checkpoints = checkpoints.for_inputs(inputs_digest(inputs))
    torch_device = resolve_device(device)
    torch.manual_seed(settings.run.seed)
    ctx = raster.RasterContext(torch_device)
    if settings.path_tracing.renderer == "path-traced":
        load_mitsuba(torch_device)  # a missing Mitsuba or LLVM said now, not after pass 1
    train_res, mode = settings.size.train_res, settings.run.mode
    train = at_longest_side(inputs.train, train_res).to(torch_device)
    test = at_longest_side(inputs.test, train_res) if inputs.test is not None else None
    if settings.reporting.validation and test is None:
        raise UserError("validation needs held-out views (inputs.test)")
    light = make_light(settings, inputs.envmap, torch_device)
    clips_white = settings.clips_white(float(train.images[..., :3].max()))
    poses = (PoseCorrections(train.cameras) if settings.refines_poses(inputs.poses_found)
             else None)
    trainers: list[PassTrainer] = []
    given_start = (mode != "reconstruct" and settings.material.init_textures == "base_mesh"
                   and inputs.base_material is not None)
    if inputs.start_renders is not None and mode != "reconstruct" and not given_start:
        raise UserError(WITHOUT_THEIR_MATERIAL)

    surface_model, warnings = None, []
    if mode == "reconstruct":
        mesh, material, first, surface_model, unwrapping = _surface_pass(
            ctx, settings, train, light, reporter, checkpoints, world, clips_white, poses)
        trainers.append(first)
    else:
        if inputs.base_mesh is None:
            raise UserError(f"mode {mode!r} needs a starting mesh (base_mesh)")
        base = _decimated(inputs.base_mesh.to(torch_device), settings.surface.target_triangles,
                          reporter, warnings)
        mesh, unwrapping = _unwrapped(base, settings, reporter, world)
        base_material = inputs.base_material
        if (base_material is not None and settings.material.init_textures == "base_mesh"
                and unwrapping["method"] != "own UVs" and has_textures(base_material)):
            base_material = averaged(base_material)
            warnings.append("the base mesh's textures follow UVs it no longer has (now "
                            f"{unwrapping['method']}): they start as their averages")
            reporter.log(warnings[-1], level="warning")
            if inputs.start_renders is not None:  # they show the textures, not the averages
                inputs = replace(inputs, start_renders=None)
                warnings.append("the start renders show those textures, not their averages: "
                                "not used")
                reporter.log(warnings[-1], level="warning")
        material = initial_textures(settings, torch_device, base_material)
        _say_start_material(settings, material, reporter)
        if settings.looks_for_sun():
            _start_light_at_sun(ctx, mesh, train, light, reporter)
        if starts_levelled(settings):
            level = level_albedo_(ctx, mesh, material, light, train, settings)
            reporter.log("the base colour starts at the views' level, "
                         + " / ".join(f"{value:.3f}" for value in level.tolist()))
    surface, path = settings.surface, settings.path_tracing
    geometry = ExplicitGeometry(mesh, mode != "materials", surface.laplace,
                                surface.laplace_scale, surface.large_steps,
                                along_normals=moves_along_normals(settings, given_start),
                                unit=offset_unit(settings, given_start, mesh.positions),
                                pull=vertex_pull(settings, given_start)).to(torch_device)
    path_traced = path.renderer == "path-traced"
    # never longer than the pass
    mip_steps = min(settings.material.mip_iterations,
                    textured_pass_iterations(settings, given_start))
    mip_cost = mip_steps * STEP_COST  # in rasterized iterations
    path_cost = path.iterations * PATH_TRACED_COST if path_traced else 0.0
    config = textured_pass(settings, clips_white=clips_white, given_start=given_start,
                           later_iterations=mip_cost + path_cost)
    second = Pass.of(config, geometry, material, light, poses)
    batch = settings.size.batch
    targets = train
    if inputs.start_renders is not None:
        if mode == "reconstruct":
            reporter.log("start renders are for materials and refine (a given start): not "
                         "used in reconstruct", level="warning")
        else:
            start_renders = at_longest_side(inputs.start_renders, train_res).to(torch_device)
            targets, gap = gap_corrected(train, start_renders,
                                         own_renders(ctx, second, train.cameras), clips_white)
            reporter.log(gap.sentence())
    trainers.append(_run_pass(ctx, second, targets, batch, reporter, checkpoints, world))
    if path_traced:  # materials mode only (settings): the mesh stays as it is
        material.fold_occlusion_()  # light transport shades cavities from here on
        config = path_traced_pass(settings, clips_white=clips_white,
                                  later_iterations=mip_cost / PATH_TRACED_COST)
        refine = Pass.of(config, geometry, material, light, poses)
        trainers.append(_run_pass(ctx, refine, _path_traced_views(train, path.res), batch,
                                  reporter, checkpoints, world))

    with torch.no_grad():
        final_mesh = geometry.mesh()
    if material.f0.requires_grad:
        reporter.log(f"the surface's IOR came to {material.ior:.2f}")
    if poses is not None:
        reporter.log(_corrections_sentence(poses.summary()))
    mips = None
    if mip_steps:
        _stop_if_asked(reporter, world, "before fitting the mip levels")
        if world.is_main:  # what the asset exports; the other ranks wait at the next stop
            reporter.log("fitting the textures' mip levels…", stage="mips")
            seen = train if poses is None else Views(poses.corrected(train.cameras),
                                                     train.images, train.names)
            mips = fit_mips(ctx, final_mesh, material, light, seen, settings,
                            reporter, iterations=mip_steps, passes=second.passes)
            material.mips = mips.levels
    metrics: dict = {"views": [], "psnr_mean": None, "ssim_mean": None}
    validation = None
    if settings.reporting.validation:
        _stop_if_asked(reporter, world, "before validating")
        reporter.log("scoring the held-out views…", stage="validating")
        if world.is_main:
            metrics, renders, targets = score_views(ctx, final_mesh, material, light, test,
                                                    settings)
            validation = Validation(renders, targets)
    _stop_if_asked(reporter, world, "before writing the outputs")
    if not world.is_main:
        return None
    metrics.update({"mode": mode, "preset": settings.run.preset,
                    "triangles": final_mesh.num_triangles,
                    "target_triangles": settings.surface.target_triangles,
                    "ior": material.ior,
                    "device": str(torch_device), "engine": ctx.engine,
                    "surface_model": surface_model, "iterations": settings.size.iterations,
                    "unwrap": {k: v for k, v in unwrapping.items() if k != "warning"},
                    "warnings": [w for w in (unwrapping["warning"], *warnings) if w],
                    "time_s": {t.run.name: t.elapsed_s for t in trainers}
                    | ({"mips": mips.seconds} if mips else {}),
                    "mips": mips.summary() if mips else None,
                    "pose_corrections": poses.summary() if poses is not None else None,
                    "stopped_early": {t.run.name: {"iteration": t.iteration,
                                                   "why": t.stopped_early}
                                      for t in trainers if t.stopped_early},
                    "peak_memory_mb": peak_memory_mb(torch_device),
                    "settings": settings.to_dict() | {"ranks": world.size},  # as run
                    "history": [entry for t in trainers for entry in t.history]})
    return Result(final_mesh, material, light, metrics, validation)
