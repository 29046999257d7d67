"""``diffrec optimize`` from the command line, and how settings are read."""

import json
import logging

import pytest
import torch

from diffrec import cli
from diffrec.errors import UserError
from diffrec.io import Material, write_image, write_obj
from diffrec.light.equirect import equirect_pixel_directions
from diffrec.mesh.primitives import uv_sphere
from diffrec.pipeline.config import build_config, read_config_file
from diffrec.pipeline.loading import load_dataset


def ball_job(folder, out) -> list[str]:
    """``diffrec optimize`` arguments of a small materials job on a ball under a sky (its
    files written into ``folder``), 10 iterations at 32 px, its result into ``out``."""
    mesh = uv_sphere(16, 8)
    write_obj(folder / "ball.obj", mesh, Material(kd=torch.tensor([0.7, 0.3, 0.2]).numpy()))
    sky = (0.7 + 0.3 * equirect_pixel_directions(16, 32)[..., 2:3]).expand(16, 32, 3)
    write_image(folder / "sky.hdr", sky.float().numpy())
    return ["optimize", "--mode", "materials", "--preset", "preview", "--device", "cpu",
            "--ref-mesh", str(folder / "ball.obj"), "--base-mesh", str(folder / "ball.obj"),
            "--envmap", str(folder / "sky.hdr"), "--light", "fixed", "--iterations", "10",
            "--train-res", "32", "--texture-res", "32", "--out-dir", str(out), "--quiet"]


@pytest.mark.slow
def test_optimize_command_writes_outputs_and_previews(tmp_path, capsys):
    out = tmp_path / "out"
    status = cli.main([*ball_job(tmp_path, out), "--preview-every", "5"])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["out_dir"] == str(out) and printed["psnr_mean"] > 15
    assert sorted(p.name for p in (out / "previews").iterdir()) == [
        "textures_000005.png", "textures_000010.png"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert [entry["iteration"] for entry in metrics["history"]] == [10]  # log_every 10
    assert (out / "mesh.glb").exists() and (out / "manifest.json").exists()
    assert not (out / "mesh.obj").exists(), "OBJ only when asked for (export_obj)"


def test_an_out_dir_that_cannot_be_written_is_a_sentence_before_any_work(tmp_path, capsys):
    (tmp_path / "a file").write_text("")
    assert cli.main(ball_job(tmp_path, tmp_path / "a file" / "out")) == 2
    said = capsys.readouterr().err
    assert "cannot write into --out-dir" in said and "a file/out: Not a directory" in said


@pytest.mark.slow
def test_a_result_that_cannot_be_written_is_a_sentence_and_the_fit_is_kept(tmp_path, capsys,
                                                                          caplog):
    out = tmp_path / "out"
    (out / "probe.hdr").mkdir(parents=True)  # in the way of the light's file
    assert cli.main(ball_job(tmp_path, out)) == 2
    assert (f"cannot write the result files into {out}: Is a directory (probe.hdr); the fit is "
            "kept in its checkpoints") in capsys.readouterr().err
    (out / "probe.hdr").rmdir()
    with caplog.at_level(logging.INFO):
        assert cli.main(ball_job(tmp_path, out)) == 0
    assert "resumed from its checkpoint at iteration 10 of 10" in caplog.messages
    assert (out / "probe.hdr").is_file() and (out / "manifest.json").is_file()


def test_reference_system_config_keys_are_translated(tmp_path):
    path = tmp_path / "nvdiffrec.json"
    path.write_text(json.dumps({"ref_mesh": "data/spot.obj", "iter": 500, "train_res": [256, 256],
                                "learning_rate": [0.03, 0.003], "learn_light": False,
                                "envmap": "probe.hdr", "display": [{"bsdf": "kd"}],
                                "dmtet_grid": 32}))
    config = build_config(read_config_file(path))
    settings = config.settings
    assert settings.run.mode == "reconstruct", "nvdiffrec runs DMTet without a base mesh"
    size = settings.size
    assert (size.iterations, size.train_res, size.grid) == (500, 256, 32)
    assert settings.schedule.learning_rate == (0.03, 0.003) and settings.light.mode == "fixed"
    assert config.sources.ref_mesh == "data/spot.obj", "found nowhere: as nvdiffrec reads it"


def test_flags_win_over_an_nvdiffrec_configs_sizes(tmp_path, capsys):
    """The file's sizes win over a --preset; --grid (its dmtet_grid) and the size flags win
    over the file, so a short CPU try of a GPU-sized config needs no edit."""
    path = tmp_path / "nvdiffrec.json"
    path.write_text(json.dumps({"ref_mesh": "data/spot.obj", "iter": 5000, "batch": 8,
                                "train_res": [800, 800], "dmtet_grid": 128}))
    assert cli.main(["optimize", "--config", str(path), "--preset", "preview", "--check",
                     "--iterations", "100", "--batch", "2", "--grid", "32"]) == 1  # no mesh
    printed = capsys.readouterr().out
    chosen = json.loads(printed[printed.index("settings:\n") + len("settings:\n"):])
    assert (chosen["iterations"], chosen["batch"], chosen["grid"], chosen["train_res"]) == (
        100, 2, 32, 800)
    assert "grid = 32 from the command line, over the file's 128" in printed


def test_settings_mistakes_are_sentences(tmp_path):
    with pytest.raises(UserError, match="unknown setting"):
        build_config({"iteratons": 10})
    with pytest.raises(UserError, match="mode: must be one of"):
        build_config({"mode": "sculpt"})
    with pytest.raises(UserError, match="needs an envmap"):
        build_config({"light": "learn-from-envmap"})
    (tmp_path / "bad.toml").write_text("mode = ")
    with pytest.raises(UserError, match="cannot read config"):
        read_config_file(tmp_path / "bad.toml")
    assert cli.main(["optimize", "--config", str(tmp_path / "missing.json")]) == 2


@pytest.mark.slow
def test_a_base_mesh_started_from_keeps_its_normal_map_in_materials_mode(tmp_path):
    """``init_textures`` base_mesh with a normal map on the mesh (a Cycles bake's start): the
    map is trained and exported, as a job's start textures are, not dropped as materials
    mode drops a normal map by default."""
    from diffrec.io import read_gltf, write_glb
    from diffrec.mesh.normals import with_vertex_normals

    mesh = with_vertex_normals(uv_sphere(16, 8))
    tilted = torch.nn.functional.normalize(torch.tensor([0.6, 0.5, 0.9]), dim=0)  # tangent space
    tilted = tilted.expand(8, 8, 3).clone()
    write_glb(tmp_path / "start.glb", mesh, Material(kd=torch.tensor([0.7, 0.3, 0.2]),
                                                     normal=tilted))
    sky = (0.7 + 0.3 * equirect_pixel_directions(16, 32)[..., 2:3]).expand(16, 32, 3)
    write_image(tmp_path / "sky.hdr", sky.float().numpy())
    (tmp_path / "start.json").write_text(json.dumps({"init_textures": "base_mesh"}))
    out = tmp_path / "out"
    assert cli.main(["optimize", "--mode", "materials", "--device", "cpu",
                     "--ref-mesh", str(tmp_path / "start.glb"), "--base-mesh",
                     str(tmp_path / "start.glb"), "--envmap", str(tmp_path / "sky.hdr"),
                     "--light", "fixed", "--iterations", "2", "--train-res", "32",
                     "--texture-res", "8", "--config", str(tmp_path / "start.json"),
                     "--out-dir", str(out), "--quiet"]) == 0
    normal = read_gltf(out / "mesh.glb").materials[0].normal
    assert normal is not None
    assert torch.allclose(normal.mean((0, 1)), tilted[0, 0], atol=0.05), normal.mean((0, 1))


def test_the_terminal_line_shows_every_pass_and_its_loss(tmp_path):
    """The mip fit's progress once crashed the command's progress line (it read
    ``losses["total"]``, which the fit did not send); a pass without losses gets no loss."""
    import io

    from diffrec.commands.optimize import TerminalReporter
    from diffrec.protocol.events import PassName, Progress

    stream = io.StringIO()
    reporter = TerminalReporter(str(tmp_path), stream=stream)
    reporter.progress(Progress(pass_name=PassName.TEXTURES, iteration=5, iterations=10,
                               losses={"total": 0.25, "color": 0.2}, psnr=21.0))
    reporter.progress(Progress(pass_name=PassName.MIPS, iteration=2, iterations=4,
                               losses={"total": 0.125}, pass_number=2, passes=2))
    reporter.progress(Progress(pass_name=PassName.FIT, iteration=1, iterations=4))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("[" + "#" * 12 + ".") and lines[0].endswith("loss 0.2500")
    assert "Mip levels" in lines[1] and lines[1].endswith("loss 0.1250")
    assert "loss" not in lines[2]


def write_capture(folder, count: int, file: str = "transforms_train.json", top=None) -> None:
    """``count`` 4x4 RGBA PNGs in ``images/`` and ``file`` naming them, cameras in a row
    looking down -z, with ``top``'s keys (default: a field of view)."""
    frames = []
    for index in range(count):
        write_image(folder / "images" / f"{file[:-5]}_{index}.png", torch.ones(4, 4, 4).numpy())
        matrix = torch.eye(4)
        matrix[0, 3] = index * 0.1
        frames.append({"file_path": f"images/{file[:-5]}_{index}",
                       "transform_matrix": matrix.tolist()})
    (folder / file).write_text(json.dumps({**(top or {"camera_angle_x": 0.8}),
                                           "frames": frames}))


def _photo_missing(folder):
    (folder / "images" / "transforms_2.png").unlink()


def _invalid_json(folder):
    (folder / "transforms.json").write_text('{"frames": [')


def _frame_without_matrix(folder):
    transforms = json.loads((folder / "transforms.json").read_text())
    del transforms["frames"][1]["transform_matrix"]
    (folder / "transforms.json").write_text(json.dumps(transforms))


@pytest.mark.parametrize("damage, sentence", [
    (_photo_missing, "1 of 4 images named in transforms.json are missing "
                     "(images/transforms_2)"),
    (_invalid_json, "transforms.json is not valid JSON"),
    (_frame_without_matrix, "frame 1 (images/transforms_1): transform_matrix must be a 4x4 "
                            "list of numbers"),
], ids=["photo missing", "invalid JSON", "frame without transform_matrix"])
def test_check_fails_saying_why_a_capture_cannot_be_read(tmp_path, capsys, damage, sentence):
    """``--check`` on a capture it cannot read exits 1 with the capture's own sentence (it
    exited 0 with "validation: unknown"), and still reports the rest."""
    folder = tmp_path / "capture"
    write_capture(folder, 4, "transforms.json", {"fl_x": 4.0})
    damage(folder)
    assert cli.main(["optimize", "--dataset", str(folder), "--check"]) == 1
    printed = capsys.readouterr().out
    problem = next(line for line in printed.splitlines() if line.startswith("CANNOT READ: "))
    assert sentence in problem
    assert "validation: unknown (the capture cannot be read, as said above)" in printed
    assert "memory: " in printed and "settings:" in printed


def _photo_cut_short(folder):
    photo = folder / "images" / "transforms_2.png"
    photo.write_bytes(photo.read_bytes()[:40])


def _photo_larger(folder):
    write_image(folder / "images" / "transforms_3.png", torch.ones(8, 4, 4).numpy())


@pytest.mark.parametrize("damage, sentence", [
    (_photo_cut_short, "cannot decode"),
    (_photo_larger, "images of split 'train' differ in size: transforms_0.png is 4x4 but "
                    "transforms_3.png is 4x8; resize them all to one size"),
], ids=["cut short", "another size"])
def test_check_reads_the_images_and_says_what_the_run_would_refuse(tmp_path, capsys, damage,
                                                                   sentence):
    """``--check`` decodes every image, so a photo the run would refuse is said before it runs
    (it passed a cut-short or mis-sized photo), in the run's own sentence."""
    folder = tmp_path / "capture"
    write_capture(folder, 4, "transforms.json", {"fl_x": 4.0})
    damage(folder)
    assert cli.main(["optimize", "--dataset", str(folder), "--check"]) == 1
    problem = next(line for line in capsys.readouterr().out.splitlines()
                   if line.startswith("CANNOT READ: "))
    assert sentence in problem and "transforms_" in problem, problem
    with pytest.raises(UserError) as refused:
        load_dataset(folder)
    assert sentence in str(refused.value)


def test_check_says_a_ref_mesh_folder_is_the_targets_dataset(tmp_path, capsys):
    """``--ref-mesh FOLDER`` trains on the folder's images, as ``--check`` now says (it
    described renders of a mesh under no envmap)."""
    folder = tmp_path / "nerfscene"
    write_capture(folder, 6)
    write_capture(folder, 2, "transforms_test.json")
    assert cli.main(["optimize", "--ref-mesh", str(folder), "--mode", "reconstruct",
                     "--check"]) == 0
    printed = capsys.readouterr().out
    assert f"targets: the images of {folder} (a NeRF-style folder)" in printed
    assert "validation: the 2 views of the test split; training on all 6" in printed


def test_the_dataset_help_names_a_capture_tools_transforms_json(capsys):
    with pytest.raises(SystemExit):
        cli.main(["optimize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    dataset_help = text[text.rindex("--dataset DATASET"):text.rindex("--ref-mesh REF_MESH")]
    assert "capture tool's folder (transforms.json" in dataset_help


@pytest.mark.parametrize("flags, sentence", [
    (["--device", "gpu"], "unknown device 'gpu'"),
    (["--mode", "materials"], "mode 'materials' needs a starting mesh (--base-mesh, or "
                              "base_mesh in the config)"),
    (["--gpus", "64"], "--gpus 64 needs 64 CUDA devices and torch sees"),
    pytest.param(["--gpus", "1"], "--gpus 1 needs a CUDA device and torch sees 0",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
], ids=["unknown device", "no start mesh", "more GPUs than here", "a GPU, none here"])
def test_check_and_the_run_refuse_alike_what_cannot_run_here(tmp_path, capsys, flags,
                                                              sentence):
    """What the run refuses before it reads its inputs, ``--check`` refuses too (it said the
    config was fine, and the run then stopped)."""
    folder = tmp_path / "capture"
    write_capture(folder, 4)
    command = ["optimize", "--dataset", str(folder), "--out-dir", str(tmp_path / "out"),
               *flags]
    assert cli.main([*command, "--check"]) == 1
    assert f"CANNOT RUN: {sentence}" in capsys.readouterr().out
    assert cli.main(command) == 2
    assert sentence in capsys.readouterr().err
    assert not (tmp_path / "out").exists(), "refused before any work"


def test_check_says_what_the_command_line_changed_and_a_reference_without_light(tmp_path,
                                                                              capsys):
    """The file's lines said plateau_window 0 and target_triangles 100 while --preset and
    --triangles ran others; a reference mesh with no envmap passed --check and stopped the
    run."""
    config = tmp_path / "nv.json"
    config.write_text(json.dumps({"ref_mesh": "x.obj", "iter": 100, "target_triangles": 100}))
    assert cli.main(["optimize", "--config", str(config), "--preset", "preview",
                     "--triangles", "50", "--check"]) == 1
    printed = capsys.readouterr().out
    for line in ("  plateau_window = 100 from the command line, over the file's 0",
                 "  target_triangles = 50 from the command line, over the file's 100",
                 "targets: 24 renders of x.obj under no envmap (see below)",
                 "CANNOT RUN: rendering a reference mesh needs an envmap (an HDRI) to light it"):
        assert line in printed, line
    config.write_text(json.dumps({"ref_mesh": "x.obj", "mostly_metal": 0,
                                  "ks_smoothness": 1}))  # whole numbers for float settings
    cli.main(["optimize", "--config", str(config), "--check"])
    assert "from the command line" not in capsys.readouterr().out


def test_path_tracing_without_mitsuba_is_refused_before_any_pass(tmp_path, capsys,
                                                                 monkeypatch):
    """It was said after the whole rasterized pass."""
    from diffrec.render import mitsuba_bridge

    monkeypatch.setattr(mitsuba_bridge, "optional_module", lambda name: None)
    mitsuba_bridge._load.cache_clear()
    try:
        command = [*ball_job(tmp_path, tmp_path / "out"), "--config",
                   str(tmp_path / "traced.toml")]
        (tmp_path / "traced.toml").write_text('renderer = "path-traced"\n')
        assert cli.main([*command, "--check"]) == 1
        assert "CANNOT RUN: path tracing runs on Mitsuba 3, which is not installed" in \
            capsys.readouterr().out
        assert cli.main(command) == 2
        assert "which is not installed" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()
    finally:
        mitsuba_bridge._load.cache_clear()
