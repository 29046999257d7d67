"""Add-on under bpy: clean registration, each bad setup's message, the live preview image,
NeRF dataset export then import (a result's import: test_import_result.py)."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_addon.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_addon(name, results_dir):
    assert_check(SCRIPT, name, results_dir)
