"""The learned light beside the artist's world, never instead of it.

A result's light comes in as a world of its own ("<name> optimised"). The scene keeps the
artist's world unless the preference "Use the learned light" says otherwise; the Switch Light
button (``diffrec.switch_world``) swaps the two, one click each way. ``scene.diffrec`` points
at both worlds, so neither is ever left without a user (hence lost when the .blend is saved):
the artist's world stays in the file even while the scene shows the learned one.
"""

from __future__ import annotations

import bpy

from . import preferences
from .core import messages

LEARNED = "diffrec_learned"
"""Custom property marking a world the add-on made from a result's light."""


def is_learned(world) -> bool:
    return world is not None and bool(world.get(LEARNED, False))


def adopt(context, world: bpy.types.World) -> None:
    """Keep the learned ``world`` beside the scene's own: remembered as the scene's learned
    light (with a fake user: older learned worlds stay in the file too) and the scene's
    current world remembered as the artist's; the scene shows ``world`` only when the
    preference asks for it."""
    scene, settings = context.scene, context.scene.diffrec
    world[LEARNED] = True
    world.use_fake_user = True
    if not is_learned(scene.world):
        settings.artist_world = scene.world
    settings.learned_world = world
    if preferences.setting("use_learned_world", context):
        scene.world = world


def switch(scene) -> bpy.types.World | None:
    """Show the learned light if the scene shows the artist's world, else the artist's world
    (None when the scene had none); returns the world now shown."""
    settings = scene.diffrec
    if is_learned(scene.world):
        scene.world = settings.artist_world
    else:
        settings.artist_world = scene.world
        scene.world = settings.learned_world
    return scene.world


class DIFFREC_OT_switch_world(bpy.types.Operator):
    """Switch the scene between your world and the light diffrec learned"""

    bl_idname = "diffrec.switch_world"
    bl_label = "Switch Light"
    bl_options = {"REGISTER", "UNDO"}  # noqa: RUF012  (Blender reads a set)

    @classmethod
    def poll(cls, context):
        return context.scene is not None and context.scene.diffrec.learned_world is not None

    @messages.reported
    def execute(self, context):
        shown = switch(context.scene)
        whose = "the learned light" if is_learned(shown) else "your world"
        self.report({"INFO"}, f"The scene now uses {whose}"
                              f"{f' ({shown.name})' if shown else ' (none)'}.")
        return {"FINISHED"}


class DIFFREC_PT_light(bpy.types.Panel):
    """Which light the scene shows: the artist's world or the learned one."""

    bl_idname = "DIFFREC_PT_light"
    bl_label = "Learned Light"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "diffrec"
    bl_parent_id = "DIFFREC_PT_main"

    @classmethod
    def poll(cls, context):
        return context.scene.diffrec.learned_world is not None

    def draw(self, context):
        scene = context.scene
        learned = is_learned(scene.world)
        self.layout.label(text=f"Showing: {scene.world.name if scene.world else 'no world'}"
                               f"{' (learned)' if learned else ''}")
        self.layout.operator(DIFFREC_OT_switch_world.bl_idname, icon="WORLD",
                             text="Use My World" if learned else "Use Learned Light")


CLASSES = (DIFFREC_OT_switch_world, DIFFREC_PT_light)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
