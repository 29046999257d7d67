"""Checks before anything is rendered, and a result not imported yet (checks_early_checks.py
under the bpy wheel)."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_early_checks.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_early_checks(name, results_dir):
    assert_check(SCRIPT, name, results_dir)
