"""Fits run on another machine: a GPU box without Blender fits, this machine judges.

``export`` writes, in one folder, what the other machine needs (each scene's cached targets
and HDRI) and ``fit.sh``, which runs every scene's ``diffrec optimize`` exactly as
``run_scene`` would (``run.optimize_command``) and leaves in ``<results>/<mode>-<scene>/`` the
result folder (``asset/``), ``optimize.log`` and ``optimize.json`` (exit status, wall
seconds). ``take_fitted`` puts such a result where ``run_scene`` expects its own, so
``scripts/bench_quality --fitted RESULTS`` judges the other machine's fits as its own.

    scripts/bench_quality --scenes dots,glyphs --preset standard --device cuda --export-fits DIR
    # on the GPU machine, from DIR:  bash fit.sh RESULTS
    scripts/bench_quality --scenes dots,glyphs --preset standard --fitted RESULTS
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

FIT_SCRIPT_HEAD = """#!/usr/bin/env bash
# Fits exported by scripts/bench_quality --export-fits; run from anywhere:  bash fit.sh RESULTS
# (PYTHON: the interpreter with diffrec importable; default python3)
set -u
here=$(cd "$(dirname "$0")" && pwd)
results=$(mkdir -p "${1:?bash fit.sh RESULTS}" && cd "$1" && pwd)
cd "$here"
fit() {  # fit NAME ARGS...: one scene's optimize, its log and its exit status and seconds
    local name=$1 started status centiseconds
    shift
    mkdir -p "$results/$name"
    started=$(date +%s%N)
    "${PYTHON:-python3}" "$@" --out-dir "$results/$name/asset" >"$results/$name/optimize.log" 2>&1
    status=$?
    centiseconds=$(( ($(date +%s%N) - started) / 10000000 ))
    printf '{"returncode": %d, "wall_s": %d.%02d}\\n' "$status" $((centiseconds / 100)) \\
        $((centiseconds % 100)) >"$results/$name/optimize.json"
    echo "fit.sh: $name exit $status"
}
"""


def folder_name(job) -> str:
    return f"{job.mode}-{job.name}"


def export(job, dataset: Path, hdri: Path, dest: Path) -> str:
    """Copy ``job``'s targets and HDRI under ``dest/<mode>-<scene>/`` and return its line of
    ``fit.sh`` (paths relative to ``dest``)."""
    from .job import optimize_command

    name = folder_name(job)
    inputs = dest / name
    shutil.rmtree(inputs, ignore_errors=True)
    shutil.copytree(dataset, inputs / "dataset", ignore=shutil.ignore_patterns("relit-*"))
    shutil.copy2(hdri, inputs / hdri.name)
    command = optimize_command(job, Path(name) / "dataset", Path(name) / hdri.name, Path())
    # the interpreter (this machine's) and the result folder are fit()'s
    out_dir = command.index("--out-dir")
    command = command[1:out_dir] + command[out_dir + 2:]
    return shlex.join(["fit", name, *command])


def export_job(job, dest: Path) -> str:
    """``export`` for one scene, its targets made (or found in the cache) first; run in a
    process of its own, as ``run_scene`` is (bpy)."""
    from diffrec_bench.demo import scene as demo_scene

    from . import dataset as datasets
    from .recipes import RECIPES

    folder, _ = datasets.ensure_dataset(job.cache, job.name, job.size, job.views, job.holdout,
                                        job.samples)
    return export(job, folder, demo_scene.bundled_hdri(RECIPES[job.name]["hdri"]), dest)


def write_fit_script(dest: Path, lines: list[str]) -> Path:
    """``dest/fit.sh``: the fits of ``lines`` (``export``'s), one after the other."""
    script = dest / "fit.sh"
    script.write_text(FIT_SCRIPT_HEAD + "\n".join(lines) + "\n")
    script.chmod(0o755)
    return script


def take_fitted(job, asset: Path) -> dict:
    """Copy the other machine's result for ``job`` (from ``job.fitted``) to ``asset`` and its
    log beside it; returns ``run_child``'s record (exit status and wall seconds as measured
    there; no CPU seconds or memory)."""
    source = Path(job.fitted) / folder_name(job)
    record_file = source / "optimize.json"
    if not record_file.is_file():
        raise FileNotFoundError(f"no fit of {folder_name(job)} in {job.fitted} (no "
                                f"{record_file.name}): was it exported and run?")
    record = json.loads(record_file.read_text())
    shutil.copy2(source / "optimize.log", job.out / "optimize.log")
    if (source / "asset").is_dir():
        shutil.copytree(source / "asset", asset)
    return {**record, "fitted_on": str(job.fitted)}
