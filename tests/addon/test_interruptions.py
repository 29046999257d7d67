"""What the artist does between two ticks of Optimize (undo, redo, save, deletions, another
scene shown) ends its run with a sentence or goes on right, and leaves nothing behind."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_interruptions.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_interruptions(name, results_dir):
    assert_check(SCRIPT, name, results_dir)
