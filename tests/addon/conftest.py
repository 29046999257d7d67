"""Fixtures of the add-on tests."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory) -> Path:
    """Where the check scripts write their results."""
    return tmp_path_factory.mktemp("blender-checks")
