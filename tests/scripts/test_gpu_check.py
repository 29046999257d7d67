"""scripts/gpu_check without CUDA: a dry run that installs nothing it was not given, names
every input the GPU steps would miss, and stops cleanly before the first of them, so the run
on the GPU machine is right the first time; where a GPU is there but the Python cannot use it,
it fails with a sentence instead of passing as a dry run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check"


def run_with_nothing_carried(tmp_path, python=sys.executable, path=None):
    """gpu_check with empty input folders, run by PYTHON; the finished process."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PYTHON": str(python), "OUT": str(tmp_path / "out"),
           **{name: str(empty) for name in ("GPU_SRC", "GPU_WHEELS", "GPU_BUILT", "GPU_ASSETS",
                                            "GPU_QUALITY")}}
    if path:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.run(["bash", str(SCRIPT), "--budget", "120"], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a dry run needs a machine without CUDA")
def test_dry_run_names_what_is_missing_and_stops_before_the_gpu(tmp_path):
    done = run_with_nothing_carried(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    for missing in ("wheels in", "the scene in", "nvdiffrec with data/irrmaps/bsdf_256_256.bin in"):
        assert f"| preflight | missing: {missing}" in summary
    assert "| info | 0 |" in summary
    assert summary.rstrip().endswith("| stopped | no CUDA device on this machine, so this was a "
                                     "dry run up to the first GPU step | 0 |")
    assert "dry run" in done.stderr
    assert (tmp_path / "out" / "logs.tar.gz").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_that_torch_cannot_use_fails_instead_of_a_dry_run(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"  # lists a GPU, as on a machine whose torch is the wrong build
    fake.write_text('#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: x)"\n')
    fake.chmod(0o755)
    done = run_with_nothing_carried(tmp_path, path=bin_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nvidia-smi lists a GPU but" in done.stderr
    assert "dry run" not in done.stderr


def test_a_python_without_torch_is_named(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    bare = tmp_path / "bare" / "bin" / "python"
    done = run_with_nothing_carried(tmp_path, python=bare)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{bare} has no torch; set PYTHON" in done.stderr
