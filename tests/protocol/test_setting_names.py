"""An unknown setting is answered with the closest names and where every setting is listed
(issue 31): over the wire and in files (``parse_settings``), and in nvdiffrec-style configs."""

import json

import pytest

from diffrec import cli
from diffrec.protocol.settings import SettingsError, parse_settings


def test_a_typo_names_the_setting_meant_and_the_table():
    with pytest.raises(SettingsError) as info:
        parse_settings({"iteratons": 3})
    assert str(info.value) == ("iteratons: unknown setting; did you mean iterations or "
                               "mip_iterations or path_iterations? Every setting is listed in "
                               "docs/protocol.md, section 8")


def test_a_name_like_none_says_only_where_the_table_is():
    with pytest.raises(SettingsError) as info:
        parse_settings({"zzz": 1})
    assert str(info.value) == ("zzz: unknown setting; every setting is listed in "
                               "docs/protocol.md, section 8")


def test_the_config_file_error_names_the_closest_setting(tmp_path, capsys):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"iteration": 5, "textur_res": 64}))
    assert cli.main(["optimize", "--config", str(config), "--check"]) == 2
    err = capsys.readouterr().err
    assert ("unknown setting 'iteration': did you mean iterations or mip_iterations or "
            "path_iterations?") in err
    assert "unknown setting 'textur_res': did you mean texture_res? Every" in err
    assert err.count("docs/protocol.md, section 8") == 2
