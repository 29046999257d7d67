"""What one ``diffrec optimize`` run is: its settings, its sources and where it runs.

``Settings`` (``diffrec.protocol.settings``) are what the run learns with, the same over the
wire; ``Sources`` are the files it reads (targets, starting mesh, HDRI), the command line's
business; ``RunConfig`` adds the device and the output folder. Precedence, lowest first: the
defaults, the preset's values, the file's values, explicit overrides (command-line flags).
Every key of nvdiffrec's JSON configs is honoured with its meaning or refused with a sentence
(``pipeline.reference_config``), so its users can bring their configs as they are.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diffrec.errors import UserError
from diffrec.pipeline.matting import MASK_MAKERS
from diffrec.pipeline.reference_config import Reading, translate
from diffrec.protocol.close_names import setting_hint
from diffrec.protocol.file_checks import FileCheckError, parse_json
from diffrec.protocol.settings import (
    ALIASES,
    FIELDS,
    PRESETS,
    Settings,
    SettingsError,
    as_type,
    parse_settings,
)


@dataclass(frozen=True)
class Sources:
    """The files a run reads. Targets: a capture folder (``dataset``: NeRF-style, LLFF or
    COLMAP) or a reference mesh (``ref_mesh``) rendered under ``envmap``, whose material
    ``ref_material`` (an MTL file) may replace; ``base_mesh`` the starting mesh; ``envmap`` an
    equirectangular HDRI, its radiance multiplied by ``env_scale``, laid out as
    ``envmap_layout`` says: "blender" (as Blender's Environment Texture maps it) or
    "nvdiffrec" (nvdiffrec's lat-long, a quarter turn from Blender's: what an nvdiffrec
    config's ``envmap`` means; ``light.equirect``); ``start_renders`` a capture folder of
    the base mesh rendered by the targets' renderer from the training cameras, same names
    (materials and refine: the fit takes that renderer's differences from ours out of the
    targets, ``pipeline.renderer_gap``); ``near_far`` every
    camera's clipping depths (None: the dataset's own: 0.1 / 1000 for NeRF folders, LLFF's
    bounds widened; 0.1 / 1000 for renders); ``mask_maker`` how a capture's photos without
    masks are first segmented, one of ``matting.MASK_MAKERS`` (``auto_masks.make_masks``)."""

    dataset: str | None = None
    ref_mesh: str | None = None
    base_mesh: str | None = None
    envmap: str | None = None
    env_scale: float = 1.0
    envmap_layout: str = "blender"
    ref_material: str | None = None
    start_renders: str | None = None
    near_far: tuple[float, float] | None = None
    mask_maker: str = "grabcut"


@dataclass(frozen=True)
class RunConfig:
    """A whole command-line run: ``settings``, ``sources``, the torch ``device`` ("auto":
    CUDA, else MPS, else CPU) and the output folder ``out_dir``."""

    settings: Settings
    sources: Sources = Sources()
    device: str = "auto"
    out_dir: str = "out"

    def to_dict(self) -> dict[str, Any]:
        """Every value as one flat, JSON-able mapping (what ``--check`` shows)."""
        return {**self.settings.to_dict(), **dataclasses.asdict(self.sources),
                "device": self.device, "out_dir": self.out_dir}


SOURCE_KEYS = tuple(f.name for f in dataclasses.fields(Sources))
RUN_KEYS = ("device", "out_dir")
CONFIG_KEYS = (*FIELDS, *ALIASES, *SOURCE_KEYS, *RUN_KEYS)
_SOURCE_HINTS = {"env_scale": float, "envmap_layout": str,
                 "near_far": tuple[float, ...] | None, "mask_maker": str}
ENVMAP_LAYOUTS = ("blender", "nvdiffrec")


def _sources(values: dict[str, Any]) -> Sources:
    typed = {}
    for key, value in values.items():
        hint = _SOURCE_HINTS.get(key)
        if hint is None:
            if value is not None and not isinstance(value, str | Path):
                raise UserError(f"{key}: must be a path, got {value!r}")
            typed[key] = None if value is None else str(value)
        else:
            typed[key] = as_type(key, hint, value)
    sources = Sources(**typed)
    if sources.env_scale <= 0:
        raise UserError("env_scale: must be positive")
    if sources.envmap_layout not in ENVMAP_LAYOUTS:
        raise UserError(f"envmap_layout: must be one of {', '.join(ENVMAP_LAYOUTS)}, got "
                        f"{sources.envmap_layout!r}")
    near_far = sources.near_far
    if near_far is not None and (len(near_far) != 2 or not 0 < near_far[0] < near_far[1]):
        raise UserError("near_far: must be two depths with 0 < near < far")
    if sources.mask_maker not in MASK_MAKERS:
        raise UserError(f"mask_maker: must be one of {', '.join(MASK_MAKERS)}, got "
                        f"{sources.mask_maker!r}")
    return sources


def _check_light(settings: Settings, sources: Sources) -> None:
    if settings.light.mode == "fixed" and sources.envmap is None and sources.dataset is not None:
        raise UserError("light 'fixed' needs an envmap (the HDRI to keep)")
    if settings.light.mode == "learn-from-envmap" and sources.envmap is None:
        raise UserError("light 'learn-from-envmap' needs an envmap")


def read_config_file(path: str | Path, preset: str | None = None) -> dict[str, Any]:
    """Read a JSON or TOML config file into a dict of settings (reference keys translated;
    ``preset``: one given on the command line, whose sizes win over the reference system's
    defaults, ``Reading.values``)."""
    return read_config_reading(path).values(PRESETS.get(preset))


def read_config_reading(path: str | Path) -> Reading:
    """Read a JSON or TOML config file: its settings and how each key was understood."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    text = path.read_text()
    try:
        data = (tomllib.loads(text) if path.suffix.lower() == ".toml" else
                parse_json(text, f"config {path}"))
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"cannot read config {path}: {error}") from None
    except FileCheckError as error:
        raise UserError(str(error)) from None
    if not isinstance(data, dict):
        raise UserError(f"config {path} must hold a table / object of settings")
    found = {key: _resolved(data[key], path.parent) for key in INPUT_PATH_KEYS
             if isinstance(data.get(key), str)}
    data.update({key: value for key, (value, _) in found.items()})
    reading = translate(data, set(CONFIG_KEYS))
    out_dir = data.get("out_dir")
    if not reading.reference and isinstance(out_dir, str) and not Path(out_dir).is_absolute():
        reading.settings["out_dir"] = str(path.parent / out_dir)  # diffrec's own: the file's
    reading.lines += [f"(path) {key} {data[key]}: {where}" for key, (_, where) in found.items()
                      if where]
    return reading


# the files a config names: relative ones are looked for in the working directory first
INPUT_PATH_KEYS = ("dataset", "ref_mesh", "base_mesh", "envmap", "mtl_override", "ref_material",
                   "start_renders")


def _resolved(value: str, config_folder: Path) -> tuple[str, str]:
    """A relative path from a config file, as nvdiffrec reads it (relative to the working
    directory), else relative to the config's folder where it is there: ``(path, which)``,
    ``which`` empty for an absolute path."""
    if Path(value).is_absolute():
        return value, ""
    if Path(value).exists():
        return value, f"found in the working directory ({Path.cwd()})"
    beside = config_folder / value
    if beside.exists():
        return str(beside), f"found beside the config file ({beside})"
    return value, (f"NOT FOUND in the working directory ({Path.cwd()}) nor beside the config "
                   f"file ({config_folder})")


def build_config(file_values: dict[str, Any] | None = None,
                 overrides: dict[str, Any] | None = None) -> RunConfig:
    """Defaults < preset < ``file_values`` < ``overrides`` (None values are skipped); a
    setting that cannot work raises UserError naming it."""
    values = {**(file_values or {}), **{k: v for k, v in (overrides or {}).items()
                                        if v is not None}}
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    if unknown:
        raise UserError("\n".join(f"unknown setting {name!r}: {setting_hint(name, CONFIG_KEYS)}"
                                   for name in unknown))
    try:
        settings = parse_settings({k: v for k, v in values.items()
                                   if k in FIELDS or k in ALIASES})
        sources = _sources({k: v for k, v in values.items() if k in SOURCE_KEYS})
    except SettingsError as error:
        raise UserError(str(error)) from None
    _check_light(settings, sources)
    run = {k: str(v) for k, v in values.items() if k in RUN_KEYS}
    return RunConfig(settings, sources, **run)
