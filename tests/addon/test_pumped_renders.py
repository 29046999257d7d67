"""Optimize's target renders pumped one view per tick, with progress; cancel sends nothing."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_pumped_renders.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_pumped_renders(name, results_dir):
    assert_check(SCRIPT, name, results_dir)
