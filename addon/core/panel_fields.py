"""The panel's fields that stand for backend settings, in one table, and everything derived
from it: the fields' defaults, the preset menu, the values a preset fills in, and the
``optimize`` settings a submission sends.

The presets, their notes and the defaults are read from the backend's own table,
``diffrec.protocol.settings`` (through ``wire``), never copied here. No bpy: the properties
and the submission use this module, and tests read it without Blender.
"""

from __future__ import annotations

from .wire import protocol

FIELD_SETTINGS = {
    "mode": "mode",
    "preset": "preset",
    "iterations": "iterations",
    "batch": "batch",
    "train_resolution": "train_res",
    "texture_resolution": "texture_res",
    "light_resolution": "light_res",
    "grid": "grid",
    "gpus": "ranks",
    "shading": "renderer",
}
"""The panel's field -> the ``optimize`` setting it sets (the panel's ``light`` is not one to
one: ``optimize_settings`` words it)."""
SENT_AS = {"grid": "dmtet_grid"}
"""Settings sent under an alias every server reads (``settings.ALIASES``): protocol 5 servers
know the grid as ``dmtet_grid`` only, and Optimize may submit to a local backend it has just
started without asking its protocol."""

CUSTOM = "CUSTOM"
"""The preset menu's entry that fills nothing (the protocol's ``custom``)."""


def to_setting(field: str, value):
    """The panel's ``value`` of ``field`` as its setting's value: preset identifiers are the
    settings' names in capitals, texture sizes enum identifiers (text)."""
    if field == "preset":
        return value.lower()
    if field == "texture_resolution":
        return int(value)
    return value


def to_field(field: str, value):
    """A setting's ``value`` as the panel's value of ``field`` (``to_setting`` undone)."""
    if field == "preset":
        return value.upper()
    if field == "texture_resolution":
        return str(value)
    return value


def default(field: str):
    """The panel's default for ``field``: its setting's default (``Settings``, whose sizes
    are the default preset's)."""
    return to_field(field, protocol().settings.FIELDS[FIELD_SETTINGS[field]].default)


def preset_items() -> list[tuple[str, str, str]]:
    """The preset menu: (identifier, name, description) per preset of the backend's table,
    in its order, then Custom."""
    settings = protocol().settings
    return [*((to_field("preset", name), name.title(), settings.PRESET_NOTES[name])
              for name in settings.PRESETS),
            (CUSTOM, "Custom", "Your own settings")]


def preset_values(preset: str, mode: str) -> dict:
    """{field: value} that the preset menu's entry ``preset`` (not CUSTOM) fills in for a job
    in ``mode``: the fields whose settings the backend's preset sets."""
    table = protocol().settings.preset_values(to_setting("preset", preset), mode)
    return {field: to_field(field, table[setting]) for field, setting in FIELD_SETTINGS.items()
            if setting in table}


def iterations_for_mode(preset: str, mode: str, iterations: int) -> int:
    """The Iterations field once the mode is ``mode``: the preset's pass length for that mode
    where the field holds the preset's length for one of the modes (``preview`` gives
    one-pass modes a longer cap), else the artist's own ``iterations``."""
    if preset == CUSTOM:
        return iterations
    lengths = {other: preset_values(preset, other)["iterations"]
               for other in protocol().settings.MODES}
    return lengths[mode] if iterations in lengths.values() else iterations


def plateau_window(preset: str, mode: str) -> int:
    """The stopping rule's window the server runs a job of the preset menu's ``preset`` with
    (the panel does not set it: the preset's, else the setting's default)."""
    settings = protocol().settings
    table = settings.preset_values(to_setting("preset", preset), mode)  # custom: {}
    return table.get("plateau_window", settings.FIELDS["plateau_window"].default)


def light_setting(light: str, target_source: str, has_envmap: bool, lamps: int = 0) -> str:
    """The ``light`` setting for the panel's Light ``light``: Keep HDRI keeps the world fixed;
    Auto keeps it where the targets are renders of the scene lit by it alone (``target_source``
    RENDER, a world sent and no ``lamps`` lighting the renders: it is the true light), else
    learns; Learn learns, starting from the world when one is sent. Lamps are never sent, so
    where they light the renders the world is not the whole light."""
    if light == "KEEP" or (light == "AUTO" and target_source == "RENDER" and has_envmap
                           and lamps == 0):
        return "fixed"
    return "learn-from-envmap" if has_envmap else "learn"


def optimize_settings(panel, has_envmap: bool, lamps: int = 0) -> dict:
    """The panel's choices (``panel``: anything with the FIELD_SETTINGS attributes,
    ``light``, ``target_source`` and ``triangles``) as the backend's ``optimize`` settings
    (docs/protocol.md): every value the panel shows is sent, so the server runs what the
    panel says, and the preset is named ("custom" for Custom). The grid goes with reconstruct
    only (as ``SENT_AS`` names it), the shading with materials only, the GPUs when more than
    one, the triangle budget when set; the light as ``light_setting`` decides it with
    ``lamps``, the lamps lighting the renders."""
    values = {setting: to_setting(field, getattr(panel, field))
              for field, setting in FIELD_SETTINGS.items()}
    if panel.mode != "reconstruct":
        del values["grid"]
    if panel.mode != "materials":  # the path-traced pass keeps the mesh fixed
        del values["renderer"]
    if panel.gpus <= 1:
        del values["ranks"]
    if panel.triangles > 0:
        values["target_triangles"] = panel.triangles
    values["light"] = light_setting(panel.light, panel.target_source, has_envmap, lamps)
    values["preview_every"] = max(10, panel.iterations // 50)  # about 50 live previews
    return {SENT_AS.get(setting, setting): value for setting, value in values.items()}
