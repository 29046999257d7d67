"""The add-on's job path against a real ``diffrec serve`` child process on 127.0.0.1."""

import pytest
from blender_run import results_beside_server

servers = pytest.importorskip("helpers.servers")


@pytest.mark.blender
def test_submit_follow_fetch_reattach(tmp_path):
    results = results_beside_server("checks_roundtrip.py", tmp_path, servers, timeout=300)
    errors = {name: error for name, error in results.items() if error}
    assert not errors, errors
