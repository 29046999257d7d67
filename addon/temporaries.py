"""Datablocks a job makes in the artist's file for a while (a baked start's decimated copy and
the material it is rendered in, the bake's objects, materials and image), marked so that none
outlives its job.

Their maker removes them (``Made``) when it is done or dropped. What it cannot reach is
swept (``sweep``): an undo or a redo restores the file as an undo step caught it, and a file
saved half-way through a job holds them too, so after every undo, redo and file load each
marked datablock no job is building with is removed (the jobs building are ended before an
undo or a redo, ``follow``).
"""

from __future__ import annotations

import contextlib

import bpy

MARK = "diffrec_temporary"
"""The custom property that marks a datablock as a job's temporary."""

COLLECTIONS = {"OBJECT": "objects", "MESH": "meshes", "MATERIAL": "materials",
               "IMAGE": "images"}
"""The kinds of datablock a job makes, by ``ID.id_type``, and their ``bpy.data`` collection."""


def made(block):
    """``block`` marked as a job's temporary (returned, for chaining)."""
    block[MARK] = True
    return block


def remove(block) -> None:
    """Remove ``block`` from ``bpy.data``; nothing where it is gone already. The collection is
    looked up now: one kept from before an undo points at freed data (removing through it
    crashes Blender)."""
    with contextlib.suppress(ReferenceError):
        getattr(bpy.data, COLLECTIONS[block.id_type]).remove(block)


def sweep() -> int:
    """Remove every marked datablock of the file (objects first, so that their meshes and
    materials lose those users); how many were removed."""
    found = [block for name in COLLECTIONS.values() for block in getattr(bpy.data, name)
             if block.get(MARK)]
    for block in found:
        remove(block)
    return len(found)


class Made:
    """The temporaries one maker made: each marked as it is kept (``keep``), all removed at
    once, the last made first (``remove_all``, safe more than once); truthy while any is
    kept."""

    def __init__(self):
        self._blocks: list = []

    def __bool__(self) -> bool:
        return bool(self._blocks)

    def keep(self, block):
        """``block`` (returned) marked and kept for ``remove_all``."""
        self._blocks.append(made(block))
        return block

    def remove_all(self) -> None:
        for block in reversed(self._blocks):
            remove(block)
        self._blocks.clear()
