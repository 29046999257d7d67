"""Issue 56 items 5 and 6 and a file opened while its server is down, under the bpy wheel
(checks_file_jobs.py): jobs belong to their .blend. Each check runs alone, beside its own
``diffrec serve`` child processes; those through a server's restart take about 20 s (slow)."""

import pytest
from blender_run import assert_check_alone, check_params

SCRIPT = "checks_file_jobs.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_params(SCRIPT, slow_when="down"))
def test_file_jobs(name, tmp_path, monkeypatch):
    monkeypatch.setenv("BLENDER_USER_RESOURCES", str(tmp_path / "blender-user"))
    assert_check_alone(SCRIPT, name, tmp_path)
