"""The artist's selection, active object and mode, kept around work that must change them
(main thread only): operators such as Decimate, Smart UV Project, a Cycles bake and the glTF
importer act on the selection and run in Object Mode."""

from __future__ import annotations

import contextlib

import bpy


@contextlib.contextmanager
def kept(view_layer):
    """Object Mode for the block; afterwards the selection, the active object and its mode
    are as before (objects removed in the block are left out)."""
    active = view_layer.objects.active
    mode = active.mode if active is not None else "OBJECT"
    if mode != "OBJECT":
        bpy.ops.object.mode_set(mode="OBJECT")
    selected = [obj for obj in view_layer.objects if obj.select_get(view_layer=view_layer)]
    try:
        yield
    finally:
        view_layer.update()  # synced: Blender 4.2 crashed reading an object removed in the block
        present = set(view_layer.objects)
        only(view_layer, [obj for obj in selected if obj in present],
             active if active in present else None)
        if mode != "OBJECT" and active in present:
            bpy.ops.object.mode_set(mode=mode)


def only(view_layer, selected, active) -> None:
    """Select exactly ``selected`` in ``view_layer`` and make ``active`` the active object."""
    for obj in view_layer.objects:
        if obj is not None:  # an object removed since the layer was last synced reads None
            obj.select_set(False, view_layer=view_layer)
    for obj in selected:
        obj.select_set(True, view_layer=view_layer)
    view_layer.objects.active = active
