"""Pointers diffrec keeps to the artist's objects (main thread only): a result's mark of its
original (``ORIGINAL``), a job's object and its result (``DiffrecJob.original``,
``.result``). Blender counts each as a user, and its Delete only unlinks an object that has
other users: a deleted object would stay in the file, outside every scene, while one points
at it. So an object in no scene counts as gone (``placed``), and before each save every
pointer to one is dropped (``release_deleted``), which lets the file forget it.
"""

from __future__ import annotations

import bpy

ORIGINAL = "diffrec_original"
"""The custom property a result carries: the object its job started from (in files from
before it was a pointer: that object's name)."""
_JOB_POINTERS = ("original", "result")


def alive(block):
    """``block`` (any datablock, or None), or None where Blender removed it: a Python
    reference it no longer backs (deleted from the file, or swapped by an undo)."""
    try:
        return block if block is not None and block.name is not None else None
    except ReferenceError:
        return None


def placed(obj: bpy.types.Object | None) -> bpy.types.Object | None:
    """``obj`` while some scene holds it, else None (deleted: kept only by a pointer, or
    removed from the file, ``alive``)."""
    obj = alive(obj)
    return obj if obj is not None and obj.users_scene else None


@bpy.app.handlers.persistent
def release_deleted(*_args) -> None:
    """Drop every pointer diffrec keeps to an object in no scene (see the module)."""
    for obj in bpy.data.objects:
        mark = obj.get(ORIGINAL)
        if isinstance(mark, bpy.types.Object) and placed(mark) is None:
            del obj[ORIGINAL]
    for scene in bpy.data.scenes:
        for entry in scene.diffrec.jobs:
            for name in _JOB_POINTERS:
                if getattr(entry, name) is not None and placed(getattr(entry, name)) is None:
                    setattr(entry, name, None)


def register() -> None:
    bpy.app.handlers.save_pre.append(release_deleted)


def unregister() -> None:
    if release_deleted in bpy.app.handlers.save_pre:
        bpy.app.handlers.save_pre.remove(release_deleted)
