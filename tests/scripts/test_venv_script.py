"""scripts/lib/venv.sh: a script asking for fewer extras than are installed does not
reinstall, and a reinstall keeps the extras another script installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

VENV_SH = Path(__file__).resolve().parents[2] / "scripts" / "lib" / "venv.sh"


def _bash(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"source {VENV_SH}; {command}"], capture_output=True,
                          text=True, timeout=30)


def test_installed_extras_that_include_the_wanted_ones_satisfy_them():
    assert _bash('extras_include "blender,cluster,test" "test,blender"').returncode == 0
    assert _bash('extras_include "blender,test" ""').returncode == 0
    assert _bash('extras_include "blender,test" "test,cluster"').returncode == 1
    assert _bash('extras_include "" "test"').returncode == 1


def test_a_reinstall_keeps_the_extras_installed_before():
    union = _bash('extras_union "blender,test" "test,blender,cluster"').stdout.strip()
    assert union == "blender,cluster,test"
    assert _bash('extras_union "" ""').stdout.strip() == ""
