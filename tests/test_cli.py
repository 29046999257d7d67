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
