"""The add-on's status on a cancel and a Resume (checks_resume_words.py under the bpy
wheel)."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_resume_words.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_resume_words(name, results_dir):
    assert_check(SCRIPT, name, results_dir)
