"""Install the built extension zip into a throwaway user folder and enable it (see harness.py).

Needs DIFFREC_EXTENSION_ZIP (the zip for this platform) and BLENDER_USER_RESOURCES (an empty
folder) in the environment before Blender starts.
"""

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # blender --python does not add it
import harness  # noqa: I001
import bpy

PACKAGE = "bl_ext.user_default.diffrec"


def check_installs_enables_and_uses_the_vendored_protocol():
    user = Path(os.environ["BLENDER_USER_RESOURCES"]).resolve()
    result = bpy.ops.extensions.package_install_files(
        filepath=os.environ["DIFFREC_EXTENSION_ZIP"], repo="user_default", enable_on_install=True
    )
    assert result == {"FINISHED"}, result
    module = sys.modules[PACKAGE]
    assert Path(module.__file__).resolve().is_relative_to(user / "extensions"), module.__file__
    assert PACKAGE in bpy.context.preferences.addons
    assert hasattr(bpy.types, "DIFFREC_OT_optimize") and hasattr(bpy.types.Scene, "diffrec")
    protocol = sys.modules[f"{PACKAGE}.core.wire"].protocol()
    assert protocol.__name__ == f"{PACKAGE}.vendor.diffrec_protocol", protocol.__name__
    assert "diffrec" not in sys.modules  # the backend package is never imported
    _the_installed_pyzmq_imports(user / "extensions" / ".local")
    import addon_utils  # importable only once bpy is

    preferences = sys.modules[f"{PACKAGE}.preferences"]
    assert preferences.user_directory().resolve().is_relative_to(user)
    addon_utils.disable(PACKAGE)
    assert not hasattr(bpy.types, "DIFFREC_OT_optimize")


def _the_installed_pyzmq_imports(local: Path) -> None:
    """The pyzmq wheel this Blender chose from the zip and installed under ``local`` imports
    in this Python, alone (``-S``: the test environment's own pyzmq out of sight, as a
    Blender's Python has none)."""
    found = sorted(local.glob("lib/python3*/site-packages/zmq/__init__.py"))
    assert len(found) == 1, found
    site = found[0].parents[1]
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import zmq; zmq.Context().term(); "
              "print(zmq.__file__)")
    run = subprocess.run([sys.executable, "-S", "-c", script, str(site)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).resolve().is_relative_to(site.resolve()), run.stdout


harness.main(globals())
