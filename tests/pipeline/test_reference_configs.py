"""The reference system's configs, as its users bring them: every key is understood
(``--check``), and each config runs on a tiny stand-in dataset in its layout, from the root of
a checkout laid out as nvdiffrec's (``configs/X.json`` beside ``data/``, paths relative to the
root, outputs in ``out/<out_dir>``).

``CONFIGS`` holds one entry per config of nvdiffrec's public ``configs/`` folder, with the same
keys; the values are theirs except sizes and iteration counts (made tiny) and the data paths
(pointed at stand-ins made here: a NeRF-style folder, an LLFF capture, a mesh + HDRI).
"""

import json

import pytest
import stand_ins

from diffrec import cli, raster
from diffrec.errors import UserError
from diffrec.io import read_gltf
from diffrec.pipeline.config import build_config, read_config_file, read_config_reading
from diffrec.pipeline.inputs import load_inputs

TINY = {"iter": 3, "save_interval": 2, "texture_res": [32, 32], "train_res": [32, 32],
        "batch": 2, "dmtet_grid": 8}
NERF = {"ref_mesh": "data/nerf", "random_textures": True, **TINY,
        "learning_rate": [0.03, 0.01], "ks_min": [0, 0.08, 0.0], "mesh_scale": 2.1,
        "laplace_scale": 3000, "background": "white",
        "display": [{"latlong": True}, {"bsdf": "kd"}, {"bsdf": "ks"}, {"bsdf": "normal"}]}
NERD = {"ref_mesh": "data/llff", "random_textures": True, **TINY,
        "learning_rate": [0.03, 0.01], "kd_min": [0.03, 0.03, 0.03], "kd_max": [0.8, 0.8, 0.8],
        "ks_min": [0, 0.08, 0], "ks_max": [0, 1.0, 1.0], "mesh_scale": 2.5,
        "background": "white", "display": [{"bsdf": "kd"}, {"bsdf": "ks"}, {"bsdf": "normal"}]}
MESH = {"ref_mesh": "data/ball.obj", "random_textures": True, **TINY,
        "learning_rate": [0.03, 0.003], "ks_min": [0, 0.25, 0], "envmap": "data/sky.hdr",
        "background": "white", "validate": False}
CONFIGS = {
    "bob": {**MESH, "env_scale": 2.0, "out_dir": "bob"},
    "bob_flexi": {**MESH, "isosurface": "flexicubes", "env_scale": 2.0, "out_dir": "bob_flexi"},
    "nerd_ehead": {**NERD, "learning_rate": [0.03, 0.03], "camera_space_light": True,
                   "out_dir": "nerd_ehead"},
    "nerd_gold": {**NERD, "out_dir": "nerd_gold"},
    "nerf_chair": {**NERF, "out_dir": "nerf_chair"},
    "nerf_drums": {**NERF, "ks_min": [0, 0.1, 0.0], "mesh_scale": 2.3, "layers": 4,
                   "out_dir": "nerf_drums"},
    "nerf_ficus": {**NERF, "ks_min": [0, 0.25, 0.0], "mesh_scale": 2.3, "layers": 8,
                   "out_dir": "nerf_ficus"},
    "nerf_hotdog": {**NERF, "mesh_scale": 3.0, "lock_light": True, "out_dir": "nerf_hotdog"},
    "nerf_lego": {**NERF, "mesh_scale": 2.4, "out_dir": "nerf_lego"},
    "nerf_materials": {**NERF, "learning_rate": [0.03, 0.003], "lock_light": True,
                       "laplace": "absolute", "out_dir": "nerf_materials"},
    "nerf_mic": {**NERF, "custom_mip": True, "layers": 4, "out_dir": "nerf_mic"},
    "nerf_ship": {**NERF, "mesh_scale": 2.75, "layers": 4, "out_dir": "nerf_ship"},
    "spot": {**MESH, "ks_min": [0, 0.1, 0.0], "out_dir": "spot"},
    "spot_fixlight": {**MESH, "ks_min": [0, 0.1, 0.0], "learn_light": False,
                      "out_dir": "spot_fixlight"},
    "spot_metal": {"base_mesh": "data/ball.obj", "ref_mesh": "data/ball.obj",
                   "mtl_override": "data/metal.mtl", "random_textures": True, **TINY,
                   "learning_rate": [0.01], "ks_min": [0, 0.2, 0.0], "lock_pos": True,
                   "envmap": "data/sky.hdr", "display": [{"latlong": True}],
                   "background": "white", "out_dir": "spot_metal"},
}
SURFACE_MODELS = {"bob_flexi": "FlexiCubesGeometry", "spot_metal": None}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The stand-ins, under ``root/data`` as the configs name them."""
    root = tmp_path_factory.mktemp("reference")
    data = root / "data"
    cameras = stand_ins.ring_cameras(12, 32, 32)
    images = stand_ins.render(cameras)
    stand_ins.write_nerf_folder(data / "nerf", cameras[:9], images[:9], "train")
    stand_ins.write_nerf_folder(data / "nerf", cameras[9:], images[9:], "test")
    stand_ins.write_llff_capture(data / "llff", cameras, images)
    stand_ins.write_mesh_and_sky(data)
    (data / "metal.mtl").write_text("newmtl metal\nKd 0.9 0.8 0.5\nKs 0 0.3 1\n")
    return root


@pytest.fixture
def data(checkout, monkeypatch):
    """The checkout's root, as the working directory (where nvdiffrec's users run it)."""
    monkeypatch.chdir(checkout)
    return checkout


def write_config(root, name: str, config: dict | None = None) -> str:
    """``configs/<name>.json`` under ``root``; returns that path relative to ``root``."""
    (root / "configs").mkdir(exist_ok=True)
    (root / "configs" / f"{name}.json").write_text(json.dumps(config or CONFIGS[name]))
    return f"configs/{name}.json"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_check_explains_every_key(data, name, capsys):
    assert cli.main(["optimize", "--config", write_config(data, name), "--check"]) == 0
    printed = capsys.readouterr().out
    explained = [line.strip().split(" ", 1)[0] for line in printed.splitlines()
                 if " -> " in line]
    assert sorted(set(explained) - {"(no"}) == sorted(CONFIGS[name])
    assert "NOT FOUND" not in printed


def test_keys_keep_their_meaning(data):
    nerd_config = build_config(read_config_file(write_config(data, "nerd_ehead")))
    nerd = nerd_config.settings
    assert nerd_config.sources.dataset == "data/llff", "relative to the working directory"
    assert nerd.run.mode == "reconstruct"
    assert nerd.material.kd_max == (0.8, 0.8, 0.8) and nerd.light.camera_space
    assert nerd.material_ranges()["ks"] == ((0.0, 0.08, 0.0), (0.0, 1.0, 1.0))
    assert nerd.material.init_textures == "random" and nerd.rendering.background == "white"
    assert nerd.reporting.display == ("kd", "ks", "normal")
    assert nerd.surface.geometry == "dmtet", "no isosurface: nvdiffrec's DMTet, not diffrec's"
    reporting = nerd.reporting
    assert (reporting.checkpoint_every, reporting.preview_every) == (2, 2), "save_interval"
    metal_config = build_config(read_config_file(write_config(data, "spot_metal")))
    metal = metal_config.settings
    assert metal.run.mode == "materials" and metal.schedule.learning_rate == (0.01, 0.01)
    assert metal.trains_normal_map(), "nvdiffrec trains a normal map on a fixed mesh too"
    assert metal_config.sources.ref_material == "data/metal.mtl"
    ficus_config = build_config(read_config_file(write_config(data, "nerf_ficus")))
    ficus = ficus_config.settings
    assert ficus.material_ranges()["kd"] == ((0.0, 0.0, 0.0, 0.0), (1.0, 1.0, 1.0, 1.0))
    flexi_config = build_config(read_config_file(write_config(data, "bob_flexi")))
    flexi = flexi_config.settings
    assert (flexi.surface.geometry, flexi.reporting.validation) == ("flexicubes", False)
    assert flexi_config.sources.env_scale == 2.0
    bob_without_lock = {k: v for k, v in CONFIGS["bob"].items()}
    bob_without_lock["base_mesh"] = "data/ball.obj"
    refine = read_config_reading(write_config(data, "refine", bob_without_lock))
    assert refine.settings["mode"] == "refine", "a base mesh without lock_pos moves"
    assert refine.settings["learning_rate"] == (0.03, 0.03), "one pass, at the first rate"


def test_nvdiffrecs_dmtet_grid_is_the_grid_of_either_surface(data):
    reading = read_config_reading(write_config(data, "nerf_ficus"))
    assert reading.settings["grid"] == TINY["dmtet_grid"] and "dmtet_grid" not in reading.settings
    assert build_config(reading.values()).settings.size.grid == TINY["dmtet_grid"]


def test_keys_without_a_meaning_here_are_refused_all_at_once(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"iter": 10, "multi_gpu": True, "display": [{"relight": "x"}],
                                "learning_rate": [[0.03, 0.01], 0.003], "denoiser": "optix",
                                "random_textures": 1}))
    with pytest.raises(UserError) as refused:
        read_config_file(path)
    message = str(refused.value)
    for expected in ("multi_gpu", "relight", "one rate per pass", "unknown setting 'denoiser'",
                     "random_textures must be true or false"):
        assert expected in message, expected
    assert cli.main(["optimize", "--config", str(path), "--check"]) == 2


def test_a_diffrec_file_with_settings_both_systems_name_stays_a_diffrec_file(tmp_path):
    """``learning_rate`` and ``display`` are diffrec settings too: a file of them alone is
    not read as an nvdiffrec config (whose schedule, surface and exports it got before)."""
    path = tmp_path / "mine.toml"
    path.write_text('learning_rate = [0.03, 0.02]\ndisplay = ["kd"]\nmode = "reconstruct"\n')
    reading = read_config_reading(path)
    assert not reading.reference
    settings = build_config(reading.values()).settings
    assert settings.schedule.learning_rate == (0.03, 0.02)
    assert settings.schedule.kind != "nvdiffrec" and settings.reporting.display == ("kd",)
    assert not settings.reporting.export_obj


def test_a_section_table_and_a_smoothness_weight_are_refused_naming_what_to_write(tmp_path):
    """``[material]`` said "did you mean ref_material?"; ``lambda_ks`` named nothing."""
    path = tmp_path / "mine.toml"
    path.write_text('lambda_ks = 0.05\n[material]\nnormal_map = "on"\n')
    with pytest.raises(UserError) as refused:
        read_config_file(path)
    message = str(refused.value)
    assert ("[material] is a section of diffrec's settings, and a file holds them flat: write "
            "normal_map at the top level, without [material]") in message
    assert "unknown setting 'lambda_ks': diffrec's loss of that kind is ks_smoothness" in message


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_runs_a_few_iterations(data, name):
    out = data / "out" / "preview" / name
    status = cli.main(["optimize", "--config", write_config(data, name), "--preset", "preview",
                       "--device", "cpu", "--out-dir", str(out), "--quiet"])
    assert status == 0
    metrics = json.loads((out / "metrics.json").read_text())
    expected_model = SURFACE_MODELS.get(name, "DMTetGeometry")
    assert metrics["surface_model"] == expected_model, "isosurface picks the model that runs"
    assert (metrics["psnr_mean"] is None) == (CONFIGS[name].get("validate") is False)
    previews = sorted(p.name for p in (out / "previews").glob("*.png"))
    assert previews and (out / "mesh.glb").is_file()
    kd_channels = read_gltf(out / "mesh.glb").materials[0].kd.shape[-1]
    assert kd_channels == (4 if CONFIGS[name].get("layers", 1) > 1 else 3), "kd alpha"


# the mesh + HDRI layout renders its targets first (GGX-prefiltered HDRI): about a minute
@pytest.mark.parametrize("name", ["nerf_chair", "nerd_ehead",
                                  pytest.param("spot", marks=pytest.mark.slow)])
def test_the_documented_command_runs_from_the_checkout_root(data, name, capsys):
    """NeRF folder, LLFF capture, mesh + HDRI: ``--check`` finds every file relative to the
    working directory, and the run writes into ``out/<out_dir>`` as nvdiffrec does; the
    surface got a real atlas (xatlas, no fallback warning)."""
    config = write_config(data, name)
    assert cli.main(["optimize", "--config", config, "--check"]) == 0
    printed = capsys.readouterr().out
    assert "found in the working directory" in printed and "NOT FOUND" not in printed
    assert cli.main(["optimize", "--config", config, "--preset", "preview", "--device", "cpu",
                     "--quiet"]) == 0
    out = data / "out" / CONFIGS[name]["out_dir"]
    assert (out / "mesh.glb").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["unwrap"]["method"] == "xatlas" and metrics["warnings"] == []


def test_check_fails_naming_each_missing_file(data, capsys):
    config = write_config(data, "spot_missing", {**CONFIGS["spot"], "ref_mesh": "data/cow.obj",
                                                 "envmap": "data/irrmaps/studio.hdr"})
    assert cli.main(["optimize", "--config", config, "--check"]) == 1
    printed = capsys.readouterr().out
    assert "NOT FOUND: ref_mesh data/cow.obj" in printed
    assert "NOT FOUND: envmap data/irrmaps/studio.hdr" in printed


def test_a_small_capture_keeps_nearly_every_view_for_training(data, capsys):
    """The LLFF stand-in has 12 images: one is held out (at most one in 8), not test_views' 8
    (which left 4 to train on); ``--check`` says so."""
    config = write_config(data, "nerd_gold")
    assert cli.main(["optimize", "--config", config, "--check"]) == 0
    assert "validation: 1 of the capture's 12 views held out" in capsys.readouterr().out
    run = build_config(read_config_file(config), {"device": "cpu"})
    inputs = load_inputs(run, raster.RasterContext("cpu"))
    assert (len(inputs.train), len(inputs.test)) == (11, 1)


def test_ref_mesh_may_name_a_capture_tools_folder(data, capsys):
    """A folder with a capture tool's ``transforms.json`` is a dataset (its layout had no name
    here, a KeyError); a folder with no capture is refused naming every layout it may hold."""
    folder = data / "data" / "tool"
    cameras = stand_ins.ring_cameras(9, 32, 32)
    stand_ins.write_nerf_folder(folder, cameras, stand_ins.render(cameras))
    (folder / "transforms_train.json").rename(folder / "transforms.json")
    config = write_config(data, "tool", {**NERF, "ref_mesh": "data/tool", "out_dir": "tool"})
    assert cli.main(["optimize", "--config", config, "--check"]) == 0
    assert ("ref_mesh \"data/tool\" -> dataset = data/tool (a capture tool's transforms.json: "
            "its images are the targets)") in capsys.readouterr().out
    assert build_config(read_config_file(config)).sources.dataset == "data/tool"
    (data / "data" / "empty").mkdir(exist_ok=True)
    empty = write_config(data, "empty", {**NERF, "ref_mesh": "data/empty"})
    with pytest.raises(UserError, match=r"neither transforms_train.json \(NeRF-style\) nor "
                                        r"transforms.json \(a capture tool's\)"):
        read_config_file(empty)


@pytest.mark.parametrize("locked", [True, False])
def test_lock_pos_without_a_base_mesh_reconstructs(data, locked, capsys):
    """nvdiffrec runs DMTet without ``base_mesh`` whatever ``lock_pos`` says (it then only
    locks pass 2's mesh): ``--check`` and the run agree on reconstruct, and say where pass 2
    departs (it said materials or refine, which then stopped for want of a base mesh)."""
    config = write_config(data, f"lock_{locked}", {**NERF, "lock_pos": locked})
    assert cli.main(["optimize", "--config", config, "--check"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "lock_pos" in line)
    assert line.strip().startswith(f"lock_pos {json.dumps(locked)} -> mode = 'reconstruct'")
    assert ("where nvdiffrec's lock_pos true keeps them" in line) == locked
    assert build_config(read_config_file(config)).settings.run.mode == "reconstruct"


def test_an_unknown_isosurface_is_refused_by_its_own_name(data):
    config = write_config(data, "marching", {**NERF, "isosurface": "marching"})
    with pytest.raises(UserError, match="isosurface must be one of dmtet, flexicubes, not "
                                        "'marching'"):
        build_config(read_config_file(config))
