"""Fits exported for another machine (``diffrec_bench.quality.remote``) without Blender: the
exported inputs, ``fit.sh`` run with a stand-in interpreter, and the result taken back as
``run_scene`` takes its own."""

import json
import os
import subprocess
from dataclasses import replace

import pytest

from diffrec_bench.quality import remote
from diffrec_bench.quality.job import SceneJob

# stands in for python3: says what it was asked, writes a result where --out-dir (the last
# argument) points, and fails with status 3
STAND_IN = """#!/bin/sh
echo "$@"
for last; do :; done
mkdir -p "$last" && echo glb > "$last/mesh.glb"
exit 3
"""


@pytest.fixture
def exported(tmp_path):
    dataset = tmp_path / "cache" / "ring-0123"
    (dataset / "relit-abcd").mkdir(parents=True)
    for name in ("scene.json", "true_mesh.obj", "relit-abcd/targets.npz"):
        (dataset / name).write_text(name)
    hdri = tmp_path / "city.exr"
    hdri.write_bytes(b"exr")
    job = SceneJob("ring", tmp_path / "judged", tmp_path / "cache", "materials", "standard", 64,
                   8, 2, 16, iterations=7, device="cuda")
    dest = tmp_path / "export"
    script = remote.write_fit_script(dest, [remote.export(job, dataset, hdri, dest)])
    return job, dest, script


def test_export_copies_the_targets_and_hdri_but_not_the_relit_cache(exported):
    _, dest, script = exported
    inputs = dest / "materials-ring"
    assert (inputs / "dataset" / "true_mesh.obj").read_text() == "true_mesh.obj"
    assert (inputs / "city.exr").read_bytes() == b"exr"
    assert not (inputs / "dataset" / "relit-abcd").exists()
    assert os.access(script, os.X_OK)


def test_fit_script_runs_the_optimize_command_and_records_its_status(exported, tmp_path):
    job, _, script = exported
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    results = tmp_path / "results"
    done = subprocess.run(["bash", str(script), str(results)], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": str(stand_in)}, cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and "materials-ring exit 3" in done.stdout, done.stderr
    fit = results / "materials-ring"
    asked = (fit / "optimize.log").read_text().split()
    assert asked[:3] == ["-m", "diffrec", "optimize"]

    def value(flag):
        return asked[asked.index(flag) + 1]

    assert value("--dataset") == "materials-ring/dataset"
    assert value("--envmap") == "materials-ring/city.exr"
    assert value("--base-mesh") == "materials-ring/dataset/true_mesh.obj"
    assert [value(flag) for flag in ("--preset", "--iterations", "--device")] == ["standard", "7",
                                                                                  "cuda"]
    assert asked[-2:] == ["--out-dir", str(fit / "asset")]
    record = json.loads((fit / "optimize.json").read_text())
    assert record["returncode"] == 3 and 0 <= record["wall_s"] < 60

    judged = replace(job, fitted=results)
    judged.out.mkdir(parents=True)
    taken = remote.take_fitted(judged, judged.out / "asset")
    assert taken == {**record, "fitted_on": str(results)}
    assert (judged.out / "asset" / "mesh.glb").read_text() == "glb\n"
    assert (judged.out / "optimize.log").read_text().startswith("-m diffrec optimize")


def test_a_scene_that_was_not_fitted_is_named(exported, tmp_path):
    job, _, _ = exported
    with pytest.raises(FileNotFoundError, match="no fit of materials-ring in"):
        remote.take_fitted(replace(job, fitted=tmp_path / "nothing"), tmp_path / "asset")
