"""``scripts/build_extension`` from a Python without bpy: it hands over to the project's
environment, or says in one sentence how to get one, and leaves no partial ``--out``."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_extension"


def test_without_bpy_or_a_venv_it_says_how_to_get_one_and_writes_nothing(tmp_path):
    out = tmp_path / "dist"
    env = {**os.environ, "DIFFREC_VENV": str(tmp_path / "no-venv")}
    done = subprocess.run([sys.executable, "-S", str(SCRIPT), "--out", str(out),
                           "--wheels-cache", str(tmp_path / "cache")],  # -S: no bpy
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "scripts/build_extension: validating the zips needs the bpy wheel, in this Python or "
        f"in {tmp_path / 'no-venv' / 'bin' / 'python'}: run scripts/test once to set that up, "
        "or pass --no-validate"]
    assert not out.exists() and not (tmp_path / "cache").exists()
