"""Settings of an optimisation run: presets, files (JSON or TOML), the reference system's keys.

Precedence, lowest first: the defaults, the preset's values, the file's values, explicit
overrides (command-line flags). Every key of nvdiffrec's JSON configs is honoured with its
meaning or refused with a sentence (``pipeline.reference_config``), so its users can bring
their configs as they are.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diffrec.errors import UserError
from diffrec.pipeline.reference_config import BACKGROUNDS, Reading, translate

MODES = ("materials", "refine", "reconstruct")
LIGHT_MODES = ("learn", "fixed", "learn-from-envmap")
GEOMETRIES = ("dmtet", "flexicubes")
LOSSES = ("logl1", "logl2", "mse", "l1", "smape", "relmse")
INIT_TEXTURES = ("constant", "random", "base_mesh")
PREVIEW_PANELS = ("latlong", "kd", "ks", "normal", "shading-only")

PRESETS: dict[str, dict[str, Any]] = {
    # CPU-friendly: a few minutes on two cores
    "preview": {"iterations": 300, "batch": 2, "train_res": 128, "texture_res": 256,
                "dmtet_grid": 32, "light_res": 64, "views": 24, "test_views": 4,
                "hash_table_log2": 15},
    "standard": {"iterations": 2000, "batch": 4, "train_res": 512, "texture_res": 1024,
                 "dmtet_grid": 64, "light_res": 256, "views": 100, "test_views": 8},
    # the reference system's paper settings
    "high": {"iterations": 5000, "batch": 8, "train_res": 512, "texture_res": 2048,
             "dmtet_grid": 128, "light_res": 512, "views": 200, "test_views": 16},
}


@dataclass
class OptimizeConfig:
    """Every setting of a run. Per-pass values are pairs (pass 1, pass 2); single-pass modes
    (materials, refine) use the second entry."""

    mode: str = "materials"
    preset: str = "standard"
    device: str = "auto"
    out_dir: str = "out"
    seed: int = 0
    # inputs: a NeRF-style folder, or a reference mesh rendered under envmap; the starting mesh
    dataset: str | None = None
    ref_mesh: str | None = None
    base_mesh: str | None = None
    envmap: str | None = None
    env_scale: float = 1.0  # multiplies the envmap file's radiance (reference renders, light)
    ref_material: str | None = None  # an MTL file whose material replaces the reference mesh's
    near_far: tuple[float, float] | None = None  # every camera's clipping depths (None: the
    # dataset's own: 0.1 / 1000 for NeRF folders, LLFF's bounds widened; 0.1 / 1000 for renders)
    # sizes and schedule (preset values unless set)
    iterations: int = 2000
    batch: int = 4
    train_res: int = 512
    texture_res: int = 1024
    dmtet_grid: int = 64
    light_res: int = 256
    views: int = 100
    test_views: int = 8
    learning_rate: tuple[float, float] = (0.03, 0.01)
    warmup_iterations: int = 100
    # geometry
    geometry: str = "dmtet"
    mesh_scale: float = 2.1
    center: tuple[float, float, float] = (0.0, 0.0, 0.0)
    laplace: str = "relative"
    laplace_scale: float = 10000.0
    sdf_regularizer: float = 0.2
    # neural material (pass 1 of reconstruct): entries per hash-grid level, as a power of two;
    # nvdiffrec's 19 (12.6M parameters) is cheap on a GPU, while Adam's dense update of that
    # many parameters dominates a CPU step, so the preview preset uses a smaller table
    hash_table_log2: int = 19
    # material and light: value ranges per channel (kd may give a 4th, alpha, entry: used
    # when layers > 1); roughness is never below min_roughness
    kd_min: tuple[float, ...] = (0.0, 0.0, 0.0)
    kd_max: tuple[float, ...] = (1.0, 1.0, 1.0)
    ks_min: tuple[float, float, float] = (0.0, 0.08, 0.0)
    ks_max: tuple[float, float, float] = (1.0, 1.0, 1.0)
    normal_min: tuple[float, float, float] = (-1.0, -1.0, 0.0)
    normal_max: tuple[float, float, float] = (1.0, 1.0, 1.0)
    min_roughness: float = 0.08
    # textures a materials / refine run starts from: mid-range constants, uniform random in
    # the ranges, or the base mesh's own (constants where it has none)
    init_textures: str = "constant"
    light: str = "learn"
    lock_light: bool = False  # learn the light in pass 1 only
    camera_space_light: bool = False  # the light is fixed to each camera, not to the world
    light_gradient_scale: float = 64.0
    albedo_smoothness: float = 0.03
    visibility: float = 0.001
    white_balance: float = 0.005
    # rendering and loss; background: what targets and renders are composited over in
    # training ("random": a colour per image) and validation ("random": black)
    loss: str = "logl1"
    layers: int = 1
    spp: int = 1
    background: str = "random"
    # bookkeeping
    validation: bool = True  # render and score the held-out views at the end
    checkpoint_every: int = 250
    preview_every: int = 0
    preview_res: int | None = None  # longest side of preview panels (None: training size)
    display: tuple[str, ...] = ()  # panels beside render | target in previews
    log_every: int = 10
    unwrap_timeout_s: float = 120.0

    def validate(self) -> OptimizeConfig:
        """Raise UserError for settings that cannot work; return self."""
        checks = [
            (self.mode in MODES, f"mode must be one of {', '.join(MODES)}, not {self.mode!r}"),
            (self.preset in PRESETS,
             f"preset must be one of {', '.join(PRESETS)}, not {self.preset!r}"),
            (self.light in LIGHT_MODES,
             f"light must be one of {', '.join(LIGHT_MODES)}, not {self.light!r}"),
            (self.geometry in GEOMETRIES,
             f"geometry must be one of {', '.join(GEOMETRIES)}, not {self.geometry!r}"),
            (self.loss in LOSSES, f"loss must be one of {', '.join(LOSSES)}, not {self.loss!r}"),
            (self.laplace in ("relative", "absolute"), "laplace must be 'relative' or 'absolute'"),
            (self.iterations >= 1, "iterations must be at least 1"),
            (self.batch >= 1, "batch must be at least 1"),
            (self.train_res >= 8, "train_res must be at least 8 pixels"),
            (self.texture_res >= 4, "texture_res must be at least 4 texels"),
            (self.dmtet_grid >= 4 and self.dmtet_grid % 2 == 0,
             "dmtet_grid must be an even number of at least 4"),
            (self.light_res >= 32 and self.light_res & (self.light_res - 1) == 0,
             "light_res must be a power of two, at least 32"),
            (self.layers >= 1 and self.spp >= 1, "layers and spp must be at least 1"),
            (self.mesh_scale > 0, "mesh_scale must be positive"),
            (10 <= self.hash_table_log2 <= 24, "hash_table_log2 must be 10 to 24"),
            (all(lr > 0 for lr in self.learning_rate), "learning rates must be positive"),
            (self.light != "fixed" or self.envmap is not None or self.dataset is None,
             "light 'fixed' needs an envmap (the HDRI to keep)"),
            (self.light != "learn-from-envmap" or self.envmap is not None,
             "light 'learn-from-envmap' needs an envmap"),
            (self.init_textures in INIT_TEXTURES,
             f"init_textures must be one of {', '.join(INIT_TEXTURES)}, not "
             f"{self.init_textures!r}"),
            (self.background in BACKGROUNDS,
             f"background must be one of {', '.join(BACKGROUNDS)}, not {self.background!r}"),
            (set(self.display) <= set(PREVIEW_PANELS),
             f"display panels must be among {', '.join(PREVIEW_PANELS)}"),
            (len(self.kd_min) in (3, 4) and len(self.kd_min) == len(self.kd_max),
             "kd_min and kd_max must both have 3 (RGB) or 4 (RGBA) values"),
            (all(len(r) == 3 for r in (self.ks_min, self.ks_max, self.normal_min,
                                       self.normal_max)),
             "ks_min, ks_max, normal_min and normal_max must have 3 values each"),
            (all(lo <= hi for lo, hi in zip(
                (*self.kd_min, *self.ks_min, *self.normal_min),
                (*self.kd_max, *self.ks_max, *self.normal_max), strict=True)),
             "each material range's minimum must not exceed its maximum"),
            (0 <= self.min_roughness <= self.ks_max[1],
             "min_roughness must lie between 0 and ks_max's roughness"),
            (self.env_scale > 0, "env_scale must be positive"),
            (self.near_far is None or 0 < self.near_far[0] < self.near_far[1],
             "near_far must be two depths with 0 < near < far"),
            (self.preview_res is None or self.preview_res >= 8,
             "preview_res must be at least 8 pixels"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def material_ranges(self) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """``{"kd", "ks", "normal"}`` -> (low, high) per channel: kd has alpha (4 channels)
        when ``layers`` > 1 (range [0, 1] unless kd_min / kd_max give a 4th value), and the
        roughness floor is the larger of ks_min's and ``min_roughness``."""
        kd_low, kd_high = list(self.kd_min), list(self.kd_max)
        if self.layers > 1 and len(kd_low) == 3:
            kd_low, kd_high = [*kd_low, 0.0], [*kd_high, 1.0]
        elif self.layers == 1:
            kd_low, kd_high = kd_low[:3], kd_high[:3]
        ks_low = list(self.ks_min)
        ks_low[1] = max(ks_low[1], self.min_roughness)
        return {"kd": (tuple(kd_low), tuple(kd_high)), "ks": (tuple(ks_low), self.ks_max),
                "normal": (self.normal_min, self.normal_max)}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON or TOML config file into a dict of settings (reference keys translated)."""
    return read_config_reading(path).settings


def read_config_reading(path: str | Path) -> Reading:
    """Read a JSON or TOML config file: its settings and how each key was understood."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    text = path.read_text()
    try:
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as error:
        raise UserError(f"cannot read config {path}: {error}") from None
    if not isinstance(data, dict):
        raise UserError(f"config {path} must hold a table / object of settings")
    # relative paths in a config file are relative to the file
    for key in ("dataset", "ref_mesh", "base_mesh", "envmap", "out_dir", "mtl_override",
                "ref_material"):
        if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
            data[key] = str(path.parent / data[key])
    return translate(data, {f.name for f in dataclasses.fields(OptimizeConfig)})


TUPLE_SETTINGS = ("learning_rate", "kd_min", "kd_max", "ks_min", "ks_max", "normal_min",
                  "normal_max", "center", "near_far")


def _coerce_tuple(key: str, value, kind) -> tuple:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise UserError(f"{key} must be a list, got {value!r}")
    try:
        return tuple(kind(v) for v in value)
    except (TypeError, ValueError):
        raise UserError(f"{key} must be a list of {kind.__name__} values, got {value!r}") from None


def build_config(file_values: dict[str, Any] | None = None,
                 overrides: dict[str, Any] | None = None) -> OptimizeConfig:
    """Defaults < preset < ``file_values`` < ``overrides`` (None values are skipped)."""
    values = {**(file_values or {}), **{k: v for k, v in (overrides or {}).items()
                                        if v is not None}}
    known = {f.name for f in dataclasses.fields(OptimizeConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"unknown setting(s): {', '.join(unknown)}")
    preset = values.get("preset", OptimizeConfig.preset)
    if preset not in PRESETS:
        raise UserError(f"preset must be one of {', '.join(PRESETS)}, not {preset!r}")
    merged = {**PRESETS[preset], **values}
    for key in TUPLE_SETTINGS:
        if merged.get(key) is not None:
            merged[key] = _coerce_tuple(key, merged[key], float)
    if "display" in merged:
        merged["display"] = _coerce_tuple("display", merged["display"], str)
    try:
        config = OptimizeConfig(**merged)
    except TypeError as error:
        raise UserError(f"bad setting: {error}") from None
    return config.validate()
