"""The extension as shipped: built zips pass Blender's validator and install into a throwaway
user folder; the add-on loads and registers in a Python where torch cannot be imported."""

import os
import subprocess
import sys

import pytest
from blender_run import HERE

REPO = HERE.parents[1]

NO_TORCH = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "diffrec"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Blocker())
sys.path.insert(0, sys.argv[1])
import bpy
import addon
addon.register()
assert hasattr(bpy.types, "DIFFREC_OT_optimize")
from addon import follow, job_operators, submission
from addon.core import job_session, wire
protocol = wire.protocol()  # the wire protocol loads without the backend package
assert protocol.__name__ == "diffrec_protocol"
addon.unregister()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "diffrec"))
assert not loaded, loaded
print("loaded without torch")
"""


@pytest.mark.blender
def test_addon_imports_and_registers_without_torch():
    result = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(REPO)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "loaded without torch" in result.stdout


@pytest.mark.blender
def test_built_zips_validate_and_install(tmp_path):
    out = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, str(REPO / "scripts/build_extension"), "--out", str(out),
         "--wheels-cache", str(REPO / "dist" / "wheels-cache")],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    zips = sorted(path.name for path in out.glob("*.zip"))
    assert zips == [f"diffrec-0.1.0-{platform}.zip" for platform in
                    ("linux-x64", "macos-arm64", "macos-x64", "windows-x64")], zips
    assert build.stdout.count("Success parsing TOML") == 4  # Blender's validator, per zip
    user = tmp_path / "blender-user"
    user.mkdir()
    env = {**os.environ, "BLENDER_USER_RESOURCES": str(user),
           "DIFFREC_EXTENSION_ZIP": str(out / "diffrec-0.1.0-linux-x64.zip")}
    results = tmp_path / "install.json"
    install = subprocess.run(
        [sys.executable, str(HERE / "checks_install.py"), "--", "--json", str(results)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert results.exists(), install.stdout + install.stderr
    errors = {name: error for name, error in __import__("json").loads(results.read_text()).items()
              if error}
    assert not errors, errors
