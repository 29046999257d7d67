"""diffrec for Blender: optimise a mesh, PBR textures and lighting from images.

The add-on is bpy + numpy + pyzmq; it never imports torch nor the backend package (only the
wire protocol, vendored in a built extension). Each submodule registers its own classes.
"""

from __future__ import annotations

import importlib

_MODULES = ("preferences", "properties", "backend_link", "job_operators", "queue_operators",
            "follow", "nerf_io", "panel", "worlds", "object_links")


def _modules():
    return [importlib.import_module(f".{name}", __package__) for name in _MODULES]


def register() -> None:
    for module in _modules():
        module.register()


def unregister() -> None:
    for module in reversed(_modules()):
        module.unregister()
