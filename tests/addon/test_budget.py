"""Issue 50's one click, high to low (checks_budget.py) under the bpy wheel, against a real
``diffrec serve`` child process on a free loopback port."""

import pytest
from blender_run import check_names, results_beside_server

servers = pytest.importorskip("helpers.servers")
SCRIPT = "checks_budget.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{check: None or traceback} from one run of the script beside one server."""
    return results_beside_server(SCRIPT, tmp_path_factory.mktemp("budget"), servers)


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_budget(name, results):
    if results[name] is not None:
        pytest.fail(f"{SCRIPT}::{name}\n{results[name]}", pytrace=False)
