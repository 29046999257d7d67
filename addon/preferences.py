"""Add-on preferences: the backend endpoint, the client key pair, a local backend."""

from __future__ import annotations

from pathlib import Path

import bpy
from bpy.props import BoolProperty, StringProperty

from .core import connection

ROOT_PACKAGE = __package__


def user_directory() -> Path:
    """The extension's user directory (keys, results, a local backend's data); outside an
    extension install (development), a 'diffrec' folder in Blender's user config."""
    try:
        return Path(bpy.utils.extension_path_user(ROOT_PACKAGE, create=True))
    except (ValueError, KeyError):
        return Path(bpy.utils.user_resource("CONFIG", path="diffrec", create=True))


def preferences(context=None):
    """This add-on's preferences, or None when it is registered without being enabled as an
    add-on (tests register it directly); callers then use the properties' defaults."""
    context = context or bpy.context
    addon = context.preferences.addons.get(ROOT_PACKAGE)
    return addon.preferences if addon else None


def setting(name: str, context=None):
    """The preference ``name``: the user's value, or its declared default where the add-on is
    registered without being enabled (``preferences``)."""
    prefs = preferences(context)
    if prefs is not None:
        return getattr(prefs, name)
    return DiffrecPreferences.bl_rna.properties[name].default


class DiffrecPreferences(bpy.types.AddonPreferences):
    bl_idname = ROOT_PACKAGE

    endpoint: StringProperty(
        name="Backend",
        description="Empty for a backend on this computer, tcp://HOST:PORT for a local server, "
        "or the pairing string printed by 'diffrec keys init' on a remote server",
        default="",
    )
    auto_start: BoolProperty(
        name="Start a local backend",
        description="Start 'python -m diffrec serve' on this computer when none answers",
        default=False,
    )
    python: StringProperty(
        name="Backend Python",
        description="The Python interpreter that has the diffrec backend installed",
        subtype="FILE_PATH",
        default="python3",
    )
    timeout: bpy.props.FloatProperty(
        name="Timeout", description="Seconds to wait for an answer", default=10.0, min=1.0
    )
    use_learned_world: BoolProperty(
        name="Use the learned light",
        description="Make a result's learned light the scene's world when it is imported (your "
        "world stays in the file either way; Switch Light swaps them)",
        default=False,
    )

    def draw(self, context):
        layout = self.layout
        layout.prop(self, "endpoint")
        layout.prop(self, "auto_start")
        sub = layout.row()
        sub.active = self.auto_start
        sub.prop(self, "python")  # labelled: the guide names it Backend Python
        layout.prop(self, "timeout")
        layout.prop(self, "use_learned_world")
        box = layout.box()
        box.label(text="This computer's key (give it to 'diffrec keys allow' on the server):")
        public_file = user_directory() / f"{connection.KEY_NAME}.key"
        if public_file.exists():
            row = box.row()
            row.label(text=public_file.read_text().strip())
            row.operator("diffrec.copy_public_key", text="", icon="COPYDOWN")
        else:
            box.operator("diffrec.generate_keys", icon="KEY_HLT")
        layout.operator("diffrec.test_connection", icon="LINKED")


CLASSES = (DiffrecPreferences,)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
