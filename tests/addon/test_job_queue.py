"""The artist's job queue and progress (checks_jobs.py) under the bpy wheel, against a real
``diffrec serve`` child process on a free loopback port."""

import pytest
from blender_run import check_names, results_beside_server

servers = pytest.importorskip("helpers.servers")
SCRIPT = "checks_jobs.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{check: None or traceback} from one run of the script beside one server."""
    return results_beside_server(SCRIPT, tmp_path_factory.mktemp("jobs"), servers)


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_jobs(name, results):
    if results[name] is not None:
        pytest.fail(f"{SCRIPT}::{name}\n{results[name]}", pytrace=False)
