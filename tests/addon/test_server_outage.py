"""Issue 56.1 / 55.9 and 56.10 under the bpy wheel (checks_server_outage.py): a followed job
through its server's SIGKILL and restart, the Jobs list's questions to a server that is down
or hung, a running job's line and the hour warning. Each check runs alone; the live ones start
and kill real ``diffrec serve`` processes (those through a restart take 25-30 s: slow)."""

import pytest
from blender_run import assert_check_alone, check_params

SCRIPT = "checks_server_outage.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_params(SCRIPT, slow_when="restart"))
def test_server_outage(name, tmp_path, monkeypatch):
    monkeypatch.setenv("BLENDER_USER_RESOURCES", str(tmp_path / "blender-user"))
    assert_check_alone(SCRIPT, name, tmp_path)
