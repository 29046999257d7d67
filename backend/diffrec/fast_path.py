"""Whether the CUDA fast path works here: each check runs in a child process, so a package that
crashes the interpreter (a segmentation fault in a compiled extension) is reported, not fatal.

``diffrec info --check`` runs ``CHECKS`` in order and prints one line per check; a failed
check says what failed and how to fix it, and the checks that need it are skipped.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass

CHILD_TIMEOUT_S = 300.0  # a first import may compile kernels


@dataclass(frozen=True)
class Check:
    """One probe: ``code`` runs in a fresh interpreter and prints a short result on success;
    ``needs`` names an earlier check that must have passed; ``fix`` is said on failure."""

    name: str
    code: str
    fix: str
    needs: str | None = None


@dataclass(frozen=True)
class Outcome:
    name: str
    ok: bool | None  # None: skipped
    detail: str

    def line(self) -> str:
        mark = {True: "ok     ", False: "FAILED ", None: "skipped"}[self.ok]
        return f"{mark} {self.name}: {self.detail}"


_TRIANGLE = """
import torch
from diffrec import raster
pos = torch.tensor([[[-0.5, -0.5, 0, 1], [0.5, -0.5, 0, 1], [0, 0.5, 0, 1]]], device="cuda")
tri = torch.tensor([[0, 1, 2]], dtype=torch.int32, device="cuda")
ids = {}
for impl in ("nvdiffrast", "torch"):
    rast, _ = raster.rasterize(raster.RasterContext("cuda", impl=impl), pos, tri, (64, 64))
    ids[impl] = rast[..., 3] > 0
covered, differ = int(ids["nvdiffrast"].sum()), int((ids["nvdiffrast"] != ids["torch"]).sum())
assert 450 < covered < 575, f"the triangle covers {covered} of 4096 pixels, not about 512"
assert differ <= 8, f"the engines disagree on {differ} pixels"
print(f"covers {covered} of 4096 pixels; the torch engine agrees on all but {differ}")
"""

_HASH_GRID = """
import torch, tinycudann as tcnn
from diffrec.neural import HashGridConfig
encoding = tcnn.Encoding(3, HashGridConfig().tcnn_config(), dtype=torch.float32)
features = encoding(torch.rand(4096, 3, device="cuda"))
features.sum().backward()
torch.cuda.synchronize()
assert torch.isfinite(features).all() and encoding.params.grad.abs().sum() > 0
print(f"hash grid forward and backward on {features.shape[0]} points")
"""

CHECKS = (
    Check("CUDA build of torch", "import sys, torch; sys.exit('torch ' + torch.__version__ + "
          "' is a CPU build') if torch.version.cuda is None else print('torch', "
          "torch.__version__, 'for CUDA', torch.version.cuda)",
          "reinstall torch from PyTorch's CUDA index (`pip install --force-reinstall "
          "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128`, cu128 or another "
          "CUDA version the driver supports: see nvidia-smi)"),
    Check("CUDA device", "import sys, torch; sys.exit('torch sees no CUDA device') if not "
          "torch.cuda.is_available() else print(torch.cuda.get_device_name())",
          "check that nvidia-smi lists the GPU (a driver is installed and loaded) and that "
          "CUDA_VISIBLE_DEVICES does not hide it", needs="CUDA build of torch"),
    Check("nvdiffrast imports",
          "import nvdiffrast, nvdiffrast.torch; print(nvdiffrast.__version__)",
          "run scripts/install_gpu (it needs nvcc matching torch's CUDA)", needs="CUDA device"),
    Check("one-triangle render", _TRIANGLE,
          "rebuild nvdiffrast for this GPU (scripts/install_gpu); until then diffrec renders "
          "with its torch engine (DIFFREC_RASTER=torch)", needs="nvdiffrast imports"),
    Check("tinycudann imports", "import tinycudann; print('imported')",
          "run scripts/install_gpu (it needs nvcc matching torch's CUDA)", needs="CUDA device"),
    Check("hash grid on tinycudann", _HASH_GRID,
          "rebuild tiny-cuda-nn (TCNN_REF picks another version in scripts/install_gpu) or "
          "uninstall it (pip uninstall tinycudann); meanwhile DIFFREC_NEURAL=torch runs the "
          "material on diffrec's torch engine", needs="tinycudann imports"),
)


def run_child(code: str, timeout: float = CHILD_TIMEOUT_S) -> tuple[bool, str]:
    """Run ``code`` in a fresh interpreter: (True, its last output line) on exit status 0,
    else (False, why: the last error line, the signal that killed it, or the timeout)."""
    try:
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout:.0f} s"
    if child.returncode == 0:
        lines = child.stdout.strip().splitlines()
        return True, lines[-1] if lines else "ok"
    if child.returncode < 0:
        name = signal.Signals(-child.returncode).name
        return False, f"the process crashed ({name})"
    lines = child.stderr.strip().splitlines()
    return False, lines[-1] if lines else f"exit status {child.returncode}"


def check_fast_path(checks=CHECKS, timeout: float = CHILD_TIMEOUT_S) -> list[Outcome]:
    """Run ``checks`` in order, skipping those whose ``needs`` did not pass."""
    passed: set[str] = set()
    outcomes = []
    for check in checks:
        if check.needs is not None and check.needs not in passed:
            outcomes.append(Outcome(check.name, None, f"needs {check.needs}"))
            continue
        ok, detail = run_child(check.code, timeout)
        if ok:
            passed.add(check.name)
        else:
            detail = f"{detail}. Fix: {check.fix}"
        outcomes.append(Outcome(check.name, ok, detail))
    return outcomes
