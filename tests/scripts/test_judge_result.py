"""scripts/judge_result.py on the CPU: nvdiffrec's files (its mesh in the reference's own
coordinates, its light in its lat-long layout) and diffrec's (the box's coordinates, Blender's
layout) each score far above anything else when they hold the truth, each read as its own
system wrote it, and the light the result came with is the one it is judged under."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from diffrec.io import Asset, Material, read_image, write_image, write_obj
from diffrec.light.equirect import equirect_pixel_directions, from_nvdiffrec_layout
from diffrec.mesh.box import fit_to_box
from diffrec.mesh.primitives import uv_sphere
from diffrec_bench import judge_result


def ball() -> Asset:
    """A banded ball of radius 0.8 (its fit into the box [-1, 1]^3 scales it by 1.25)."""
    kd = torch.tensor([[0.8, 0.2, 0.1], [0.1, 0.6, 0.2], [0.9, 0.8, 0.2], [0.1, 0.2, 0.7]])
    mesh = uv_sphere(24, 12)
    return Asset(mesh.replace(positions=0.8 * mesh.positions),
                 [Material(kd=kd.repeat_interleave(2, 0)[:, None].expand(8, 8, 3).contiguous(),
                           ks=torch.tensor([0.0, 0.6, 0.0]))],
                 torch.zeros(0, dtype=torch.long))


def write_config(folder: Path, background: str = "white"):
    """An nvdiffrec config (``iter``: read as one, so its envmap is in nvdiffrec's layout):
    the ball under a sky brighter above than below with a bright patch to one side (so that a
    turn of the light shows), 3 held-out views of 32 px."""
    mesh, sky = folder / "ball.obj", folder / "sky.hdr"
    write_obj(mesh, ball().mesh, ball().materials[0])
    directions = equirect_pixel_directions(16, 32)
    up = directions[..., 2:3]
    patch = torch.exp(-(directions - torch.tensor([0.8, 0.0, 0.6], dtype=torch.float64))
                      .square().sum(-1, keepdim=True) / 0.1)
    write_image(sky, (0.4 + 0.6 * up.clamp(min=0) + torch.tensor([0.0, 0.05, 0.2]) * (up < 0)
                      + 4 * patch).float().numpy())
    path = folder / "config.json"
    path.write_text(json.dumps({"ref_mesh": str(mesh), "envmap": str(sky), "iter": 1,
                                "views": 1, "test_views": 3, "train_res": [32, 32],
                                "probe_res": 32, "background": background}))
    return path, mesh, sky


@pytest.fixture
def config(tmp_path):
    return write_config(tmp_path)


def test_the_truth_scores_as_either_system_writes_it_and_only_so(config, tmp_path):
    path, mesh, sky = config
    truth, _, _ = judge_result.judge(str(path), str(mesh), str(sky), nvdiffrec=True,
                                     device="cpu")
    assert len(truth["views"]) == 3
    assert truth["psnr"] > 45 and truth["ssim"] > 0.999

    # the same files read as diffrec's: a ball of 0.8 against targets of radius 1
    misplaced, _, _ = judge_result.judge(str(path), str(mesh), str(sky), device="cpu")
    assert misplaced["psnr"] < truth["psnr"] - 20

    # diffrec's files: the ball in the box, the light in Blender's layout
    asset = ball()
    boxed, _ = fit_to_box(asset.mesh)
    write_obj(tmp_path / "boxed" / "ball.obj", boxed, asset.materials[0])
    blender_sky = tmp_path / "blender_sky.hdr"
    write_image(blender_sky, from_nvdiffrec_layout(torch.from_numpy(read_image(sky))).numpy())
    in_box, _, _ = judge_result.judge(str(path), str(tmp_path / "boxed" / "ball.obj"),
                                      str(blender_sky), device="cpu")
    assert in_box["psnr"] > 45
    # and nvdiffrec's light read as if in Blender's layout: turned a quarter, the patch
    # lights another side
    turned, _, _ = judge_result.judge(str(path), str(tmp_path / "boxed" / "ball.obj"), str(sky),
                                      device="cpu")
    assert turned["psnr"] < truth["psnr"] - 15


def test_the_result_is_judged_under_its_own_light(tmp_path):
    path, mesh, sky = write_config(tmp_path, background="black")  # pixels linear in the light
    dim = tmp_path / "dim.hdr"
    write_image(dim, 0.5 * read_image(sky))
    full, renders, _ = judge_result.judge(str(path), str(mesh), str(sky),
                                                nvdiffrec=True, device="cpu")
    halved, dim_renders, _ = judge_result.judge(str(path), str(mesh), str(dim),
                                                nvdiffrec=True, device="cpu")
    assert halved["psnr"] < full["psnr"] - 10
    ratio = dim_renders.sum() / renders.sum()
    assert ratio == pytest.approx(0.5, abs=0.02)


def test_the_command_appends_its_scores_and_writes_the_first_view(config, tmp_path, capsys):
    path, mesh, sky = config
    scores = tmp_path / "scores.jsonl"
    image = tmp_path / "first.png"
    assert judge_result.main([str(path), str(mesh), str(sky), "--nvdiffrec", "--device",
                              "cpu", "--label", "truth", "--json", str(scores),
                              "--image", str(image)]) == 0
    row = json.loads(scores.read_text())
    assert row["judged"] == "truth" and row["psnr"] > 45
    assert f"| truth | 3 | {row['psnr']:.2f} |" in capsys.readouterr().out
    assert read_image(image).shape == (32, 64, 3)
    picture = np.asarray(read_image(image))
    np.testing.assert_allclose(picture[:, :32], picture[:, 32:], atol=0.05)


def test_a_missing_result_is_named(config, tmp_path):
    path, _, sky = config
    with pytest.raises(SystemExit, match="does not exist"):
        judge_result.main([str(path), str(tmp_path / "no_mesh.obj"), str(sky)])
