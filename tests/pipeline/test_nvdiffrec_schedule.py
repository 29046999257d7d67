"""``schedule: nvdiffrec``: its learning-rate decay and warm-up, per-pixel noise behind the
training targets, the geometry at ``learning_rate``; set for nvdiffrec's configs (light 512
unless a preset is asked for), overridable, and ``--check`` lists what still departs."""

import json

import pytest
import stand_ins
import torch

from diffrec import cli
from diffrec.pipeline import run as run_module
from diffrec.pipeline.config import build_config, read_config_file
from diffrec.pipeline.inputs import Inputs
from diffrec.pipeline.trainer import learning_rate_factor
from diffrec.pipeline.views import Views
from diffrec.protocol.settings import parse_settings
from diffrec.render.backgrounds import background_for

NVDIFFREC_CONFIG = {"ref_mesh": "data/ball.obj", "envmap": "data/sky.hdr", "iter": 1000,
                    "random_textures": True, "out_dir": "ball"}


def test_nvdiffrecs_decay_does_not_depend_on_the_pass_length():
    assert learning_rate_factor(50, 1000, 100, "nvdiffrec") == pytest.approx(0.5)
    assert learning_rate_factor(1000, 1000, 100, "nvdiffrec") == pytest.approx(10 ** -0.18)
    assert learning_rate_factor(1000, 1000, 100, "nvdiffrec") == pytest.approx(0.66, abs=0.01)
    assert learning_rate_factor(5100, 5000, 100, "nvdiffrec") == pytest.approx(0.1)
    assert learning_rate_factor(999, 1000, 100) == pytest.approx(0.1, rel=0.01), "diffrec's"


def test_the_noise_background_differs_per_pixel_and_per_view():
    targets = torch.zeros(2, 4, 5, 4)
    noise = background_for("noise", targets, torch.Generator().manual_seed(0))
    assert noise.shape == (2, 4, 5, 3)
    assert noise[0].std((0, 1)).min() > 0.1 and (noise[0] - noise[1]).abs().mean() > 0.1


def test_the_noise_is_drawn_where_the_targets_are_and_follows_the_generator():
    targets = torch.zeros(4, 6, 5, 4, dtype=torch.float64)
    first = background_for("noise", targets, torch.Generator().manual_seed(7))
    assert (first.dtype, first.device) == (targets.dtype, targets.device)
    generator = torch.Generator().manual_seed(7)
    torch.testing.assert_close(background_for("noise", targets, generator), first)
    assert (background_for("noise", targets, generator) - first).abs().mean() > 0.1
    share = background_for("noise", targets[2:], torch.Generator().manual_seed(7),
                           (slice(2, 4), 4))
    torch.testing.assert_close(share, first[2:])  # a rank's rows of the whole batch's noise


def _passes(monkeypatch, settings: dict) -> list:
    """The ``Pass`` objects a materials run of ``settings`` trains (the run itself goes on)."""
    seen = []
    real = run_module.PassTrainer

    def spy(ctx, run, *args, **kwargs):
        seen.append(run)
        return real(ctx, run, *args, **kwargs)

    monkeypatch.setattr(run_module, "PassTrainer", spy)
    cameras = stand_ins.ring_cameras(2, 16, 16)
    views = Views(cameras, stand_ins.render(cameras))
    run_module.optimize(parse_settings({"mode": "materials", "iterations": 2, "batch": 2,
                                        "texture_res": 8, "light_res": 32, "train_res": 16,
                                        "checkpoint_every": 0, "validation": False,
                                        **settings}),
                        Inputs(views, None, stand_ins.ball_asset().mesh), device="cpu")
    return seen


def test_a_materials_run_warms_up_under_nvdiffrecs_schedule_only(monkeypatch):
    assert [p.warmup for p in _passes(monkeypatch, {"schedule": "nvdiffrec"})] == [100]
    assert [p.warmup for p in _passes(monkeypatch, {})] == [0]


def test_nvdiffrec_configs_get_its_schedule_light_and_start(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stand_ins.write_mesh_and_sky(tmp_path / "data")
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "ball.json"
    config.write_text(json.dumps(NVDIFFREC_CONFIG))
    settings = build_config(read_config_file(config)).settings
    assert (settings.schedule.kind, settings.size.light_res, settings.surface.surface_init) == (
        "nvdiffrec", 512, "random")
    assert settings.schedule.plateau_window == 0, "every pass runs its iterations, as nvdiffrec's"
    config.write_text(json.dumps({**NVDIFFREC_CONFIG, "schedule": "diffrec"}))
    settings = build_config(read_config_file(config)).settings
    assert (settings.schedule.kind, settings.size.light_res, settings.surface.surface_init) == (
        "diffrec", 256, "visual-hull"), "schedule: diffrec keeps diffrec's own"
    config.write_text(json.dumps(NVDIFFREC_CONFIG))  # the same given on the command line
    assert cli.main(["optimize", "--config", "configs/ball.json", "--schedule", "diffrec",
                     "--check"]) == 0
    printed = capsys.readouterr().out
    chosen = json.loads(printed[printed.index("settings:\n") + len("settings:\n"):])
    assert (chosen["schedule"], chosen["light_res"], chosen["surface_init"]) == (
        "diffrec", 256, "visual-hull"), "--schedule diffrec keeps diffrec's own too"
    assert "surface_init = \"visual-hull\" from the command line" in printed

    config.write_text(json.dumps(NVDIFFREC_CONFIG))
    assert cli.main(["optimize", "--config", "configs/ball.json", "--preset", "preview",
                     "--check"]) == 0
    printed = capsys.readouterr().out
    departures = printed.split("departures from nvdiffrec's behaviour:")[1].split("memory:")[0]
    assert "light cube faces of 64 texels (nvdiffrec: 512)" in departures, "the preset's size"
    assert "learning rate decays" not in departures and "visual hull" not in departures
    assert "simplified to at most 20000 triangles" in departures
    assert "renders made once, from cameras at -30 to 60 degrees of elevation" in departures
    assert "hash grid computes in float32 (nvdiffrec: float16" in departures
    assert "diffuse is shaded under the specular coat" in departures
    assert "white target pixels are taken as clipped (clipped_white 'auto'" in departures
    assert "pulled to all metal (mostly_metal 0.3" in departures
    assert "held together (ks_smoothness 0.1" in departures
    assert "two sides of each UV seam" in departures
    assert "stops early" in departures, "a --preset brings its stopping rule, said as such"
    assert "brightest parts" not in departures, "a learned light is not split into sources"
    assert "learned light steps in log radiance" not in departures, "off by default"
    shown = json.loads(printed[printed.index("{"):])
    assert (shown["light_res"], shown["iterations"], shown["schedule"]) == (64, 1000, "nvdiffrec")
    assert shown["plateau_window"] == 100


def test_a_configs_own_probe_res_is_no_departure(tmp_path, monkeypatch, capsys):
    """nvdiffrec learns a light of the config's ``probe_res``, which wins over a preset's
    size here too: no departure to list (it was listed as "the preset's size")."""
    monkeypatch.chdir(tmp_path)
    stand_ins.write_mesh_and_sky(tmp_path / "data")
    config = tmp_path / "ball.json"
    config.write_text(json.dumps({**NVDIFFREC_CONFIG, "probe_res": 32}))
    for flags in ([], ["--preset", "preview"]):
        assert cli.main(["optimize", "--config", str(config), *flags, "--check"]) == 0
        printed = capsys.readouterr().out
        assert '"light_res": 32' in printed
        departures = printed.split("departures from nvdiffrec's behaviour:")[1]
        assert "light cube faces" not in departures, flags


def test_a_fixed_light_says_its_sources_depart(tmp_path, monkeypatch, capsys):
    """nvdiffrec's ``learn_light: false`` keeps the HDRI; diffrec then shades its brightest
    parts as sources, which ``--check`` lists with the setting that turns them off."""
    monkeypatch.chdir(tmp_path)
    stand_ins.write_mesh_and_sky(tmp_path / "data")
    config = tmp_path / "ball.json"
    for given, listed in (({}, True), ({"light_sources": 0}, False)):
        config.write_text(json.dumps({**NVDIFFREC_CONFIG, "learn_light": False, **given}))
        assert cli.main(["optimize", "--config", str(config), "--check"]) == 0
        printed = capsys.readouterr().out
        departures = printed.split("departures from nvdiffrec's behaviour:")[1]
        assert ("64 brightest parts are shaded exactly" in departures) == listed
        assert ("light_sources 0 for its" in departures) == listed
