"""``addon/core`` never reaches Blender: no module of it imports bpy (or another of Blender's
modules) anywhere in its source, functions included, nor an add-on module outside the core
(``from .. import follow`` would bring bpy in); and every one of them imports in a plain Python
where importing bpy raises."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "addon" / "core"
BLENDER = frozenset({"bpy", "bpy_extras", "bmesh", "mathutils", "gpu", "gpu_extras", "bl_math",
                     "aud", "idprop", "addon_utils", "bl_ui", "bl_operators"})
"""Modules that exist only inside Blender (or its bpy wheel)."""
VENDORED = "..vendor."
"""The one thing outside the core a core module may import: the built extension's bundled copy
of the wire protocol (numpy only; scripts/build_extension puts it in the add-on's vendor/)."""


def core_modules(core: Path = CORE) -> list[str]:
    """The module names of the core folder, its ``__init__`` as ``""``."""
    return sorted("" if path.stem == "__init__" else path.stem for path in core.glob("*.py"))


def imports(source: str) -> list[tuple[int, str]]:
    """(level, dotted name) of every import in ``source``, at any depth: ``import a.b`` is
    (0, "a.b"), ``from ..x import y`` is (2, "x.y"), ``from . import y`` is (1, "y"), and
    ``importlib.import_module("a")`` or ``__import__("a")`` with a literal name is (0, "a")."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found += [(node.level, f"{base}.{alias.name}".lstrip(".")) for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args and
              isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) and
              ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module") or
               (isinstance(node.func, ast.Name) and node.func.id == "__import__"))):
            found.append((0, node.args[0].value))
    return found


def outside_imports(source: str) -> list[str]:
    """What a core module's ``source`` imports that the core must not: a module of Blender's,
    absolutely, or anything relative that is not inside the core (``from .. import x``) but the
    vendored protocol."""
    wrong = []
    for level, name in imports(source):
        if level == 0 and name.split(".")[0] in BLENDER:
            wrong.append(name)
        elif level == 0 and name.split(".")[0] == "addon" and not name.startswith("addon.core"):
            wrong.append(name)
        elif level > 1 and not ("." * level + name).startswith(VENDORED):
            wrong.append("." * level + name)
    return wrong


def test_the_core_holds_the_bpy_free_modules():
    assert {"job_session", "messages", "panel_fields", "wire", "connection"} <= set(
        core_modules())


def test_no_core_module_imports_blender_or_the_rest_of_the_add_on():
    wrong = {name or "__init__": outside_imports((CORE / f"{name or '__init__'}.py").read_text())
             for name in core_modules()}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_the_check_sees_imports_inside_functions_and_relative_ones():
    source = (
        "import numpy as np\n"
        "from . import messages\n"
        "from .wire import protocol\n"
        "def draw():\n"
        "    import bpy.utils.previews\n"
        "    from mathutils import Vector\n"
        "    from .. import follow\n"
        "    from ..scene_updates import apply\n"
        "    import importlib\n"
        "    importlib.import_module('bmesh')\n"
        "    from addon import panel\n"
        "    from ..vendor import diffrec_protocol\n"
    )
    assert sorted(outside_imports(source)) == sorted([
        "bpy.utils.previews", "mathutils.Vector", "..follow", "..scene_updates.apply", "bmesh",
        "addon.panel"])


BLOCK_BPY = """
import importlib, sys
class NoBlender:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blender!r}:
            raise ImportError(f"{{name}} is blocked: addon/core runs without Blender")
sys.meta_path.insert(0, NoBlender())
sys.path.insert(0, {repo!r})
for name in {modules!r}:
    importlib.import_module(f"addon.core.{{name}}".rstrip("."))
from addon.core import panel_fields, wire
assert wire.protocol().__name__ == "diffrec_protocol"
assert panel_fields.default("iterations") > 0  # reads the backend's settings table
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {blender!r})
assert not loaded, loaded
try:
    import bpy
except ImportError:
    print("core imported without bpy")
"""


def test_every_core_module_imports_in_a_python_without_bpy():
    script = BLOCK_BPY.format(blender=sorted(BLENDER), repo=str(REPO), modules=core_modules())
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "core imported without bpy"
