"""scripts/gpu_check without CUDA: a dry run that installs nothing it was not given, names
every input the GPU steps would miss, and stops cleanly before the first of them, so the run
on the GPU machine is right the first time."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a dry run needs a machine without CUDA")
def test_dry_run_names_what_is_missing_and_stops_before_the_gpu(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           **{name: str(empty) for name in ("GPU_SRC", "GPU_WHEELS", "GPU_BUILT", "GPU_ASSETS",
                                            "GPU_QUALITY")}}
    done = subprocess.run(["bash", str(SCRIPT), "--budget", "120"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    for missing in ("wheels in", "the scene in", "nvdiffrec in"):
        assert f"| preflight | missing: {missing}" in summary
    assert "| info | 0 |" in summary
    assert summary.rstrip().endswith("| dry run | stopped: no CUDA device here; every later step "
                                     "needs one | 0 |")
    assert "dry run" in done.stdout
    assert (tmp_path / "out" / "logs.tar.gz").is_file()
