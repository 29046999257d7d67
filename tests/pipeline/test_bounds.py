"""Settings bounded by the device's memory (issue 15.3): refused at submit and by the command
line, with the setting named, before anything runs."""

from __future__ import annotations

import pytest
from helpers.servers import smallest_materials_inputs

from diffrec import cli
from diffrec.errors import UserError
from diffrec.pipeline.bounds import GIB, check_bounds
from diffrec.protocol import ServerError
from diffrec.protocol.settings import MAX_RES, PRESETS, SettingsError, parse_settings


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_fits_a_16_gib_device(preset):
    for mode in ("materials", "reconstruct"):
        check_bounds(parse_settings({"preset": preset, "mode": mode}), 16 * GIB, 100_000)


@pytest.mark.parametrize("settings, named", [
    ({"batch": 10**7}, "batch"), ({"texture_res": 12000}, "texture_res"),
    ({"mode": "reconstruct", "grid": 1024}, "grid"),
    ({"batch": 64, "texture_res": 8192, "train_res": 1024}, "batch"),  # together too much
    ({"batch": 1, "train_res": 2048}, "mip_iterations"),  # the mip fit's views
])
def test_settings_that_cannot_fit_are_refused_with_the_setting_named(settings, named):
    with pytest.raises(UserError, match=named):
        check_bounds(parse_settings(settings), 16 * GIB)
    with pytest.raises(UserError, match="triangles"):
        check_bounds(parse_settings({}), 16 * GIB, triangles=10**9)
    check_bounds(parse_settings({"batch": 1, "train_res": 2048, "mip_iterations": 0}),
                 16 * GIB)


def test_a_side_over_the_limit_is_refused_as_a_setting_whatever_the_memory():
    for name in ("train_res", "texture_res"):
        with pytest.raises(SettingsError, match=f"{name}: must be at most {MAX_RES}"):
            parse_settings({name: MAX_RES + 1})


def test_the_server_refuses_them_at_submit(server, connect):
    client = connect(server)
    for settings, named in (({"batch": 10**7}, "batch"), ({"texture_res": 65536},
                                                           "texture_res")):
        spec = {"task": "optimize", "settings": {"mode": "materials", "light": "learn",
                                                 **settings}}
        with pytest.raises(ServerError) as info:
            client.submit(f"huge-{named}", spec, smallest_materials_inputs())
        assert info.value.code == "invalid_input" and named in info.value.message
    assert client.list_jobs() == [] or all(not j["job"].startswith("huge")
                                           for j in client.list_jobs())


def test_the_command_line_refuses_them_before_loading_anything(tmp_path, capsys):
    status = cli.main(["optimize", "--batch", "10000000", "--out-dir", str(tmp_path / "out")])
    assert status == 2
    assert "batch" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_check_reports_a_config_too_big_for_this_machine_without_refusing_it(tmp_path, capsys):
    """--check says whether the settings fit here; the file may be meant for a larger GPU."""
    config = tmp_path / "big.json"
    config.write_text('{"batch": 10000000, "mode": "reconstruct"}')
    assert cli.main(["optimize", "--config", str(config), "--check"]) == 0
    memory = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory")]
    assert memory and "too much for this machine" in memory[0] and "lower batch" in memory[0]
    assert cli.main(["optimize", "--mode", "reconstruct", "--check"]) == 0
    assert "memory: fits this machine" in capsys.readouterr().out
