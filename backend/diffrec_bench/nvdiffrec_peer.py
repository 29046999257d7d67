"""Run the reference system (nvdiffrec, from its own repository) on a config, side by side
with ``scripts/bench_passes.py``: milliseconds per iteration of each pass, peak GPU memory,
whole-run wall time and held-out PSNR, as one markdown row and one JSON line.

nvdiffrec is not part of diffrec (NVIDIA's non-commercial licence): fetch it yourself and
point ``--source`` at the checkout. This script copies it into ``--work`` and applies the fixes
its users need with today's packages, each checked to apply:

- ``RasterizeCudaContext`` instead of ``RasterizeGLContext`` (no OpenGL on a headless box);
- ``torch.cross(a, b, dim=-1)`` (the dim-less form is deprecated and guesses the dimension);
- ``int`` for the ``np.int`` alias that NumPy 1.24 removed;
- ``.hdr`` / ``.exr`` read with OpenCV (imageio needs a FreeImage download for them);
- its CUDA plugin taken from ``cpp_extension.load``'s return value (torch 2.11 no longer
  makes it importable by name).

The tetrahedral grid nvdiffrec loads (``data/tets/<N>_tets.npz``) is written from diffrec's
own grid generator, so both systems start from the same grid; its BRDF table
(``data/irrmaps/bsdf_256_256.bin``) must be in the checkout.

    scripts/bench_nvdiffrec.py CONFIG --source NVDIFFREC_DIR [--iterations 100]
                               [--work DIR] [--json FILE] [--prepare-only | --reuse]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from diffrec.geometry.tetgrid import generate_bcc_grid

# nvdiffrec's run, with its peak GPU memory printed on the way out
RUNNER = """
import atexit, runpy, sys, torch
atexit.register(lambda: print(f"PEAK_MEMORY_MB {torch.cuda.max_memory_allocated() / 2**20:.1f}",
                              flush=True))
sys.argv = ["train.py", "--config", sys.argv[1]]
runpy.run_path("train.py", run_name="__main__")
"""
HDR_READER = '''def load_image_raw(fn) -> np.ndarray:
    if fn.lower().endswith((".hdr", ".exr")):
        import cv2
        image = cv2.imread(fn, cv2.IMREAD_UNCHANGED)
        return np.ascontiguousarray(image[..., 2::-1]).astype(np.float32)
    return imageio.imread(fn)'''
ITERATION_LINE = re.compile(r"^iter=\s*(\d+),.*time=([\d.]+) ms")
# validation's result: "MSE,      PSNR" then "<mse>, <psnr>" on stdout ("AVERAGES: <mse>, <psnr>"
# goes to its metrics file only)
RESULT_HEADER = "MSE,      PSNR"
RESULT_LINE = re.compile(r"^([\d.]+), ([\d.]+)$")


class PatchError(RuntimeError):
    """A fix did not apply: the checkout is not the nvdiffrec this script knows."""


def replace(path: Path, pattern: str, replacement: str, *, regex: bool = False) -> None:
    """Replace ``pattern`` in ``path`` (at least once, else PatchError)."""
    text = path.read_text()
    if regex:
        patched, count = re.subn(pattern, replacement, text)
    else:
        count = text.count(pattern)
        patched = text.replace(pattern, replacement)
    if count == 0:
        raise PatchError(f"{path}: {pattern!r} not found")
    path.write_text(patched)


def prepare(source: Path, work: Path, grid: int) -> None:
    """A patched copy of the checkout ``source`` in ``work``, with diffrec's tet grid."""
    if not (source / "train.py").is_file():
        raise SystemExit(f"{source} is not an nvdiffrec checkout (no train.py)")
    lut = source / "data" / "irrmaps" / "bsdf_256_256.bin"
    if not lut.is_file() or lut.stat().st_size != 256 * 256 * 2 * 4:
        raise SystemExit(f"{lut} is missing or not the 256x256x2 float table")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    replace(work / "train.py", "dr.RasterizeGLContext()", "dr.RasterizeCudaContext()")
    for path in work.rglob("*.py"):
        if "torch.cross(" in path.read_text():
            replace(path, r"torch\.cross\(([^()]*)\)", r"torch.cross(\1, dim=-1)", regex=True)
    replace(work / "render" / "material.py", ".astype(np.int)", ".astype(int)")
    ops = work / "render" / "renderutils" / "ops.py"
    replace(ops, "    torch.utils.cpp_extension.load(name='renderutils_plugin'",
            "    plugin = torch.utils.cpp_extension.load(name='renderutils_plugin'")
    replace(ops, "    import renderutils_plugin\n    _cached_plugin = renderutils_plugin",
            "    _cached_plugin = plugin")
    replace(work / "render" / "util.py",
            "def load_image_raw(fn) -> np.ndarray:\n    return imageio.imread(fn)", HDR_READER)
    vertices, tets, _ = generate_bcc_grid(grid)
    (work / "data" / "tets").mkdir(parents=True, exist_ok=True)
    np.savez(work / "data" / "tets" / f"{grid}_tets.npz", vertices=vertices, indices=tets)


def reference_config(config: Path, iterations: int, work: Path) -> Path:
    """``config`` for nvdiffrec: paths made absolute, ``iterations`` per pass, validation on,
    no intermediate images; written into ``work``."""
    data = json.loads(config.read_text())
    for key in ("ref_mesh", "base_mesh", "envmap"):
        if key in data:
            data[key] = str((config.parent / data[key]).resolve())
    data.update(iter=iterations, validate=True, save_interval=0, display_interval=0,
                out_dir="bench")
    path = work / "bench_config.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def parse_log(lines: list[str]) -> dict:
    """Per-pass mean ms/iteration (nvdiffrec's own timer, its first report left out), the
    final held-out PSNR and the peak memory, from nvdiffrec's output."""
    passes: list[list[float]] = [[]]
    psnr = peak = None
    for previous, line in zip(["", *lines], lines, strict=False):
        if line.startswith("Running validation"):
            passes.append([])
        elif match := ITERATION_LINE.match(line):
            passes[-1].append(float(match.group(2)))
        elif previous.strip() == RESULT_HEADER and (match := RESULT_LINE.match(line.strip())):
            psnr = float(match.group(2))
        elif line.startswith("PEAK_MEMORY_MB"):
            peak = float(line.split()[1])
    timed = [times[1:] for times in passes if len(times) > 1]
    ms = [statistics.mean(times) if times else None for times in timed]
    return {"pass1_ms": ms[0] if ms else None, "pass2_ms": ms[1] if len(ms) > 1 else None,
            "psnr": psnr, "peak_memory_mb": peak}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="an nvdiffrec config (reconstruct: no base_mesh)")
    parser.add_argument("--source", type=Path, required=True, help="an nvdiffrec checkout")
    parser.add_argument("--iterations", type=int, default=100, help="iterations per pass")
    parser.add_argument("--work", type=Path, default=Path("out/bench_nvdiffrec"))
    parser.add_argument("--json", type=Path, help="append the figures as a JSON line here")
    parser.add_argument("--prepare-only", action="store_true",
                        help="make the patched copy in --work and stop (to build its CUDA "
                             "plugin ahead, or to read the fixes)")
    parser.add_argument("--reuse", action="store_true",
                        help="run the copy already prepared in --work")
    args = parser.parse_args(argv)

    grid = json.loads(args.config.read_text()).get("dmtet_grid", 64)
    if not args.reuse:
        prepare(args.source, args.work, grid)
    if args.prepare_only:
        return 0
    config = reference_config(args.config.resolve(), args.iterations, args.work)
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", RUNNER, str(config)], cwd=args.work,
                         capture_output=True, text=True)
    wall = time.monotonic() - started
    (args.work / "run.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        print(run.stdout[-3000:] + run.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"nvdiffrec failed ({run.returncode}); log in {args.work / 'run.log'}")
    figures = {"engine": "nvdiffrec", "config": str(args.config), "iterations": args.iterations,
               **parse_log(run.stdout.splitlines()), "wall_s": wall}
    print("| engine | pass 1 ms/it | pass 2 ms/it | peak MiB | wall s | PSNR dB |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("| nvdiffrec | " + " | ".join(
        "-" if figures[key] is None else f"{figures[key]:.{2 if key == 'psnr' else 1}f}"
        for key in ("pass1_ms", "pass2_ms", "peak_memory_mb", "wall_s", "psnr")) + " |")
    if args.json:
        with args.json.open("a") as out:
            out.write(json.dumps(figures) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
