"""The ``optimize`` task's settings: one typed, validating schema and one preset table.

The single source of the presets and defaults: the backend's runs, the server and the
add-on's panel (which vendors this package: its preset menu and field defaults are read from
here) all take them from this module. Standard library only (this package as a whole needs
numpy, and pyzmq for its client), so the add-on imports it without the rest of the backend.
``parse_settings`` turns a JSON-like mapping
(a config file, command-line flags, a job spec from the wire) into a frozen ``Settings``:
defaults < the preset's values < the given values. Coercion is lossless only: ``"100"`` or
``100.0`` become the integer 100, while ``2.5`` for an integer, ``true`` for a number or
``"abc"`` for a float are refused with a ``SettingsError`` naming the field.

Sources (dataset folders, meshes, HDRIs, the output folder, the device) are not settings:
they are the command line's or the server's business (``diffrec.pipeline.config``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .close_names import setting_hint
from .images import MIN_SIDE

MODES = ("materials", "refine", "reconstruct")
LIGHT_MODES = ("learn", "fixed", "learn-from-envmap")
GEOMETRIES = ("dmtet", "flexicubes")
SURFACE_INITS = ("visual-hull", "sphere", "random")
LOSSES = ("logl1", "logl2", "mse", "l1", "smape", "relmse")
INIT_TEXTURES = ("constant", "random", "base_mesh")
NORMAL_MAPS = ("auto", "on", "off")
LEARN_IOR = ("auto", "on", "off")
GRID_PRECISIONS = ("float16", "float32")
BACKGROUNDS = ("random", "white", "black", "checker", "reference")
PREVIEW_PANELS = ("latlong", "kd", "ks", "normal", "shading-only")
LAPLACE_MODES = ("relative", "absolute")
VERTEX_MOTIONS = ("auto", "free", "along-normals")
RENDERERS = ("rasterized", "path-traced")
BSDFS = ("principled", "nvdiffrec")
CLIPPED_WHITE = ("auto", "on", "off")
REFINE_POSES = ("auto", "on", "off")
PATH_TRACED_COST = 3.0
"""Rasterized iterations one path-traced iteration costs at the same batch and image size, on
a CPU (docs/BENCHMARKS.md, "Pre-submit estimate": ``scripts/bench_estimate.py --renderer
path-traced``): the job's ETA and the add-on's estimate count the path-traced pass by it."""

MAX_RES = 16384
"""The largest ``train_res`` and ``texture_res`` whatever the memory (image writers' and
rasterizers' limits)."""
MAX_RANKS = 64
"""The most processes one job trains in (``ranks``, ``--gpus``, ``--ranks``)."""

PRESETS: dict[str, dict[str, Any]] = {
    # CPU-friendly: a few minutes on two cores. Grid 64 (not 32): thin parts (fins, legs,
    # ears) need its finer cells and cost little more on a CPU, where rendering dominates
    # (docs/BENCHMARKS.md)
    "preview": {"iterations": 300, "batch": 2, "train_res": 128, "texture_res": 256,
                "grid": 64, "light_res": 64, "views": 24, "test_views": 4,
                "hash_table_log2": 15, "plateau_window": 100},
    # the plateau rule on: run to 2000 iterations, the textures drift from what held-out
    # views see (-2 to -3.5 dB at 128 px on ring, box, dots, glyphs; docs/BENCHMARKS.md,
    # "Fine texture detail: why standard scored below preview")
    "standard": {"iterations": 2000, "batch": 4, "train_res": 512, "texture_res": 1024,
                 "grid": 64, "light_res": 256, "views": 100, "test_views": 8,
                 "plateau_window": 100},
    # the reference system's paper settings (its NeRF-synthetic images are 800 pixels wide)
    "high": {"iterations": 5000, "batch": 8, "train_res": 800, "texture_res": 2048,
             "grid": 128, "light_res": 512, "views": 200, "test_views": 16,
             "plateau_window": 0},
}

ONE_PASS_ITERATIONS: dict[str, int] = {"preview": 1000}
"""A preset's ``iterations`` for the modes that run one pass on a given mesh (materials,
refine), where it differs from its ``iterations`` (reconstruct's two passes). At ``preview``'s
300 a materials pass is still learning (the prism's faces each trade their metal against the
light); at 1000 with the stopping rule every quality-suite scene stops between 260 and 520,
the suite gains 1.2 dB relit and takes less time, while reconstruct at 1000 takes twice the
time for 0.4 dB (docs/BENCHMARKS.md, "The prism had not finished")."""
PLATEAU_TYPICAL_WINDOWS = 3.5
"""Where a pass with the stopping rule typically ends, in windows of ``plateau_window``: the
suite's materials passes at ``preview`` stop at 260 to 520 (median 310), its ``standard``
passes at 270 to 460, the demo's at 280 to 320 (docs/BENCHMARKS.md). What estimates and ETAs
count such a pass as (``expected_iterations``)."""

PRESET_NOTES: dict[str, str] = {
    "preview": "Few iterations, small textures: minutes on a CPU",
    "standard": "The defaults: between Preview and High",
    "high": "As the published results (the reference system's paper settings)",
}
"""A sentence per preset, for menus and listings (the add-on's preset menu)."""

DEFAULT_PRESET = "standard"
"""The preset a run without one uses; ``Settings``' defaults are its values."""
_DEFAULT_SIZES = PRESETS[DEFAULT_PRESET]


CUSTOM = "custom"
"""The preset that fills nothing: what a client sends when every size is its own choice."""

HINTS: dict[str, Any] = {}
"""Setting (wire name) -> its Python type, filled once the records are defined."""


class SettingsError(ValueError):
    """A setting that cannot work: ``field`` names it (None: several together), the message
    says why and what is allowed."""

    def __init__(self, field_name: str | None, message: str):
        super().__init__(f"{field_name}: {message}" if field_name else message)
        self.field = field_name


def _choice(options: tuple[str, ...]) -> dict:
    return {"choices": options}


def _setting(section: str, default, help_text: str, **checks) -> Any:
    """A dataclass field with its section (SECTIONS), help text and checks (``choices``,
    ``minimum``, ``maximum``, ``length``) in its metadata."""
    return field(default=default, metadata={"section": section, "help": help_text, **checks})


SECTIONS: dict[str, str] = {
    "run": "what is optimized, from which preset, with which random seed",
    "size": "sizes a preset sets: iterations, images, textures, the grid, the light, views",
    "schedule": "learning rates and their schedule, and the rule that ends a pass early",
    "surface": "the surface: its grid, regularisers, starting shape, simplification",
    "material": "the textures: value ranges, starting values, the neural material's size",
    "light": "the environment light and its regularisers",
    "rendering": "the image loss, layers, supersampling and the compositing background",
    "path_tracing": "the path-traced pass that may follow the rasterized one",
    "reporting": "what a run reports and keeps, not what it learns",
    "limits": "how a run is spread over processes and how long its unwrapping may take",
}
"""The settings' sections, in the order docs/protocol.md lists them, each with what it
holds: each is a record of ``Settings`` (``settings.light``, a ``LightSettings``), and every
field names its own in its ``section`` metadata. The wire and the files stay flat."""

# the field makers of each section
_run = partial(_setting, "run")
_size = partial(_setting, "size")
_schedule = partial(_setting, "schedule")
_surface = partial(_setting, "surface")
_material = partial(_setting, "material")
_light = partial(_setting, "light")
_rendering = partial(_setting, "rendering")
_path_tracing = partial(_setting, "path_tracing")
_reporting = partial(_setting, "reporting")
_limits = partial(_setting, "limits")


class _Record:
    """A section's settings: frozen, each value coerced (``as_type``) and checked on
    construction, errors naming the setting as the wire does. ``WIRE`` maps the attributes
    whose flat (wire, file) name differs to that name (``light.log_rate`` is
    ``light_log_rate``)."""

    WIRE: typing.ClassVar[dict[str, str]] = {}

    def __post_init__(self):
        for spec in dataclasses.fields(self):
            name = self.WIRE.get(spec.name, spec.name)
            value = as_type(name, HINTS[name], getattr(self, spec.name))
            _check_field(name, spec, value)
            object.__setattr__(self, spec.name, value)


@dataclass(frozen=True)
class RunSettings(_Record):
    mode: str = _run("materials", "what is optimized", **_choice(MODES))
    preset: str = _run(DEFAULT_PRESET, "the sizes and schedule below, unless given "
                       "(custom: none, the given values over these defaults)",
                       **_choice((*PRESETS, CUSTOM)))
    seed: int = _run(0, "random seed")


@dataclass(frozen=True)
class SizeSettings(_Record):
    """The sizes a preset sets (preset values unless given)."""

    iterations: int = _size(_DEFAULT_SIZES["iterations"], "the most iterations a pass runs "
                            "(the stopping rule, plateau_window, may end it sooner)", minimum=1)
    batch: int = _size(_DEFAULT_SIZES["batch"], "views per iteration", minimum=1)
    train_res: int = _size(_DEFAULT_SIZES["train_res"],
                           "longest side of training images, pixels", minimum=MIN_SIDE,
                           maximum=MAX_RES)
    texture_res: int = _size(_DEFAULT_SIZES["texture_res"], "texture side, texels", minimum=4,
                             maximum=MAX_RES)
    grid: int = _size(_DEFAULT_SIZES["grid"],
                      "surface grid resolution (even): DMTet's tetrahedral grid; FlexiCubes "
                      "takes half as many cubes a side (also read as dmtet_grid)", minimum=4)
    light_res: int = _size(_DEFAULT_SIZES["light_res"],
                           "environment cube face side (power of two)", minimum=32)
    views: int = _size(_DEFAULT_SIZES["views"], "reference renders of a ref_mesh", minimum=1)
    test_views: int = _size(_DEFAULT_SIZES["test_views"], "held-out views for validation",
                            minimum=0)


@dataclass(frozen=True)
class ScheduleSettings(_Record):
    """Per-pass values are pairs (pass 1, pass 2): ``pipeline.pass_config`` takes each pass's
    own, single-pass modes (materials, refine) the second."""

    WIRE: typing.ClassVar[dict[str, str]] = {"kind": "schedule"}

    learning_rate: tuple[float, float] = _schedule((0.03, 0.01), "per pass (each positive)",
                                                    length=2)
    warmup_iterations: int = _schedule(100, "learning-rate warm-up", minimum=0)
    # "nvdiffrec": its rules, so that a comparison sees the same training: the decay
    # 10^(-0.0002 it) whatever the pass length, the warm-up in every mesh pass (materials and
    # refine too), per-pixel noise behind the training targets, the geometry at
    # learning_rate (docs/guide.md, "Coming from nvdiffrec")
    kind: str = _schedule("diffrec", "training schedule: diffrec's or nvdiffrec's",
                          **_choice(("diffrec", "nvdiffrec")))
    # a surface that starts close (the visual hull, pass 1's result) loses it to large steps
    # (docs/BENCHMARKS.md); a sphere start (pass 1) and refine's bare given mesh move at
    # learning_rate, as the reference system's do
    surface_learning_rate: tuple[float, float] = _schedule(
        (0.001, 0.001), "a close start's surface, per pass (a visual-hull start; pass 2's "
        "mesh)", length=2)
    # a start decimated and baked is closer still: at 5 % of the reference its vertices wander
    # at 0.001, and at 0.0003 they still cost the sun's highlights (docs/BENCHMARKS.md,
    # "Against Blender's own route", rounds four and eleven)
    given_start_learning_rate: float = _schedule(
        0.0001, "refine from a mesh given with its textures (the reference decimated and "
        "baked): its vertices' rate, in half-diagonals of its bounding box", minimum=0)
    # Adam steps a vertex the views barely push as far as one they pin down: on a 5 % start
    # with bevels, such steps turned the bevels' normals and cost 0.8 dB under a sun; a pull
    # of 20 kept them and most of the chair's gain there (docs/BENCHMARKS.md, "Against
    # Blender's own route", round twelve)
    given_start_vertex_pull: float = _schedule(
        20.0, "refine from a mesh given with its textures: weight of the pull of its vertices "
        "back to their start (mean absolute offset over the vertices, in half-diagonals of its "
        "bounding box; 0: none)", minimum=0)
    # such a start begins where the bake ends: on the five peer assets 50 iterations score
    # as 100 within half a dB, no cell further below the bake than 0.03 dB (0.37 at 100), in
    # two thirds of the time (docs/BENCHMARKS.md, "Against Blender's own route", round
    # sixteen; round five had tried 60); kept as it is (materials), the stopping rule ran it
    # to 200 for no more than 0.015 dB (round seventeen)
    given_start_iterations: int = _schedule(
        50, "materials or refine from a mesh given with its textures: its pass's most "
        "iterations (at most iterations; 0: iterations, as any pass)", minimum=0)
    # poses found from photos are off by a pixel or more at the training size
    # (docs/BENCHMARKS.md, "Poses refined with the fit")
    refine_poses: str = _schedule("auto", "correct the training views' poses with the fit: "
                                  "on, off, or auto (on where the poses were found from the "
                                  "photos: a capture tool's transforms.json, LLFF, a COLMAP "
                                  "model)", **_choice(REFINE_POSES))
    pose_learning_rate: float = _schedule(0.003, "Adam's rate of each view's pose correction: "
                                          "its turn (radians) and shift (in the cameras' mean "
                                          "distance from their centre)", minimum=0)
    # stopping: a pass ends early once its training PSNR, averaged over plateau_window
    # iterations, gains less than plateau_db on the window before (diffrec.pipeline.plateau)
    plateau_window: int = _schedule(_DEFAULT_SIZES["plateau_window"],
                                    "iterations per window of the plateau stopping rule "
                                    "(0: every pass runs all its iterations)", minimum=0)
    plateau_db: float = _schedule(0.3, "a pass stops when its training PSNR gains less than "
                                  "this over its last plateau_window iterations, dB", minimum=0)


@dataclass(frozen=True)
class SurfaceSettings(_Record):
    geometry: str = _surface("flexicubes", "surface extraction", **_choice(GEOMETRIES))
    mesh_scale: float = _surface(2.1, "side of the grid's cube, scene units (positive)")
    center: tuple[float, float, float] = _surface((0.0, 0.0, 0.0), "the grid's centre", length=3)
    laplace: str = _surface("relative", "Laplacian regulariser", **_choice(LAPLACE_MODES))
    laplace_scale: float = _surface(10000.0, "Laplacian weight", minimum=0)
    large_steps: float = _surface(0.0, "pass 2's and refine's vertex smoothing lambda "
                                  "(0: plain offsets)", minimum=0)
    # a baked start's textures are right where they are: sliding its vertices sideways drags
    # them (docs/BENCHMARKS.md, "Against Blender's own route, round four")
    vertex_motion: str = _surface("auto", "how pass 2's and refine's vertices move: freely, "
                                  "or each along its start's normal only (the textures do "
                                  "not slide over the surface); auto: along-normals from a "
                                  "mesh given with its textures, else free",
                                  **_choice(VERTEX_MOTIONS))
    sdf_regularizer: float = _surface(0.2, "SDF sign-change weight", minimum=0)
    surface_init: str = _surface("visual-hull", "pass 1's starting surface",
                                 **_choice(SURFACE_INITS))
    max_triangles: int = _surface(20000, "reconstruct: pass 1's surface is simplified to at most "
                                  "this many triangles before unwrapping (0: never; else at "
                                  "least 4)", minimum=0)
    target_triangles: int = _surface(0, "the triangle budget: the result has at most this "
                                     "many triangles (materials and refine decimate the base "
                                     "mesh to it, reconstruct simplifies its surface to it "
                                     "when below max_triangles; 0: no budget; else at least "
                                     "4)", minimum=0)


@dataclass(frozen=True)
class MaterialSettings(_Record):
    # neural material (pass 1 of reconstruct): entries per hash-grid level, a power of two;
    # nvdiffrec's 19 is cheap on a GPU, while Adam's dense update of that many parameters
    # dominates a CPU step, so the preview preset uses a smaller table
    hash_table_log2: int = _material(19, "hash-grid table size, log2", minimum=10, maximum=24)
    # float16 (nvdiffrec's) is no faster once only covered pixels are evaluated, and its
    # backward pass rounds most of a mean loss's small gradients to zero (docs/BENCHMARKS.md)
    hash_grid_precision: str = _material("float32", "tiny-cuda-nn's hash-grid arithmetic "
                                         "(float16: nvdiffrec's; the torch engine's is float32)",
                                         **_choice(GRID_PRECISIONS))
    texture_mip_bias: float = _material(0.0, "added to the textures' mip level when training "
                                        "and validating, levels (negative: sharper; -16: "
                                        "the full-resolution texture only)")
    # material value ranges per channel (kd may give a 4th, alpha, entry: used when
    # layers > 1); roughness is never below min_roughness
    kd_min: tuple[float, ...] = _material((0.0, 0.0, 0.0), "albedo low", length=(3, 4))
    kd_max: tuple[float, ...] = _material((1.0, 1.0, 1.0), "albedo high", length=(3, 4))
    ks_min: tuple[float, float, float] = _material((0.0, 0.08, 0.0), "ORM low", length=3)
    ks_max: tuple[float, float, float] = _material((1.0, 1.0, 1.0), "ORM high", length=3)
    normal_min: tuple[float, float, float] = _material((-1.0, -1.0, 0.0), "normal low", length=3)
    normal_max: tuple[float, float, float] = _material((1.0, 1.0, 1.0), "normal high", length=3)
    min_roughness: float = _material(0.08, "roughness floor (at most ks_max's roughness)",
                                  minimum=0)
    # textures a materials / refine run starts from: mid-range constants, uniform random in
    # the ranges, or the base mesh's own (constants where it has none)
    init_textures: str = _material("constant", "starting textures", **_choice(INIT_TEXTURES))
    # a normal map on a given mesh fits the training light's shading, not the surface: the
    # result relights worse (docs/BENCHMARKS.md, "The normal map learns the light")
    normal_map: str = _material("auto", "train a tangent-space normal map: on, off (the "
                                "mesh's own normals) or auto (off in materials mode)",
                                **_choice(NORMAL_MAPS))
    # a gloss the metallic-roughness channels cannot hold (a Glossy BSDF mixed in, a varnish)
    # is a brighter dielectric: on a bake's start it is what the bake cannot read
    # (docs/BENCHMARKS.md, "Against Blender's own route, round seventeen")
    learn_ior: str = _material("auto", "train the surface's index of refraction (one value: "
                               "the non-metal's gloss, Blender's IOR, glTF's "
                               "KHR_materials_ior, between 1.33 and 3): on, off (the start's, "
                               "1.5 where it has none) or auto (on where the fit starts from "
                               "given textures, init_textures base_mesh)",
                               **_choice(LEARN_IOR))
    albedo_smoothness: float = _material(0.03, "albedo smoothness weight", minimum=0)
    # 0.1 evens out each texel's noisy roughness and ties the charts' seams without holding
    # roughness at its start (docs/BENCHMARKS.md, "Seams")
    ks_smoothness: float = _material(0.1, "occlusion, roughness and metallic smoothness "
                                     "weight", minimum=0)
    # each step of ks spread over its neighbourhood: the few pixels that see a texel do not
    # determine its roughness (docs/BENCHMARKS.md, "Relighting, round seven")
    ks_gradient_blur: float = _material(0.0, "Gaussian sigma, in UV units, that each step of "
                                        "occlusion, roughness and metallic is spread over "
                                        "(textures; 0: none)", minimum=0)
    # a point that is mostly metal is metal: a gold left at 0.93 glows under a sun; points
    # under half metal are left alone, so a metal still climbing is not pulled back
    # (docs/BENCHMARKS.md, "Mostly metal")
    mostly_metal: float = _material(0.3, "weight of the prior that pulls each rendered point "
                                    "whose metallic is past 0.5 to 1 (mean m (1 - m) there, "
                                    "ramped in over the pass; 0: none)", minimum=0)
    # a start that is already right (a bake of the reference) stays where the views do not
    # ask for a change (docs/BENCHMARKS.md, "Against Blender's own route")
    start_prior: float = _material(3.0, "weight of the pull of the textures back to their "
                                   "start when init_textures is base_mesh (mean absolute "
                                   "difference per texel, the normal map's three times as "
                                   "hard; 0: none)", minimum=0)
    mip_iterations: int = _material(120, "steps of the fit of the textures' mip levels after "
                                    "the last pass, exported with the asset (at most "
                                    "iterations; 0: none, the exports then carry linear box "
                                    "averages)", minimum=0)


@dataclass(frozen=True)
class LightSettings(_Record):
    WIRE: typing.ClassVar[dict[str, str]] = {
        "mode": "light", "lock": "lock_light", "camera_space": "camera_space_light",
        "gradient_scale": "light_gradient_scale", "log_rate": "light_log_rate",
        "sources": "light_sources", "find_sun": "light_find_sun"}

    mode: str = _light("learn", "what happens to the light", **_choice(LIGHT_MODES))
    lock: bool = _light(False, "learn the light in pass 1 only")
    camera_space: bool = _light(False, "the light is fixed to each camera")
    gradient_scale: float = _light(64.0, "light learning-rate multiplier", minimum=0)
    # plain Adam moves each texel by about the learning rate per step; in log radiance a texel
    # grows by a factor per step. Off by default: on its own it did not find the test sun
    # (docs/BENCHMARKS.md, "Learning a sun")
    log_rate: float = _light(0.0, "learned light: Adam's rate on the log of its "
                             "radiance, each step a factor of about exp(this) at most, "
                             "on the pass's schedule (0: plain Adam at the pass's "
                             "learning_rate, as nvdiffrec)", minimum=0)
    # split-sum blurs small bright lamps as if seen head-on; shaded as directional sources
    # they land where Cycles puts them (docs/BENCHMARKS.md, "Small bright lamps")
    sources: int = _light(64, "with light fixed: the HDRI's brightest parts shaded "
                          "exactly, as this many directional sources (0: none)", minimum=0)
    # a grey start explains a sun's highlights with the material (docs/BENCHMARKS.md,
    # "Learning a sun")
    find_sun: bool = _light(True, "learned light: start it with the sun the targets' "
                            "highlights show on the start mesh (reconstruct: on the masks' "
                            "visual hull), or with a faint one (1% of the light) where they "
                            "peak when none stands out; the fit then learns the sun's "
                            "direction, power and width")
    visibility: float = _light(0.001, "occlusion regulariser weight", minimum=0)
    white_balance: float = _light(0.005, "light white-balance weight", minimum=0)


@dataclass(frozen=True)
class RenderingSettings(_Record):
    # rendering and loss; background: what targets and renders are composited over in
    # training ("random": a colour per image) and validation ("random": black)
    loss: str = _rendering("logl1", "image loss", **_choice(LOSSES))
    layers: int = _rendering(1, "depth-peeled layers", minimum=1)
    spp: int = _rendering(1, "samples per pixel (supersampling factor)", minimum=1)
    background: str = _rendering("random", "compositing background", **_choice(BACKGROUNDS))
    # Blender's Principled BSDF lays the diffuse under the specular coat; nvdiffrec adds the
    # two, which Blender then shows darker (docs/BENCHMARKS.md, "The diffuse under the coat")
    bsdf: str = _rendering("principled", "shading model: principled (the diffuse under the "
                           "specular coat and multiple-scattering GGX, as Blender's Principled "
                           "BSDF shows the result) or nvdiffrec (the two added, single "
                           "scattering)", **_choice(BSDFS))
    # 8-bit photos and renders clip highlights at white: compared as exact, they teach the fit
    # that glossy surfaces are rough (docs/BENCHMARKS.md, "Relighting, round seven")
    clipped_white: str = _rendering("auto", "targets' white pixels were clipped: a render at "
                                    "least as bright matches them (on; auto: when no target "
                                    "is brighter than white) or they are exact (off)",
                                    **_choice(CLIPPED_WHITE))


@dataclass(frozen=True)
class PathTracingSettings(_Record):
    WIRE: typing.ClassVar[dict[str, str]] = {
        "iterations": "path_iterations", "learning_rate": "path_learning_rate",
        "samples": "path_samples", "res": "path_res", "max_depth": "path_max_depth"}

    # path tracing (docs/guide.md, "Materials that relight: path-traced fitting"):
    # after the rasterized pass, Mitsuba 3 renders path_iterations more and the validation,
    # so shadows and light bounced between the object's own surfaces are not painted into
    # the base colour; the mesh stays fixed (materials mode)
    renderer: str = _path_tracing("rasterized", "rasterized with the split-sum light, or "
                                  "path-traced: a rasterized pass, then path_iterations path-"
                                  "traced by Mitsuba 3 (the pathtracing extra; materials "
                                  "mode)", **_choice(RENDERERS))
    iterations: int = _path_tracing(100, "path-traced iterations refining the textures "
                                    "after the rasterized pass", minimum=1)
    learning_rate: float = _path_tracing(0.01, "the path-traced pass's learning rate "
                                         "(positive)", minimum=0)
    samples: int = _path_tracing(8, "samples per pixel of a path-traced training image "
                                 "(validation takes four times as many)", minimum=1)
    res: int = _path_tracing(0, "longest side in pixels of the path-traced training "
                             "images, the views resized down to it (0, or at least the "
                             "views' size: the training views as they are; else at least "
                             f"{MIN_SIDE})", minimum=0)
    max_depth: int = _path_tracing(3, "path length as Mitsuba's max_depth: 2 direct light "
                                   "with shadows, 3 also one bounce between the object's "
                                   "own surfaces", minimum=2, maximum=16)


@dataclass(frozen=True)
class ReportingSettings(_Record):
    validation: bool = _reporting(True, "render and score the held-out views at the end")
    checkpoint_every: int = _reporting(250, "iterations between checkpoints (0: none)", minimum=0)
    preview_every: int = _reporting(0, "iterations between previews (0: none)", minimum=0)
    preview_res: int | None = _reporting(None, "preview panels' longest side", minimum=8)
    display: tuple[str, ...] = _reporting((), "panels beside the render and the target in "
                                          "previews",
                                          choices=PREVIEW_PANELS)
    log_every: int = _reporting(10, "iterations between progress reports", minimum=1)
    export_obj: bool = _reporting(False, "also write OBJ + MTL + PNG textures (nvdiffrec's "
                                  "format)")


@dataclass(frozen=True)
class LimitsSettings(_Record):
    unwrap_timeout_s: float = _limits(120.0, "UV unwrapping time limit, seconds", minimum=0)
    ranks: int = _limits(1, "processes training the job data-parallel: one per GPU on a CUDA "
                         "worker, CPU processes on a CPU worker", minimum=1, maximum=MAX_RANKS)


RECORDS: dict[str, type[_Record]] = {
    "run": RunSettings, "size": SizeSettings, "schedule": ScheduleSettings,
    "surface": SurfaceSettings, "material": MaterialSettings, "light": LightSettings,
    "rendering": RenderingSettings, "path_tracing": PathTracingSettings,
    "reporting": ReportingSettings, "limits": LimitsSettings,
}
"""``Settings``' records by section (attribute) name, in SECTIONS' order."""
PLACES: dict[str, tuple[str, str]] = {
    record.WIRE.get(spec.name, spec.name): (section, spec.name)
    for section, record in RECORDS.items() for spec in dataclasses.fields(record)}
"""Setting (wire name) -> (its section, its attribute in that section's record)."""
FIELDS: dict[str, dataclasses.Field] = {
    name: {spec.name: spec for spec in dataclasses.fields(RECORDS[section])}[attribute]
    for name, (section, attribute) in PLACES.items()}
"""Setting (wire name) -> its dataclass field (default, and in ``metadata`` its section,
help and checks), in the order the wire, the files and docs/protocol.md list them."""
for _name, (_section, _attribute) in PLACES.items():
    HINTS[_name] = typing.get_type_hints(RECORDS[_section])[_attribute]
BOOKKEEPING = (*(name for name, (section, _) in PLACES.items() if section == "reporting"),
               "ranks")
"""Settings that change what a run reports or how it is spread, not what it learns (a
checkpoint taken under other values of these still resumes)."""
ALIASES: dict[str, str] = {"dmtet_grid": "grid"}
"""Other names a setting is read by -> its own name. ``dmtet_grid`` is nvdiffrec's name for the
grid (its configs keep working) and protocol 5's; FlexiCubes, the default, takes it too, hence
``grid``. What is written (``to_dict``, results) has the own name."""


def _own_names(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each alias (``ALIASES``) under its setting's own name; a setting given
    under both names with different values is a SettingsError."""
    own: dict[str, Any] = {}
    for name, value in values.items():
        setting = ALIASES.get(name, name)
        if setting in own and own[setting] != value:
            alias = next(alias for alias, target in ALIASES.items() if target == setting)
            raise SettingsError(setting, f"given twice, also as {alias}, with another value")
        own[setting] = value
    return own


@dataclass(frozen=True, init=False)
class Settings:
    """Every tuning setting of an ``optimize`` run (docs/protocol.md lists them), one record
    per section: ``settings.light.log_rate``, ``settings.schedule.learning_rate``.

    Built from records, from flat (wire) names, or both, the flat names winning:
    ``Settings(mode="refine", batch=2)``, ``dataclasses.replace(settings, texture_res=64)``.
    ``to_dict`` is flat, as the wire and the files are. A setting is read from its record
    only: ``settings.batch`` raises AttributeError naming ``settings.size.batch``. The trainer
    reads its pass's config (``pipeline.pass_config``), built from the records."""

    run: RunSettings
    size: SizeSettings
    schedule: ScheduleSettings
    surface: SurfaceSettings
    material: MaterialSettings
    light: LightSettings
    rendering: RenderingSettings
    path_tracing: PathTracingSettings
    reporting: ReportingSettings
    limits: LimitsSettings

    def __init__(self, **values):
        records = {section: values.pop(section) for section, record in RECORDS.items()
                   if isinstance(values.get(section), record)}
        values = _own_names(values)
        unknown = sorted(str(name) for name in values if name not in PLACES)
        if unknown:
            raise SettingsError(unknown[0], f"unknown setting; {setting_hint(unknown[0], PLACES)}")
        for section, record in RECORDS.items():
            given = {attribute: values[name] for name, (home, attribute) in PLACES.items()
                     if home == section and name in values}
            built = records.get(section)
            built = (record(**given) if built is None else
                     dataclasses.replace(built, **given) if given else built)
            object.__setattr__(self, section, built)
        _check_together(self)

    def __getattr__(self, name: str):
        """Called only for what is not an attribute: a setting's flat (wire) name is one
        (``settings.batch``), and its AttributeError says where the setting is read
        (``settings.size.batch``)."""
        section, attribute = PLACES.get(ALIASES.get(name, name), (None, None))
        where = f"; read it from its section: settings.{section}.{attribute}" if section else ""
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}{where}")

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON-able values under their flat names (tuples as lists once
        serialised)."""
        return {name: getattr(getattr(self, section), attribute)
                for name, (section, attribute) in PLACES.items()}

    def replace(self, **changes) -> Settings:
        """A copy with ``changes`` (flat names) applied (coerced and checked like
        ``parse_settings``)."""
        return parse_settings({**self.to_dict(), **_own_names(changes)}, apply_preset=False)

    def trains_normal_map(self) -> bool:
        """Whether the textures include a normal map: ``normal_map``, "auto" meaning on
        unless the mesh is given and kept (materials mode)."""
        normal_map = self.material.normal_map
        return normal_map == "on" or (normal_map == "auto" and self.run.mode != "materials")

    def trains_ior(self) -> bool:
        """Whether the fit trains the surface's IOR: ``learn_ior``, "auto" meaning on where it
        starts from given textures (``init_textures`` "base_mesh") and rasterizes (the
        path-traced pass shades IOR 1.5)."""
        learn = self.material.learn_ior
        return learn == "on" or (learn == "auto" and self.material.init_textures == "base_mesh"
                                 and self.path_tracing.renderer == "rasterized")

    def surface_triangles(self) -> int:
        """The most triangles reconstruct's pass-1 surface keeps: the smaller of
        ``max_triangles`` and ``target_triangles`` where each is set (0: no limit)."""
        surface = self.surface
        return min((n for n in (surface.max_triangles, surface.target_triangles) if n),
                   default=0)

    def clips_white(self, brightest: float) -> bool:
        """Whether the image loss takes white target pixels as clipped (``clipped_white``),
        for targets whose brightest colour value is ``brightest`` (linear)."""
        clipped = self.rendering.clipped_white
        return clipped == "on" or (clipped == "auto" and brightest <= 1.0)

    def refines_poses(self, poses_found: bool) -> bool:
        """Whether the training views' poses are corrected with the fit (``refine_poses``),
        for views whose poses were found from photos (``poses_found``) or not."""
        refine = self.schedule.refine_poses
        return refine == "on" or (refine == "auto" and poses_found)

    def looks_for_sun(self) -> bool:
        """Whether a run looks for a sun in its targets' highlights before its fit
        (``pipeline.sun_finder``): ``light_find_sun``, a light learned from grey (``light``
        "learn") in the world's frame (not ``camera_space_light``), and a surface to look on:
        the start mesh, or in reconstruct the visual hull (``surface_init`` "visual-hull")."""
        light = self.light
        on_a_surface = self.run.mode != "reconstruct" or self.surface.surface_init == "visual-hull"
        return light.find_sun and light.mode == "learn" and not light.camera_space and on_a_surface

    def layered_bsdf(self) -> bool:
        """Whether the split-sum shading lays the diffuse under the specular coat (``bsdf``
        "principled"; ``diffrec.shading.bsdf``)."""
        return self.rendering.bsdf == "principled"

    def material_ranges(self) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """``{"kd", "ks", "normal"}`` -> (low, high) per channel: kd has alpha (4 channels)
        when ``layers`` > 1 (range [0, 1] unless kd_min / kd_max give a 4th value), and the
        roughness floor is the larger of ks_min's and ``min_roughness``."""
        material, layers = self.material, self.rendering.layers
        kd_low, kd_high = list(material.kd_min), list(material.kd_max)
        if layers > 1 and len(kd_low) == 3:
            kd_low, kd_high = [*kd_low, 0.0], [*kd_high, 1.0]
        elif layers == 1:
            kd_low, kd_high = kd_low[:3], kd_high[:3]
        ks_low = list(material.ks_min)
        ks_low[1] = max(ks_low[1], material.min_roughness)
        return {"kd": (tuple(kd_low), tuple(kd_high)), "ks": (tuple(ks_low), material.ks_max),
                "normal": (material.normal_min, material.normal_max)}


def preset_values(preset: str, mode: str) -> dict[str, Any]:
    """The settings ``preset`` sets for a run in ``mode`` (``PRESETS``, with the one-pass
    modes' ``ONE_PASS_ITERATIONS``); {} for ``custom`` or an unknown name."""
    values = dict(PRESETS.get(preset, {}))
    if mode != "reconstruct" and preset in ONE_PASS_ITERATIONS:
        values["iterations"] = ONE_PASS_ITERATIONS[preset]
    return values


def textured_pass_iterations(settings: Settings, given_start: bool) -> int:
    """The most iterations of the textured pass (materials' and refine's one, reconstruct's
    second): ``iterations``, or ``given_start_iterations`` where fewer and the start is a mesh
    given with its textures in materials or refine (``given_start``)."""
    iterations = settings.size.iterations
    cap = settings.schedule.given_start_iterations
    if given_start and settings.run.mode != "reconstruct" and cap:
        return min(iterations, cap)
    return iterations


def expected_iterations(iterations: int, plateau_window: int, done: int = 0) -> int:
    """The iterations a pass of at most ``iterations`` is expected to run in all, ``done`` of
    them run: all of them without the stopping rule (``plateau_window`` 0); with it, its
    typical end (``PLATEAU_TYPICAL_WINDOWS``), or one window more than ``done`` once past
    that, never more than ``iterations``."""
    if not plateau_window:
        return iterations
    typical = round(PLATEAU_TYPICAL_WINDOWS * plateau_window)
    return min(iterations, max(typical, done + plateau_window))


def parse_settings(values: Mapping[str, Any], apply_preset: bool = True) -> Settings:
    """``values`` (JSON-like: lists for tuples) as ``Settings``: defaults < the preset's
    values (unless ``apply_preset`` is false) < ``values``. Raises ``SettingsError`` for an
    unknown name, a value of the wrong type or out of range, naming the field."""
    if not isinstance(values, Mapping):
        raise SettingsError(None, "settings must be an object of name: value")
    values = _own_names(values)
    unknown = sorted(str(name) for name in values if name not in FIELDS)
    if unknown:
        raise SettingsError(unknown[0], f"unknown setting; {setting_hint(unknown[0], FIELDS)}")
    preset = as_type("preset", str, values.get("preset", FIELDS["preset"].default))
    _check_field("preset", FIELDS["preset"], preset)
    mode = as_type("mode", str, values.get("mode", FIELDS["mode"].default))
    base = preset_values(preset, mode) if apply_preset else {}
    return Settings(**{**base, **values})


def as_type(name: str, hint, value):
    """``value`` converted to the type ``hint`` without losing anything, or SettingsError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return as_type(name, inner, value)
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise SettingsError(name, f"must be a list, got {value!r}")
        inner = args[0]
        return tuple(as_type(name, inner, item) for item in value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise SettingsError(name, f"must be true or false, got {value!r}")
    if hint is int:
        return _as_int(name, value)
    if hint is float:
        return _as_float(name, value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise SettingsError(name, f"must be a string, got {value!r}")
    raise TypeError(f"setting {name} has a type this parser does not know: {hint}")


def _as_int(name: str, value) -> int:
    number = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int):
        raise SettingsError(name, f"must be a whole number, got {value!r}")
    return number


def _as_float(name: str, value) -> float:
    number = None
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            pass
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    if number is None or not math.isfinite(number):
        raise SettingsError(name, f"must be a finite number, got {value!r}")
    return number


def _check_field(name: str, spec: dataclasses.Field, value) -> None:
    meta = spec.metadata
    items = value if isinstance(value, tuple) else (value,)
    choices = meta.get("choices")
    if choices is not None and not set(items) <= set(choices):
        raise SettingsError(name, f"must be {'among' if isinstance(value, tuple) else 'one of'}"
                                  f" {', '.join(choices)}, not {value!r}")
    length = meta.get("length")
    if length is not None and len(value) not in (length if isinstance(length, tuple) else
                                                 (length,)):
        wanted = " or ".join(map(str, length)) if isinstance(length, tuple) else length
        raise SettingsError(name, f"must have {wanted} values, got {len(value)}")
    if value is None:
        return
    if "minimum" in meta and any(item < meta["minimum"] for item in items):
        raise SettingsError(name, f"must be at least {meta['minimum']}, got {value!r}")
    if "maximum" in meta and any(item > meta["maximum"] for item in items):
        raise SettingsError(name, f"must be at most {meta['maximum']}, got {value!r}")


def _check_together(settings: Settings) -> None:
    """The checks that involve one value's shape or several fields."""
    size, material = settings.size, settings.material
    checks = [
        ("grid", size.grid % 2 == 0, "must be even"),
        ("light_res", size.light_res & (size.light_res - 1) == 0, "must be a power of two"),
        ("mesh_scale", settings.surface.mesh_scale > 0, "must be positive"),
        ("learning_rate", all(lr > 0 for lr in settings.schedule.learning_rate),
         "must be positive"),
        ("path_learning_rate", settings.path_tracing.learning_rate > 0, "must be positive"),
        ("path_res", settings.path_tracing.res == 0 or settings.path_tracing.res >= MIN_SIDE,
         f"must be 0 (the training views' size) or at least {MIN_SIDE}"),
        ("kd_max", len(material.kd_min) == len(material.kd_max),
         "must have as many values as kd_min"),
        (None, all(lo <= hi for lo, hi in zip(
            (*material.kd_min, *material.ks_min, *material.normal_min),
            (*material.kd_max, *material.ks_max, *material.normal_max), strict=True)),
         "each material range's minimum must not exceed its maximum"),
        ("min_roughness", material.min_roughness <= material.ks_max[1],
         "must not exceed ks_max's roughness"),
        *((name, getattr(settings.surface, name) not in (1, 2, 3),
           "must be 0 (no limit) or at least 4: a closed surface has 4 triangles or more")
          for name in ("max_triangles", "target_triangles")),
    ]
    if settings.surface.vertex_motion == "along-normals":  # auto leaves large steps free
        checks.append(("vertex_motion", not settings.surface.large_steps,
                       "along-normals moves plain offsets: large_steps 0"))
    if settings.path_tracing.renderer == "path-traced":
        checks += [
            ("renderer", settings.run.mode == "materials",
             "path-traced needs a fixed mesh: mode materials"),
            ("renderer", settings.rendering.layers == 1,
             "path-traced renders one layer (layers 1)"),
            ("renderer", not settings.light.camera_space,
             "path-traced needs the light fixed to the world (camera_space_light false)"),
            ("learn_ior", material.learn_ior != "on",
             "the path-traced pass shades IOR 1.5: learn_ior off or auto"),
        ]
    for name, ok, message in checks:
        if not ok:
            raise SettingsError(name, message)


def settings_schema() -> dict[str, dict[str, Any]]:
    """Per setting: its JSON type, default, help text and checks (docs/protocol.md)."""
    json_types = {bool: "boolean", int: "integer", float: "number", str: "string"}
    schema = {}
    for name, spec in FIELDS.items():
        hint, optional = HINTS[name], False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
            optional = True
        if typing.get_origin(hint) is tuple:
            kind = f"list of {json_types[typing.get_args(hint)[0]]}"
        else:
            kind = json_types[hint]
        default = list(spec.default) if isinstance(spec.default, tuple) else spec.default
        schema[name] = {"type": kind + (" or null" if optional else ""), "default": default,
                        **{key: (list(value) if isinstance(value, tuple) else value)
                           for key, value in spec.metadata.items()}}
    return schema
