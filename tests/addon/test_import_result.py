"""The add-on's import of a result (``checks_import.py`` under bpy): a result written by the
backend's own writer (``pipeline.outputs.write_result``) comes in through Blender's glTF importer
as one object where the backend put it, with a material using the GLB's textures, faded by
occlusion, a world lit by the probe, and nothing imported from a folder that fails its manifest."""

import pytest
from blender_run import assert_check, check_names

SCRIPT = "checks_import.py"


@pytest.mark.blender
@pytest.mark.parametrize("name", check_names(SCRIPT))
def test_import(name, result_folder, results_dir, monkeypatch):
    monkeypatch.setenv("DIFFREC_TEST_RESULT", str(result_folder))
    assert_check(SCRIPT, name, results_dir)
