"""Settings of an optimisation run: presets, files (JSON or TOML), the reference system's keys.

Precedence, lowest first: the defaults, the preset's values, the file's values, explicit
overrides (command-line flags). Keys of nvdiffrec's JSON configs (``iter``, ``train_res``,
``learning_rate``, ``lock_pos``, ``learn_light``...) are accepted and translated, so its users
can bring their configs; keys that only make sense there are reported and ignored.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diffrec.errors import UserError

log = logging.getLogger(__name__)

MODES = ("materials", "refine", "reconstruct")
LIGHT_MODES = ("learn", "fixed", "learn-from-envmap")
GEOMETRIES = ("dmtet", "flexicubes")
LOSSES = ("logl1", "logl2", "mse", "l1", "smape", "relmse")

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
    # material and light
    ks_min: tuple[float, float, float] = (0.0, 0.08, 0.0)
    ks_max: tuple[float, float, float] = (1.0, 1.0, 1.0)
    light: str = "learn"
    light_gradient_scale: float = 64.0
    albedo_smoothness: float = 0.03
    visibility: float = 0.001
    white_balance: float = 0.005
    # rendering and loss
    loss: str = "logl1"
    layers: int = 1
    spp: int = 1
    # bookkeeping
    checkpoint_every: int = 250
    preview_every: int = 0
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
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# nvdiffrec config key -> (our key, converter); None drops the key with a note
def _pair(value):
    return (float(value), float(value)) if isinstance(value, int | float) else tuple(value)


def _resolution(value):
    return int(value if isinstance(value, int | float) else max(value))


REFERENCE_KEYS = {
    "iter": ("iterations", int),
    "batch": ("batch", int),
    "train_res": ("train_res", _resolution),
    "texture_res": ("texture_res", _resolution),
    "dmtet_grid": ("dmtet_grid", int),
    "mesh_scale": ("mesh_scale", float),
    "learning_rate": ("learning_rate", _pair),
    "ks_min": ("ks_min", tuple),
    "ks_max": ("ks_max", tuple),
    "laplace": ("laplace", str),
    "laplace_scale": ("laplace_scale", float),
    "layers": ("layers", int),
    "spp": ("spp", int),
    "loss": ("loss", str),
    "ref_mesh": ("ref_mesh", str),
    "base_mesh": ("base_mesh", str),
    "envmap": ("envmap", str),
    "out_dir": ("out_dir", str),
    "sdf_regularizer": ("sdf_regularizer", float),
}
REFERENCE_IGNORED = {"display", "save_interval", "validate", "background", "env_scale",
                     "camera_space_light", "random_textures", "custom_mip", "isosurface",
                     "kd_min", "kd_max", "nrm_min", "nrm_max", "cam_near_far", "min_roughness",
                     "local_rank", "multi_gpu", "config", "probe_res", "transparency"}


def _translate_reference(data: dict[str, Any]) -> dict[str, Any]:
    """nvdiffrec keys -> ours. ``lock_pos`` and ``learn_light`` select mode and light."""
    out: dict[str, Any] = {}
    ignored = []
    for key, value in data.items():
        if key in REFERENCE_KEYS:
            ours, convert = REFERENCE_KEYS[key]
            out[ours] = convert(value)
        elif key == "lock_pos":
            out.setdefault("mode", "materials" if value else "refine")
        elif key == "learn_light":
            out["light"] = "learn" if value else "fixed"
        elif key in REFERENCE_IGNORED:
            ignored.append(key)
        else:
            out[key] = value
    if ignored:
        log.info("ignoring reference-system keys with no meaning here: %s", ", ".join(ignored))
    if "base_mesh" not in out and "ref_mesh" in out and "mode" not in out:
        out["mode"] = "reconstruct"  # nvdiffrec without a base mesh runs DMTet
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON or TOML config file into a dict (reference keys translated)."""
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
    for key in ("dataset", "ref_mesh", "base_mesh", "envmap", "out_dir"):
        if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
            data[key] = str(path.parent / data[key])
    return _translate_reference(data)


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
    for key in ("learning_rate", "ks_min", "ks_max", "center"):
        if key in merged:
            merged[key] = tuple(float(v) for v in merged[key])
    try:
        config = OptimizeConfig(**merged)
    except TypeError as error:
        raise UserError(f"bad setting: {error}") from None
    return config.validate()
