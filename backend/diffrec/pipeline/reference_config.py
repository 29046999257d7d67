"""The reference system's (nvdiffrec's) config keys, each honoured with its meaning or refused.

``translate(data)`` maps a config file's keys to diffrec settings and says, key by key, how each
was understood (``Reading.lines``; ``diffrec optimize --check`` prints them). A key with no
counterpart here is refused with a sentence that says what it meant there and what to use
instead; nothing is dropped silently. Keys that are diffrec's own settings pass through.

A file is read as the reference system's when it has any key only that system uses (``iter``,
``lock_pos``, ``random_textures``...); then its defaults for the keys it leaves out apply where
they differ from ours and change the run: without ``base_mesh`` the run reconstructs (whatever
``lock_pos`` says), with one it refines the mesh (``lock_pos`` false) or only the materials
(``lock_pos`` true); it trains on nvdiffrec's ``schedule`` (unless the file gives ``schedule:
diffrec``) with its light resolution and starting surface (``Reading.defaults``: a
``--preset`` given on the command line overrides the sizes among them). ``departures`` lists
what a run still does otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diffrec.errors import UserError
from diffrec.pipeline.captures import capture_layout
from diffrec.pipeline.reference_cameras import REFERENCE_ELEVATIONS_DEGREES
from diffrec.protocol.close_names import setting_hint
from diffrec.protocol.settings import BACKGROUNDS, GEOMETRIES, SECTIONS

DISPLAY_PANELS = {"kd": "kd", "ks": "ks", "normal": "normal", "white": "shading-only"}


class Refused(Exception):
    """A key this tool does not take; the message says what it meant and what to do."""


@dataclass
class Reading:
    """What a config file's keys became: ``settings`` (diffrec's names) and one line per key."""

    settings: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    reference: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)

    def values(self, preset: dict[str, Any] | None = None,
               schedule: str | None = None) -> dict[str, Any]:
        """The settings to run: ``defaults`` (those a ``preset`` given on the command line
        sets left out; all of them under a ``schedule`` "diffrec" given there, as under the
        file's own ``schedule: diffrec``), then the file's own."""
        kept = {} if schedule == "diffrec" else self.defaults
        defaults = {k: v for k, v in kept.items() if k not in (preset or {})}
        return {**defaults, **self.settings}


def _as_list(value, key: str, lengths: tuple[int, ...]) -> tuple[float, ...]:
    if not isinstance(value, list | tuple) or len(value) not in lengths or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise Refused(f"{key} must be a list of {' or '.join(map(str, lengths))} numbers, "
                      f"got {value!r}")
    return tuple(float(v) for v in value)


def _size(value, key: str) -> int:
    """nvdiffrec's ``[height, width]`` (or one number) -> our longest side."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    height, width = _as_list(value, key, (2,))
    return int(max(height, width))


def _bool(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise Refused(f"{key} must be true or false, got {value!r}")
    return value


def _ref_mesh(value, data) -> tuple[dict, str]:
    path = Path(value)
    if path.is_dir():
        layout = capture_layout(path)
        if layout is None:
            raise Refused(f"ref_mesh {value} is a folder with neither transforms_train.json "
                          "(NeRF-style) nor transforms.json (a capture tool's) nor "
                          "poses_bounds.npy (LLFF) nor a COLMAP model: name a mesh file or a "
                          "dataset folder")
        kind = {"nerf": "a NeRF-style dataset folder",
                "nerfstudio": "a capture tool's transforms.json", "llff": "an LLFF capture",
                "colmap": "a COLMAP model"}[layout]
        return {"dataset": str(path)}, f"dataset = {path} ({kind}: its images are the targets)"
    if path.suffix == "" and not path.exists():
        return ({"dataset": str(path)},
                f"dataset = {path} (a dataset folder, by its name; not there yet)")
    return {"ref_mesh": str(path)}, f"ref_mesh = {path} (a mesh rendered under envmap)"


def _learning_rate(value, data) -> tuple[dict, str]:
    rates = [value] if isinstance(value, int | float) else value
    if not isinstance(rates, list) or not 1 <= len(rates) <= 2 or not all(
            isinstance(r, int | float) and not isinstance(r, bool) for r in rates):
        raise Refused("learning_rate must be a number or one number per pass; separate "
                      "position and material rates ([[pos, mat], ...]) are not supported: give "
                      "one rate per pass")
    first = float(rates[0])
    if "base_mesh" in data:  # one pass there, at the first rate; ours is the second slot
        return ({"learning_rate": (first, first)},
                f"learning_rate = ({first}, {first}) (a base_mesh run has one pass, at the "
                "first rate)")
    pair = (first, float(rates[-1]))
    return {"learning_rate": pair}, f"learning_rate = {pair} (pass 1, pass 2)"


def _display(value, data) -> tuple[dict, str]:
    if not isinstance(value, list):
        raise Refused(f"display must be a list of panels, got {value!r}")
    panels = []
    for entry in value:
        if isinstance(entry, dict) and entry.get("latlong") is True and len(entry) == 1:
            panels.append("latlong")
        elif isinstance(entry, dict) and set(entry) == {"bsdf"} and entry["bsdf"] in \
                DISPLAY_PANELS:
            panels.append(DISPLAY_PANELS[entry["bsdf"]])
        elif isinstance(entry, dict) and "relight" in entry:
            raise Refused("display relight (a preview under another HDRI) is not drawn here: "
                          "import mesh.glb into Blender and light it with that HDRI")
        else:
            raise Refused(f"display panel {entry!r} is not one diffrec draws: use "
                          '{"latlong": true} or {"bsdf": "kd" | "ks" | "normal" | "white"}')
    return ({"display": tuple(panels)},
            f"display = {tuple(panels)} (panels beside render | target in previews/*.png)")


def _save_interval(value, data) -> tuple[dict, str]:
    every = int(value)
    settings = {"checkpoint_every": every}
    if "display_interval" not in data:
        settings["preview_every"] = every
    return settings, (f"checkpoint_every = {every}" + (
        f", preview_every = {every} (preview images in previews/)"
        if "preview_every" in settings else ""))


def _multi_gpu(value, data) -> tuple[dict, str]:
    if _bool(value, "multi_gpu"):
        raise Refused("multi_gpu (training one job on several GPUs with apex) is not read from "
                      "a config: give diffrec optimize --gpus N, or start it under torchrun")
    return {}, "one device per job, as asked"


def _lock_pos(value, data) -> tuple[dict, str]:
    """With ``base_mesh``: materials (the mesh locked) or refine; without one nvdiffrec
    reconstructs, and lock_pos only locks its second pass's mesh."""
    locked = _bool(value, "lock_pos")
    if "base_mesh" not in data:
        return {"mode": "reconstruct"}, (
            "mode = 'reconstruct' (no base_mesh: the surface is found from scratch; pass 2's "
            "vertices move, as diffrec's reconstruct always moves them"
            + (", where nvdiffrec's lock_pos true keeps them)" if locked else ")"))
    if locked:
        return ({"mode": "materials", "normal_map": "on"}, "mode = 'materials', normal_map = "
                "'on' (nvdiffrec trains one with a fixed mesh too)")
    return {"mode": "refine"}, "mode = 'refine'"


def _isosurface(value, data) -> tuple[dict, str]:
    if value not in GEOMETRIES:
        raise Refused(f"isosurface must be one of {', '.join(GEOMETRIES)}, not {value!r}")
    return {"geometry": value}, f"geometry = {value!r} (the pass-1 surface model)"


def _local_rank(value, data) -> tuple[dict, str]:
    if value != 0:
        raise Refused("local_rank is set by a multi-GPU launcher, not by a config: remove it")
    return {}, "the only process"


def _nested_config(value, data) -> tuple[dict, str]:
    raise Refused("config inside a config file is not read: pass each file with --config")


def _probe_res(value, data) -> tuple[dict, str]:
    return {"light_res": int(value)}, f"light_res = {int(value)} (the learnt light's cube faces)"


def _background(value, data) -> tuple[dict, str]:
    if value not in BACKGROUNDS:
        raise Refused(f"background must be one of {', '.join(BACKGROUNDS)}, not {value!r}")
    return {"background": value}, f"background = {value!r} (training and validation images)"


def _transparency(value, data) -> tuple[dict, str]:
    if not _bool(value, "transparency"):
        return {}, "opaque surfaces, as asked"
    layers = max(int(data.get("layers", 8)), 2)
    return ({"layers": layers},
            f"layers = {layers} (kd carries alpha and {layers} depth-peeled layers are blended)")


def _plain(ours: str, convert: Callable, describe: str = "") -> Callable:
    def translate(value, data) -> tuple[dict, str]:
        converted = convert(value)
        return {ours: converted}, f"{ours} = {converted!r}" + (f" ({describe})" if describe else "")
    return translate


def _range(ours: str, lengths=(3,)) -> Callable:
    return _plain(ours, lambda value: _as_list(value, ours, lengths))


def _no_effect(reason: str) -> Callable:
    return lambda value, data: ({}, f"no setting needed: {reason}")


# nvdiffrec key -> translator(value, whole file) -> (our settings, how it was understood)
KEYS: dict[str, Callable] = {
    "ref_mesh": _ref_mesh,
    "base_mesh": _plain("base_mesh", str, "the starting mesh"),
    "envmap": lambda value, data: (
        {"envmap": str(value), "envmap_layout": data.get("envmap_layout", "nvdiffrec")},
        f"envmap = {str(value)!r} (the HDRI, in nvdiffrec's lat-long layout unless "
        "envmap_layout says otherwise: turned a quarter turn into Blender's on reading, so it "
        "lights the mesh as in nvdiffrec)"),
    "out_dir": _plain("out_dir", lambda value: str(Path("out", value)),
                      "out/<out_dir> under the working directory, where nvdiffrec writes"),
    "iter": _plain("iterations", int, "per pass"),
    "batch": _plain("batch", int),
    "spp": _plain("spp", int),
    "layers": _plain("layers", int, "depth-peeled layers; kd carries alpha when above 1"),
    "train_res": lambda v, d: _plain("train_res", lambda x: _size(x, "train_res"),
                                     "longest side, pixels")(v, d),
    "texture_res": lambda v, d: _plain("texture_res", lambda x: _size(x, "texture_res"),
                                       "square textures of the longest side")(v, d),
    "display_res": lambda v, d: _plain("preview_res", lambda x: _size(x, "display_res"),
                                       "longest side of preview panels")(v, d),
    "learning_rate": _learning_rate,
    "min_roughness": _plain("min_roughness", float, "roughness is never below it"),
    "custom_mip": _no_effect("the texture mip chain is always built from 2x2 box averages, as "
                             "custom_mip builds it"),
    "random_textures": lambda v, d: ({"init_textures": "random" if _bool(v, "random_textures")
                                      else "base_mesh"},
                                     "init_textures = " + ("'random' (uniform in the ranges)"
                                                           if v else "'base_mesh' (its own "
                                                           "textures where it has them)")),
    "background": _background,
    "loss": _plain("loss", str),
    "validate": lambda v, d: ({"validation": _bool(v, "validate")},
                              f"validation = {v} (held-out views "
                              f"{'rendered and scored' if v else 'not scored'})"),
    "isosurface": _isosurface,
    "mtl_override": _plain("ref_material", str, "replaces the reference mesh's material"),
    "dmtet_grid": _plain("grid", int, "grid cells per side"),
    "mesh_scale": _plain("mesh_scale", float, "side of the box the surface is sought in"),
    "env_scale": _plain("env_scale", float, "multiplies the envmap's radiance"),
    "display": _display,
    "display_interval": _plain("preview_every", int, "preview images in previews/"),
    "save_interval": _save_interval,
    "camera_space_light": lambda v, d: ({"camera_space_light": _bool(v, "camera_space_light")},
                                        f"camera_space_light = {v} (the light turns with each "
                                        "camera)"),
    "lock_light": lambda v, d: ({"lock_light": _bool(v, "lock_light")},
                                f"lock_light = {v} (light learnt in pass 1 only)"),
    "lock_pos": _lock_pos,
    "learn_light": lambda v, d: ({"light": "learn" if _bool(v, "learn_light") else "fixed"},
                                 f"light = {'learn' if v else 'fixed'}"),
    "sdf_regularizer": _plain("sdf_regularizer", float),
    "laplace": _plain("laplace", str),
    "laplace_scale": _plain("laplace_scale", float),
    "pre_load": _no_effect("targets are always held in memory"),
    "kd_min": _range("kd_min", (3, 4)),
    "kd_max": _range("kd_max", (3, 4)),
    "ks_min": _range("ks_min"),
    "ks_max": _range("ks_max"),
    "nrm_min": _range("normal_min"),
    "nrm_max": _range("normal_max"),
    "cam_near_far": lambda v, d: _plain("near_far", lambda x: _as_list(x, "cam_near_far", (2,)),
                                        "clipping depths of every camera")(v, d),
    "probe_res": _probe_res,
    "transparency": _transparency,
    "multi_gpu": _multi_gpu,
    "local_rank": _local_rank,
    "config": _nested_config,
}
# keys the reference system uses that diffrec's own files do not hold in its form: one of
# them marks a file as its config, unless diffrec has a setting of that name too
# (``learning_rate``, ``display``: see ``translate``)
REFERENCE_ONLY = set(KEYS) - {"ref_mesh", "base_mesh", "envmap", "out_dir", "batch", "spp",
                              "layers", "train_res", "texture_res", "loss", "dmtet_grid",
                              "mesh_scale", "sdf_regularizer", "laplace", "laplace_scale",
                              "min_roughness", "env_scale", "kd_min", "kd_max", "ks_min",
                              "ks_max", "background", "camera_space_light", "lock_light"}


SMOOTHNESS_NAMES = {"lambda_kd": "albedo_smoothness", "lambda_ks": "ks_smoothness"}
"""nvdiffrecmc's names for the texture smoothness losses diffrec has, its weights its own."""


def _unknown(key: str, value: Any, own_settings: set[str]) -> str:
    """Why ``key`` is refused, with the name it likely meant."""
    if key in SECTIONS and isinstance(value, dict):
        return (f"[{key}] is a section of diffrec's settings, and a file holds them flat: "
                f"write {', '.join(map(str, value))} at the top level, without [{key}]")
    if key in SMOOTHNESS_NAMES:
        return (f"unknown setting {key!r}: diffrec's loss of that kind is "
                f"{SMOOTHNESS_NAMES[key]} (its own weight)")
    return f"unknown setting {key!r}: {setting_hint(key, [*KEYS, *own_settings])}"


def translate(data: dict[str, Any], own_settings: set[str]) -> Reading:
    """Translate every key of ``data``; diffrec's own settings (``own_settings``) pass
    through, unless a key only the reference system uses marks ``data`` as its config.
    Raises ``UserError`` listing every refused or unknown key."""
    reading = Reading(reference=bool((REFERENCE_ONLY - own_settings) & set(data)))
    refused = []
    for key, value in data.items():
        shown = json.dumps(value)
        try:
            if key in KEYS and (reading.reference or key not in own_settings
                                or key == "ref_mesh"):
                settings, note = KEYS[key](value, data)
            elif key in own_settings:
                settings, note = {key: value}, "diffrec setting"
            else:
                raise Refused(_unknown(key, value, own_settings))
        except Refused as refusal:
            refused.append(str(refusal))
            continue
        except (TypeError, ValueError) as error:
            refused.append(f"{key} {shown}: {error}")
            continue
        reading.settings.update(settings)
        reading.lines.append(f"{key} {shown} -> {note}")
    if refused:
        raise UserError("this config cannot be run as it is:\n  - " + "\n  - ".join(refused))
    if reading.reference:
        _reference_mode(reading, data)
        _reference_schedule(reading, data)
        if "export_obj" not in reading.settings:
            reading.settings["export_obj"] = True
            reading.lines.append("(no export_obj) -> export_obj = true (the reference system "
                                 "writes OBJ + MTL + PNG textures; mesh.glb as always)")
    return reading


def _reference_mode(reading: Reading, data: dict) -> None:
    """The reference system's choice of passes, where the file does not say (see above)."""
    settings = reading.settings
    if "mode" in settings:
        return
    if "base_mesh" in settings:
        settings["mode"] = "refine"
        reading.lines.append("(no lock_pos) -> mode = 'refine' (the base mesh's vertices move)")
    elif "ref_mesh" in settings or "dataset" in settings:
        settings["mode"] = "reconstruct"
        reading.lines.append("(no base_mesh) -> mode = 'reconstruct' (the surface is found "
                             "from scratch, then refined)")


NVDIFFREC_LIGHT_RES = 512  # its probe_res default


def _reference_schedule(reading: Reading, data: dict) -> None:
    """nvdiffrec's schedule, light resolution and starting surface where the file is silent."""
    if reading.settings.get("schedule", "nvdiffrec") != "nvdiffrec":
        return
    defaults = {"schedule": "nvdiffrec", "surface_init": "random", "plateau_window": 0}
    if "isosurface" not in data:
        defaults["geometry"] = "dmtet"
        reading.lines.append("(no isosurface) -> geometry = 'dmtet' (nvdiffrec's default; "
                             "diffrec's is flexicubes)")
    if "schedule" not in data:
        reading.lines.append("(no schedule) -> schedule = 'nvdiffrec' (its learning-rate decay, "
                             "warm-up, noise background and geometry rate; give schedule: "
                             "diffrec for diffrec's)")
    if "probe_res" not in data and "light_res" not in data:
        defaults["light_res"] = NVDIFFREC_LIGHT_RES
        reading.lines.append(f"(no probe_res) -> light_res = {NVDIFFREC_LIGHT_RES} (nvdiffrec's "
                             "default; a --preset sets its own)")
    if "surface_init" not in data:
        reading.lines.append("(no surface_init) -> surface_init = 'random' (nvdiffrec's "
                             "uniform random SDF, not a visual hull)")
    if "plateau_window" not in data:
        reading.lines.append("(no plateau_window) -> plateau_window = 0 (every pass runs its "
                             "iterations, as nvdiffrec's do)")
    reading.defaults.update({k: v for k, v in defaults.items() if k not in data})


def departures(settings, sources=None, light_res: int = NVDIFFREC_LIGHT_RES) -> list[str]:
    """Where a run of ``settings`` (``diffrec.protocol.settings.Settings``) on ``sources``
    (``pipeline.config.Sources``, if given) departs from what nvdiffrec does, one sentence
    each, saying why; ``light_res``: the light's cube faces nvdiffrec would learn (the
    config's ``probe_res``, else its default)."""
    run, size, schedule = settings.run, settings.size, settings.schedule
    surface, material, rendering = settings.surface, settings.material, settings.rendering
    light = settings.light
    found = []
    if schedule.kind != "nvdiffrec":
        found += ["learning rate decays to 0.1 over each pass, whatever its length (nvdiffrec: "
                  "10^(-0.0002 it), 0.66 at 1000 iterations); schedule: nvdiffrec for its",
                  f"training background {rendering.background!r} (nvdiffrec: per-pixel noise); "
                  "schedule: nvdiffrec for its"]
        if run.mode == "reconstruct":
            found.append(f"geometry moves at surface_learning_rate {schedule.surface_learning_rate}"
                         " from a visual-hull start (nvdiffrec: at learning_rate); schedule: "
                         "nvdiffrec for its")
        else:
            found.append("no learning-rate warm-up in a single-pass run (nvdiffrec: 100 "
                         "iterations); schedule: nvdiffrec for its")
    if schedule.plateau_window:
        found.append(f"a pass stops early once its training PSNR gains less than "
                     f"{schedule.plateau_db} dB over {schedule.plateau_window} iterations "
                     "(nvdiffrec runs every iteration): plateau_window 0 for its")
    if size.light_res != light_res:
        found.append(f"light cube faces of {size.light_res} texels (nvdiffrec: {light_res}): "
                     "the preset's or diffrec's default size, for speed")
    if run.mode == "reconstruct":
        if surface.surface_init == "visual-hull":
            found.append("pass 1 starts from the visual hull of the masks (nvdiffrec: a random "
                         "SDF): fewer iterations to a surface")
        if surface.max_triangles:
            found.append(f"pass 1's surface is simplified to at most {surface.max_triangles} "
                         "triangles before unwrapping (nvdiffrec unwraps it whole): xatlas "
                         "takes minutes on larger surfaces on a CPU")
        found.append("pass 2's normal map starts flat (nvdiffrec bakes pass 1's untrained "
                     "normal channel)")
        if material.hash_table_log2 != 19:
            found.append(f"hash-grid tables of 2^{material.hash_table_log2} entries (nvdiffrec: "
                         "2^19): the preset's size, for speed on a CPU")
        if material.hash_grid_precision != "float16":
            found.append("tiny-cuda-nn's hash grid computes in float32 (nvdiffrec: float16, "
                         "which rounds most of its gradients to zero and is no faster): "
                         "hash_grid_precision float16 for its")
    if rendering.bsdf != "nvdiffrec":
        found.append("the diffuse is shaded under the specular coat, and the light lost "
                     "between microfacets given back, as Blender's Principled BSDF shows the "
                     "result (nvdiffrec adds the two, single scattering): bsdf nvdiffrec for "
                     "its")
    if light.mode == "fixed" and light.sources:
        found.append(f"the fixed light's {light.sources} brightest parts are shaded "
                     "exactly, as directional sources (nvdiffrec: split-sum for all of it): "
                     "light_sources 0 for its")
    if light.mode != "fixed" and light.log_rate:
        found.append(f"the learned light steps in log radiance (light_log_rate "
                     f"{light.log_rate}), so a sun can grow within a pass (nvdiffrec: "
                     "plain Adam at learning_rate, about that much a texel a step): "
                     "light_log_rate 0 for its")
    if settings.looks_for_sun():
        looked_on = "visual hull" if settings.run.mode == "reconstruct" else "start mesh"
        found.append(f"a learned light starts with the sun the targets' highlights show on the "
                     f"{looked_on}, or a faint one where none stands out (nvdiffrec: grey): "
                     "light_find_sun false for its")
    if rendering.clipped_white != "off":
        found.append(f"white target pixels are taken as clipped (clipped_white "
                     f"{rendering.clipped_white!r}: a render at least as bright matches them; "
                     "nvdiffrec compares them as exact): clipped_white off for its")
    if material.ks_smoothness:
        found.append(f"roughness and metallic are held together (ks_smoothness "
                     f"{material.ks_smoothness}; nvdiffrec smooths the base colour only): "
                     "ks_smoothness 0 for its")
    if material.albedo_smoothness or material.ks_smoothness:
        found.append("the smoothness terms also compare the two sides of each UV seam "
                     "(nvdiffrec's stay inside a chart)")
    if material.mostly_metal:
        found.append(f"points past half metal are pulled to all metal (mostly_metal "
                     f"{material.mostly_metal}; nvdiffrec has no such prior): mostly_metal 0 "
                     "for its")
    if surface.large_steps:
        found.append(f"vertex steps smoothed (large_steps {surface.large_steps}; nvdiffrec: "
                     "plain offsets)")
    if settings.reporting.validation:
        found.append("validation on held-out views (at most one in 8 of a capture without a "
                     "test split), which then do not train (nvdiffrec trains on every image)")
    if (sources is not None and sources.ref_mesh and not sources.dataset
            and not Path(sources.ref_mesh).is_dir()):  # a mesh to render, not a capture
        low, high = REFERENCE_ELEVATIONS_DEGREES
        found.append(f"the targets are {size.views} renders made once, from cameras at "
                     f"{low:g} to {high:g} degrees of elevation (nvdiffrec renders a new view "
                     "from any direction for every image of every batch)")
    return found


__all__ = ["KEYS", "NVDIFFREC_LIGHT_RES", "Reading", "Refused", "departures", "translate"]
