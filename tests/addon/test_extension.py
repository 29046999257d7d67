"""The extension as shipped: built zips pass Blender's validator and install into a throwaway
user folder; each zip's pyzmq imports on its Blenders' Python; the add-on loads and registers in
a Python where torch cannot be imported."""

import os
import subprocess
import sys
import tomllib
import zipfile

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


LEFT_ENABLED = """
import sys
sys.path.insert(0, sys.argv[1])
import bpy
import addon_utils
addon_utils.enable("addon", default_set=True)
from addon import follow
follow._pumped()  # the jobs' timer, as while a job is followed
print("left enabled", flush=True)
"""


@pytest.mark.blender
def test_a_script_that_leaves_the_addon_enabled_exits_cleanly():
    """The bpy wheel outlives Python's teardown while an add-on stays registered, then crashes
    (4.2: exit status -11) or hangs (4.5) as the process leaves; the add-on unregisters at
    the interpreter's exit, so a script that never disables it ends as it should."""
    result = subprocess.run([sys.executable, "-c", LEFT_ENABLED, str(REPO)],
                            capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout.strip()) == (0, "left enabled"), result.stderr


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
    assert zips == [f"diffrec-0.1.0-{platform}-{blenders}.zip"
                    for platform in ("linux-x64", "macos-arm64", "macos-x64", "windows-x64")
                    for blenders in ("blender-4.2-to-5.0", "blender-5.1-and-later")], zips
    assert build.stdout.count("Success parsing TOML") == 8  # Blender's validator, per zip
    ranges = {name: _blender_range(out / name) for name in zips}
    assert set(ranges.values()) == {("4.2.0", "5.1.0"), ("5.1.0", None)}
    this_python = out / "diffrec-0.1.0-linux-x64-blender-4.2-to-5.0.zip"  # 3.11, as bpy's
    _pyzmq_imports_as_blender_42_installs_it(this_python, tmp_path / "site")
    user = tmp_path / "blender-user"
    user.mkdir()
    env = {**os.environ, "BLENDER_USER_RESOURCES": str(user),
           "DIFFREC_EXTENSION_ZIP": str(this_python)}
    results = tmp_path / "install.json"
    install = subprocess.run(
        [sys.executable, str(HERE / "checks_install.py"), "--", "--json", str(results)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert results.exists(), install.stdout + install.stderr
    errors = {name: error for name, error in __import__("json").loads(results.read_text()).items()
              if error}
    assert not errors, errors


def _blender_range(path) -> tuple[str, str | None]:
    with zipfile.ZipFile(path) as archive:
        manifest = tomllib.loads(archive.read("blender_manifest.toml").decode())
    return manifest["blender_version_min"], manifest.get("blender_version_max")


def _pyzmq_imports_as_blender_42_installs_it(path, site) -> None:
    """Blender 4.2.0 installs every wheel of the platform whatever its Python tag and, of two
    of one version, the one whose name sorts last (its wheel_manager): that wheel of the zip
    must import on this Python (3.11, Blender 4.2 to 5.0's). (checks_install has Blender
    install the zip and imports what it installed: in 4.2.23, which reads the tag, under
    scripts/test_blender_lts.)"""
    with zipfile.ZipFile(path) as archive:
        wheels = sorted(name for name in archive.namelist() if name.startswith("wheels/"))
        site.mkdir()
        (site / "pyzmq.whl").write_bytes(archive.read(wheels[-1]))
    with zipfile.ZipFile(site / "pyzmq.whl") as wheel:
        wheel.extractall(site)
    imported = subprocess.run(
        [sys.executable, "-c", "import zmq; zmq.Context().term(); print(zmq.__file__)"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(site)})
    assert imported.returncode == 0, f"{wheels}: {imported.stderr[-400:]}"
    assert imported.stdout.strip().startswith(str(site)), imported.stdout  # not the venv's
