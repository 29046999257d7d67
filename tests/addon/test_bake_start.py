"""Blender's route under bpy: the decimated copy within budget with the reference untouched,
baked maps against a material known at every point, flat and bumpy normal maps, the scene as it
was after the bake (checks_bake_start.py)."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_bake_start.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_bake_start(name, results_dir):
    assert_check(SCRIPT, name, results_dir)
