"""Shared pytest configuration: the ``gpu``, ``blender``, ``mitsuba`` and ``slow`` markers.

- ``gpu``: needs CUDA (and usually nvdiffrast / tinycudann); skipped without it.
- ``blender``: needs ``bpy`` (the bpy wheel or ``blender --background``); skipped without it.
- ``mitsuba``: needs Mitsuba 3 running on the CPU (the ``pathtracing`` extra, libLLVM, and a
  test render that does not crash: ``diffrec.render.mitsuba_check``); skipped without it.
- ``slow``: longer CPU tests; run by default, deselect with ``-m "not slow"``.

The folders mirror the code (``test_layout.py`` checks it): ``tests/<package>/`` tests
``backend/diffrec/<package>/``, the modules at the package root (``camera.py``, ``cli.py``,
``rows.py``...) are tested here at the top, ``addon/`` tests the add-on and ``scripts/`` the
scripts. Helpers shared by several folders live in ``helpers/`` (the server fixtures among them,
loaded below for every folder); conftest.py files hold fixtures.
"""

import importlib.util

import pytest
import torch

pytest_plugins = ["helpers.server_fixtures"]


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_bpy = pytest.mark.skip(reason="needs bpy (the bpy wheel or blender --background)")
    has_cuda = torch.cuda.is_available()
    has_bpy = importlib.util.find_spec("bpy") is not None
    mitsuba_problem = (_mitsuba_problem() if any("mitsuba" in item.keywords for item in items)
                       else None)
    skip_mitsuba = pytest.mark.skip(reason=f"needs Mitsuba 3 running on the CPU: {mitsuba_problem}")
    for item in items:
        if "mitsuba" in item.keywords and mitsuba_problem:
            item.add_marker(skip_mitsuba)
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "blender" in item.keywords and not has_bpy:
            item.add_marker(skip_bpy)


def _mitsuba_problem() -> str | None:
    """Why Mitsuba 3 does not run here with the CPU variant the path tracer uses (not
    installed, no libLLVM, or a test render that crashes), or None."""
    from diffrec.errors import UserError
    from diffrec.render.mitsuba_bridge import load_mitsuba

    try:
        load_mitsuba("cpu")
    except UserError as exc:
        return str(exc)
    return None


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state."""
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """torch on one thread for the test: tiny tensors (on a busy machine each multi-threaded
    product waits for a core), and results that do not depend on how many threads a loaded
    machine grants (the BLAS may take fewer under load, which changes the rounding)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
