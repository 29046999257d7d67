"""The checkout this package runs from: its root, its ``scripts/``, and the add-on's package
``addon`` imported from its ``addon/`` folder (Blender loads the add-on as an extension; no
installer puts it on the path). Needs an editable install (``pip install -e backend``)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
ADDON = REPO / "addon"


def addon_package() -> ModuleType:
    """The package ``addon``: this checkout's ``addon/`` unless one is imported already.
    Raises ImportError outside a checkout."""
    if "addon" not in sys.modules:
        init = ADDON / "__init__.py"
        if not init.is_file():
            raise ImportError(f"no add-on at {ADDON}: diffrec_bench runs from a checkout "
                              "(pip install -e backend)")
        spec = importlib.util.spec_from_file_location("addon", init,
                                                      submodule_search_locations=[str(ADDON)])
        package = importlib.util.module_from_spec(spec)
        sys.modules["addon"] = package
        spec.loader.exec_module(package)
    return sys.modules["addon"]


def addon_module(name: str) -> ModuleType:
    """The add-on's module ``addon.<name>`` (``addon_package``'s)."""
    addon_package()
    return importlib.import_module(f"addon.{name}")


def enable_addon() -> ModuleType:
    """Turn the add-on on in this bpy session, as its preferences' checkbox does; returns the
    package. ``addon_utils`` reloads a module whose ``__time__`` is not its file's time, and
    reloading needs the package on ``sys.path``: the time is set so it keeps this one."""
    import addon_utils  # bpy's, importable once bpy is

    package = addon_package()
    package.__time__ = os.path.getmtime(package.__file__)
    addon_utils.enable("addon", default_set=True)
    return package
