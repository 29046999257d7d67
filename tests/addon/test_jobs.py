"""The artist's job queue and progress (checks_jobs.py) under the bpy wheel, against a real
``diffrec serve`` child process on a free loopback port."""

import json
import os
import subprocess
import sys

import pytest
from blender_run import HERE, check_names

sys.path.insert(0, str(HERE.parent / "server"))
server_helpers = pytest.importorskip("server_helpers")
SCRIPT = "checks_jobs.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{check: None or traceback} from one run of the script beside one server."""
    root = tmp_path_factory.mktemp("jobs")
    server = server_helpers.ServerProcess(root / "data").start()
    try:
        user = root / "blender-user"
        user.mkdir()
        env = {**os.environ, "DIFFREC_SERVER": server.address, "BLENDER_USER_RESOURCES": str(user)}
        output = root / "jobs.json"
        run = subprocess.run([sys.executable, str(HERE / SCRIPT), "--", "--json", str(output)],
                             capture_output=True, text=True, timeout=600, env=env)
        assert output.exists(), run.stdout + run.stderr
        return json.loads(output.read_text())
    finally:
        server.stop()


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_jobs(name, results):
    if results[name] is not None:
        pytest.fail(f"{SCRIPT}::{name}\n{results[name]}", pytrace=False)
