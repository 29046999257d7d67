"""What one pass trains with, built once from the settings and the mode: ``PassConfig``.

``pipeline.trainer.PassTrainer`` reads its pass's config and nothing else of the settings.
The per-pass values are decided here, once: reconstruct's surface pass takes the first of
each pair (``learning_rate``, ``surface_learning_rate``), the textures pass after it (and the
one pass of materials and refine) the second, the path-traced pass its own ``path_*`` values.
Each pass is named for what it does (``protocol.events.PassName``).

A pass's checkpoint is fingerprinted (``PassConfig.fingerprint``) with what the pass depends
on: its config, less what only reports, and ``start_settings``, the settings that shaped what
it starts from. A setting that only a later pass or a later stage reads (``path_samples``,
``unwrap_timeout_s``, pass 2's learning rate) leaves the checkpoints of the passes before it
usable. A checkpoint written under protocol 5's pass names (``PROTOCOL_5_NAMES``) with the
same config is still resumed (``PassConfig.fingerprints``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from diffrec.protocol.events import PassName
from diffrec.protocol.settings import BOOKKEEPING, FIELDS, Settings, textured_pass_iterations

PATH_TRACING = tuple(name for name, spec in FIELDS.items()
                     if spec.metadata["section"] == "path_tracing")
AFTER_THE_MESH_PASSES = ("mip_iterations", *BOOKKEEPING)
"""Settings no training pass depends on: the mip fit's length (it runs after the last pass)
and what only reports or spreads a run."""
AFTER_THE_SURFACE_PASS = (
    *AFTER_THE_MESH_PASSES, *PATH_TRACING, "unwrap_timeout_s", "max_triangles",
    "target_triangles", "texture_res", "texture_mip_bias", "normal_map", "init_textures",
    "start_prior", "large_steps", "laplace", "laplace_scale",
    # the pairs: the surface pass's own values are in its config
    "learning_rate", "surface_learning_rate", "warmup_iterations")
"""Settings reconstruct's surface pass does not depend on: what simplifies, unwraps and bakes
its result, what only the passes after it read, and the pairs, whose first values its config
holds."""
REPORTING_ONLY = ("number", "passes", "later_iterations", "log_every", "preview_every",
                  "checkpoint_every", "display")
"""``PassConfig`` fields that change what a pass reports, not what it learns."""
SEED_OFFSETS = {PassName.SURFACE: 0, PassName.TEXTURES: 1, PassName.PATH_TRACED: 2}
"""What each training pass adds to the run's seed, so that each draws its own views."""
PROTOCOL_5_NAMES = {PassName.SURFACE: "pass1", PassName.TEXTURES: "pass2",
                    PassName.PATH_TRACED: "path"}
"""The training passes' names up to protocol 5: their checkpoints' names in a job's folder
written before, which a resumed job still reads (``PassConfig.fingerprints``)."""


@dataclass(frozen=True, kw_only=True)
class PassConfig:
    """Everything a pass trains with but its modules (``pipeline.trainer.Pass`` adds those).

    ``name``: what the pass does, its one identity (a ``PassName``; ``seed_offset`` follows
    from it). ``number`` of ``passes``: where it stands among the passes its job runs
    (1-based). ``iterations``, ``learning_rate``, ``warmup`` (iterations),
    ``surface_learning_rate`` (the geometry's own rate; None: as the rest) and ``schedule``
    ("diffrec" or "nvdiffrec", ``trainer.learning_rate_factor``); ``pose_learning_rate``: the
    rate of the training views' pose corrections (``pipeline.pose_refinement``; 0: applied as
    they stand, not trained).
    ``learn_light``: the light is
    trained, with its gradient scaled by ``light_gradient_scale`` and stepped in log radiance at
    ``light_log_rate`` (0: with the rest); ``camera_space_light``: the light turns with each
    camera. ``renderer``: "rasterized" (``loss``, ``layers``, ``spp``, ``layered_bsdf``) or
    "path-traced" (``path_samples``, ``path_max_depth``). ``background``: what the training
    targets are composited over. ``clips_white``: the colour loss takes the targets' white
    pixels as clipped (``Settings.clips_white``, decided once from the training views). The
    regularisers' weights: ``albedo_smoothness``, ``ks_smoothness``, ``visibility``,
    ``mostly_metal``, ``white_balance``, ``start_prior`` (``pipeline.start_prior``; 0: none);
    ``ks_gradient_blur`` blurs the ks texture's steps. ``plateau_window``, ``plateau_db``: the
    stopping rule. ``later_iterations``: what the passes still to come cost, in iterations of
    this one (None: ``passes - number`` passes as long as this one), for the job's ETA.
    ``log_every``, ``preview_every``, ``checkpoint_every``, ``display``: its reports.
    ``start_settings``: the settings (JSON) that what the pass starts from depends on."""

    name: PassName
    iterations: int
    learning_rate: float
    warmup: int
    learn_light: bool
    surface_learning_rate: float | None = None
    pose_learning_rate: float = 0.0
    number: int = 1
    passes: int = 1
    renderer: str = "rasterized"
    later_iterations: float | None = None
    clips_white: bool = False
    start_prior: float = 0.0
    seed: int
    schedule: str
    plateau_window: int
    plateau_db: float
    light_gradient_scale: float
    light_log_rate: float
    camera_space_light: bool
    loss: str
    background: str
    layers: int
    spp: int
    layered_bsdf: bool
    path_samples: int = 0
    path_max_depth: int = 0
    albedo_smoothness: float
    ks_smoothness: float
    ks_gradient_blur: float
    mostly_metal: float
    visibility: float
    white_balance: float
    log_every: int
    preview_every: int
    checkpoint_every: int
    display: tuple[str, ...]
    start_settings: str

    @property
    def seed_offset(self) -> int:
        """What this pass adds to the run's seed (``SEED_OFFSETS``)."""
        return SEED_OFFSETS[self.name]

    @property
    def protocol_5_name(self) -> str:
        """This pass's name up to protocol 5 (``PROTOCOL_5_NAMES``): its checkpoint's then."""
        return PROTOCOL_5_NAMES[self.name]

    def fingerprint(self) -> str:
        """What a checkpoint of this pass is tagged with: another value, another run."""
        return json.dumps(self._learning_fields(), sort_keys=True, default=str)

    def fingerprints(self) -> tuple[str, str]:
        """``fingerprint``, and what protocol 5 tagged the checkpoint of the same pass and
        config with (its name as ``PROTOCOL_5_NAMES`` has it, and ``index``, the seed
        offset): the tags a checkpoint this pass may resume from carries."""
        protocol_5 = {**self._learning_fields(), "name": self.protocol_5_name,
                      "index": self.seed_offset}
        return self.fingerprint(), json.dumps(protocol_5, sort_keys=True, default=str)

    def _learning_fields(self) -> dict:
        return {name: value for name, value in _fields(self).items()
                if name not in REPORTING_ONLY}


def _fields(config: PassConfig) -> dict:
    return {spec.name: getattr(config, spec.name) for spec in dataclasses.fields(PassConfig)}


def start_settings(settings: Settings, leaving_out: tuple[str, ...] = AFTER_THE_MESH_PASSES
                   ) -> str:
    """``settings`` as JSON, less ``leaving_out``: what a pass's start depends on."""
    return json.dumps({name: value for name, value in settings.to_dict().items()
                       if name not in leaving_out}, sort_keys=True, default=str)


def pass_config(settings: Settings, **own) -> PassConfig:
    """A pass's config: ``own`` (its name, iterations, rates, ...) over what every pass
    takes from ``settings`` alike; ``start_settings`` every setting a training pass may
    depend on, unless ``own`` says less."""
    schedule, light, rendering = settings.schedule, settings.light, settings.rendering
    material, reporting = settings.material, settings.reporting
    alike = dict(
        seed=settings.run.seed, schedule=schedule.kind, plateau_window=schedule.plateau_window,
        plateau_db=schedule.plateau_db, pose_learning_rate=schedule.pose_learning_rate,
        light_gradient_scale=light.gradient_scale,
        light_log_rate=light.log_rate, camera_space_light=light.camera_space,
        visibility=light.visibility, white_balance=light.white_balance, loss=rendering.loss,
        background=rendering.background, layers=rendering.layers, spp=rendering.spp,
        layered_bsdf=settings.layered_bsdf(), albedo_smoothness=material.albedo_smoothness,
        ks_smoothness=material.ks_smoothness, ks_gradient_blur=material.ks_gradient_blur,
        mostly_metal=material.mostly_metal, log_every=reporting.log_every,
        preview_every=reporting.preview_every, checkpoint_every=reporting.checkpoint_every,
        display=reporting.display, start_settings=start_settings(settings))
    return PassConfig(**{**alike, **own})


def surface_pass(settings: Settings, *, hull_start: bool, clips_white: bool) -> PassConfig:
    """Reconstruct's first pass, "surface": the surface and the neural material at the pairs'
    first values, the surface at its own rate from a visual-hull start (``hull_start``), the
    light learned unless fixed."""
    schedule = settings.schedule
    return pass_config(
        settings, name=PassName.SURFACE, iterations=settings.size.iterations,
        learning_rate=schedule.learning_rate[0], warmup=0,
        learn_light=settings.light.mode != "fixed",
        surface_learning_rate=schedule.surface_learning_rate[0] if hull_start else None,
        number=1, passes=2, clips_white=clips_white,
        start_settings=start_settings(settings, AFTER_THE_SURFACE_PASS))


def textured_pass(settings: Settings, *, clips_white: bool, given_start: bool,
                  later_iterations: float) -> PassConfig:
    """"textures": reconstruct's second pass, or the one rasterized pass of materials and
    refine, at the pairs' second values; it warms up after reconstruct's surface pass (and, with
    ``schedule`` "nvdiffrec", in every mode); the surface at its own rate (unless "nvdiffrec")
    where it starts close: reconstruct's pass-1 mesh, and at ``given_start_learning_rate``
    refine's given start (``given_start``: a mesh given with its textures, e.g. the reference
    decimated and baked), for at most ``given_start_iterations`` from such a start in
    materials or refine; the light learned unless fixed or locked after pass 1; textures held
    to a given start by ``start_prior``."""
    schedule, mode = settings.schedule, settings.run.mode
    nvdiffrec, reconstruct = schedule.kind == "nvdiffrec", mode == "reconstruct"
    path_traced = settings.path_tracing.renderer == "path-traced"
    passes = 2 if reconstruct or path_traced else 1
    return pass_config(
        settings, name=PassName.TEXTURES,
        iterations=textured_pass_iterations(settings, given_start),
        learning_rate=schedule.learning_rate[1],
        warmup=schedule.warmup_iterations if reconstruct or nvdiffrec else 0,
        learn_light=_learns_light_after_pass_1(settings),
        surface_learning_rate=_close_start_rate(settings, given_start),
        number=passes - path_traced, passes=passes, later_iterations=later_iterations,
        clips_white=clips_white,
        start_prior=settings.material.start_prior if given_start else 0.0,
        start_settings=start_settings(settings, (*AFTER_THE_MESH_PASSES, *PATH_TRACING)))


def path_traced_pass(settings: Settings, *, clips_white: bool,
                     later_iterations: float) -> PassConfig:
    """"path-traced": the pass after materials' rasterized one (``renderer`` "path-traced"):
    ``path_iterations`` at ``path_learning_rate``, no warm-up, the light as the textures pass
    has it."""
    path = settings.path_tracing
    return pass_config(
        settings, name=PassName.PATH_TRACED, iterations=path.iterations,
        learning_rate=path.learning_rate, warmup=0,
        learn_light=_learns_light_after_pass_1(settings), number=2, passes=2,
        pose_learning_rate=0.0,  # Mitsuba's renders give the cameras no gradient
        renderer="path-traced", later_iterations=later_iterations, clips_white=clips_white,
        path_samples=path.samples, path_max_depth=path.max_depth)


def _close_start_rate(settings: Settings, given_start: bool) -> float | None:
    """The textures pass's surface rate where its surface starts close (None elsewhere, and
    with the "nvdiffrec" schedule: the pass's rate)."""
    schedule, mode = settings.schedule, settings.run.mode
    if schedule.kind == "nvdiffrec":
        return None
    if mode == "reconstruct":
        return schedule.surface_learning_rate[1]
    return schedule.given_start_learning_rate if mode == "refine" and given_start else None


def moves_along_normals(settings: Settings, given_start: bool) -> bool:
    """Whether the vertices move along their start's normals only (``vertex_motion``; auto:
    in refine from a mesh given with its textures, ``given_start``, unless large steps smooth
    them)."""
    motion = settings.surface.vertex_motion
    if motion == "auto":
        return (settings.run.mode == "refine" and given_start
                and not settings.surface.large_steps)
    return motion == "along-normals"


def offset_unit(settings: Settings, given_start: bool, positions) -> float:
    """Scene units per unit of refine's vertex offsets (``ExplicitGeometry.unit``): for a
    mesh given with its textures (``given_start``, unless large steps smooth it), half the
    diagonal of its ``positions`` ``[V, 3]``' bounding box, so that ``given_start_learning_rate``
    and ``laplace_scale`` act alike on the artist's object at any size (the benchmark's
    assets, 2 units across, move as in scene units); else 1: the other passes' rates are in
    scene units, as the reference system's."""
    if not given_start or settings.surface.large_steps:
        return 1.0
    half_diagonal = float((positions.max(0).values - positions.min(0).values).norm()) / 2
    return half_diagonal if half_diagonal > 0 else 1.0


def vertex_pull(settings: Settings, given_start: bool) -> float:
    """The weight of the pull of refine's vertices back to a mesh given with its textures
    (``ExplicitGeometry.pull``): ``given_start_vertex_pull`` where that start's vertices move
    by plain offsets (``given_start``, unless large steps smooth them), else 0."""
    if settings.run.mode != "refine" or not given_start or settings.surface.large_steps:
        return 0.0
    return settings.schedule.given_start_vertex_pull


def _learns_light_after_pass_1(settings: Settings) -> bool:
    """Whether the passes after reconstruct's first learn the light: unless it is fixed, or
    locked after pass 1 (``lock_light``)."""
    return settings.light.mode != "fixed" and not settings.light.lock
