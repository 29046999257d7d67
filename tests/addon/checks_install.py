"""Install the built extension zip into a throwaway user folder and enable it (see harness.py).

Needs DIFFREC_EXTENSION_ZIP (the zip for this platform) and BLENDER_USER_RESOURCES (an empty
folder) in the environment before Blender starts.
"""

import os
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
    import addon_utils  # importable only once bpy is

    preferences = sys.modules[f"{PACKAGE}.preferences"]
    assert preferences.user_directory().resolve().is_relative_to(user)
    addon_utils.disable(PACKAGE)
    assert not hasattr(bpy.types, "DIFFREC_OT_optimize")


harness.main(globals())
