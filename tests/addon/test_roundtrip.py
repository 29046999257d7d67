"""The add-on's job path against a real ``diffrec serve`` child process on 127.0.0.1."""

import json
import os
import subprocess
import sys

import pytest
from blender_run import HERE

sys.path.insert(0, str(HERE.parent / "server"))
server_helpers = pytest.importorskip("server_helpers")


@pytest.mark.blender
def test_submit_follow_fetch_reattach(tmp_path):
    server = server_helpers.ServerProcess(tmp_path / "data").start()
    try:
        user = tmp_path / "blender-user"
        user.mkdir()
        env = {**os.environ, "DIFFREC_SERVER": server.address, "BLENDER_USER_RESOURCES": str(user)}
        results = tmp_path / "roundtrip.json"
        run = subprocess.run(
            [sys.executable, str(HERE / "checks_roundtrip.py"), "--", "--json", str(results)],
            capture_output=True, text=True, timeout=300, env=env,
        )
        assert results.exists(), run.stdout + run.stderr
        errors = {name: error for name, error in json.loads(results.read_text()).items() if error}
        assert not errors, errors
    finally:
        server.stop()
