"""The command line runs as a console script and as ``python -m diffrec``."""

import json
import subprocess
import sys

from diffrec import __version__, cli


def test_info_json(capsys):
    assert cli.main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["diffrec"] == __version__
    assert info["raster_engine"] in ("torch", "nvdiffrast")


def test_python_dash_m():
    out = subprocess.run(
        [sys.executable, "-m", "diffrec", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"diffrec {__version__}"


def test_user_error_is_a_sentence(capsys, monkeypatch):
    from diffrec.commands import info
    from diffrec.errors import UserError

    def fail(args):
        raise UserError("the mesh file does not exist")

    monkeypatch.setattr(info, "run", fail)
    assert cli.main(["info"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "diffrec: error: the mesh file does not exist"


def test_a_key_that_starts_with_a_dash_is_allowed_and_revoked_after_a_double_dash(
        tmp_path, capsys):
    """Z85 keys may start with "-" (one in 85), which argparse takes for an option: the help
    and every printed instruction put "--" before the key, and that works."""
    from zmq.utils import z85

    key = z85.encode((63 * 85**4).to_bytes(4, "big") + bytes(28)).decode()
    assert key.startswith("-") and len(key) == 40
    data = str(tmp_path / "data")
    assert cli.main(["keys", "allow", "--data-dir", data, "--comment", "dash", "--", key]) == 0
    assert cli.main(["keys", "show", "--data-dir", data]) == 0
    assert f"allowed: {key} dash" in capsys.readouterr().out
    assert cli.main(["keys", "revoke", "--data-dir", data, "--", key]) == 0
    assert capsys.readouterr().out == f"revoked {key}\n"
    assert cli.main(["keys", "show", "--data-dir", data]) == 0
    assert key not in capsys.readouterr().out


def test_an_engine_variable_of_another_value_is_a_sentence(capsys, monkeypatch):
    monkeypatch.setenv("DIFFREC_RASTER", "bogus")
    assert cli.main(["info"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("diffrec: error: $DIFFREC_RASTER must be 'auto' or 'torch' or "
                           "'nvdiffrast', not 'bogus'")
