"""diffrec for Blender: optimise a mesh, PBR textures and lighting from images.

The add-on is bpy + numpy + pyzmq; it never imports torch nor the backend package (only the
wire protocol, vendored in a built extension). Each submodule registers its own classes.
"""

from __future__ import annotations

import atexit
import importlib

_MODULES = ("preferences", "properties", "backend_link", "job_operators", "queue_operators",
            "follow", "nerf_io", "panel", "worlds", "object_links")

_registered = False
"""Whether the add-on's classes, handlers and timer are in Blender now."""


def _modules():
    return [importlib.import_module(f".{name}", __package__) for name in _MODULES]


def register() -> None:
    global _registered
    for module in _modules():
        module.register()
    _registered = True
    atexit.register(unregister)


def unregister() -> None:
    """The add-on's classes, handlers and timer taken out of Blender; nothing when they are
    out already. Also at the interpreter's exit while the add-on is registered: Blender as a
    Python module (the bpy wheel) outlives Python's teardown while an add-on's operator,
    callback, handler or timer stays registered, and then crashes (4.2) or hangs for good
    (4.5) as the process leaves. Blender itself disables its add-ons before its Python ends,
    and the 5.0 wheel after this has run, which then finds nothing to do."""
    global _registered
    atexit.unregister(unregister)
    if not _registered:
        return
    _registered = False
    for module in reversed(_modules()):
        module.unregister()
