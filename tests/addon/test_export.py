"""Scene export under bpy: camera projection against world_to_camera_view, the evaluated mesh,
HDRI orientation and colour space, the procedural-world bake, straight-alpha top-down renders."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_export.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_export(name, results_dir):
    assert_check(SCRIPT, name, results_dir)
