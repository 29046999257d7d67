"""The shell scripts whose header lists their options answer -h and --help with it at once:
before any environment, build folder or output is made."""

import os
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("name", ["install_gpu", "build_gpu_wheels", "gpu_prepare", "gpu_check",
                                  "install_tools"])
def test_help_prints_the_header_and_does_nothing_else(tmp_path, name, flag):
    made = tmp_path / "made"  # every folder a script would create, pointed here
    env = {**os.environ, "DIFFREC_VENV": str(made / "venv"), "GPU_BUILD_ENV": str(made / "env"),
           "GPU_BUILT": str(made / "built"), "GPU_WHEELS": str(made / "wheels"),
           "GPU_ASSETS": str(made / "assets"), "OUT": str(made / "out")}
    done = subprocess.run(["bash", str(SCRIPTS / name), flag], capture_output=True, text=True,
                          env=env, timeout=30, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    header = (SCRIPTS / name).read_text().splitlines()[1]
    assert done.stdout.splitlines()[0] == header.removeprefix("# ")
    assert not any(line.startswith("#") for line in done.stdout.splitlines())
    assert not made.exists()
